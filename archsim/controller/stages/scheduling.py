"""Scheduling: what a pseudo-channel may do at a cycle, then the scheduler's choice of one column command and one
row command among its schedulable requests (`schedulers/`), then the wake-up rule shared by every scheduler.

`prepare` fills the context slots of `pick` (`codes.PK_*`) and clears its choice; a scheduler reads the context
and writes its choice there. Bounds shared by every candidate of a kind (data bus, tRRD / tFAW) let the scheduler
skip work that cannot issue at the cycle."""

from __future__ import annotations

import numpy as np

from archsim.controller.bank_timing import act_bound, col_bound, hits_bound
from archsim.controller.codes import (
    ACT,
    BUS_ROW_IS_REF,
    BUS_ROW_PC,
    INF,
    P_BPP,
    P_BQD,
    P_FAW,
    P_POLICY,
    P_RANKS,
    P_WORDS,
    PC_HITS_R,
    PC_HITS_W,
    PC_RQ_LEN,
    PC_RQ_UNMOVED,
    PC_RR_PTR,
    PC_WQ_LEN,
    PC_WQ_UNMOVED,
    PK_AB,
    PK_ACT_KEY,
    PK_CB_R,
    PK_CB_W,
    PK_COL,
    PK_COL_CMD,
    PK_COL_KEY,
    PK_COL_W,
    PK_FAVORED,
    PK_K_HI,
    PK_K_LO,
    PK_PRE_KEY,
    PK_PRE_KEY2,
    PK_READY_ACT,
    PK_READY_PRE,
    PK_REF_ON_BUS,
    PK_REF_RANK,
    PK_ROW,
    PK_ROW_CMD,
    PK_ROW_KEY,
    PK_RR_NEXT,
    PK_USE_W,
    PK_WANT_COL,
    PK_WANT_ROW,
    POL_CLOSED,
    RD,
    WR,
)
from archsim.controller.index_lowering import kernel_stage

assert np  # the index lowering casts with np.uint64


@kernel_stage
def prepare(pc, t, nt, use_w, favored, prm, bus, pick, st):
    """The context of pseudo-channel `pc`'s choice at `t` into `pick`; returns the wake-up bound. A column command
    is wanted when row hits are queued and the data bus may take one, a row command when other requests are
    queued and no refresh holds the row bus."""
    pstate = st.pstate
    _clear_choice(pc, pick, pstate)
    bankq = prm[P_BQD] > 0
    pick[PK_USE_W] = use_w
    pick[PK_FAVORED] = favored
    pick[PK_REF_ON_BUS] = bus[BUS_ROW_IS_REF]
    pick[PK_K_LO] = 0 if bankq else (1 if use_w else 0)
    pick[PK_K_HI] = 2 if bankq else pick[PK_K_LO] + 1
    if bankq:
        n_hits = pstate[pc, PC_HITS_R] + pstate[pc, PC_HITS_W]
        n_sched = (pstate[pc, PC_RQ_LEN] - pstate[pc, PC_RQ_UNMOVED] + pstate[pc, PC_WQ_LEN]
                   - pstate[pc, PC_WQ_UNMOVED])
    else:
        n_hits = pstate[pc, PC_HITS_W] if use_w else pstate[pc, PC_HITS_R]
        n_sched = pstate[pc, PC_WQ_LEN] if use_w else pstate[pc, PC_RQ_LEN]
    ranks = prm[P_RANKS]
    pick[PK_CB_R] = col_bound(RD, pc, ranks, st.nxt_rank, st.nxt_pc) if bankq or not use_w else INF
    pick[PK_CB_W] = col_bound(WR, pc, ranks, st.nxt_rank, st.nxt_pc) if bankq or use_w else INF
    pick[PK_WANT_COL] = n_hits > 0
    if n_hits > 0 and min(pick[PK_CB_R], pick[PK_CB_W]) > t:
        pick[PK_WANT_COL] = 0
        nt = min(nt, hits_bound(pc, prm[P_BPP], prm[P_WORDS], st.hmask, st.nxt_bank, pick[PK_CB_R], pick[PK_CB_W],
                                prm[P_POLICY] == POL_CLOSED))
    pick[PK_WANT_ROW] = n_sched > n_hits and bus[BUS_ROW_IS_REF] == 0
    if bus[BUS_ROW_IS_REF] != 0 and bus[BUS_ROW_PC] != pc and n_sched > n_hits:
        nt = t + 1  # another pseudo-channel's refresh holds the row bus this cycle
    pick[PK_AB] = act_bound(pc, ranks, pick[PK_REF_RANK], st.nxt_rank, st.nxt_pc, st.faw, st.faw_pos, prm[P_FAW])
    return nt


@kernel_stage
def _clear_choice(pc, pick, pstate):
    pick[PK_COL] = -1
    pick[PK_COL_KEY] = INF
    pick[PK_COL_CMD] = -1
    pick[PK_COL_W] = 0
    pick[PK_ROW] = -1
    pick[PK_ROW_KEY] = INF
    pick[PK_ROW_CMD] = -1
    pick[PK_READY_PRE] = 0
    pick[PK_READY_ACT] = 0
    pick[PK_ACT_KEY] = INF
    pick[PK_PRE_KEY] = INF
    pick[PK_PRE_KEY2] = INF
    pick[PK_RR_NEXT] = pstate[pc, PC_RR_PTR]


@kernel_stage
def settle(t, nt, pick):
    """Another ready row command may issue next cycle; other ACTs behind an ACT wait for tRRD / tFAW, which the
    ACT's own wake-up covers."""
    ready_pre = pick[PK_READY_PRE]
    if ready_pre + pick[PK_READY_ACT] > 1 and (pick[PK_ROW_CMD] != ACT or ready_pre > 0):
        return t + 1
    return nt
