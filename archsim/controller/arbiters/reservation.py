"""Bandwidth reservation: one port (`P_RSRC`) earns tokens at its reserved share of the column-command rate (up to a
burst, `P_RCAP`) and ranks first while it holds one command's worth; each column command it is served spends one."""

from __future__ import annotations

import numpy as np

from archsim.controller.codes import P_RCAP, P_RRATE, P_RSRC, PC_TOKEN_T, PC_TOKENS, TOKEN
from archsim.controller.index_lowering import kernel_stage

assert np  # the index lowering casts with np.uint64


@kernel_stage
def favored_by_reservation(pc, t, prm, pstate):
    v = pstate[pc, PC_TOKENS] + (t - pstate[pc, PC_TOKEN_T]) * prm[P_RRATE]
    pstate[pc, PC_TOKENS] = min(v, prm[P_RCAP])
    pstate[pc, PC_TOKEN_T] = t
    return prm[P_RSRC] if pstate[pc, PC_TOKENS] >= TOKEN else -1


@kernel_stage
def spend_token(pc, src, prm, pstate):
    """A column command served port `src`: the reserved port spends a token if it holds one."""
    if src == prm[P_RSRC] and pstate[pc, PC_TOKENS] >= TOKEN:
        pstate[pc, PC_TOKENS] -= TOKEN
