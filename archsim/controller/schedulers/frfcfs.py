"""FR-FCFS (first ready, first come first served): per bank the oldest row hit (a column command) and the oldest
other request (ACT or PRE); across banks the oldest ready of each kind. The open banks come first (column commands
to the banks with row hits, then PREs), then the closed banks (most banks of a tFAW-bound stream, waiting for
their activation), only while an ACT may issue.

The walks take `turns`: round robin (`round_robin.py`) ranks candidates by bank turn order instead of age and
keeps the keys its second look needs."""

from __future__ import annotations

import numpy as np

from archsim.controller.bank_timing import earliest
from archsim.controller.codes import (
    B_OPEN,
    P_AGECAP,
    P_BPP,
    P_BPR,
    P_BQD,
    P_FAW,
    P_POLICY,
    P_REFHOLD,
    P_SH_BPR,
    P_WORDS,
    PK_COL,
    PK_COL_CMD,
    PK_COL_KEY,
    PK_COL_W,
    PK_FAVORED,
    PK_K_HI,
    PK_K_LO,
    PK_PRE_KEY,
    PK_PRE_KEY2,
    PK_READY_PRE,
    PK_REF_BANK,
    PK_REF_RANK,
    PK_ROW,
    PK_ROW_CMD,
    PK_ROW_KEY,
    PK_USE_W,
    PK_WANT_COL,
    PK_WANT_ROW,
    POL_CLOSED,
    PRE,
)
from archsim.controller.index_lowering import kernel_stage
from archsim.controller.request_lists import bit_index, first_request, quotient
from archsim.controller.row_policies.closed import column_bank_bound, column_command
from archsim.controller.row_policies.open_cap import hits_go_first, precharge_candidates
from archsim.controller.schedulers.activations import closed_banks
from archsim.controller.schedulers.keys import ordered, turn_key

assert np  # the index lowering casts with np.uint64


@kernel_stage
def choose(pc, t, nt, prm, pick, req, out, st):
    """The scheduler interface: write pseudo-channel `pc`'s choice at `t` into `pick`, return the wake-up bound."""
    return walk_banks(pc, t, nt, False, prm, pick, req, out, st)


@kernel_stage
def walk_banks(pc, t, nt, turns, prm, pick, req, out, st):
    if pick[PK_WANT_COL]:
        nt = _column_walk(pc, t, nt, turns, prm, pick, req, out, st)
    if pick[PK_WANT_ROW]:
        nt = _precharge_walk(pc, t, nt, turns, prm, pick, req, out, st)
        nt = closed_banks(pc, t, nt, turns, prm, pick, req, out, st)
    return nt


@kernel_stage
def _column_walk(pc, t, nt, turns, prm, pick, req, out, st):
    """Column commands to the banks with row hits of the served kinds; a refresh may hold some banks' columns."""
    hmask = st.hmask
    words = prm[P_WORDS]
    # read once here, not per bank: a load from `prm` or `pick` repeats after every store the compiler cannot
    # prove apart from them
    k_lo = pick[PK_K_LO]
    k_hi = pick[PK_K_HI]
    hold = prm[P_REFHOLD] != 0
    base = pc * prm[P_BPP]
    use_w = pick[PK_USE_W] != 0
    bankq = prm[P_BQD] > 0
    closed_policy = prm[P_POLICY] == POL_CLOSED
    for word in range(words):
        live = hmask[pc, k_lo, word] | hmask[pc, k_hi - 1, word]
        while live != 0:
            bb = word * 64 + bit_index(live)
            live &= live - np.uint64(1)
            if hold and (quotient(bb, prm[P_BPR], prm[P_SH_BPR]) == pick[PK_REF_RANK] or bb == pick[PK_REF_BANK]):
                continue
            # the bank's own bound on its column commands: a bank waiting out tRCD or tCCD skips the walk
            cbank = column_bank_bound(base + bb, use_w, bankq, closed_policy, st.nxt_bank)
            if cbank > t:
                nt = min(nt, cbank)
                continue
            nt = _column_candidate(pc, bb, t, nt, turns, prm, pick, req, out, st)
    return nt


@kernel_stage
def _column_candidate(pc, bb, t, nt, turns, prm, pick, req, out, st):
    bstate = st.bstate
    gb = pc * prm[P_BPP] + bb
    idx, kidx = first_request(gb, pick[PK_K_LO], pick[PK_K_HI], bstate[gb, B_OPEN], True, t, bstate, st.bnext,
                              req.row, req.src, out.accept, pick[PK_FAVORED], prm[P_AGECAP], ordered(prm))
    if turns:
        kidx = turn_key(pc, bb, prm, st.pstate)  # across banks: turn order, not age
    if idx < 0 or kidx >= pick[PK_COL_KEY]:
        return nt
    if out.ready[idx] > t:
        return min(nt, out.ready[idx])
    is_w = req.write[idx] != 0
    cmd = column_command(gb, is_w, prm, bstate)
    e = earliest(cmd, gb, req.bgf[idx], req.rf[idx], pc, st.nxt_bank, st.nxt_bg, st.nxt_rank, st.nxt_pc, st.faw,
                 st.faw_pos, prm[P_FAW])
    if e > t:
        return min(nt, e)
    pick[PK_COL] = idx
    pick[PK_COL_KEY] = kidx
    pick[PK_COL_CMD] = cmd
    pick[PK_COL_W] = is_w
    return nt


@kernel_stage
def _precharge_walk(pc, t, nt, turns, prm, pick, req, out, st):
    """PREs: an open bank with requests for other rows, once its hits are served (or, open with a cap, once the
    cap is reached)."""
    nxt_bank = st.nxt_bank
    words = prm[P_WORDS]
    k_lo = pick[PK_K_LO]
    for word in range(words):
        pending = precharge_candidates(pc, word, k_lo, pick[PK_K_HI], words, prm, st.amask, st.omask, st.hmask)
        while pending != 0:
            bb = word * 64 + bit_index(pending)
            pending &= pending - np.uint64(1)
            gb = pc * prm[P_BPP] + bb
            if hits_go_first(gb, k_lo, prm[P_BQD] > 0, prm, st.bstate):
                continue
            if nxt_bank[gb, PRE] > t:
                nt = min(nt, nxt_bank[gb, PRE])  # the bank's own tRAS / tRTP / tWR bound
                continue
            nt = _precharge_candidate(pc, bb, t, nt, turns, prm, pick, req, out, st)
    return nt


@kernel_stage
def _precharge_candidate(pc, bb, t, nt, turns, prm, pick, req, out, st):
    bstate = st.bstate
    gb = pc * prm[P_BPP] + bb
    idx, kidx = first_request(gb, pick[PK_K_LO], pick[PK_K_HI], bstate[gb, B_OPEN], False, t, bstate, st.bnext,
                              req.row, req.src, out.accept, pick[PK_FAVORED], prm[P_AGECAP], ordered(prm))
    if idx < 0:
        return nt
    if out.ready[idx] > t:
        return min(nt, out.ready[idx])
    e = earliest(PRE, gb, req.bgf[idx], req.rf[idx], pc, st.nxt_bank, st.nxt_bg, st.nxt_rank, st.nxt_pc, st.faw,
                 st.faw_pos, prm[P_FAW])
    if e > t:
        return min(nt, e)
    pick[PK_READY_PRE] += 1
    if turns:
        kidx = turn_key(pc, bb, prm, st.pstate)
        if kidx < pick[PK_PRE_KEY]:
            pick[PK_PRE_KEY2] = pick[PK_PRE_KEY]
            pick[PK_PRE_KEY] = kidx
        elif kidx < pick[PK_PRE_KEY2]:
            pick[PK_PRE_KEY2] = kidx
    if kidx < pick[PK_ROW_KEY]:
        pick[PK_ROW] = idx
        pick[PK_ROW_KEY] = kidx
        pick[PK_ROW_CMD] = PRE
    return nt

