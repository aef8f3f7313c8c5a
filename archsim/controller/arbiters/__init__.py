"""Port arbiters: which port (0 host, 1 PNM) a pseudo-channel favours when it picks among ready requests.

One module per arbiter; `favored_port` dispatches on `P_ARB`. The shared arbiter favours none (pure age). A
favoured port's requests rank before the other's in the priority key (`request_lists.priority_key`), after those
past the age cap. The interface takes N sources: a port is an index into the per-port columns of `pstate`."""

from __future__ import annotations

import numpy as np

from archsim.controller.arbiters.priority import favored_by_priority
from archsim.controller.arbiters.reservation import favored_by_reservation
from archsim.controller.arbiters.wrr import favored_by_weight
from archsim.controller.codes import ARB_PRIORITY_HOST, ARB_PRIORITY_PNM, ARB_RESERVE, ARB_WRR, P_ARB
from archsim.controller.index_lowering import kernel_stage

assert np  # the index lowering casts with np.uint64


@kernel_stage
def favored_port(pc, t, prm, pstate):
    """The port pseudo-channel `pc` favours at `t`, or -1 for none."""
    arb = prm[P_ARB]
    if arb in (ARB_PRIORITY_HOST, ARB_PRIORITY_PNM):
        return favored_by_priority(arb)
    if arb == ARB_WRR:
        return favored_by_weight(pc, prm, pstate)
    if arb == ARB_RESERVE:
        return favored_by_reservation(pc, t, prm, pstate)
    return -1
