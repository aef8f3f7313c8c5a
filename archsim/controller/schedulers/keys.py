"""How FR-FCFS and round robin rank candidates: by priority key (`request_lists.priority_key`) unless age alone
orders the requests, or by bank turn order (round robin)."""

from __future__ import annotations

import numpy as np

from archsim.controller.codes import ARB_SHARED, P_AGECAP, P_ARB, P_BPP, PC_RR_PTR
from archsim.controller.index_lowering import kernel_stage

assert np  # the index lowering casts with np.uint64


@kernel_stage
def ordered(prm):
    """False: the oldest request is always first (no favoured port, no age cap)."""
    return prm[P_ARB] != ARB_SHARED or prm[P_AGECAP] > 0


@kernel_stage
def turn_key(pc, bb, prm, pstate):
    """Bank `bb`'s place in the turn order after the bank served last (round robin)."""
    bpp = prm[P_BPP]
    return (bb + bpp - pstate[pc, PC_RR_PTR] - 1) % bpp
