"""`archsim serve` on several cores: each system's run in a worker process, the results in the given order.

Systems are independent runs on the same requests, so each can run in its own process and the JSON is
byte-identical to a serial run (tests/test_serving_parallel.py). Workers are forked, so they start with the
parent's imports (nothing is re-imported or pickled on the way in), and each takes the next system when it
finishes one. The systems whose decode cost replays DRAM (a PNM pool, or KV streamed every step) take longest;
those on equal pools are served by one worker in turn where the load allows (the later ones reuse the first
one's PNM runs). With their memory kernel in numba's cache they are handed out first. Without it, compiling the
kernel takes most of a first run: the first group of them goes first and compiles it, the systems that never run
the kernel come next (the other workers serve them meanwhile), and the other kernel groups come last; a worker
that needs the kernel while another compiles it waits for it (`kernel_cache.compile_lock`) and loads it.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any

from archsim.serving.run import SystemRun, run_system
from archsim.serving.scenario import Scenario
from archsim.system.config import SystemConfig

# one run: a system, the scenario it serves and its requests (`requests_for(block_tokens)`: run.requests_source)
Task = tuple[SystemConfig, Scenario, Any]
# what a forked worker runs: set by run_systems just before the workers fork (fork copies it, nothing is pickled)
_JOB: tuple[Sequence[Task], int, bool] | None = None


def uses_memory_kernel(system: SystemConfig) -> bool:
    """Whether serving `system` replays DRAM for its decode cost (archsim.serving.costs: `tabulated`)."""
    return system.kv_location != "gpu" and (system.attention == "pnm" or system.kv_decode == "stream")


def kernel_cached(system: SystemConfig) -> bool:
    """Whether numba's cache already holds the memory kernel `system`'s pool replays run."""
    from archsim.memory import kernel_cached as cached

    return system.pool is not None and cached(system.pool.memory)


# relative cost of a run, from the README main job (2000 multiturn requests, warm): a kernel-free system 2.2 s,
# the first PNM system of a process 6.4 s (it runs the timed PNM unit), a later one on the same pool 5.9 s; and
# compiling the memory kernel's variant when numba's cache does not hold it, 12 s
PLAIN_COST, KERNEL_FIRST_COST, KERNEL_NEXT_COST, COMPILE_COST = 1.0, 2.9, 2.7, 5.4


def _pool_key(system: SystemConfig) -> str:
    """Systems with equal pools share a process's memoized PNM and DRAM runs."""
    return repr(system.pool) if system.pool is not None else system.name


def hand_out_order(systems: Sequence[SystemConfig], cached: Callable[[SystemConfig], bool] = kernel_cached,
                   jobs: int = 2) -> list[list[int]]:
    """Groups of indices of `systems`, each served in turn by one worker, in the order workers take them.
    Kernel systems on equal pools go together (the later ones reuse the first one's PNM runs) as long as a
    group stays within an even share of the estimated work. With the kernel in numba's cache the kernel groups
    go first (longest first balances the workers); without it, the first of them goes first and carries the
    compile (so the systems sharing its pool may go to another worker, which loads the kernel once compiled),
    then the systems without the kernel (served while it compiles), then the other kernel groups."""
    kernel: dict[str, list[int]] = {}
    for k, s in enumerate(systems):
        if uses_memory_kernel(s):
            kernel.setdefault(_pool_key(s), []).append(k)
    plain = [[k] for k, s in enumerate(systems) if not uses_memory_kernel(s)]
    compiles = not all(cached(systems[k]) for ks in kernel.values() for k in ks)
    total = PLAIN_COST * len(plain) + sum(KERNEL_FIRST_COST + KERNEL_NEXT_COST * (len(ks) - 1)
                                          for ks in kernel.values()) + COMPILE_COST * compiles
    share = total / max(jobs, 1)
    groups: list[list[int]] = []
    for ks in kernel.values():
        group, cost = [], COMPILE_COST * compiles * (not groups)
        for k in ks:
            add = KERNEL_NEXT_COST if group else KERNEL_FIRST_COST
            if group and cost + add > share:
                groups.append(group)
                group, cost, add = [], 0.0, KERNEL_FIRST_COST
            group.append(k)
            cost += add
        groups.append(group)
    if not compiles:
        return sorted(groups, key=len, reverse=True) + plain
    return groups[:1] + plain + sorted(groups[1:], key=len, reverse=True)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_jobs(n_systems: int) -> int:
    """One worker per system up to the cores this process may use; 1 where workers cannot be forked."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(n_systems, usable_cores()))


def _run_group(group: list[int]) -> list[tuple[int, SystemRun, float]]:
    return [_run_one(k) for k in group]


def _run_one(k: int) -> tuple[int, SystemRun, float]:
    assert _JOB is not None
    tasks, warmup, record = _JOB
    system, scenario, requests_for = tasks[k]
    start = time.perf_counter()
    run = run_system(system, scenario, requests_for, warmup=warmup, record=record)
    return k, run, time.perf_counter() - start


def _quiet_interrupts() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops the workers


def run_systems(tasks: Sequence[Task], *, warmup: int, jobs: int,
                on_done: Callable[[int, SystemRun, float], None], record: bool = False) -> list[SystemRun]:
    """Run every task, `jobs` at a time; `on_done(index, run, seconds)` is called in the tasks' own order as
    their runs come in; `record` as in run_system. The runs, in that order."""
    global _JOB
    came: dict[int, tuple[SystemRun, float]] = {}
    runs: list[SystemRun] = []

    def collect(k: int, run: SystemRun, seconds: float) -> None:
        came[k] = (run, seconds)
        while len(runs) in came:  # report in the systems' order, whatever order they finish in
            run, seconds = came[len(runs)]
            on_done(len(runs), run, seconds)
            runs.append(run)

    _JOB = (tasks, warmup, record)
    try:
        if jobs <= 1 or len(tasks) <= 1:
            for k in range(len(tasks)):
                collect(*_run_one(k))
        else:
            context = multiprocessing.get_context("fork")
            groups = hand_out_order([system for system, _, _ in tasks], jobs=jobs)
            with context.Pool(min(jobs, len(groups)), initializer=_quiet_interrupts) as pool:
                for results in pool.imap_unordered(_run_group, groups, chunksize=1):
                    for result in results:
                        collect(*result)
    finally:
        _JOB = None
    return runs


__all__ = ["run_systems", "default_jobs", "hand_out_order", "uses_memory_kernel"]
