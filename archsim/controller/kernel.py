"""The compiled controller + bank-timing loop: event-driven, struct-of-arrays, no Python objects.

One call advances the whole memory (every channel) until a number of requests has been injected or all
are done; state lives in arrays so the Python side can run it in chunks (progress bar) and resume.

Per pseudo-channel: an age-ordered read queue and write queue. With `bank_queue_depth` > 0 the queues
are transaction queues that feed per-bank command queues one request per cycle (DRAMSim3's structure):
only requests moved into a bank queue are schedulable. Per channel: one row-command and one
column-command slot per cycle, shared by its pseudo-channels (HBM's separate row and column buses).
Each pseudo-channel keeps a bound before which nothing can happen in it (`PC_NEXT`): the earliest issue
time of a queued request's next command, a refresh deadline, or the cycle after it issued or moved a
request. A channel is visited when its earliest pseudo-channel bound comes, and the visit evaluates only
the pseudo-channels whose bound has come; one displaced from a shared command bus tries again next cycle.

The loop is compiled in variants (`KernelVariant`, chosen by `memory.kernel_variant`): the plain one serves the
default controller features only and has the code of the others compiled out; for the shapes of the shipped
standards it is compiled again with the pseudo-channels, ranks and bank-mask words as constants. Every variant
and the helpers it inlines are compiled with lowered array indexing (`index_lowering`): unsigned indices, and the
arrays of `codes.FLAT_ARRAYS` flat with constant (or, for the bank masks, named) row lengths.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from numba import njit

from archsim.controller import index_lowering
from archsim.controller.bank_timing import (
    act_bound,
    apply_command,
    col_bound,
    earliest,
    hits_bound,
    note_closed,
    recompute_closed,
    row_earliest,
    set_hits,
)
from archsim.controller.codes import (
    ACT,
    ARB_PRIORITY_HOST,
    ARB_PRIORITY_PNM,
    ARB_RESERVE,
    ARB_SHARED,
    ARB_WRR,
    B_BGF,
    B_BUSY,
    B_CNT,
    B_COLS,
    B_HEAD,
    B_HITS_R,
    B_HITS_W,
    B_LASTCOL,
    B_OPEN,
    B_OPENER,
    B_PEND,
    B_WIN,
    C_CONFLICT,
    C_FORWARD,
    C_HIT,
    C_MISS,
    FAW_ACTS,
    INF,
    P_AGECAP,
    P_ARB,
    P_BANKS,
    P_BGS,
    P_BQD,
    P_BURST,
    P_CAP,
    P_CL,
    P_CWL,
    P_DELAY,
    P_FAW,
    P_FORWARD,
    P_HIGH,
    P_IDLE,
    P_INJCAP,
    P_LOGCAP,
    P_LOW,
    P_NCH,
    P_PCS,
    P_POLICY,
    P_POSTED,
    P_RANKS,
    P_RCAP,
    P_REFHOLD,
    P_REFI,
    P_REFIPB,
    P_REFRESH,
    P_RQ,
    P_RRATE,
    P_RSRC,
    P_SCHED,
    P_TICK,
    P_TIMEOUT,
    P_W0,
    P_W1,
    P_WQ,
    PC_CLOSED_ACT,
    PC_CLOSED_HEAD,
    PC_DRAINING,
    PC_HITS_R,
    PC_HITS_W,
    PC_NEXT,
    PC_PORT_Q,
    PC_RQ_LEN,
    PC_RQ_UNMOVED,
    PC_RR_PTR,
    PC_SERVED,
    PC_TOKEN_T,
    PC_TOKENS,
    PC_WQ_LEN,
    PC_WQ_UNMOVED,
    POL_CLOSED,
    POL_OPEN_CAP,
    POL_TIMEOUT,
    PRE,
    PREA,
    RD,
    RDA,
    REF,
    REFPB,
    S_DONE,
    S_IDLE,
    S_LAST,
    S_LASTCOL,
    S_LOGOVF,
    S_LOOPS,
    S_NLOG,
    S_PTR,
    S_QUEUED,
    S_STALLED,
    S_T,
    S_TLIMIT,
    S_VISITS,
    SCHED_FCFS,
    SCHED_ROUND_ROBIN,
    STALL_CYCLES,
    TOKEN,
    WR,
    WRA,
)
from archsim.controller.index_lowering import with_lowered_indexing
from archsim.controller.request_lists import (
    add_hit,
    bit_index,
    count_row,
    first_request,
    link,
    log_command,
    move_one,
    pow2_shift,
    priority_key,
    quotient,
    set_bank_bit,
    unlink,
)
from archsim.controller.source_digest import source_digest


def _kernel(stop_ptr, prm, gaps, scal, scratch, inputs, outputs, state, log):
    (req_ts, req_pc, req_bank, req_row, req_write, req_addr, req_gb, req_bgf, req_rf, req_src,
     port_idx, port_end) = inputs
    accept, ready, done, klass, bank_conflict = outputs
    (nxt_bank, nxt_bg, nxt_rank, nxt_pc, faw, faw_pos,
     bstate, pstate, bnext, bprev, amask, omask, hmask, rq, wq, port_ptr,
     ref_due, ref_ptr, qos_counts, chan_next, cmd_count) = state
    log_cycle, log_cmd, log_pc, log_bank, log_row = log
    # a constant of each compiled variant (see `compiled_kernel`): the plain kernel carries none of the code of the
    # features the defaults leave off (fewer live values, fewer spills)
    general = GENERAL
    logging = prm[P_LOGCAP] > 0
    n_req = req_ts.shape[0]
    nch = prm[P_NCH]
    # a variant compiled for its organization's shape has these as constants (see `compiled_kernel`): the loops over
    # one pseudo-channel or one rank fold away, and their bounds leave the live values
    pcs = FIXED_PCS if FIXED_PCS > 0 else prm[P_PCS]
    ranks = FIXED_RANKS if FIXED_RANKS > 0 else prm[P_RANKS]
    bgs = prm[P_BGS]
    banks = prm[P_BANKS]
    bpr = bgs * banks
    bpp = ranks * bpr
    sh_pcs = pow2_shift(pcs)  # divisions by these are shifts (see `quotient`)
    sh_bpr = pow2_shift(bpr)
    rqd = prm[P_RQ]
    wqd = prm[P_WQ]
    fcfs = general and prm[P_SCHED] == SCHED_FCFS
    rr = general and prm[P_SCHED] == SCHED_ROUND_ROBIN  # banks served in turn, as DRAMSim3's per-bank command queues
    policy = prm[P_POLICY]
    cap = prm[P_CAP]
    timeout = prm[P_TIMEOUT]
    high = prm[P_HIGH]
    low = prm[P_LOW]
    # -1: watermarks; >= 0: batch drains (pstate[pc, PC_DRAINING] counts the writes left)
    idle_drain = prm[P_IDLE] if general else -1
    refresh = prm[P_REFRESH]
    hold_cols = general and prm[P_REFHOLD] != 0  # a due refresh holds its rank's (bank's) column commands too
    delay = prm[P_DELAY]
    forward = prm[P_FORWARD] != 0
    injcap = prm[P_INJCAP]
    posted = prm[P_POSTED] != 0
    cl = prm[P_CL]
    cwl = prm[P_CWL]
    burst = prm[P_BURST]
    tfaw = prm[P_FAW]
    trefi = prm[P_REFI]
    trefipb = prm[P_REFIPB]
    bqd = prm[P_BQD] if general else 0
    tick = general and prm[P_TICK] != 0  # reference mode: evaluate every channel every cycle (tests the wake-up bounds)
    arb = prm[P_ARB] if general else ARB_SHARED
    w0 = prm[P_W0]
    w1 = prm[P_W1]
    rsrc = prm[P_RSRC]
    rrate = prm[P_RRATE]
    rcap = prm[P_RCAP]
    agecap = prm[P_AGECAP] if general else 0
    ordered = arb != ARB_SHARED or agecap > 0  # False: the oldest request is always first
    words = FIXED_WORDS if FIXED_WORDS > 0 else (bpp + 63) >> 6  # 64-bit words of a bank mask
    bankq = bqd > 0

    t = scal[S_T]
    ptr = scal[S_PTR]
    tlimit = scal[S_TLIMIT]
    port_injected = scratch[0:2]
    port_blocked = scratch[2:4]  # 1: the port's next request waits for room in a full queue
    due = scratch[4:]
    tail_drain_woken = False
    n_visits = 0
    n_loops = 0
    n_idle = 0
    queued = scal[S_QUEUED]
    last = scal[S_LAST]
    last_col_t = scal[S_LASTCOL]

    while True:
        # a call stops only between cycles, so that a resumed run is the same as an uninterrupted one: after the
        # caller's chunk of requests is in, or before a cycle whose commands might not fit in the log
        if ptr >= stop_ptr and ptr < n_req:
            break
        if logging and scal[S_NLOG] + 2 * nch + 2 > log_cycle.shape[0]:
            scal[S_LOGOVF] = 1  # the caller grows the log and resumes at this very cycle
            break
        # ---- injection: each port (host, pnm) in its own trace order, head-of-line blocking on a full queue
        for port in range(2):
            port_injected[port] = 0
            port_blocked[port] = 0
            while port_ptr[port] < port_end[port + 1]:
                idx = port_idx[port_ptr[port]]
                if req_ts[idx] > t:
                    break
                if injcap > 0 and port_injected[port] >= injcap:
                    break
                pc = req_pc[idx]
                is_w = req_write[idx] != 0
                if bankq:
                    full = (pstate[pc, PC_WQ_UNMOVED] if is_w else pstate[pc, PC_RQ_UNMOVED]) >= (wqd if is_w else rqd)
                else:
                    full = pstate[pc, PC_PORT_Q + (2 if is_w else 0) + port] >= (wqd if is_w else rqd)
                if full:
                    port_blocked[port] = 1
                    break
                port_ptr[port] += 1
                port_injected[port] += 1
                accept[idx] = t
                if t > last:
                    last = t
                ptr += 1
                b = req_bank[idx]
                gb = pc * bpp + b
                row = req_row[idx]
                orow = bstate[gb, B_OPEN]
                if (orow >= 0 and orow != row) or (bstate[gb, B_PEND] > 0 and orow != row) or bstate[gb, B_BUSY] > t:
                    bank_conflict[idx] = 1
                    if orow >= 0 and orow != row:
                        qos_counts[4 + req_src[idx] * 2 + bstate[gb, B_OPENER]] += 1
                if forward:
                    # a read of a queued write's address is served from the write queue; a second write to a
                    # queued address merges into it
                    a = req_addr[idx]
                    hit = False
                    # only a write to the same bank can hold the same address: those in its list, and with bank
                    # queues those still waiting to move into one
                    j = bstate[gb, B_HEAD + 1]
                    while j >= 0:
                        if req_addr[j] == a:
                            hit = True
                            break
                        j = bnext[j]
                    if bankq and not hit:
                        for j in range(pstate[pc, PC_WQ_UNMOVED]):
                            if req_addr[wq[pc, j]] == a:
                                hit = True
                                break
                    if hit:
                        done[idx] = t + 1
                        klass[idx] = C_FORWARD
                        if t + 1 > last:
                            last = t + 1
                        continue
                if bankq:
                    ready[idx] = INF
                else:
                    ready[idx] = t + delay
                    link(idx, gb, pc, 1 if is_w else 0, bstate, bnext, bprev, amask, bpp, words)
                    if orow < 0:
                        note_closed(pstate, pc, gb, bstate, nxt_bank, nxt_bg)
                pstate[pc, PC_PORT_Q + (2 if is_w else 0) + port] += 1
                if is_w:
                    if bankq:
                        wq[pc, pstate[pc, PC_WQ_UNMOVED]] = idx  # in arrival order they wait for the bank queues
                    pstate[pc, PC_WQ_LEN] += 1
                    pstate[pc, PC_WQ_UNMOVED] += 1
                    if orow == row and not bankq:
                        add_hit(gb, pc, 1, 1, bstate, pstate, hmask, bpp, words)
                    if posted:
                        done[idx] = t
                else:
                    if bankq:
                        rq[pc, pstate[pc, PC_RQ_UNMOVED]] = idx
                    pstate[pc, PC_RQ_LEN] += 1
                    pstate[pc, PC_RQ_UNMOVED] += 1
                    if orow == row and not bankq:
                        add_hit(gb, pc, 0, 1, bstate, pstate, hmask, bpp, words)
                bstate[gb, B_PEND] += 1
                if queued == 0:
                    last_col_t = t  # the watchdog counts from the first request of a busy spell
                queued += 1
                # when must the channel look at this request? One that may change which queue is served (drain
                # watermarks) is looked at at once; a read otherwise can act no earlier than its bank allows.
                if bankq or is_w or (pstate[pc, PC_RQ_LEN] == 1 and pstate[pc, PC_WQ_LEN] > 0):
                    wake = t
                elif pstate[pc, PC_DRAINING]:
                    wake = t + delay
                else:
                    wake = t + delay
                    if orow == row:
                        lb = nxt_bank[gb, RD]
                    elif orow < 0:
                        lb = nxt_bank[gb, ACT]
                        v = act_bound(pc, ranks, -1, nxt_rank, nxt_pc, faw, faw_pos, tfaw)
                        if v > lb:
                            lb = v
                    elif bstate[gb, B_HITS_R] > 0 and not (policy == POL_OPEN_CAP and bstate[gb, B_COLS] >= cap):
                        lb = INF  # waits behind this bank's row hits; their column commands wake the channel
                    else:
                        lb = nxt_bank[gb, PRE]
                    if lb > wake:
                        wake = lb
                ch = quotient(pc, pcs, sh_pcs)
                if chan_next[ch] > wake:
                    chan_next[ch] = wake
                if pstate[pc, PC_NEXT] > wake:
                    pstate[pc, PC_NEXT] = wake

        if idle_drain >= 0 and ptr >= n_req and not tail_drain_woken:
            tail_drain_woken = True  # the last request is in: writes held below the threshold may drain now
            for pc in range(nch * pcs):
                if pstate[pc, PC_WQ_LEN] > 0:
                    pstate[pc, PC_NEXT] = t
                    chan_next[quotient(pc, pcs, sh_pcs)] = t
        # ---- channels due at t
        n_loops += 1
        freed = False
        # the due channels first, then a loop over that list: a channel number read from memory is no induction
        # variable, so the compiler does not step a pointer into every per-channel array for each channel skipped
        n_due = 0
        for ch in range(nch):
            due[n_due] = ch  # kept only if due: a select, not a branch the predictor keeps missing
            n_due += chan_next[ch] <= t
        for k_due in range(n_due):
            ch = due[k_due]
            n_visits += 1
            col_pc = -1
            col_i = -1
            col_w = False
            col_cmd = -1
            col_age = INF
            row_pc = -1
            row_req = -1
            row_cmd = -1
            row_age = INF
            row_bank = -1
            row_is_ref = False
            col_rr = 0
            row_rr = 0
            for p in range(pcs):
                pc = ch * pcs + p
                if pstate[pc, PC_NEXT] > t and not tick:
                    continue  # nothing can happen in this pseudo-channel yet: its bound stands
                nt = INF
                base = pc * bpp
                if idle_drain >= 0:
                    # batch drains: at the high watermark, or above the threshold with no command queued; a
                    # drain serves the writes present at its start, and writes move only in drains
                    if pstate[pc, PC_DRAINING] == 0:
                        queued_cmds = pstate[pc, PC_RQ_LEN]
                        if bankq:
                            queued_cmds += pstate[pc, PC_WQ_LEN] - pstate[pc, PC_RQ_UNMOVED] - pstate[pc, PC_WQ_UNMOVED]
                        # after the last request, the writes left below the threshold drain too (DRAMSim3 would
                        # hold them forever; posted, they change no statistic, and the run must end)
                        # the write buffer holds the writes not yet moved to a bank queue (wq_len also counts
                        # moved ones, which a drain cannot move again: counting them would never end the drain)
                        buffered = pstate[pc, PC_WQ_UNMOVED]
                        if buffered >= high or (queued_cmds == 0 and (buffered > idle_drain or
                                                                      (ptr >= n_req and buffered > 0))):
                            pstate[pc, PC_DRAINING] = buffered
                    use_w = pstate[pc, PC_DRAINING] > 0
                else:
                    # write-drain mode with watermarks; writes are also served when no read waits
                    if pstate[pc, PC_DRAINING] > 0:
                        if pstate[pc, PC_WQ_LEN] <= low:
                            pstate[pc, PC_DRAINING] = 0
                    elif pstate[pc, PC_WQ_LEN] >= high:
                        pstate[pc, PC_DRAINING] = 1
                    use_w = pstate[pc, PC_DRAINING] > 0 or (pstate[pc, PC_RQ_LEN] == 0 and pstate[pc, PC_WQ_LEN] > 0)
                favored = -1
                if arb == ARB_PRIORITY_HOST:
                    favored = 0
                elif arb == ARB_PRIORITY_PNM:
                    favored = 1
                elif arb == ARB_WRR:
                    favored = 0 if pstate[pc, PC_SERVED] * w1 <= pstate[pc, PC_SERVED + 1] * w0 else 1
                elif arb == ARB_RESERVE:
                    v = pstate[pc, PC_TOKENS] + (t - pstate[pc, PC_TOKEN_T]) * rrate
                    pstate[pc, PC_TOKENS] = v if v < rcap else rcap
                    pstate[pc, PC_TOKEN_T] = t
                    if pstate[pc, PC_TOKENS] >= TOKEN:
                        favored = rsrc
                if bankq:
                    if use_w:
                        moved_gb = move_one(wq, pstate, PC_WQ_UNMOVED, pc, base, bqd, t, bstate, hmask, req_bank,
                                            req_row, ready, 1, bnext, bprev, amask, bpp, words)
                    else:
                        moved_gb = move_one(rq, pstate, PC_RQ_UNMOVED, pc, base, bqd, t, bstate, hmask, req_bank,
                                            req_row, ready, 0, bnext, bprev, amask, bpp, words)
                    moved = moved_gb >= 0
                    if moved and bstate[moved_gb, B_OPEN] < 0:
                        note_closed(pstate, pc, moved_gb, bstate, nxt_bank, nxt_bg)
                    if moved and use_w and idle_drain >= 0:
                        pstate[pc, PC_DRAINING] -= 1
                    if moved and pstate[pc, PC_RQ_UNMOVED] + pstate[pc, PC_WQ_UNMOVED] > 0:
                        nt = t + 1  # one request moves per cycle while any waits
                    # none moved: every waiting request of the served queue finds its bank queue full, and stays
                    # so until a column command frees a slot, a request comes or the served queue changes; each
                    # of those wakes this pseudo-channel itself
                # ---- refresh: a due rank blocks activations and takes the row bus first
                ref_block_rank = -1
                ref_block_bank = -1
                if refresh != 0:
                    for r in range(ranks):
                        rf = pc * ranks + r
                        if ref_due[rf] > t:
                            if ref_due[rf] < nt:
                                nt = ref_due[rf]
                            continue
                        if refresh == 1:
                            ref_block_rank = r
                            any_open = False
                            for bb in range(bpr):
                                if bstate[base + r * bpr + bb, B_OPEN] >= 0:
                                    any_open = True
                                    break
                            cmd = PREA if any_open else REF
                            tb = r * bpr
                        else:
                            tb = r * bpr + ref_ptr[rf]
                            ref_block_bank = tb
                            cmd = PRE if bstate[base + tb, B_OPEN] >= 0 else REFPB
                        e = row_earliest(cmd, pc, tb, ranks, bpr, sh_bpr, bpp, bstate, nxt_bank, nxt_bg,
                                          nxt_rank, nxt_pc, faw, faw_pos, tfaw)
                        if e <= t:
                            if not row_is_ref:
                                if row_pc >= 0:
                                    pstate[row_pc, PC_NEXT] = t + 1  # displaced: it tries again next cycle
                                row_pc = pc
                                row_cmd = cmd
                                row_bank = tb
                                row_req = -1
                                row_is_ref = True
                            else:
                                nt = t + 1
                        elif e < nt:
                            nt = e
                # ---- FR-FCFS (or FCFS) over the schedulable requests, oldest first. Bounds shared by every
                # candidate of a kind (data bus, tRRD/tFAW) skip work that cannot issue at t.
                best_col = -1
                best_row = -1
                best_col_key = INF
                best_row_key = INF
                bc_cmd = -1
                br_cmd = -1
                bc_w = False
                act_key = INF  # round-robin: the first ready ACT and the first two ready PREs in turn order
                pre_key = INF
                pre_key2 = INF
                ptr_rr = pstate[pc, PC_RR_PTR]
                ready_pre = 0
                ready_act = 0
                nt_closed = INF  # wake-up bounds from closed banks' ACTs
                cb_r = INF
                cb_w = INF
                if bankq:
                    n_hits = pstate[pc, PC_HITS_R] + pstate[pc, PC_HITS_W]
                    n_sched = (pstate[pc, PC_RQ_LEN] - pstate[pc, PC_RQ_UNMOVED] + pstate[pc, PC_WQ_LEN]
                               - pstate[pc, PC_WQ_UNMOVED])
                    cb_r = col_bound(RD, pc, ranks, nxt_rank, nxt_pc)
                    cb_w = col_bound(WR, pc, ranks, nxt_rank, nxt_pc)
                elif use_w:
                    n_hits = pstate[pc, PC_HITS_W]
                    n_sched = pstate[pc, PC_WQ_LEN]
                    cb_w = col_bound(WR, pc, ranks, nxt_rank, nxt_pc)
                else:
                    n_hits = pstate[pc, PC_HITS_R]
                    n_sched = pstate[pc, PC_RQ_LEN]
                    cb_r = col_bound(RD, pc, ranks, nxt_rank, nxt_pc)
                cb = min(cb_r, cb_w)
                want_col = n_hits > 0
                if want_col and cb > t:
                    want_col = False
                    v = hits_bound(pc, bpp, words, hmask, nxt_bank, cb_r, cb_w, policy == POL_CLOSED)
                    if v < nt:
                        nt = v
                want_row = n_sched > n_hits and not row_is_ref
                if row_is_ref and row_pc != pc and n_sched > n_hits:
                    nt = t + 1  # another pseudo-channel's refresh holds the row bus this cycle
                ab = act_bound(pc, ranks, ref_block_rank, nxt_rank, nxt_pc, faw, faw_pos, tfaw)
                if (want_col or want_row) and fcfs:
                    # FCFS: only the oldest schedulable request of the pseudo-channel may act
                    idx = -1
                    for k in range(2):
                        if not bankq and k != (1 if use_w else 0):
                            continue
                        for bb in range(bpp):
                            h = bstate[base + bb, B_HEAD + k]
                            if h >= 0 and (idx < 0 or h < idx):
                                idx = h
                    if idx >= 0:
                        if ready[idx] > t:
                            if ready[idx] < nt:
                                nt = ready[idx]
                        else:
                            gb = req_gb[idx]
                            is_w_req = req_write[idx] != 0
                            if bstate[gb, B_OPEN] == req_row[idx]:
                                cmd = WR if is_w_req else RD
                            elif bstate[gb, B_OPEN] < 0:
                                cmd = ACT
                            else:
                                cmd = PRE
                            blocked_ref = cmd == ACT and (req_rf[idx] - pc * ranks == ref_block_rank or
                                                          gb - base == ref_block_bank)
                            if cmd in (ACT, PRE) and row_is_ref:
                                blocked_ref = True
                            if cmd in (RD, WR) and hold_cols and (req_rf[idx] - pc * ranks == ref_block_rank or
                                                                  gb - base == ref_block_bank):
                                blocked_ref = True
                            if not blocked_ref:
                                e = earliest(cmd, gb, req_bgf[idx], req_rf[idx], pc, nxt_bank, nxt_bg, nxt_rank,
                                              nxt_pc, faw, faw_pos, tfaw)
                                if e > t:
                                    if e < nt:
                                        nt = e
                                elif cmd in (RD, WR):
                                    best_col = idx
                                    best_col_key = idx
                                    bc_cmd = cmd
                                    bc_w = is_w_req
                                else:
                                    best_row = idx
                                    best_row_key = idx
                                    br_cmd = cmd
                elif want_col or want_row:
                    # FR-FCFS over banks: per bank the oldest row hit (column command) and the oldest other
                    # request (ACT or PRE); across banks the oldest ready of each kind
                    k_lo = 0 if bankq else (1 if use_w else 0)
                    k_hi = 2 if bankq else k_lo + 1
                    # the open banks first: column commands to the banks with row hits, then PREs
                    if want_col:
                        for word in range(words):
                            live = hmask[pc, k_lo, word] | hmask[pc, k_hi - 1, word]
                            while live != 0:
                                bb = word * 64 + bit_index(live)
                                live &= live - np.uint64(1)
                                if hold_cols and (quotient(bb, bpr, sh_bpr) == ref_block_rank or bb == ref_block_bank):
                                    continue
                                gb = base + bb
                                # the bank's own bound on its column commands: a bank waiting out tRCD or tCCD skips
                                # the walk
                                if bankq:
                                    cbank = min(nxt_bank[gb, RD], nxt_bank[gb, WR])
                                else:
                                    cbank = nxt_bank[gb, WR] if use_w else nxt_bank[gb, RD]
                                if policy == POL_CLOSED:
                                    cbank = min(cbank, nxt_bank[gb, RDA], nxt_bank[gb, WRA])
                                if cbank > t:
                                    if cbank < nt:
                                        nt = cbank
                                    continue
                                idx, kidx = first_request(gb, k_lo, k_hi, bstate[gb, B_OPEN], True, t, bstate, bnext,
                                                          req_row, req_src, accept, favored, agecap, ordered)
                                if rr:
                                    kidx = (bb + bpp - ptr_rr - 1) % bpp  # across banks: turn order, not age
                                if idx >= 0 and kidx < best_col_key:
                                    if ready[idx] > t:
                                        if ready[idx] < nt:
                                            nt = ready[idx]
                                    else:
                                        is_w_req = req_write[idx] != 0
                                        auto = False
                                        if policy == POL_CLOSED:
                                            auto = (bstate[gb, B_HITS_W] if is_w_req else bstate[gb, B_HITS_R]) <= 1
                                        cmd = (WRA if auto else WR) if is_w_req else (RDA if auto else RD)
                                        e = earliest(cmd, gb, req_bgf[idx], req_rf[idx], pc, nxt_bank, nxt_bg,
                                                      nxt_rank, nxt_pc, faw, faw_pos, tfaw)
                                        if e <= t:
                                            best_col = idx
                                            best_col_key = kidx
                                            bc_cmd = cmd
                                            bc_w = is_w_req
                                        elif e < nt:
                                            nt = e
                    # PREs: an open bank with requests for other rows, once its hits are served (or, open with a cap,
                    # once the cap is reached)
                    for word in range(words if want_row else 0):
                        pending = amask[pc, word] & omask[pc, word]
                        if policy != POL_OPEN_CAP:
                            pending &= ~(hmask[pc, k_lo, word] | hmask[pc, k_hi - 1, word])
                        while pending != 0:
                            bb = word * 64 + bit_index(pending)
                            pending &= pending - np.uint64(1)
                            gb = base + bb
                            cnt = bstate[gb, B_CNT] + bstate[gb, B_CNT + 1] if bankq else bstate[gb, B_CNT + k_lo]
                            h = bstate[gb, B_HITS_R] + bstate[gb, B_HITS_W] if bankq else bstate[gb, B_HITS_R + k_lo]
                            if cnt == h or (h > 0 and bstate[gb, B_COLS] < cap):
                                continue  # the open row's hits go first; their column commands wake the channel
                            if nxt_bank[gb, PRE] > t:
                                if nxt_bank[gb, PRE] < nt:
                                    nt = nxt_bank[gb, PRE]  # the bank's own tRAS / tRTP / tWR bound
                                continue
                            idx, kidx = first_request(gb, k_lo, k_hi, bstate[gb, B_OPEN], False, t, bstate, bnext,
                                                      req_row, req_src, accept, favored, agecap, ordered)
                            if idx < 0:
                                continue
                            if ready[idx] > t:
                                if ready[idx] < nt:
                                    nt = ready[idx]
                                continue
                            e = earliest(PRE, gb, req_bgf[idx], req_rf[idx], pc, nxt_bank, nxt_bg, nxt_rank, nxt_pc,
                                          faw, faw_pos, tfaw)
                            if e <= t:
                                ready_pre += 1
                                if rr:
                                    kidx = (bb + bpp - ptr_rr - 1) % bpp
                                    if kidx < pre_key:
                                        pre_key2 = pre_key
                                        pre_key = kidx
                                    elif kidx < pre_key2:
                                        pre_key2 = kidx
                                if kidx < best_row_key:
                                    best_row = idx
                                    best_row_key = kidx
                                    br_cmd = PRE
                            elif e < nt:
                                nt = e
                    # then the closed banks (most banks of a tFAW-bound stream, waiting for their activation), only
                    # while an ACT may issue; otherwise they bound the wake-up by the shared ACT bound and their banks'
                    # and bank groups' own. A closed bank has no row hits: its oldest request wants an ACT.
                    if want_row and ab > t:
                        v = max(ab, pstate[pc, PC_CLOSED_ACT])
                        if v < nt:
                            nt = v
                    elif want_row:
                        # by age alone, the oldest request at a closed bank wins if it may activate: no scan
                        idx = min(pstate[pc, PC_CLOSED_HEAD + k_lo], pstate[pc, PC_CLOSED_HEAD + k_hi - 1])
                        oldest_may_act = False
                        if not ordered and not rr and idx < INF:
                            gb = req_gb[idx]
                            e = earliest(ACT, gb, req_bgf[idx], req_rf[idx], pc, nxt_bank, nxt_bg, nxt_rank, nxt_pc,
                                         faw, faw_pos, tfaw)
                            oldest_may_act = max(e, ready[idx]) <= t and not (
                                req_rf[idx] - pc * ranks == ref_block_rank or gb - base == ref_block_bank)
                        if oldest_may_act:
                            # any other ready ACT is younger: it changes neither the choice nor the wake-up (two
                            # ready row commands wake the pseudo-channel next cycle, one ready ACT is enough to know)
                            ready_act = 1
                            kidx = priority_key(idx, t, req_src, accept, favored, agecap)
                            if kidx < best_row_key:
                                best_row = idx
                                best_row_key = kidx
                                br_cmd = ACT
                        for word in range(0 if oldest_may_act else words):
                            closed = amask[pc, word] & ~omask[pc, word]
                            while closed != 0:
                                bb = word * 64 + bit_index(closed)
                                closed &= closed - np.uint64(1)
                                gb = base + bb
                                idx, kidx = first_request(gb, k_lo, k_hi, -1, False, t, bstate, bnext, req_row, req_src,
                                                          accept, favored, agecap, ordered)
                                if idx < 0:
                                    continue
                                # selects, not branches: whether a closed bank may activate is a coin toss to the
                                # branch predictor. With one rank the bounds every bank shares (`ab`) are met here.
                                if ranks > 1:
                                    e = earliest(ACT, gb, req_bgf[idx], req_rf[idx], pc, nxt_bank, nxt_bg,
                                                  nxt_rank, nxt_pc, faw, faw_pos, tfaw)
                                else:
                                    e = max(nxt_bank[gb, ACT], nxt_bg[req_bgf[idx], ACT])
                                e = max(e, ready[idx])
                                nt_closed = min(nt_closed, e if e > t else INF)
                                # refresh may hold this rank or bank; refresh progress wakes the channel
                                held = (req_rf[idx] - pc * ranks == ref_block_rank) | (bb == ref_block_bank)
                                may_act = (e <= t) & ~held
                                ready_act += may_act
                                if rr:
                                    kidx = (bb + bpp - ptr_rr - 1) % bpp
                                    act_key = min(act_key, kidx if may_act else INF)
                                better = may_act & (kidx < best_row_key)
                                best_row = idx if better else best_row
                                best_row_key = kidx if better else best_row_key
                                br_cmd = ACT if better else br_cmd
                    # the closed banks' bounds matter unless this pseudo-channel issues an ACT now: then the ACT's
                    # own wake-up (tRRD, tFAW and the closed banks' bounds) covers them, and if the ACT loses the row
                    # bus the pseudo-channel looks again next cycle
                    if nt_closed < nt and not (best_row >= 0 and br_cmd == ACT):
                        nt = nt_closed
                rr_next = ptr_rr
                if rr and (best_col >= 0 or best_row >= 0):
                    # DRAMSim3 issues the first ready command in bank turn order, then looks on from that bank,
                    # with the first command's timing applied, for a second one: issued if it uses the other
                    # bus. A column command blocks every other column command and an ACT every other ACT
                    # (tCCD, tRRD); a PRE blocks nothing. The turn moves to the bank where the second look stops.
                    if best_col_key < best_row_key:
                        first_key = best_col_key
                        next_key = best_row_key
                    else:
                        first_key = best_row_key
                        next_key = min(best_col_key, pre_key if br_cmd == ACT else min(act_key, pre_key2))
                        if best_col >= 0 and best_col_key > next_key:
                            best_col = -1
                            nt = t + 1
                    rr_next = (ptr_rr + 1 + (next_key if next_key < INF else first_key)) % bpp
                # another ready row command may issue next cycle; other ACTs behind an ACT wait for tRRD/tFAW,
                # which the ACT's own wake-up covers
                if ready_pre + ready_act > 1 and (br_cmd != ACT or ready_pre > 0):
                    nt = t + 1
                # ---- timeout policy: close idle rows nobody is waiting for
                timeout_bank = -1
                if policy == POL_TIMEOUT and (best_row >= 0 or row_is_ref):
                    nt = t + 1  # idle rows were not examined this cycle
                if policy == POL_TIMEOUT and best_row < 0 and not row_is_ref:
                    for bb in range(bpp):
                        gbb = base + bb
                        if bstate[gbb, B_OPEN] < 0 or bstate[gbb, B_HITS_R] + bstate[gbb, B_HITS_W] > 0:
                            continue
                        e = row_earliest(PRE, pc, bb, ranks, bpr, sh_bpr, bpp, bstate, nxt_bank, nxt_bg,
                                          nxt_rank, nxt_pc, faw, faw_pos, tfaw)
                        v = bstate[gbb, B_LASTCOL] + timeout
                        if v > e:
                            e = v
                        if e <= t:
                            timeout_bank = bb
                            break
                        if e < nt:
                            nt = e
                # ---- this pseudo-channel's candidates onto the channel's two buses (oldest wins)
                if best_col >= 0:
                    if best_col_key < col_age:
                        if col_pc >= 0:
                            pstate[col_pc, PC_NEXT] = t + 1
                        col_pc = pc
                        col_rr = rr_next
                        col_i = best_col
                        col_cmd = bc_cmd
                        col_w = bc_w
                        col_age = best_col_key
                    else:
                        nt = t + 1
                if best_row >= 0 or timeout_bank >= 0:
                    if row_is_ref:
                        nt = t + 1
                    else:
                        age = best_row_key if best_row >= 0 else INF - 1
                        if age < row_age:
                            if row_pc >= 0:
                                pstate[row_pc, PC_NEXT] = t + 1  # displaced (an earlier pseudo-channel)
                            row_pc = pc
                            row_rr = rr_next
                            row_age = age
                            if best_row >= 0:
                                row_req = best_row
                                row_cmd = br_cmd
                                row_bank = req_bank[best_row]
                            else:
                                row_req = -1
                                row_cmd = PRE
                                row_bank = timeout_bank
                        else:
                            nt = t + 1
                pstate[pc, PC_NEXT] = nt

            # ---- column command
            if col_pc >= 0:
                pc = col_pc
                nt = pstate[pc, PC_NEXT]
                idx = col_i
                if col_w:
                    pstate[pc, PC_WQ_LEN] -= 1
                else:
                    pstate[pc, PC_RQ_LEN] -= 1
                b = req_bank[idx]
                gb = pc * bpp + b
                rf = req_rf[idx]
                bgf = req_bgf[idx]
                unlink(idx, gb, pc, 1 if col_w else 0, bstate, bnext, bprev, amask, bpp, words)
                apply_command(col_cmd, t, gb, bgf, rf, pc, ranks, gaps, nxt_bank, nxt_bg, nxt_rank, nxt_pc)
                cmd_count[col_cmd] += 1
                last_col_t = t
                pstate[pc, PC_RR_PTR] = col_rr
                if col_w:
                    end = t + cwl + burst
                    add_hit(gb, pc, 1, -1, bstate, pstate, hmask, bpp, words)
                    if not bankq:
                        pstate[pc, PC_WQ_UNMOVED] -= 1
                    if not posted:
                        done[idx] = end
                else:
                    end = t + cl + burst
                    add_hit(gb, pc, 0, -1, bstate, pstate, hmask, bpp, words)
                    if not bankq:
                        pstate[pc, PC_RQ_UNMOVED] -= 1
                    done[idx] = end
                if bankq:
                    bstate[gb, B_WIN] -= 1
                if end > last:
                    last = end
                if klass[idx] < 0:
                    klass[idx] = C_HIT
                src = req_src[idx]
                pstate[pc, PC_SERVED + src] += 1
                pstate[pc, PC_PORT_Q + (2 if col_w else 0) + src] -= 1
                if arb == ARB_RESERVE and src == rsrc and pstate[pc, PC_TOKENS] >= TOKEN:
                    pstate[pc, PC_TOKENS] -= TOKEN
                bstate[gb, B_PEND] -= 1
                bstate[gb, B_COLS] += 1
                bstate[gb, B_LASTCOL] = t
                if col_cmd in (RDA, WRA):
                    bstate[gb, B_OPEN] = -1
                    set_bank_bit(omask, pc, b, False, words)
                    set_hits(gb, pc, 0, 0, bstate, pstate, hmask, bpp, words)
                    note_closed(pstate, pc, gb, bstate, nxt_bank, nxt_bg)
                if logging:
                    log_command(col_cmd, t, pc, b, req_row[idx], scal, log_cycle, log_cmd, log_pc, log_bank, log_row)
                queued -= 1
                freed = True
                # next visit: more hits wait for the data bus; a bank left without hits may precharge or activate
                if policy == POL_TIMEOUT and t + timeout < nt:
                    nt = t + timeout  # this row may time out
                if pstate[pc, PC_HITS_R] + pstate[pc, PC_HITS_W] > 0:
                    # the next column command: the data bus (tCCD) and each hit's own bank (tRCD, tCCD_L)
                    cb_r = col_bound(RD, pc, ranks, nxt_rank, nxt_pc) if bankq or not col_w else INF
                    cb_w = col_bound(WR, pc, ranks, nxt_rank, nxt_pc) if bankq or col_w else INF
                    v = hits_bound(pc, bpp, words, hmask, nxt_bank, cb_r, cb_w, policy == POL_CLOSED)
                    if v < nt:
                        nt = v
                if bstate[gb, B_PEND] > bstate[gb, B_HITS_R] + bstate[gb, B_HITS_W]:
                    v = nxt_bank[gb, PRE] if bstate[gb, B_OPEN] >= 0 else nxt_bank[gb, ACT]
                    if v < nt:
                        nt = v
                # the queue served next may change (drain watermarks): look again next cycle
                if col_w:
                    if idle_drain >= 0 and not bankq and pstate[pc, PC_DRAINING] > 0:
                        pstate[pc, PC_DRAINING] -= 1
                        if pstate[pc, PC_DRAINING] == 0:
                            nt = t + 1
                    wq_left = pstate[pc, PC_WQ_LEN]
                    if (idle_drain < 0 and pstate[pc, PC_DRAINING] > 0 and wq_left <= low) or wq_left == 0:
                        nt = t + 1
                elif pstate[pc, PC_RQ_LEN] == 0 and pstate[pc, PC_WQ_LEN] > 0:
                    nt = t + 1
                if fcfs:
                    nt = t + 1  # FCFS looked at the oldest request only; the next one's command is unknown
                if bankq and pstate[pc, PC_RQ_UNMOVED] + pstate[pc, PC_WQ_UNMOVED] > 0:
                    nt = t + 1  # the freed bank-queue slot may take a waiting request
                pstate[pc, PC_NEXT] = nt
                # the column command may have moved the gates of a row command picked in the same cycle
                if row_pc >= 0 and row_earliest(row_cmd, row_pc, row_bank, ranks, bpr, sh_bpr, bpp, bstate,
                                                 nxt_bank, nxt_bg, nxt_rank, nxt_pc, faw, faw_pos, tfaw) > t:
                    pstate[row_pc, PC_NEXT] = t + 1
                    row_pc = -1
            # ---- row command
            if row_pc >= 0:
                pc = row_pc
                nt = pstate[pc, PC_NEXT]
                base = pc * bpp
                b = row_bank
                gb = base + b
                r = quotient(b, bpr, sh_bpr)
                rf = pc * ranks + r
                bgf = bstate[gb, B_BGF]
                apply_command(row_cmd, t, gb, bgf, rf, pc, ranks, gaps, nxt_bank, nxt_bg, nxt_rank, nxt_pc)
                row = -1
                if row_cmd == ACT:
                    idx = row_req
                    row = req_row[idx]
                    bstate[gb, B_OPEN] = row
                    set_bank_bit(omask, pc, b, True, words)
                    bstate[gb, B_OPENER] = req_src[idx]
                    bstate[gb, B_COLS] = 0
                    faw[rf, faw_pos[rf]] = t
                    faw_pos[rf] = (faw_pos[rf] + 1) % FAW_ACTS
                    set_hits(gb, pc, count_row(gb, 0, row, bstate, bnext, req_row),
                              count_row(gb, 1, row, bstate, bnext, req_row), bstate, pstate, hmask, bpp, words)
                    if klass[idx] < 0:
                        klass[idx] = C_MISS
                    # next visit: the new row's hits after tRCD, other activations after tRRD / tFAW
                    v = min(nxt_bank[gb, RD], nxt_bank[gb, WR])
                    if v < nt:
                        nt = v
                    recompute_closed(pstate, pc, bpp, words, amask, omask, bstate, nxt_bank, nxt_bg)
                    v = max(act_bound(pc, ranks, -1, nxt_rank, nxt_pc, faw, faw_pos, tfaw), pstate[pc, PC_CLOSED_ACT])
                    if v < nt:
                        nt = v
                elif row_cmd == PRE:
                    row = bstate[gb, B_OPEN]
                    bstate[gb, B_OPEN] = -1
                    set_bank_bit(omask, pc, b, False, words)
                    set_hits(gb, pc, 0, 0, bstate, pstate, hmask, bpp, words)
                    note_closed(pstate, pc, gb, bstate, nxt_bank, nxt_bg)
                    if row_req >= 0:
                        if klass[row_req] < 0:
                            klass[row_req] = C_CONFLICT
                        # row-buffer interference: whose row was closed, for whom
                        qos_counts[bstate[gb, B_OPENER] * 2 + req_src[row_req]] += 1
                    v = nxt_bank[gb, ACT]
                    if v < nt:
                        nt = v
                    if row_req < 0:
                        nt = t + 1
                elif row_cmd == PREA:
                    for bb in range(bpr):
                        gbb = base + r * bpr + bb
                        bstate[gbb, B_OPEN] = -1
                        set_bank_bit(omask, pc, r * bpr + bb, False, words)
                        set_hits(gbb, pc, 0, 0, bstate, pstate, hmask, bpp, words)
                        note_closed(pstate, pc, gbb, bstate, nxt_bank, nxt_bg)
                    nt = t + 1
                elif row_cmd == REF:
                    ref_due[rf] += trefi
                    for bb in range(bpr):
                        bstate[base + r * bpr + bb, B_BUSY] = nxt_rank[rf, ACT]
                else:  # REFpb
                    ref_due[rf] += trefipb
                    ref_ptr[rf] = (ref_ptr[rf] + 1) % bpr
                    bstate[gb, B_BUSY] = nxt_bank[gb, ACT]
                if row_cmd in (REF, REFPB):
                    nt = t + 1
                if logging:
                    log_command(row_cmd, t, pc, b, row, scal, log_cycle, log_cmd, log_pc, log_bank, log_row)
                cmd_count[row_cmd] += 1
                if row_req >= 0:
                    pstate[pc, PC_RR_PTR] = row_rr
                pstate[pc, PC_NEXT] = nt
            if col_pc < 0 and row_pc < 0:
                n_idle += 1
            nt = INF
            for p in range(pcs):
                pc = ch * pcs + p
                if refresh != 0 and (col_pc >= 0 or row_pc >= 0):
                    # a bank closed by auto-precharge drops out of a pending PREA's gate: look again next cycle
                    for r in range(ranks):
                        if ref_due[pc * ranks + r] <= t:
                            pstate[pc, PC_NEXT] = t + 1
                if pstate[pc, PC_NEXT] <= t or tick:
                    pstate[pc, PC_NEXT] = t + 1
                if pstate[pc, PC_NEXT] < nt:
                    nt = pstate[pc, PC_NEXT]
            chan_next[ch] = nt

        if ptr >= n_req and queued == 0:
            scal[S_DONE] = 1
            break
        if queued > 0 and t - last_col_t > STALL_CYCLES:
            scal[S_STALLED] = 1
            break
        # ---- next event: the earliest channel event or the next injection
        nt = INF
        for ch in range(nch):
            if chan_next[ch] < nt:
                nt = chan_next[ch]
        for port in range(2):
            if port_ptr[port] >= port_end[port + 1]:
                continue
            if port_blocked[port] != 0:
                if (freed or bankq) and t + 1 < nt:
                    nt = t + 1  # a slot may have freed (or a request may move into a bank queue)
            elif injcap > 0 and port_injected[port] >= injcap and req_ts[port_idx[port_ptr[port]]] <= t:
                if t + 1 < nt:
                    nt = t + 1
            else:
                v = req_ts[port_idx[port_ptr[port]]]
                if v < t + 1:
                    v = t + 1
                if v < nt:
                    nt = v
        if nt <= t:
            nt = t + 1
        if nt >= tlimit or nt >= INF:
            # nothing before the caller's horizon (or ever, until more requests are released): hand back
            t = tlimit if nt > tlimit else nt
            break
        t = nt

    scal[S_VISITS] += n_visits
    scal[S_LOOPS] += n_loops
    scal[S_IDLE] += n_idle
    scal[S_T] = t
    scal[S_PTR] = ptr
    scal[S_QUEUED] = queued
    scal[S_LAST] = last
    scal[S_LASTCOL] = last_col_t
    return t


# `_kernel` reads these globals as constants: `compiled_kernel` gives each compiled variant its own values. A fixed
# shape (> 0) is pseudo-channels per channel, ranks per pseudo-channel and bank-mask words; 0 reads the parameters.
GENERAL = True
FIXED_PCS = 0
FIXED_RANKS = 0
FIXED_WORDS = 0

# The shapes the plain kernel is also compiled for, frozen: those of the shipped standards (HBM2 in legacy mode:
# one pseudo-channel and one rank; HBM3 and HBM3E: two pseudo-channels of two stack IDs), where the fixed shape
# cuts 13-18 % of the instructions per request. Each costs one more compile when first used (80-85 s on a 2-core
# machine; the cache keeps it), so other shapes run the plain kernel that reads them.
SPECIALIZED_SHAPES = ((1, 1, 1), (2, 2, 1))


class KernelVariant(NamedTuple):
    """Which compiled kernel runs a configuration: the general one or the plain one, and the organization's
    shape frozen into it (all 0: read from the parameters)."""

    general: bool
    pseudo_channels: int = 0
    ranks: int = 0
    mask_words: int = 0


@functools.cache
def compiled_kernel(variant: KernelVariant):
    """`_kernel` compiled with the variant's constants frozen, on first use, under its own name (and so its own
    cache files) that ends in the `source_digest` of everything it inlines, so that an edited helper, constant or
    timing rule compiles anew instead of loading a stale kernel. The plain variant carries none of the code of the
    features the defaults leave off, which keeps its live values in registers (about 1.2x faster); a fixed shape
    is worth about 1.2x more. The body is compiled from its source with lowered indexing (`with_lowered_indexing`)."""
    name = "_kernel_general" if variant.general else "_kernel_plain"
    if variant.pseudo_channels > 0:
        name += f"_{variant.pseudo_channels}pc_{variant.ranks}rank_{variant.mask_words}word"
    constants = {"GENERAL": variant.general, "FIXED_PCS": variant.pseudo_channels, "FIXED_RANKS": variant.ranks,
                 "FIXED_WORDS": variant.mask_words}
    # numba keys its cache on this file alone: the digest of every inlined source in the name keys it on them all
    name += "_" + source_digest(_kernel, constants, extra_modules=(index_lowering,))
    return njit(cache=True, error_model="numpy", _nrt=False)(with_lowered_indexing(_kernel, name, constants))


def run_kernel(variant: KernelVariant, stop_ptr: int, prm: np.ndarray, gaps: np.ndarray, scal: np.ndarray,
               scratch: np.ndarray, inputs: tuple, outputs: tuple, state: tuple, log: tuple) -> int:
    """Advance the memory (see the module docstring) with the kernel compiled for `variant`."""
    return compiled_kernel(variant)(stop_ptr, prm, gaps, scal, scratch, inputs, outputs, state, log)
