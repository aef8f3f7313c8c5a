"""The write drain: whether a pseudo-channel serves its write queue this cycle. Two modes (`P_IDLE`): watermarks
(drain from the high watermark down to the low one; writes are also served when no read waits), or batch drains
(DRAMSim3's: a drain starts at the high watermark, or above the idle threshold when no command is queued, and
serves the writes present at its start; writes move only in drains)."""

from __future__ import annotations

import numpy as np

from archsim.controller.codes import (
    P_BQD,
    P_HIGH,
    P_IDLE,
    P_LOW,
    P_NCH,
    P_PCS,
    P_SH_PCS,
    PC_DRAINING,
    PC_NEXT,
    PC_RQ_LEN,
    PC_RQ_UNMOVED,
    PC_WQ_LEN,
    PC_WQ_UNMOVED,
)
from archsim.controller.index_lowering import kernel_stage
from archsim.controller.request_lists import quotient

assert np  # the index lowering casts with np.uint64


@kernel_stage
def serve_writes(pc, t, all_in, prm, st):
    """Whether pseudo-channel `pc` serves writes at `t` (`all_in`: the trace's last request is in)."""
    if prm[P_IDLE] >= 0:
        return _batch_drain(pc, all_in, prm, st.pstate)
    pstate = st.pstate
    if pstate[pc, PC_DRAINING] > 0:
        if pstate[pc, PC_WQ_LEN] <= prm[P_LOW]:
            pstate[pc, PC_DRAINING] = 0
    elif pstate[pc, PC_WQ_LEN] >= prm[P_HIGH]:
        pstate[pc, PC_DRAINING] = 1
    return pstate[pc, PC_DRAINING] > 0 or (pstate[pc, PC_RQ_LEN] == 0 and pstate[pc, PC_WQ_LEN] > 0)


@kernel_stage
def _batch_drain(pc, all_in, prm, pstate):
    """Batch drains: `pstate[pc, PC_DRAINING]` counts the writes the drain has left. The write buffer holds the
    writes not yet moved to a bank queue (the write queue's length also counts moved ones, which a drain cannot
    move again: counting them would never end the drain). After the last request the writes left below the
    threshold drain too (DRAMSim3 would hold them forever; posted, they change no statistic, and the run must
    end)."""
    if pstate[pc, PC_DRAINING] == 0:
        queued_cmds = pstate[pc, PC_RQ_LEN]
        if prm[P_BQD] > 0:
            queued_cmds += pstate[pc, PC_WQ_LEN] - pstate[pc, PC_RQ_UNMOVED] - pstate[pc, PC_WQ_UNMOVED]
        buffered = pstate[pc, PC_WQ_UNMOVED]
        if buffered >= prm[P_HIGH] or (queued_cmds == 0 and (buffered > prm[P_IDLE] or (all_in and buffered > 0))):
            pstate[pc, PC_DRAINING] = buffered
    return pstate[pc, PC_DRAINING] > 0


@kernel_stage
def wake_for_tail(t, prm, st):
    """The last request is in: batch drains may now take the writes held below the threshold, so every
    pseudo-channel with writes looks again at `t`."""
    pstate = st.pstate
    for pc in range(prm[P_NCH] * prm[P_PCS]):
        if pstate[pc, PC_WQ_LEN] > 0:
            pstate[pc, PC_NEXT] = t
            st.chan_next[quotient(pc, prm[P_PCS], prm[P_SH_PCS])] = t
