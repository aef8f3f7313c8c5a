"""Port arbiters: which port (a host or the PNM) a pseudo-channel favours when it picks among ready requests.

One module per arbiter; `favored_port` dispatches on `P_ARB`. The shared arbiter favours none (pure age). A
favoured port's requests rank before the others' in the priority key (`request_lists.priority_key`), after those
past the age cap. Every arbiter takes N ports: a port is an index into the trace's sources and into the per-port
table `pport` (`codes.PP_*`); its parameters follow the global ones in `prm` (`codes.PORT_*`)."""

from __future__ import annotations

import numpy as np

from archsim.controller.arbiters.reservation import favored_by_reservation
from archsim.controller.arbiters.wrr import favored_by_weight
from archsim.controller.codes import ARB_PRIORITY, ARB_RESERVE, ARB_WRR, P_ARB, P_FAVOR
from archsim.controller.index_lowering import kernel_stage

assert np  # the index lowering casts with np.uint64


@kernel_stage
def favored_port(pc, t, prm, pport):
    """The port pseudo-channel `pc` favours at `t`, or -1 for none."""
    arb = prm[P_ARB]
    if arb == ARB_PRIORITY:
        return prm[P_FAVOR]  # strict priority: one port always ranks first (the age cap bounds the others' wait)
    if arb == ARB_WRR:
        return favored_by_weight(pc, prm, pport)
    if arb == ARB_RESERVE:
        return favored_by_reservation(pc, t, prm, pport)
    return -1
