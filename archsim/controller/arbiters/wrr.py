"""Weighted round robin over column commands: of the ports with requests queued in the pseudo-channel, the one
whose served count is furthest below its weight's share ranks first (`PORT_WEIGHT` per port; served counts in
`pport[pc, port, PP_SERVED]`); on a tie the lower port. A real arbiter skips an empty queue: an idle host must not
hold the favour."""

from __future__ import annotations

import numpy as np

from archsim.controller.codes import N_PARAMS, P_PORTS, PORT_PARAMS, PORT_WEIGHT, PP_QUEUED, PP_SERVED
from archsim.controller.index_lowering import kernel_stage

assert np  # the index lowering casts with np.uint64


@kernel_stage
def favored_by_weight(pc, prm, pport):
    ports = prm[P_PORTS]
    best = -1
    for port in range(ports):
        if pport[pc, port, PP_QUEUED] + pport[pc, port, PP_QUEUED + 1] == 0:
            continue
        # served / weight below the best's, cross-multiplied: integers, no division
        if best < 0 or (pport[pc, port, PP_SERVED] * prm[N_PARAMS + best * PORT_PARAMS + PORT_WEIGHT]
                        < pport[pc, best, PP_SERVED] * prm[N_PARAMS + port * PORT_PARAMS + PORT_WEIGHT]):
            best = port
    return best


@kernel_stage
def rejoin(pc, port, prm, pport):
    """`port` queues a request in pseudo-channel `pc` with none there before: it rejoins the round no better off
    than the ports already in it. Its served count rises to the lowest the active ports' counts give for its
    weight (served_q x w_port / w_q), so idle time banks no credit (as a deficit round robin forgets an empty
    queue's deficit); a port that served more keeps its count."""
    ports = prm[P_PORTS]
    w_port = prm[N_PARAMS + port * PORT_PARAMS + PORT_WEIGHT]
    floor = -1
    for q in range(ports):
        if q == port or pport[pc, q, PP_QUEUED] + pport[pc, q, PP_QUEUED + 1] == 0:
            continue
        level = pport[pc, q, PP_SERVED] * w_port // prm[N_PARAMS + q * PORT_PARAMS + PORT_WEIGHT]
        if floor < 0 or level < floor:
            floor = level
    if floor > pport[pc, port, PP_SERVED]:
        pport[pc, port, PP_SERVED] = floor
