"""Wake-up bounds: each pseudo-channel keeps a cycle before which nothing can happen in it (`PC_NEXT`); a channel
is visited when its earliest pseudo-channel bound comes, and the loop jumps to the earliest channel bound or the
next injection."""

from __future__ import annotations

import numpy as np

from archsim.controller.codes import (
    INF,
    P_BQD,
    P_INJCAP,
    P_NCH,
    P_PCS,
    P_PORTS,
    P_REFRESH,
    P_TICK,
    PC_NEXT,
    PF_BLOCKED,
    PF_INJECTED,
    SCR_DUE,
)
from archsim.controller.index_lowering import kernel_stage
from archsim.controller.stages.refresh import recheck_after_issue

assert np  # the index lowering casts with np.uint64


@kernel_stage
def due_channels(t, prm, scratch, chan_next):
    """List the channels due at `t` in `scratch[SCR_DUE:]`; returns how many. A list, then a loop over it: a
    channel number read from memory is no induction variable, so the compiler does not step a pointer into every
    per-channel array for each channel skipped; kept only if due is a select, not a branch the predictor misses."""
    n_due = 0
    for ch in range(prm[P_NCH]):
        scratch[SCR_DUE + n_due] = ch
        n_due += chan_next[ch] <= t
    return n_due


@kernel_stage
def close_visit(ch, t, issued, prm, st):
    """After channel `ch`'s visit: each pseudo-channel whose bound has come looks again next cycle (every cycle in
    the reference mode, `P_TICK`), and the channel's bound is the earliest of its pseudo-channels'."""
    pstate = st.pstate
    pcs = prm[P_PCS]
    tick = prm[P_TICK] != 0
    nt = INF
    for p in range(pcs):
        pc = ch * pcs + p
        if prm[P_REFRESH] != 0 and issued:
            recheck_after_issue(pc, t, prm, st)
        if pstate[pc, PC_NEXT] <= t or tick:
            pstate[pc, PC_NEXT] = t + 1
        nt = min(nt, pstate[pc, PC_NEXT])
    st.chan_next[ch] = nt


@kernel_stage
def next_event(t, freed, prm, scratch, req, st):
    """The earliest channel bound or next injection after `t`. A port blocked on a full queue retries next cycle
    if a slot may have freed (or a request may move into a bank queue); a port at its per-cycle injection cap
    retries next cycle."""
    nt = INF
    for ch in range(prm[P_NCH]):
        nt = min(nt, st.chan_next[ch])
    port_ptr = st.port_ptr
    pflags = st.pflags
    for port in range(prm[P_PORTS]):
        if port_ptr[port] >= req.port_end[port + 1]:
            continue
        head_ts = req.ts[req.port_idx[port_ptr[port]]]
        if pflags[port, PF_BLOCKED] != 0:
            if freed or prm[P_BQD] > 0:
                nt = min(nt, t + 1)
        elif prm[P_INJCAP] > 0 and pflags[port, PF_INJECTED] >= prm[P_INJCAP] and head_ts <= t:
            nt = min(nt, t + 1)
        else:
            nt = min(nt, max(head_ts, t + 1))
    return nt
