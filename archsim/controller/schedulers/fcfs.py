"""FCFS: only the oldest schedulable request of the pseudo-channel may act (its column command, ACT or PRE); FCFS
does not auto-precharge. Its next request's command is unknown until it issues, so a pseudo-channel that issued a
column command looks again next cycle (`command_issue`)."""

from __future__ import annotations

import numpy as np

from archsim.controller.bank_timing import earliest
from archsim.controller.codes import (
    ACT,
    B_HEAD,
    B_OPEN,
    P_BPP,
    P_BQD,
    P_FAW,
    P_RANKS,
    P_REFHOLD,
    PK_COL,
    PK_COL_CMD,
    PK_COL_KEY,
    PK_COL_W,
    PK_REF_BANK,
    PK_REF_ON_BUS,
    PK_REF_RANK,
    PK_ROW,
    PK_ROW_CMD,
    PK_ROW_KEY,
    PK_USE_W,
    PRE,
    RD,
    WR,
)
from archsim.controller.index_lowering import kernel_stage

assert np  # the index lowering casts with np.uint64


@kernel_stage
def choose(pc, t, nt, prm, pick, req, out, st):
    """The scheduler interface (see `frfcfs.choose`)."""
    idx = _oldest(pc, prm, pick, st.bstate)
    if idx < 0:
        return nt
    if out.ready[idx] > t:
        return min(nt, out.ready[idx])
    gb = req.gb[idx]
    is_w = req.write[idx] != 0
    if st.bstate[gb, B_OPEN] == req.row[idx]:
        cmd = WR if is_w else RD
    elif st.bstate[gb, B_OPEN] < 0:
        cmd = ACT
    else:
        cmd = PRE
    if _held(pc, idx, cmd, prm, pick, req):
        return nt
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


@kernel_stage
def _oldest(pc, prm, pick, bstate):
    """The oldest request at the head of a bank list of the served kinds (both with bank queues), or -1."""
    base = pc * prm[P_BPP]
    idx = -1
    for k in range(2):
        if prm[P_BQD] == 0 and k != (1 if pick[PK_USE_W] else 0):
            continue
        for bb in range(prm[P_BPP]):
            h = bstate[base + bb, B_HEAD + k]
            if h >= 0 and (idx < 0 or h < idx):
                idx = h
    return idx


@kernel_stage
def _held(pc, idx, cmd, prm, pick, req):
    """Whether a refresh holds the command: an ACT to the rank (bank) it refreshes, any row command while it has
    the row bus, and with held columns a column command to that rank (bank)."""
    here = (req.rf[idx] - pc * prm[P_RANKS] == pick[PK_REF_RANK]
            or req.gb[idx] - pc * prm[P_BPP] == pick[PK_REF_BANK])
    if cmd == ACT and here:
        return True
    if (cmd in (ACT, PRE)) and pick[PK_REF_ON_BUS] != 0:
        return True
    return (cmd in (RD, WR)) and prm[P_REFHOLD] != 0 and here
