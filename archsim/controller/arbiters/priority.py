"""Strict priority: one port always ranks first (after requests past the age cap, which bound its starvation)."""

from __future__ import annotations

import numpy as np

from archsim.controller.codes import ARB_PRIORITY_HOST
from archsim.controller.index_lowering import kernel_stage

assert np  # the index lowering casts with np.uint64


@kernel_stage
def favored_by_priority(arb):
    return 0 if arb == ARB_PRIORITY_HOST else 1
