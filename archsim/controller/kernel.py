"""The compiled controller + bank-timing loop: event-driven, struct-of-arrays, no Python objects.

One call advances the whole memory (every channel) until a number of requests has been injected or all are done;
state lives in arrays (`records`) so the Python side can run it in chunks (progress bar) and resume.

Per pseudo-channel: an age-ordered read queue and write queue. With `bank_queue_depth` > 0 the queues are
transaction queues that feed per-bank command queues one request per cycle (DRAMSim3's structure): only requests
moved into a bank queue are schedulable. Per channel: one row-command and one column-command slot per cycle,
shared by its pseudo-channels (HBM's separate row and column buses). Each pseudo-channel keeps a bound before which
nothing can happen in it (`PC_NEXT`): the earliest issue time of a queued request's next command, a refresh
deadline, or the cycle after it issued or moved a request. A channel is visited when its earliest pseudo-channel
bound comes, and the visit evaluates only the pseudo-channels whose bound has come; one displaced from a shared
command bus tries again next cycle.

A cycle runs the stages (`stages/`, each a module) in order: injection; per due channel and due pseudo-channel the
write drain, the port arbiter (`arbiters/`), the bank queues, refresh, scheduling with the scheduler
(`schedulers/`), the row policy (`row_policies/`) and the offer to the channel's buses; then command issue and
the wake-up bounds; last the next event. Every stage is a function compiled apart (their type inference inlined
into one function took 90 s cold), and each reads the organization's shape from the parameters.

One general kernel runs every configuration and dispatches on the codes in `prm`. The defaults on a shipped
standard's shape run a plain kernel: the same stages rebuilt with `PLAIN` and the shape as constants. A scheduler
registered from outside the package (`schedulers.register_scheduler`) gets a kernel variant of its own
(`KernelVariant`).
"""

from __future__ import annotations

import functools
import sys
from typing import NamedTuple

import numpy as np

from archsim.controller import codes, index_lowering
from archsim.controller.arbiters import favored_port
from archsim.controller.codes import (
    ARB_SHARED,
    BUS_COL_PC,
    BUS_ROW_PC,
    INF,
    N_BUS,
    N_PICK,
    P_BQD,
    P_IDLE,
    P_LOGCAP,
    P_NCH,
    P_PCS,
    P_TICK,
    PC_NEXT,
    PK_WANT_COL,
    PK_WANT_ROW,
    POL_OPEN_CAP,
    S_DONE,
    S_IDLE,
    S_LAST,
    S_LASTCOL,
    S_LOGOVF,
    S_LOOPS,
    S_NLOG,
    S_PTR,
    S_QUEUED,
    S_STALLED,
    S_T,
    S_TLIMIT,
    S_VISITS,
    SCHED_FRFCFS,
    SCHED_ROUND_ROBIN,
    SCR_BUS,
    SCR_DUE,
    SCR_PICK,
    STALL_CYCLES,
)
from archsim.controller.index_lowering import kernel_stage, with_lowered_indexing
from archsim.controller.row_policies.timeout import idle_row
from archsim.controller.schedulers import EXTERNAL, choose_builtin
from archsim.controller.source_digest import source_digest
from archsim.controller.stages.bank_queues import fill_bank_queue
from archsim.controller.stages.buses import clear, offer
from archsim.controller.stages.command_issue import issue_column, issue_row
from archsim.controller.stages.injection import inject
from archsim.controller.stages.refresh import claim_refresh
from archsim.controller.stages.scheduling import prepare, settle
from archsim.controller.stages.wakeup import close_visit, due_channels, next_event
from archsim.controller.stages.write_drain import serve_writes, wake_for_tail
from archsim.jit import njit

# `_evaluate` calls the variant's scheduler, `_visit` the variant's `_evaluate` and `_kernel` its `_visit`:
# `compiled_kernel` lays each variant's functions over these names
schedule = choose_builtin
evaluate = None
visit = None


def _kernel(stop_ptr, prm, gaps, scal, scratch, req, out, st, log):
    """Run until `stop_ptr` requests are in, all are done, the log may overflow or `scal[S_TLIMIT]` comes; the
    carried scalars go back to `scal`. Returns the cycle it stopped at."""
    n_req = req.ts.shape[0]
    logging = prm[P_LOGCAP] > 0
    nch = prm[P_NCH]
    t = scal[S_T]
    ptr = scal[S_PTR]
    tlimit = scal[S_TLIMIT]
    queued = scal[S_QUEUED]
    last = scal[S_LAST]
    last_col_t = scal[S_LASTCOL]
    tail_drain_woken = False
    n_visits = 0
    n_loops = 0
    n_idle = 0
    while True:
        # a call stops only between cycles, so that a resumed run is the same as an uninterrupted one: after the
        # caller's chunk of requests is in, or before a cycle whose commands might not fit in the log
        if ptr >= stop_ptr and ptr < n_req:
            break
        if logging and scal[S_NLOG] + 2 * nch + 2 > log.cycle.shape[0]:
            scal[S_LOGOVF] = 1  # the caller grows the log and resumes at this very cycle
            break
        ptr, queued, last, last_col_t = inject(t, ptr, queued, last, last_col_t, prm, scratch, req, out, st)
        if prm[P_IDLE] >= 0 and ptr >= n_req and not tail_drain_woken:
            tail_drain_woken = True
            wake_for_tail(t, prm, st)
        n_loops += 1
        freed = False
        for k in range(due_channels(t, prm, scratch, st.chan_next)):
            n_visits += 1
            col, row, queued, last = visit(scratch[SCR_DUE + k], t, ptr >= n_req, queued, last, prm, gaps, scal,
                                           scratch, req, out, st, log)
            if col:
                last_col_t = t
                freed = True
            n_idle += not (col or row)
        if ptr >= n_req and queued == 0:
            scal[S_DONE] = 1
            break
        if queued > 0 and t - last_col_t > STALL_CYCLES:
            scal[S_STALLED] = 1
            break
        nt = max(next_event(t, freed, prm, scratch, req, st), t + 1)
        if nt >= tlimit or nt >= INF:
            # nothing before the caller's horizon (or ever, until more requests are released): hand back
            t = min(nt, tlimit)
            break
        t = nt
    scal[S_VISITS] += n_visits
    scal[S_LOOPS] += n_loops
    scal[S_IDLE] += n_idle
    scal[S_T] = t
    scal[S_PTR] = ptr
    scal[S_QUEUED] = queued
    scal[S_LAST] = last
    scal[S_LASTCOL] = last_col_t
    return t


def _visit(ch, t, all_in, queued, last, prm, gaps, scal, scratch, req, out, st, log):
    """Visit channel `ch` at `t`: evaluate its due pseudo-channels onto the buses, issue the winners, set the
    bounds. Returns (a column command issued, a row command issued, queued, last event cycle)."""
    bus = scratch[SCR_BUS:SCR_BUS + N_BUS]
    pick = scratch[SCR_PICK:SCR_PICK + N_PICK]
    clear(bus)
    pcs = prm[P_PCS]
    tick = prm[P_TICK] != 0  # reference mode: evaluate every channel every cycle (tests the wake-up bounds)
    for p in range(pcs):
        pc = ch * pcs + p
        if st.pstate[pc, PC_NEXT] > t and not tick:
            continue  # nothing can happen in this pseudo-channel yet: its bound stands
        st.pstate[pc, PC_NEXT] = evaluate(pc, t, all_in, prm, bus, pick, req, out, st)
    col = bus[BUS_COL_PC] >= 0
    if col:
        queued, last = issue_column(t, queued, last, prm, gaps, scal, bus, req, out, st, log)
    row = bus[BUS_ROW_PC] >= 0
    if row:
        issue_row(t, prm, gaps, scal, bus, req, out, st, log)
    close_visit(ch, t, col or row, prm, st)
    return col, row, queued, last


def _evaluate(pc, t, all_in, prm, bus, pick, req, out, st):
    """Pseudo-channel `pc`'s stages at `t`, up to its offer to the buses; returns its wake-up bound."""
    nt = INF
    use_w = serve_writes(pc, t, all_in, prm, st)
    favored = favored_port(pc, t, prm, st.pport)
    if prm[P_BQD] > 0:
        nt = fill_bank_queue(pc, t, nt, use_w, prm, req, out, st)
    nt = claim_refresh(pc, t, nt, prm, bus, pick, st)
    nt = prepare(pc, t, nt, use_w, favored, prm, bus, pick, st)
    if pick[PK_WANT_COL] or pick[PK_WANT_ROW]:
        nt = schedule(pc, t, nt, prm, pick, req, out, st)
    nt = settle(t, nt, pick)
    idle_bank, nt = idle_row(pc, t, nt, prm, pick, st)
    return offer(pc, t, nt, idle_bank, pick, bus, req, st.pstate)


class KernelVariant(NamedTuple):
    """Which compiled kernel runs a configuration: the general one (`scheduler` -1: the built-in schedulers by
    code) or one with a scheduler registered from outside the package (its code); with a shape (> 0), the shape
    frozen as constants, and the parameters of the controller named by `controller` (`FROZEN_CONTROLLERS`:
    "plain", the defaults; "dramsim3", DRAMSim3's; "general", none)."""

    scheduler: int = -1
    pseudo_channels: int = 0
    ranks: int = 0
    mask_words: int = 0
    controller: str = "plain"


# The plain kernels freeze the defaults (FR-FCFS, the shared arbiter without age cap, two ports (host and PNM), no
# bank queues, watermark write drains, no refresh hold, event-driven) and the shape of a shipped standard (HBM2 in
# legacy mode: one pseudo-channel, one rank; HBM3 and HBM3E: two pseudo-channels of two stack IDs), so that the
# features they leave off fold away and the loops over one pseudo-channel, rank or port unroll. DRAMSim3's controller
# gets the same on its own parameters; any other controller on such a shape runs the general kernel of that shape:
# the shape alone frozen, which unrolls those loops. Each costs one more compile when first used;
# docs/performance.md has what it pays.
PLAIN = {"P_SCHED": SCHED_FRFCFS, "P_ARB": ARB_SHARED, "P_PORTS": 2, "P_AGECAP": 0, "P_BQD": 0, "P_IDLE": -1,
         "P_REFHOLD": 0, "P_TICK": 0}
# DRAMSim3's controller as `config import-dramsim3` writes it (round robin over per-bank command queues of 8, batch
# write drains above an idle threshold of 8, an open page with a cap, refresh holding the columns): the one that runs
# every comparison with DRAMSim3 and Ramulator 2, so it gets a kernel of its own (docs/performance.md has what it pays)
DRAMSIM3 = {"P_SCHED": SCHED_ROUND_ROBIN, "P_POLICY": POL_OPEN_CAP, "P_ARB": ARB_SHARED, "P_PORTS": 2, "P_AGECAP": 0,
            "P_BQD": 8, "P_IDLE": 8, "P_REFHOLD": 1, "P_TICK": 0}
FROZEN_CONTROLLERS = {"plain": PLAIN, "dramsim3": DRAMSIM3, "general": {}}  # tried in this order
SPECIALIZED_SHAPES = ((1, 1, 1), (2, 2, 1))


def _frozen(variant: KernelVariant) -> dict[str, int]:
    if variant.pseudo_channels == 0:
        return {}
    shape = {"P_PCS": variant.pseudo_channels, "P_RANKS": variant.ranks, "P_WORDS": variant.mask_words}
    return {**FROZEN_CONTROLLERS[variant.controller], **shape}


def _specialized(stage, frozen: dict[str, int], suffix: str, memo: dict):
    """`stage` rebuilt with the `frozen` parameter slots as constants, and so every stage it calls that reads the
    parameters (a helper takes its values as arguments, and stays as it is)."""
    py = stage.py_func
    if id(py) not in memo:
        overrides = {}
        for name in sorted(set(py.__code__.co_names)):
            value = py.__globals__.get(name)
            if hasattr(value, "py_func") and "prm" in value.py_func.__code__.co_varnames:
                overrides[name] = _specialized(value, frozen, suffix, memo)
        memo[id(py)] = kernel_stage(py, f"{py.__name__}_{suffix}", overrides, frozen)
    return memo[id(py)]


def _variant_name(variant: KernelVariant) -> str:
    name = "general" if variant.scheduler < 0 else EXTERNAL[variant.scheduler][0]
    if variant.pseudo_channels > 0:
        shape = f"{variant.pseudo_channels}pc_{variant.ranks}rank_{variant.mask_words}word"
        name = f"{variant.controller}_{shape}"
    return name


@functools.cache
def _variant(variant: KernelVariant) -> tuple[dict, str]:
    """The functions `_kernel` calls in `variant` (its `_visit`, which calls its `_evaluate`, which calls its
    scheduler, each compiled as a kernel stage under the variant's name) and the `source_digest` of them all.
    The digest is taken here, while the variant's functions still have their source's code (their indexing is
    lowered only when they compile), so that it does not depend on what this process compiled before."""
    chosen = choose_builtin if variant.scheduler < 0 else EXTERNAL[variant.scheduler][2]
    name = _variant_name(variant)
    evaluate_fn = kernel_stage(_evaluate, f"_evaluate_{name}", {"schedule": chosen})
    visit_fn = kernel_stage(_visit, f"_visit_{name}", {"evaluate": evaluate_fn})
    if variant.pseudo_channels > 0:
        visit_fn = _specialized(visit_fn, _frozen(variant), name, {})
    constants = {"visit": visit_fn}
    # numba keys its cache on this file alone: the digest of every source it reaches in the name keys it on them all,
    # and on `codes` whole: the lowering bakes its tables' row lengths (FLAT_ARRAYS) into code that names none
    return constants, source_digest(_kernel, constants, extra_modules=(index_lowering, codes, sys.modules[__name__]))


def variant_globals(variant: KernelVariant) -> dict:
    """The functions `_kernel` calls in `variant` (see `_variant`)."""
    return _variant(variant)[0]


@functools.cache
def compiled_kernel(variant: KernelVariant):
    """`_kernel` compiled for `variant` on first use, under its own name (and so its own cache files) that ends in
    the `source_digest` of everything it reaches and of this module (the frozen values), so that an edited stage,
    helper, constant or timing rule compiles anew instead of loading a stale kernel. Every function is compiled
    from its source with lowered indexing (`index_lowering`); the stages only on a cache miss, the kernel itself
    always, since numba's cache index is keyed on the kernel's bytecode."""
    constants, digest = _variant(variant)
    name = f"_kernel_{_variant_name(variant)}_{digest}"
    kernel_fn = with_lowered_indexing(_kernel, name, constants, _frozen(variant))
    return njit(cache=True, error_model="numpy", _nrt=False)(kernel_fn)


def run_kernel(variant: KernelVariant, stop_ptr: int, prm: np.ndarray, gaps: np.ndarray, scal: np.ndarray,
               scratch: np.ndarray, inputs: tuple, outputs: tuple, state: tuple, log: tuple) -> int:
    """Advance the memory (see the module docstring) with the kernel compiled for `variant`."""
    return compiled_kernel(variant)(stop_ptr, prm, gaps, scal, scratch, inputs, outputs, state, log)
