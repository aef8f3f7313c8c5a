"""Command issue: the channel's winning column and row commands take effect (bank timing, request lists, row-hit
counts, statistics, the command log), and the pseudo-channel that issued sets its next wake-up."""

from __future__ import annotations

import numpy as np

from archsim.controller.arbiters.reservation import spend_token
from archsim.controller.bank_timing import (
    act_bound,
    apply_command,
    col_bound,
    hits_bound,
    note_closed,
    recompute_closed,
    row_earliest,
    set_hits,
)
from archsim.controller.codes import (
    ACT,
    ARB_RESERVE,
    B_BGF,
    B_COLS,
    B_HITS_R,
    B_HITS_W,
    B_LASTCOL,
    B_OPEN,
    B_OPENER,
    B_PEND,
    B_WIN,
    BUS_COL_CMD,
    BUS_COL_I,
    BUS_COL_PC,
    BUS_COL_RR,
    BUS_COL_W,
    BUS_ROW_BANK,
    BUS_ROW_CMD,
    BUS_ROW_PC,
    BUS_ROW_REQ,
    BUS_ROW_RR,
    C_CONFLICT,
    C_HIT,
    C_MISS,
    FAW_ACTS,
    INF,
    P_ARB,
    P_BPP,
    P_BPR,
    P_BQD,
    P_BURST,
    P_CL,
    P_CWL,
    P_FAW,
    P_IDLE,
    P_LOGCAP,
    P_LOW,
    P_POLICY,
    P_PORTS,
    P_POSTED,
    P_RANKS,
    P_SCHED,
    P_SH_BPR,
    P_TIMEOUT,
    P_WORDS,
    PC_CLOSED_ACT,
    PC_DRAINING,
    PC_HITS_R,
    PC_HITS_W,
    PC_NEXT,
    PC_RQ_LEN,
    PC_RQ_UNMOVED,
    PC_RR_PTR,
    PC_WQ_LEN,
    PC_WQ_UNMOVED,
    POL_CLOSED,
    POL_TIMEOUT,
    PP_QUEUED,
    PP_SERVED,
    PRE,
    PREA,
    RD,
    RDA,
    SCHED_FRFCFS,
    SCHED_ROUND_ROBIN,
    WR,
    WRA,
)
from archsim.controller.index_lowering import kernel_stage
from archsim.controller.request_lists import add_hit, count_row, log_command, quotient, set_bank_bit, unlink
from archsim.controller.stages.refresh import refreshed

assert np  # the index lowering casts with np.uint64


@kernel_stage
def issue_column(t, queued, last, prm, gaps, scal, bus, req, out, st, log):
    """Issue the channel's column command: the request leaves its queue and is done after CL (CWL) plus the burst;
    returns (queued, last event cycle). A row command picked in the same cycle whose gates the column command
    moved tries again next cycle."""
    pstate = st.pstate
    pc = bus[BUS_COL_PC]
    idx = bus[BUS_COL_I]
    cmd = bus[BUS_COL_CMD]
    is_w = bus[BUS_COL_W] != 0
    gb = pc * prm[P_BPP] + req.bank[idx]
    pstate[pc, PC_WQ_LEN if is_w else PC_RQ_LEN] -= 1
    unlink(idx, gb, pc, 1 if is_w else 0, st.bstate, st.bnext, st.bprev, st.amask, prm[P_BPP], prm[P_WORDS])
    apply_command(cmd, t, gb, req.bgf[idx], req.rf[idx], pc, prm[P_RANKS], gaps, st.nxt_bank, st.nxt_bg,
                  st.nxt_rank, st.nxt_pc)
    st.cmd_count[cmd] += 1
    pstate[pc, PC_RR_PTR] = bus[BUS_COL_RR]
    last = max(last, _served(idx, gb, pc, t, is_w, prm, req, out, st))
    _account_column(idx, gb, pc, t, cmd, is_w, prm, req, out, st)
    if prm[P_LOGCAP] > 0:
        log_command(cmd, t, pc, req.bank[idx], req.row[idx], scal, log.cycle, log.cmd, log.pc, log.bank, log.row)
    pstate[pc, PC_NEXT] = _column_wake(gb, pc, t, is_w, pstate[pc, PC_NEXT], prm, st)
    row_pc = bus[BUS_ROW_PC]
    if row_pc >= 0 and row_earliest(bus[BUS_ROW_CMD], row_pc, bus[BUS_ROW_BANK], prm[P_RANKS], prm[P_BPR],
                                    prm[P_SH_BPR], prm[P_BPP], st.bstate, st.nxt_bank, st.nxt_bg, st.nxt_rank,
                                    st.nxt_pc, st.faw, st.faw_pos, prm[P_FAW]) > t:
        pstate[row_pc, PC_NEXT] = t + 1
        bus[BUS_ROW_PC] = -1
    return queued - 1, last


@kernel_stage
def _served(idx, gb, pc, t, is_w, prm, req, out, st):
    """The request's row hit leaves the counts and its queue; returns the cycle its data burst ends (a posted
    write was done when accepted)."""
    pstate = st.pstate
    kind = 1 if is_w else 0
    end = t + (prm[P_CWL] if is_w else prm[P_CL]) + prm[P_BURST]
    add_hit(gb, pc, kind, -1, st.bstate, pstate, st.hmask, prm[P_BPP], prm[P_WORDS])
    if prm[P_BQD] == 0:
        pstate[pc, PC_WQ_UNMOVED if is_w else PC_RQ_UNMOVED] -= 1
    else:
        st.bstate[gb, B_WIN] -= 1
    if not (is_w and prm[P_POSTED] != 0):
        out.done[idx] = end
    return end


@kernel_stage
def _account_column(idx, gb, pc, t, cmd, is_w, prm, req, out, st):
    """Class, per-port service counts, reservation tokens and the bank's column count; an auto-precharge closes
    the row."""
    bstate = st.bstate
    if out.klass[idx] < 0:
        out.klass[idx] = C_HIT
    src = req.src[idx]
    ports = prm[P_PORTS]  # noqa: F841 - the row length of pport's indexing (index_lowering)
    pport = st.pport
    pport[pc, src, PP_SERVED] += 1
    pport[pc, src, PP_QUEUED + (1 if is_w else 0)] -= 1
    if prm[P_ARB] == ARB_RESERVE:
        spend_token(pc, src, prm, pport)
    bstate[gb, B_PEND] -= 1
    bstate[gb, B_COLS] += 1
    bstate[gb, B_LASTCOL] = t
    if cmd in (RDA, WRA):
        _close_bank(gb, pc, prm, st)


@kernel_stage
def _close_bank(gb, pc, prm, st):
    st.bstate[gb, B_OPEN] = -1
    set_bank_bit(st.omask, pc, gb - pc * prm[P_BPP], False, prm[P_WORDS])
    set_hits(gb, pc, 0, 0, st.bstate, st.pstate, st.hmask, prm[P_BPP], prm[P_WORDS])
    note_closed(st.pstate, pc, gb, st.bstate, st.nxt_bank, st.nxt_bg)


@kernel_stage
def _column_wake(gb, pc, t, is_w, nt, prm, st):
    """The next visit after a column command: more hits wait for the data bus; a bank left without hits may
    precharge or activate; a row may time out; the queue served next may change."""
    bstate = st.bstate
    pstate = st.pstate
    bankq = prm[P_BQD] > 0
    if prm[P_POLICY] == POL_TIMEOUT:
        nt = min(nt, t + prm[P_TIMEOUT])  # this row may time out
    if pstate[pc, PC_HITS_R] + pstate[pc, PC_HITS_W] > 0:
        # the next column command: the data bus (tCCD) and each hit's own bank (tRCD, tCCD_L)
        cb_r = col_bound(RD, pc, prm[P_RANKS], st.nxt_rank, st.nxt_pc) if bankq or not is_w else INF
        cb_w = col_bound(WR, pc, prm[P_RANKS], st.nxt_rank, st.nxt_pc) if bankq or is_w else INF
        nt = min(nt, hits_bound(pc, prm[P_BPP], prm[P_WORDS], st.hmask, st.nxt_bank, cb_r, cb_w,
                                prm[P_POLICY] == POL_CLOSED))
    if bstate[gb, B_PEND] > bstate[gb, B_HITS_R] + bstate[gb, B_HITS_W]:
        nt = min(nt, st.nxt_bank[gb, PRE] if bstate[gb, B_OPEN] >= 0 else st.nxt_bank[gb, ACT])
    if _queue_may_change(pc, is_w, prm, pstate) or not _bounds_cover_scheduler(prm):
        return t + 1
    if bankq and pstate[pc, PC_RQ_UNMOVED] + pstate[pc, PC_WQ_UNMOVED] > 0:
        return t + 1  # the freed bank-queue slot may take a waiting request
    return nt


@kernel_stage
def _bounds_cover_scheduler(prm):
    """Whether the bounds above cover the scheduler's next choice: they do for FR-FCFS and round robin, which look
    at every bank; FCFS (the oldest request only) and any registered scheduler look again next cycle, as the next
    request's command is unknown."""
    return prm[P_SCHED] == SCHED_FRFCFS or prm[P_SCHED] == SCHED_ROUND_ROBIN


@kernel_stage
def _queue_may_change(pc, is_w, prm, pstate):
    """Whether the queue served next may change after this column command (drain watermarks, an emptied queue):
    then the pseudo-channel looks again next cycle."""
    if not is_w:
        return pstate[pc, PC_RQ_LEN] == 0 and pstate[pc, PC_WQ_LEN] > 0
    changed = False
    if prm[P_IDLE] >= 0 and prm[P_BQD] == 0 and pstate[pc, PC_DRAINING] > 0:
        pstate[pc, PC_DRAINING] -= 1
        changed = pstate[pc, PC_DRAINING] == 0
    wq_left = pstate[pc, PC_WQ_LEN]
    return changed or (prm[P_IDLE] < 0 and pstate[pc, PC_DRAINING] > 0 and wq_left <= prm[P_LOW]) or wq_left == 0


@kernel_stage
def issue_row(t, prm, gaps, scal, bus, req, out, st, log):
    """Issue the channel's row command (ACT, PRE, PREA, REF or REFpb) and set its pseudo-channel's wake-up."""
    pstate = st.pstate
    pc = bus[BUS_ROW_PC]
    cmd = bus[BUS_ROW_CMD]
    b = bus[BUS_ROW_BANK]
    row_req = bus[BUS_ROW_REQ]
    gb = pc * prm[P_BPP] + b
    rf = pc * prm[P_RANKS] + quotient(b, prm[P_BPR], prm[P_SH_BPR])
    apply_command(cmd, t, gb, st.bstate[gb, B_BGF], rf, pc, prm[P_RANKS], gaps, st.nxt_bank, st.nxt_bg, st.nxt_rank,
                  st.nxt_pc)
    nt = pstate[pc, PC_NEXT]
    row = -1
    if cmd == ACT:
        row = req.row[row_req]
        nt = _activated(row_req, gb, pc, rf, t, nt, prm, req, out, st)
    elif cmd == PRE:
        row = st.bstate[gb, B_OPEN]
        nt = _precharged(row_req, gb, pc, t, nt, prm, req, out, st)
    elif cmd == PREA:
        for bb in range(prm[P_BPR]):
            _close_bank(gb + bb, pc, prm, st)  # the rank's banks: b is its first
        nt = t + 1
    else:
        refreshed(cmd, pc, b, rf, prm, st)
        nt = t + 1
    if prm[P_LOGCAP] > 0:
        log_command(cmd, t, pc, b, row, scal, log.cycle, log.cmd, log.pc, log.bank, log.row)
    st.cmd_count[cmd] += 1
    if row_req >= 0:
        pstate[pc, PC_RR_PTR] = bus[BUS_ROW_RR]
    pstate[pc, PC_NEXT] = nt


@kernel_stage
def _activated(idx, gb, pc, rf, t, nt, prm, req, out, st):
    """An ACT opened request `idx`'s row: its queued hits count, the tFAW window moves; next visit for the new
    row's hits after tRCD, for other activations after tRRD / tFAW."""
    bstate = st.bstate
    row = req.row[idx]
    bstate[gb, B_OPEN] = row
    set_bank_bit(st.omask, pc, gb - pc * prm[P_BPP], True, prm[P_WORDS])
    bstate[gb, B_OPENER] = req.src[idx]
    bstate[gb, B_COLS] = 0
    st.faw[rf, st.faw_pos[rf]] = t
    st.faw_pos[rf] = (st.faw_pos[rf] + 1) % FAW_ACTS
    set_hits(gb, pc, count_row(gb, 0, row, bstate, st.bnext, req.row), count_row(gb, 1, row, bstate, st.bnext, req.row),
             bstate, st.pstate, st.hmask, prm[P_BPP], prm[P_WORDS])
    if out.klass[idx] < 0:
        out.klass[idx] = C_MISS
    nt = min(nt, st.nxt_bank[gb, RD], st.nxt_bank[gb, WR])
    recompute_closed(st.pstate, pc, prm[P_BPP], prm[P_WORDS], st.amask, st.omask, bstate, st.nxt_bank, st.nxt_bg)
    v = max(act_bound(pc, prm[P_RANKS], -1, st.nxt_rank, st.nxt_pc, st.faw, st.faw_pos, prm[P_FAW]),
            st.pstate[pc, PC_CLOSED_ACT])
    return min(nt, v)


@kernel_stage
def _precharged(row_req, gb, pc, t, nt, prm, req, out, st):
    """A PRE closed bank `gb`'s row, for request `row_req` (a conflict: row-buffer interference, whose row was
    closed for whom) or for a timed-out row (-1: look again next cycle)."""
    _close_bank(gb, pc, prm, st)
    if row_req < 0:
        return t + 1
    if out.klass[row_req] < 0:
        out.klass[row_req] = C_CONFLICT
    st.qos_counts[st.bstate[gb, B_OPENER] * prm[P_PORTS] + req.src[row_req]] += 1
    return min(nt, st.nxt_bank[gb, ACT])

