"""Bank queues (DRAMSim3's structure, `P_BQD` > 0): the read and write queues are transaction queues that feed
per-bank command queues of `P_BQD` entries, one request per cycle from the queue being served; only requests in a
bank queue are schedulable."""

from __future__ import annotations

import numpy as np

from archsim.controller.bank_timing import note_closed
from archsim.controller.codes import (
    B_OPEN,
    P_BPP,
    P_BQD,
    P_IDLE,
    P_WORDS,
    PC_DRAINING,
    PC_RQ_UNMOVED,
    PC_WQ_UNMOVED,
)
from archsim.controller.index_lowering import kernel_stage
from archsim.controller.request_lists import move_one

assert np  # the index lowering casts with np.uint64


@kernel_stage
def fill_bank_queue(pc, t, nt, use_w, prm, req, out, st):
    """Move the oldest waiting request of the served queue whose bank queue has room; returns the wake-up bound.
    If none moved, every waiting request of that queue finds its bank queue full, and stays so until a column
    command frees a slot, a request comes or the served queue changes: each of those wakes the pseudo-channel."""
    bstate = st.bstate
    pstate = st.pstate
    if use_w:
        moved_gb = move_one(st.wq, pstate, PC_WQ_UNMOVED, pc, pc * prm[P_BPP], prm[P_BQD], t, bstate, st.hmask,
                            req.bank, req.row, out.ready, 1, st.bnext, st.bprev, st.amask, prm[P_BPP], prm[P_WORDS])
    else:
        moved_gb = move_one(st.rq, pstate, PC_RQ_UNMOVED, pc, pc * prm[P_BPP], prm[P_BQD], t, bstate, st.hmask,
                            req.bank, req.row, out.ready, 0, st.bnext, st.bprev, st.amask, prm[P_BPP], prm[P_WORDS])
    if moved_gb < 0:
        return nt
    if bstate[moved_gb, B_OPEN] < 0:
        note_closed(pstate, pc, moved_gb, bstate, st.nxt_bank, st.nxt_bg)
    if use_w and prm[P_IDLE] >= 0:
        pstate[pc, PC_DRAINING] -= 1
    if pstate[pc, PC_RQ_UNMOVED] + pstate[pc, PC_WQ_UNMOVED] > 0:
        return t + 1  # one request moves per cycle while any waits
    return nt
