"""Timeout: a row with no queued hits closes `P_TIMEOUT` cycles after its last column command, when the row bus is
free of other row commands; a pseudo-channel with rows open is looked at again after each column command."""

from __future__ import annotations

import numpy as np

from archsim.controller.bank_timing import row_earliest
from archsim.controller.codes import (
    B_HITS_R,
    B_HITS_W,
    B_LASTCOL,
    B_OPEN,
    P_BPP,
    P_BPR,
    P_FAW,
    P_POLICY,
    P_RANKS,
    P_SH_BPR,
    P_TIMEOUT,
    PK_REF_ON_BUS,
    PK_ROW,
    POL_TIMEOUT,
    PRE,
)
from archsim.controller.index_lowering import kernel_stage

assert np  # the index lowering casts with np.uint64


@kernel_stage
def idle_row(pc, t, nt, prm, pick, st):
    """The bank (within the pseudo-channel) whose idle row times out at `t`, or -1; and the wake-up bound. Idle
    rows are looked at only when no row command was picked: with one, they wait for the next cycle."""
    if prm[P_POLICY] != POL_TIMEOUT:
        return -1, nt
    if pick[PK_ROW] >= 0 or pick[PK_REF_ON_BUS] != 0:
        return -1, t + 1
    bstate = st.bstate
    bpp = prm[P_BPP]
    base = pc * bpp
    for bb in range(bpp):
        gbb = base + bb
        if bstate[gbb, B_OPEN] < 0 or bstate[gbb, B_HITS_R] + bstate[gbb, B_HITS_W] > 0:
            continue
        e = row_earliest(PRE, pc, bb, prm[P_RANKS], prm[P_BPR], prm[P_SH_BPR], bpp, bstate, st.nxt_bank, st.nxt_bg,
                         st.nxt_rank, st.nxt_pc, st.faw, st.faw_pos, prm[P_FAW])
        e = max(e, bstate[gbb, B_LASTCOL] + prm[P_TIMEOUT])
        if e <= t:
            return bb, nt
        nt = min(nt, e)
    return -1, nt
