"""Bandwidth reservation: each port with a reserved share earns tokens at that share of the column-command rate
(`PORT_RATE`, up to a burst, `PORT_CAP`) and ranks first while it holds one command's worth; each column command
it is served spends one. When several hold one, the one whose bucket would overflow first goes first (earliest
deadline: a bucket at its cap loses the share it keeps earning), on a tie the lower port; favouring the fullest
bucket instead let a large share starve a small one below its guarantee. A port with nothing queued in the
pseudo-channel keeps earning (to its cap) but is not favoured: favouring it would rank no one first and void
the other ports' shares."""

from __future__ import annotations

import numpy as np

from archsim.controller.codes import (
    N_PARAMS,
    P_PORTS,
    PORT_CAP,
    PORT_PARAMS,
    PORT_RATE,
    PP_QUEUED,
    PP_TOKEN_T,
    PP_TOKENS,
    TOKEN,
)
from archsim.controller.index_lowering import kernel_stage

assert np  # the index lowering casts with np.uint64


@kernel_stage
def favored_by_reservation(pc, t, prm, pport):
    ports = prm[P_PORTS]
    best, best_room, best_rate = -1, 0, 1
    for port in range(ports):
        rate = prm[N_PARAMS + port * PORT_PARAMS + PORT_RATE]
        if rate == 0:
            continue
        v = pport[pc, port, PP_TOKENS] + (t - pport[pc, port, PP_TOKEN_T]) * rate
        pport[pc, port, PP_TOKENS] = min(v, prm[N_PARAMS + port * PORT_PARAMS + PORT_CAP])
        pport[pc, port, PP_TOKEN_T] = t
        if pport[pc, port, PP_TOKENS] < TOKEN or pport[pc, port, PP_QUEUED] + pport[pc, port, PP_QUEUED + 1] == 0:
            continue  # no credit, or nothing queued here: a favour it cannot use would void the others' shares
        # time to overflow, (cap - tokens) / rate, below the best's: cross-multiplied
        room = prm[N_PARAMS + port * PORT_PARAMS + PORT_CAP] - pport[pc, port, PP_TOKENS]
        if best < 0 or room * best_rate < best_room * rate:
            best, best_room, best_rate = port, room, rate
    return best


@kernel_stage
def spend_token(pc, src, prm, pport):
    """A column command served port `src`: it spends a token if it holds one."""
    ports = prm[P_PORTS]  # noqa: F841 - the row length of pport's indexing (index_lowering)
    if pport[pc, src, PP_TOKENS] >= TOKEN:
        pport[pc, src, PP_TOKENS] -= TOKEN
