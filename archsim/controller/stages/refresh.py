"""Refresh: all-bank (`P_REFRESH` 1: PREA then REF per rank every tREFI) or per-bank (2: PRE then REFpb, banks in
turn every tREFI / banks). A due refresh blocks its rank's (bank's) activations, and with `P_REFHOLD` its column
commands, and takes the channel's row bus before any request."""

from __future__ import annotations

import numpy as np

from archsim.controller.bank_timing import row_earliest
from archsim.controller.codes import (
    ACT,
    B_BUSY,
    B_OPEN,
    BUS_ROW_BANK,
    BUS_ROW_CMD,
    BUS_ROW_IS_REF,
    BUS_ROW_PC,
    BUS_ROW_REQ,
    P_BPP,
    P_BPR,
    P_FAW,
    P_RANKS,
    P_REFI,
    P_REFIPB,
    P_REFRESH,
    P_SH_BPR,
    PC_NEXT,
    PK_REF_BANK,
    PK_REF_RANK,
    PRE,
    PREA,
    REF,
    REFPB,
)
from archsim.controller.index_lowering import kernel_stage

assert np  # the index lowering casts with np.uint64


@kernel_stage
def claim_refresh(pc, t, nt, prm, bus, pick, st):
    """Offer pseudo-channel `pc`'s due refresh commands to the row bus (the first refresh of the channel wins it,
    displacing a request's row command); note in `pick` the rank or bank a due refresh holds. Returns the wake-up
    bound: the next refresh due, or when a due one may issue."""
    pick[PK_REF_RANK] = -1
    pick[PK_REF_BANK] = -1
    if prm[P_REFRESH] == 0:
        return nt
    ranks = prm[P_RANKS]
    for r in range(ranks):
        rf = pc * ranks + r
        if st.ref_due[rf] > t:
            nt = min(nt, st.ref_due[rf])
            continue
        cmd, tb = _refresh_command(pc, r, prm, pick, st)
        e = row_earliest(cmd, pc, tb, ranks, prm[P_BPR], prm[P_SH_BPR], prm[P_BPP], st.bstate, st.nxt_bank,
                         st.nxt_bg, st.nxt_rank, st.nxt_pc, st.faw, st.faw_pos, prm[P_FAW])
        if e > t:
            nt = min(nt, e)
        elif bus[BUS_ROW_IS_REF] == 0:
            if bus[BUS_ROW_PC] >= 0:
                st.pstate[bus[BUS_ROW_PC], PC_NEXT] = t + 1  # displaced: it tries again next cycle
            bus[BUS_ROW_PC] = pc
            bus[BUS_ROW_CMD] = cmd
            bus[BUS_ROW_BANK] = tb
            bus[BUS_ROW_REQ] = -1
            bus[BUS_ROW_IS_REF] = 1
        else:
            nt = t + 1
    return nt


@kernel_stage
def _refresh_command(pc, r, prm, pick, st):
    """The next command of rank `r`'s due refresh and its bank within the pseudo-channel: all-bank, PREA while a
    bank of the rank is open, then REF; per-bank, PRE of the bank whose turn it is while open, then REFpb."""
    bstate = st.bstate
    bpr = prm[P_BPR]
    base = pc * prm[P_BPP]
    if prm[P_REFRESH] == 1:
        pick[PK_REF_RANK] = r
        for bb in range(bpr):
            if bstate[base + r * bpr + bb, B_OPEN] >= 0:
                return PREA, r * bpr
        return REF, r * bpr
    tb = r * bpr + st.ref_ptr[pc * prm[P_RANKS] + r]
    pick[PK_REF_BANK] = tb
    return (PRE if bstate[base + tb, B_OPEN] >= 0 else REFPB), tb


@kernel_stage
def refreshed(cmd, pc, b, rf, prm, st):
    """A REF or REFpb issued: the next one falls due; the refreshed banks are busy until they may activate."""
    bstate = st.bstate
    bpr = prm[P_BPR]
    if cmd == REF:
        st.ref_due[rf] += prm[P_REFI]
        base = pc * prm[P_BPP] + (b // bpr) * bpr
        for bb in range(bpr):
            bstate[base + bb, B_BUSY] = st.nxt_rank[rf, ACT]
    else:
        st.ref_due[rf] += prm[P_REFIPB]
        st.ref_ptr[rf] = (st.ref_ptr[rf] + 1) % bpr
        bstate[pc * prm[P_BPP] + b, B_BUSY] = st.nxt_bank[pc * prm[P_BPP] + b, ACT]


@kernel_stage
def recheck_after_issue(pc, t, prm, st):
    """A command issued in the channel: a bank closed by auto-precharge drops out of a pending PREA's gate, so a
    pseudo-channel with a refresh due looks again next cycle."""
    ranks = prm[P_RANKS]
    for r in range(ranks):
        if st.ref_due[pc * ranks + r] <= t:
            st.pstate[pc, PC_NEXT] = t + 1
