"""The channel's two command buses (HBM's separate row and column buses, shared by its pseudo-channels): each
pseudo-channel offers its picked column and row command; per bus the smallest priority key (the oldest) wins, a
displaced pseudo-channel tries again next cycle, and a due refresh holds the row bus."""

from __future__ import annotations

import numpy as np

from archsim.controller.codes import (
    BUS_COL_AGE,
    BUS_COL_CMD,
    BUS_COL_I,
    BUS_COL_PC,
    BUS_COL_RR,
    BUS_COL_W,
    BUS_ROW_AGE,
    BUS_ROW_BANK,
    BUS_ROW_CMD,
    BUS_ROW_IS_REF,
    BUS_ROW_PC,
    BUS_ROW_REQ,
    BUS_ROW_RR,
    INF,
    PC_NEXT,
    PK_COL,
    PK_COL_CMD,
    PK_COL_KEY,
    PK_COL_W,
    PK_ROW,
    PK_ROW_CMD,
    PK_ROW_KEY,
    PK_RR_NEXT,
    PRE,
)
from archsim.controller.index_lowering import kernel_stage

assert np  # the index lowering casts with np.uint64


@kernel_stage
def clear(bus):
    """Both buses free at the start of a channel's visit."""
    bus[BUS_COL_PC] = -1
    bus[BUS_COL_I] = -1
    bus[BUS_COL_W] = 0
    bus[BUS_COL_CMD] = -1
    bus[BUS_COL_AGE] = INF
    bus[BUS_COL_RR] = 0
    bus[BUS_ROW_PC] = -1
    bus[BUS_ROW_REQ] = -1
    bus[BUS_ROW_CMD] = -1
    bus[BUS_ROW_AGE] = INF
    bus[BUS_ROW_BANK] = -1
    bus[BUS_ROW_IS_REF] = 0
    bus[BUS_ROW_RR] = 0


@kernel_stage
def offer(pc, t, nt, idle_bank, pick, bus, req, pstate):
    """Offer pseudo-channel `pc`'s picks (and a PRE of `idle_bank`'s timed-out row, if >= 0, with the lowest
    priority) to the buses; returns the wake-up bound (next cycle for a pick that lost)."""
    if pick[PK_COL] >= 0:
        if pick[PK_COL_KEY] < bus[BUS_COL_AGE]:
            if bus[BUS_COL_PC] >= 0:
                pstate[bus[BUS_COL_PC], PC_NEXT] = t + 1
            bus[BUS_COL_PC] = pc
            bus[BUS_COL_RR] = pick[PK_RR_NEXT]
            bus[BUS_COL_I] = pick[PK_COL]
            bus[BUS_COL_CMD] = pick[PK_COL_CMD]
            bus[BUS_COL_W] = pick[PK_COL_W]
            bus[BUS_COL_AGE] = pick[PK_COL_KEY]
        else:
            nt = t + 1
    if pick[PK_ROW] < 0 and idle_bank < 0:
        return nt
    age = pick[PK_ROW_KEY] if pick[PK_ROW] >= 0 else INF - 1
    if bus[BUS_ROW_IS_REF] != 0 or age >= bus[BUS_ROW_AGE]:
        return t + 1
    if bus[BUS_ROW_PC] >= 0:
        pstate[bus[BUS_ROW_PC], PC_NEXT] = t + 1  # displaced (an earlier pseudo-channel)
    bus[BUS_ROW_PC] = pc
    bus[BUS_ROW_RR] = pick[PK_RR_NEXT]
    bus[BUS_ROW_AGE] = age
    if pick[PK_ROW] >= 0:
        bus[BUS_ROW_REQ] = pick[PK_ROW]
        bus[BUS_ROW_CMD] = pick[PK_ROW_CMD]
        bus[BUS_ROW_BANK] = req.bank[pick[PK_ROW]]
    else:
        bus[BUS_ROW_REQ] = -1
        bus[BUS_ROW_CMD] = PRE
        bus[BUS_ROW_BANK] = idle_bank
    return nt
