"""A scheduler defined outside the package, as a user would write one: it serves the lowest-numbered bank with
requests first, oldest request of that bank first (a deliberately unfair order, unlike any built-in one).
tests/test_scheduler_registry.py registers it and runs it end to end."""

import numpy as np

from archsim.controller.bank_timing import earliest
from archsim.controller.codes import (
    ACT,
    B_HEAD,
    B_OPEN,
    P_BPP,
    P_FAW,
    P_RANKS,
    PK_COL,
    PK_COL_CMD,
    PK_COL_KEY,
    PK_COL_W,
    PK_K_HI,
    PK_K_LO,
    PK_REF_BANK,
    PK_REF_ON_BUS,
    PK_REF_RANK,
    PK_ROW,
    PK_ROW_CMD,
    PK_ROW_KEY,
    PRE,
    RD,
    WR,
)
from archsim.controller.index_lowering import kernel_stage

assert np  # the index lowering casts with np.uint64


def choose(pc, t, nt, prm, pick, req, out, st):
    idx = _lowest_bank_head(pc, prm, pick, st.bstate)
    if idx < 0:
        return nt
    if out.ready[idx] > t:
        return min(nt, out.ready[idx])
    gb = req.gb[idx]
    is_w = req.write[idx] != 0
    open_row = st.bstate[gb, B_OPEN]
    cmd = (WR if is_w else RD) if open_row == req.row[idx] else (ACT if open_row < 0 else PRE)
    refreshing = (req.rf[idx] - pc * prm[P_RANKS] == pick[PK_REF_RANK]
                  or req.gb[idx] - pc * prm[P_BPP] == pick[PK_REF_BANK])
    if (cmd == ACT and refreshing) or ((cmd in (ACT, PRE)) and pick[PK_REF_ON_BUS] != 0):
        return nt  # the refresh's progress wakes the channel
    e = earliest(cmd, gb, req.bgf[idx], req.rf[idx], pc, st.nxt_bank, st.nxt_bg, st.nxt_rank, st.nxt_pc, st.faw,
                 st.faw_pos, prm[P_FAW])
    if e > t:
        return min(nt, e)
    if cmd in (RD, WR):
        pick[PK_COL] = idx
        pick[PK_COL_KEY] = idx
        pick[PK_COL_CMD] = cmd
        pick[PK_COL_W] = is_w
    else:
        pick[PK_ROW] = idx
        pick[PK_ROW_KEY] = idx
        pick[PK_ROW_CMD] = cmd
    return nt


@kernel_stage  # a helper a stage calls is compiled as one too
def _lowest_bank_head(pc, prm, pick, bstate):
    base = pc * prm[P_BPP]
    for bb in range(prm[P_BPP]):
        idx = -1
        for k in range(pick[PK_K_LO], pick[PK_K_HI]):
            h = bstate[base + bb, B_HEAD + k]
            if h >= 0 and (idx < 0 or h < idx):
                idx = h
        if idx >= 0:
            return idx
    return -1
