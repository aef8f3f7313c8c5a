"""Round robin over banks (DRAMSim3's per-bank command queues): FR-FCFS's readiness rules with candidates ranked
by bank turn order, starting after the bank served last. DRAMSim3 issues the first ready command in turn order,
then looks on from that bank, with the first command's timing applied, for a second one, issued if it uses the
other bus. A column command blocks every other column command and an ACT every other ACT (tCCD, tRRD); a PRE
blocks nothing. The turn moves to the bank where the second look stops."""

from __future__ import annotations

import numpy as np

from archsim.controller.codes import (
    ACT,
    INF,
    P_BPP,
    PK_ACT_KEY,
    PK_COL,
    PK_COL_KEY,
    PK_PRE_KEY,
    PK_PRE_KEY2,
    PK_ROW,
    PK_ROW_CMD,
    PK_ROW_KEY,
    PK_RR_NEXT,
)
from archsim.controller.index_lowering import kernel_stage
from archsim.controller.schedulers.frfcfs import walk_banks

assert np  # the index lowering casts with np.uint64


@kernel_stage
def choose(pc, t, nt, prm, pick, req, out, st):
    """The scheduler interface (see `frfcfs.choose`)."""
    nt = walk_banks(pc, t, nt, True, prm, pick, req, out, st)
    if pick[PK_COL] < 0 and pick[PK_ROW] < 0:
        return nt
    col_key = pick[PK_COL_KEY]
    row_key = pick[PK_ROW_KEY]
    if col_key < row_key:
        first_key = col_key
        next_key = row_key
    else:
        first_key = row_key
        if pick[PK_ROW_CMD] == ACT:
            next_key = min(col_key, pick[PK_PRE_KEY])
        else:
            next_key = min(col_key, pick[PK_ACT_KEY], pick[PK_PRE_KEY2])
        if pick[PK_COL] >= 0 and col_key > next_key:
            pick[PK_COL] = -1
            nt = t + 1
    pick[PK_RR_NEXT] = (pick[PK_RR_NEXT] + 1 + (next_key if next_key < INF else first_key)) % prm[P_BPP]
    return nt
