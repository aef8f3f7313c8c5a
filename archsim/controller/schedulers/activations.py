"""The closed banks' candidates for an ACT (FR-FCFS and round robin). A closed bank has no row hits: its oldest
request wants an ACT. While the bounds every ACT of the pseudo-channel shares (tRRD, tFAW, refresh) are not met,
the closed banks only bound the wake-up; otherwise, by age alone, the oldest request at a closed bank wins if it
may activate, with no scan of the banks."""

from __future__ import annotations

import numpy as np

from archsim.controller.bank_timing import earliest
from archsim.controller.codes import (
    ACT,
    INF,
    P_AGECAP,
    P_BPP,
    P_FAW,
    P_RANKS,
    P_WORDS,
    PC_CLOSED_ACT,
    PC_CLOSED_HEAD,
    PK_AB,
    PK_ACT_KEY,
    PK_FAVORED,
    PK_K_HI,
    PK_K_LO,
    PK_READY_ACT,
    PK_REF_BANK,
    PK_REF_RANK,
    PK_ROW,
    PK_ROW_CMD,
    PK_ROW_KEY,
)
from archsim.controller.index_lowering import kernel_stage
from archsim.controller.request_lists import bit_index, first_request, priority_key
from archsim.controller.schedulers.keys import ordered, turn_key

assert np  # the index lowering casts with np.uint64


@kernel_stage
def closed_banks(pc, t, nt, turns, prm, pick, req, out, st):
    """Offer the closed banks' ACTs (`turns`: keys in round-robin turn order); returns the wake-up bound. The
    closed banks' own bounds matter unless this pseudo-channel issues an ACT now: then the ACT's own wake-up
    (tRRD, tFAW and the closed banks' bounds) covers them, and if the ACT loses the row bus the pseudo-channel
    looks again next cycle."""
    ab = pick[PK_AB]
    if ab > t:
        return min(nt, max(ab, st.pstate[pc, PC_CLOSED_ACT]))
    if not turns and _oldest_may_act(pc, t, prm, pick, req, out, st):
        return nt
    nt_closed = INF
    words = prm[P_WORDS]
    # read once here, not per bank: a load from `prm` or `pick` repeats after every store the compiler cannot
    # prove apart from them
    k_lo = pick[PK_K_LO]
    k_hi = pick[PK_K_HI]
    favored = pick[PK_FAVORED]
    agecap = prm[P_AGECAP]
    by_key = ordered(prm)
    for word in range(words):
        closed = st.amask[pc, word] & ~st.omask[pc, word]
        while closed != 0:
            bb = word * 64 + bit_index(closed)
            closed &= closed - np.uint64(1)
            idx, kidx = first_request(pc * prm[P_BPP] + bb, k_lo, k_hi, -1, False, t, st.bstate, st.bnext, req.row,
                                      req.src, out.accept, favored, agecap, by_key)
            if idx >= 0:
                nt_closed = _closed_candidate(pc, bb, idx, kidx, t, nt_closed, turns, prm, pick, req, out, st)
    if nt_closed < nt and not (pick[PK_ROW] >= 0 and pick[PK_ROW_CMD] == ACT):
        return nt_closed
    return nt


@kernel_stage
def _oldest_may_act(pc, t, prm, pick, req, out, st):
    """Whether the oldest request at a closed bank may activate now (then any other ready ACT is younger: it
    changes neither the choice nor the wake-up, and one ready ACT is enough to know); if so it is offered. Only
    when age alone orders requests."""
    idx = min(st.pstate[pc, PC_CLOSED_HEAD + pick[PK_K_LO]], st.pstate[pc, PC_CLOSED_HEAD + pick[PK_K_HI] - 1])
    if ordered(prm) or idx >= INF:
        return False
    gb = req.gb[idx]
    e = earliest(ACT, gb, req.bgf[idx], req.rf[idx], pc, st.nxt_bank, st.nxt_bg, st.nxt_rank, st.nxt_pc, st.faw,
                 st.faw_pos, prm[P_FAW])
    if max(e, out.ready[idx]) > t or (req.rf[idx] - pc * prm[P_RANKS] == pick[PK_REF_RANK]
                                      or gb - pc * prm[P_BPP] == pick[PK_REF_BANK]):
        return False
    pick[PK_READY_ACT] = 1
    kidx = priority_key(idx, t, req.src, out.accept, pick[PK_FAVORED], prm[P_AGECAP])
    if kidx < pick[PK_ROW_KEY]:
        pick[PK_ROW] = idx
        pick[PK_ROW_KEY] = kidx
        pick[PK_ROW_CMD] = ACT
    return True


@kernel_stage
def _closed_candidate(pc, bb, idx, kidx, t, nt_closed, turns, prm, pick, req, out, st):
    """Closed bank `bb`'s oldest request `idx` (priority key `kidx`) as an ACT candidate; returns the closed banks'
    wake-up bound. Selects, not branches: whether a closed bank may activate is a coin toss to the branch
    predictor. With one rank the bounds every bank shares (`PK_AB`) are met here."""
    gb = pc * prm[P_BPP] + bb
    ranks = prm[P_RANKS]
    if ranks > 1:
        e = earliest(ACT, gb, req.bgf[idx], req.rf[idx], pc, st.nxt_bank, st.nxt_bg, st.nxt_rank, st.nxt_pc,
                     st.faw, st.faw_pos, prm[P_FAW])
    else:
        e = max(st.nxt_bank[gb, ACT], st.nxt_bg[req.bgf[idx], ACT])
    e = max(e, out.ready[idx])
    nt_closed = min(nt_closed, e if e > t else INF)
    # refresh may hold this rank or bank; refresh progress wakes the channel
    held = (req.rf[idx] - pc * ranks == pick[PK_REF_RANK]) | (bb == pick[PK_REF_BANK])
    may_act = (e <= t) & ~held
    pick[PK_READY_ACT] += may_act
    if turns:
        kidx = turn_key(pc, bb, prm, st.pstate)
        pick[PK_ACT_KEY] = min(pick[PK_ACT_KEY], kidx if may_act else INF)
    better = may_act & (kidx < pick[PK_ROW_KEY])
    pick[PK_ROW] = idx if better else pick[PK_ROW]
    pick[PK_ROW_KEY] = kidx if better else pick[PK_ROW_KEY]
    pick[PK_ROW_CMD] = ACT if better else pick[PK_ROW_CMD]
    return nt_closed
