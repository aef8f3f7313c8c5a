"""Schedulers, one module each, registered by name (`config.memory.SCHEDULERS` holds the codes the config
accepts). A scheduler is a kernel stage `choose(pc, t, nt, prm, pick, req, out, st) -> nt`: given the context in
`pick` (`codes.PK_*`: served kinds, favoured port, what a refresh holds, whether a column or a row command is
wanted, the shared ACT bound), it writes at most one column and one row command of pseudo-channel `pc` that may
issue at cycle `t` into `pick`, each with its priority key (smaller wins the channel's bus), and returns the
earliest cycle at which its choice could change (the wake-up bound, at most `nt`).

The general kernel dispatches on the code (`choose_builtin`); `register_scheduler` adds one from outside the
package, compiled into a kernel variant of its own."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from archsim.controller.codes import P_SCHED, SCHED_FCFS, SCHED_ROUND_ROBIN
from archsim.controller.index_lowering import kernel_stage
from archsim.controller.schedulers.fcfs import choose as choose_fcfs
from archsim.controller.schedulers.frfcfs import choose as choose_frfcfs
from archsim.controller.schedulers.round_robin import choose as choose_round_robin

assert np  # the index lowering casts with np.uint64

# the schedulers registered from outside the package: code -> (name, the function given, its compiled stage)
EXTERNAL: dict[int, tuple[str, Callable, Callable]] = {}


@kernel_stage
def choose_builtin(pc, t, nt, prm, pick, req, out, st):
    """The general kernel's scheduler: the built-in one `P_SCHED` names (each by its own name, not as a module's
    attribute, so that `source_digest` reaches its source)."""
    sched = prm[P_SCHED]
    if sched == SCHED_FCFS:
        return choose_fcfs(pc, t, nt, prm, pick, req, out, st)
    if sched == SCHED_ROUND_ROBIN:
        return choose_round_robin(pc, t, nt, prm, pick, req, out, st)
    return choose_frfcfs(pc, t, nt, prm, pick, req, out, st)


def register_scheduler(name: str, choose: Callable) -> int:
    """Register `choose` (a function with the interface above, plain Python: it is compiled as a kernel stage)
    under `name`, which configs may then give as `memory.controller.scheduler`; returns its code. Registering the
    same name again with the same function is a no-op."""
    from archsim.config.memory import SCHEDULERS

    if name in SCHEDULERS.names():
        code = SCHEDULERS.get(name)
        if code not in EXTERNAL:
            raise ValueError(f"scheduler {name!r} is a built-in one")
        if EXTERNAL[code][1] is not choose:
            raise ValueError(f"scheduler {name!r} is registered already")
        return code
    code = 16 + len(EXTERNAL)
    SCHEDULERS.add(name, code)
    EXTERNAL[code] = (name, choose, kernel_stage(choose))
    return code
