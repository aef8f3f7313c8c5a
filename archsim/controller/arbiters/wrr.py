"""Weighted round robin over column commands: the port whose served count is furthest below its weight's share
ranks first (weights `P_W0`, `P_W1`; served counts in `pstate[pc, PC_SERVED + port]`)."""

from __future__ import annotations

import numpy as np

from archsim.controller.codes import P_W0, P_W1, PC_SERVED
from archsim.controller.index_lowering import kernel_stage

assert np  # the index lowering casts with np.uint64


@kernel_stage
def favored_by_weight(pc, prm, pstate):
    return 0 if pstate[pc, PC_SERVED] * prm[P_W1] <= pstate[pc, PC_SERVED + 1] * prm[P_W0] else 1
