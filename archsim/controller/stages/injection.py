"""Injection: each port (a host or the PNM) hands its requests to the controller in its own trace order, as many
per cycle as the front end allows, with head-of-line blocking on a full queue (each port has its own share of the
read and write queues, its own request buffer). An accepted request joins its bank's
age-ordered list (or, with bank queues, the transaction queue), or is served from the write queue (forwarding),
and sets the cycle at which its pseudo-channel must look at it."""

from __future__ import annotations

import numpy as np

from archsim.controller.arbiters.wrr import rejoin
from archsim.controller.bank_timing import act_bound, note_closed
from archsim.controller.codes import (
    ACT,
    ARB_WRR,
    B_BUSY,
    B_COLS,
    B_HEAD,
    B_HITS_R,
    B_OPEN,
    B_OPENER,
    B_PEND,
    C_FORWARD,
    INF,
    P_ARB,
    P_BPP,
    P_BQD,
    P_CAP,
    P_DELAY,
    P_FAW,
    P_FORWARD,
    P_INJCAP,
    P_PCS,
    P_POLICY,
    P_PORTS,
    P_POSTED,
    P_RANKS,
    P_RQ,
    P_SH_PCS,
    P_WORDS,
    P_WQ,
    PC_DRAINING,
    PC_NEXT,
    PC_RQ_LEN,
    PC_RQ_UNMOVED,
    PC_WQ_LEN,
    PC_WQ_UNMOVED,
    PF_BLOCKED,
    PF_INJECTED,
    POL_OPEN_CAP,
    PP_QUEUED,
    PRE,
    RD,
)
from archsim.controller.index_lowering import kernel_stage
from archsim.controller.request_lists import add_hit, link, quotient

assert np  # the index lowering casts with np.uint64


@kernel_stage
def inject(t, ptr, queued, last, last_col_t, prm, scratch, req, out, st):
    """Inject what each port may hand over at cycle `t`; returns the updated (requests injected, queued, last
    event cycle, start of the column-command watchdog)."""
    port_ptr = st.port_ptr
    pflags = st.pflags
    injcap = prm[P_INJCAP]
    for port in range(prm[P_PORTS]):
        pflags[port, PF_INJECTED] = 0
        pflags[port, PF_BLOCKED] = 0
        while port_ptr[port] < req.port_end[port + 1]:
            idx = req.port_idx[port_ptr[port]]
            if req.ts[idx] > t or (injcap > 0 and pflags[port, PF_INJECTED] >= injcap):
                break
            if _queue_full(idx, port, prm, req, st):
                pflags[port, PF_BLOCKED] = 1
                break
            port_ptr[port] += 1
            pflags[port, PF_INJECTED] += 1
            out.accept[idx] = t
            last = max(last, t)
            ptr += 1
            _note_conflict(idx, t, prm, req, out, st)
            if prm[P_FORWARD] != 0 and _forwarded(idx, prm, req, st):
                out.done[idx] = t + 1
                out.klass[idx] = C_FORWARD
                last = max(last, t + 1)
                continue
            _enqueue(idx, port, t, prm, req, out, st)
            if queued == 0:
                last_col_t = t  # the watchdog counts from the first request of a busy spell
            queued += 1
            _wake_for(idx, t, prm, req, st)
    return ptr, queued, last, last_col_t


@kernel_stage
def _queue_full(idx, port, prm, req, st):
    """Whether the queue request `idx` joins is full: with bank queues the transaction queue of its kind, else
    its port's share of the read or write queue."""
    pstate = st.pstate
    ports = prm[P_PORTS]  # noqa: F841 - the row length of pport's indexing (index_lowering)
    pc = req.pc[idx]
    is_w = req.write[idx] != 0
    depth = prm[P_WQ] if is_w else prm[P_RQ]
    if prm[P_BQD] > 0:
        return (pstate[pc, PC_WQ_UNMOVED] if is_w else pstate[pc, PC_RQ_UNMOVED]) >= depth
    return st.pport[pc, port, PP_QUEUED + (1 if is_w else 0)] >= depth


@kernel_stage
def _note_conflict(idx, t, prm, req, out, st):
    """A request meets a bank conflict when its bank has another row open, pending or busy refreshing; an open
    other row counts as row-buffer interference, by whose row it was and whose request came."""
    bstate = st.bstate
    gb = req.pc[idx] * prm[P_BPP] + req.bank[idx]
    row = req.row[idx]
    orow = bstate[gb, B_OPEN]
    if (orow >= 0 and orow != row) or (bstate[gb, B_PEND] > 0 and orow != row) or bstate[gb, B_BUSY] > t:
        out.bank_conflict[idx] = 1
        if orow >= 0 and orow != row:
            ports = prm[P_PORTS]
            st.qos_counts[ports * ports + req.src[idx] * ports + bstate[gb, B_OPENER]] += 1


@kernel_stage
def _forwarded(idx, prm, req, st):
    """Whether a queued write holds request `idx`'s address: a read of it is served from the write queue, a second
    write merges into it. Only a write to the same bank can: those in its list, and with bank queues those still
    waiting to move into one."""
    bstate = st.bstate
    bnext = st.bnext
    req_addr = req.addr
    pc = req.pc[idx]
    a = req_addr[idx]
    j = bstate[pc * prm[P_BPP] + req.bank[idx], B_HEAD + 1]
    while j >= 0:
        if req_addr[j] == a:
            return True
        j = bnext[j]
    if prm[P_BQD] > 0:
        for j in range(st.pstate[pc, PC_WQ_UNMOVED]):
            if req_addr[st.wq[pc, j]] == a:
                return True
    return False


@kernel_stage
def _enqueue(idx, port, t, prm, req, out, st):
    """Queue request `idx`: into its bank's list (schedulable after the front-end delay), or with bank queues into
    the transaction queue of its kind (schedulable once moved)."""
    bstate = st.bstate
    pstate = st.pstate
    bpp = prm[P_BPP]
    words = prm[P_WORDS]
    ports = prm[P_PORTS]  # noqa: F841 - the row length of pport's indexing (index_lowering)
    bankq = prm[P_BQD] > 0
    pc = req.pc[idx]
    gb = pc * bpp + req.bank[idx]
    is_w = req.write[idx] != 0
    kind = 1 if is_w else 0
    orow = bstate[gb, B_OPEN]
    if bankq:
        out.ready[idx] = INF
        queue = st.wq if is_w else st.rq
        queue[pc, pstate[pc, PC_WQ_UNMOVED if is_w else PC_RQ_UNMOVED]] = idx  # in arrival order
    else:
        out.ready[idx] = t + prm[P_DELAY]
        link(idx, gb, pc, kind, bstate, st.bnext, st.bprev, st.amask, bpp, words)
        if orow < 0:
            note_closed(pstate, pc, gb, bstate, st.nxt_bank, st.nxt_bg)
    if prm[P_ARB] == ARB_WRR and st.pport[pc, port, PP_QUEUED] + st.pport[pc, port, PP_QUEUED + 1] == 0:
        rejoin(pc, port, prm, st.pport)
    st.pport[pc, port, PP_QUEUED + kind] += 1
    pstate[pc, PC_WQ_LEN if is_w else PC_RQ_LEN] += 1
    pstate[pc, PC_WQ_UNMOVED if is_w else PC_RQ_UNMOVED] += 1
    if orow == req.row[idx] and not bankq:
        add_hit(gb, pc, kind, 1, bstate, pstate, st.hmask, bpp, words)
    if is_w and prm[P_POSTED] != 0:
        out.done[idx] = t
    bstate[gb, B_PEND] += 1


@kernel_stage
def _wake_for(idx, t, prm, req, st):
    """When the pseudo-channel must look at the new request: at once if it may change which queue is served
    (drain watermarks) or moves through a bank queue; a read otherwise no earlier than its bank allows."""
    pstate = st.pstate
    pc = req.pc[idx]
    wake = t
    if not (prm[P_BQD] > 0 or req.write[idx] != 0 or (pstate[pc, PC_RQ_LEN] == 1 and pstate[pc, PC_WQ_LEN] > 0)):
        wake = t + prm[P_DELAY]
        if not pstate[pc, PC_DRAINING]:
            wake = max(wake, _read_bound(idx, prm, req, st))
    ch = quotient(pc, prm[P_PCS], prm[P_SH_PCS])
    if st.chan_next[ch] > wake:
        st.chan_next[ch] = wake
    if pstate[pc, PC_NEXT] > wake:
        pstate[pc, PC_NEXT] = wake


@kernel_stage
def _read_bound(idx, prm, req, st):
    """The earliest cycle a new read's first command may issue: a row hit's column command, a closed bank's ACT,
    or another row's PRE; INF behind the open row's hits, whose column commands wake the channel."""
    bstate = st.bstate
    nxt_bank = st.nxt_bank
    pc = req.pc[idx]
    gb = pc * prm[P_BPP] + req.bank[idx]
    orow = bstate[gb, B_OPEN]
    if orow == req.row[idx]:
        return nxt_bank[gb, RD]
    if orow < 0:
        return max(nxt_bank[gb, ACT], act_bound(pc, prm[P_RANKS], -1, st.nxt_rank, st.nxt_pc, st.faw, st.faw_pos,
                                                 prm[P_FAW]))
    if bstate[gb, B_HITS_R] > 0 and not (prm[P_POLICY] == POL_OPEN_CAP and bstate[gb, B_COLS] >= prm[P_CAP]):
        return INF
    return nxt_bank[gb, PRE]
