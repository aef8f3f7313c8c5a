"""Open page with a cap: a row with hits queued serves at most `P_CAP` column commands while a request for another
row of its bank waits, then precharges; under the other policies an open row's hits always go first."""

from __future__ import annotations

import numpy as np

from archsim.controller.codes import B_CNT, B_COLS, B_HITS_R, B_HITS_W, P_CAP, P_POLICY, POL_OPEN_CAP
from archsim.controller.index_lowering import kernel_stage

assert np  # the index lowering casts with np.uint64


@kernel_stage
def precharge_candidates(pc, word, k_lo, k_hi, words, prm, amask, omask, hmask):
    """Of bank-mask word `word`, the open banks with requests that may want a PRE: all of them with a cap, else
    those without row hits queued."""
    pending = amask[pc, word] & omask[pc, word]
    if prm[P_POLICY] != POL_OPEN_CAP:
        pending &= ~(hmask[pc, k_lo, word] | hmask[pc, k_hi - 1, word])
    return pending


@kernel_stage
def hits_go_first(gb, k_lo, bankq, prm, bstate):
    """Whether open bank `gb` keeps its row: no request waits for another row, or its hits go first (below the
    cap); their column commands wake the channel."""
    cnt = bstate[gb, B_CNT] + bstate[gb, B_CNT + 1] if bankq else bstate[gb, B_CNT + k_lo]
    h = bstate[gb, B_HITS_R] + bstate[gb, B_HITS_W] if bankq else bstate[gb, B_HITS_R + k_lo]
    return cnt == h or (h > 0 and bstate[gb, B_COLS] < prm[P_CAP])
