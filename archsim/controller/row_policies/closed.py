"""Closed-page: the column command to a bank's last queued row hit (of its kind) auto-precharges (RDA / WRA), so
its bank's bound on column commands is the earlier of the plain and the auto-precharging one."""

from __future__ import annotations

import numpy as np

from archsim.controller.codes import B_HITS_R, B_HITS_W, P_POLICY, POL_CLOSED, RD, RDA, WR, WRA
from archsim.controller.index_lowering import kernel_stage

assert np  # the index lowering casts with np.uint64


@kernel_stage
def column_command(gb, is_w, prm, bstate):
    """The column command for a row hit of bank `gb`: RD / WR, or under the closed policy RDA / WRA for its
    bank's last queued hit of the kind."""
    auto = False
    if prm[P_POLICY] == POL_CLOSED:
        auto = (bstate[gb, B_HITS_W] if is_w else bstate[gb, B_HITS_R]) <= 1
    if is_w:
        return WRA if auto else WR
    return RDA if auto else RD


@kernel_stage
def column_bank_bound(gb, use_w, bankq, closed_policy, nxt_bank):
    """No column command to bank `gb` can issue before this cycle (its own tRCD, tCCD_L, tWTR): for the kind
    served, or both kinds with bank queues, and their auto-precharging forms under the closed policy."""
    cbank = nxt_bank[gb, WR] if use_w else nxt_bank[gb, RD]
    if bankq:
        cbank = min(nxt_bank[gb, RD], nxt_bank[gb, WR])
    if closed_policy:
        cbank = min(cbank, nxt_bank[gb, RDA], nxt_bank[gb, WRA])
    return cbank
