"""The `archsim pnm run --timeline` view of a timed run (Chrome trace-event JSON, archsim/report/timeline.py).

One process per PNM unit. On it, one thread per execution unit (ctl, cfg, alu, dma, host, mac, vec, sfu):
every issued instruction is a slice named by its mnemonic, from its issue cycle for as long as it occupies
its unit (the MAC array, vector unit or SFU for a compute instruction's occupancy, the host port for
RECV/SEND, one cycle for the DMA command port and the scalar units), cut short where the next instruction on
that thread starts. A `stalls` thread holds each stall, from the cycle the in-order front end allowed the
instruction to the cycle it issued, named by the cause the stats charge it to (memory, dependency, compute,
host, barrier; a consumer of a compute result split into compute, then dependency, as the stats split it).
`DMA lane k` threads hold each load and store from its issue to its in-order completion (transfers
overlap up to `dma.max_outstanding_loads`, so each lane holds transfers that do not), and a counter per unit
gives the transfers in flight. Times are unit cycles x the unit clock period. After the units, when the timeline
is bounded (a window or an instruction count: a whole run issues millions of commands), the device memory's
DRAM commands, one process per pseudo-channel, as `replay --timeline` draws them (metadata under
`metadata.dram`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from archsim.pnm.timed.timing import (
    _COMPUTED,
    COMP,
    COMPUTE,
    DEP,
    EXEC_UNITS,
    LOAD,
    RECV,
    SEND,
    STALL_CAUSES,
    STORE,
)
from archsim.report.timeline import Timeline, Window, _bins, _span_us, interval_lanes, replay_timeline

STALLS_TID = len(EXEC_UNITS)
LANE_TID = STALLS_TID + 1


def pnm_timeline(run: Any, window: Window, source: str = "") -> Timeline:
    """The timeline of a `run_pnm(..., record=True)` run (see the module docstring). `window.requests` keeps
    each unit's first N instructions."""
    period = run.layout.unit_period_ns
    t = Timeline(metadata={"source": source, "kind": "pnm run", "unit_period_ns": period,
                           "window": window.as_dict(), "exec_units": list(EXEC_UNITS),
                           "stall_causes": list(STALL_CAUSES)})
    omitted = {"instructions": 0, "stalls": 0, "transfers": 0}
    last_ns = 0.0  # where the kept instructions end: the DRAM's window under --timeline-requests
    for timer in run.timing.timers:
        if timer.record is None:
            raise ValueError("pnm_timeline needs a run with record=True")
        pid = timer.unit + 1
        t.name_process(pid, f"PNM unit {timer.unit}", pid)
        for tid, name in enumerate(EXEC_UNITS):
            t.name_thread(pid, tid, name)
        t.name_thread(pid, STALLS_TID, "stalls")
        issued = [r for r in timer.record if r[0] >= 0 and (window.requests is None or r[0] < window.requests)]
        last_ns = max(last_ns, max((r[2] for r in issued), default=0) * period)
        omitted["instructions"] += timer.stats.issued - len(issued)
        _instructions(t, timer, pid, issued, period, window, omitted)
        _stalls(t, pid, [r for r in timer.record if r[0] < 0 or window.requests is None or r[0] < window.requests],
                period, window, omitted)
        _transfers(t, timer, pid, issued, period, window, omitted)
    t.omitted.update(omitted)
    memory = run.timing.memory
    if memory.command_log is None:
        t.metadata["dram"] = "not drawn: give --timeline-window or --timeline-requests to draw the DRAM commands"
    else:  # the device memory's commands, one process per pseudo-channel after the units
        end = window.end_ns if window.requests is None else min(window.end_ns, last_ns + period)
        base = max(timer.unit for timer in run.timing.timers) + 2
        replay_timeline(memory, Window(window.start_ns, end), source, pid_base=base, into=t)
    return t


def _mnemonics(timer: Any) -> list[str]:
    return [ins.mnemonic for ins in timer.work.program.instructions]


def _emit(t: Timeline, pid: int, tid: int, names: list[str], start_ns: np.ndarray, end_ns: np.ndarray,
          window: Window, args: list[str], omitted: dict[str, int], what: str) -> None:
    a, b = np.maximum(start_ns, window.start_ns), np.minimum(end_ns, window.end_ns)
    show = (b > a) | ((b == a) & (a >= window.start_ns) & (a < window.end_ns))
    omitted[what] += int((~show).sum())
    ts_us, dur_us = _span_us(a[show], b[show])
    kept = np.flatnonzero(show).tolist()
    for k, ts, d in zip(kept, ts_us.tolist(), dur_us.tolist(), strict=True):
        t.events.append(f'{{"ph":"X","name":"{names[k]}","pid":{pid},"tid":{tid},"ts":{ts:.6f},"dur":{d:.6f},'
                        f'"args":{{{args[k]}}}}}')


def _instructions(t: Timeline, timer: Any, pid: int, issued: list, period: float, window: Window,
                  omitted: dict[str, int]) -> None:
    mnemonic = _mnemonics(timer)
    by_unit: dict[int, list[tuple[int, int]]] = {}
    for i, _earliest, issue, _cause, _split in issued:
        kind = timer._kind[i]
        busy = timer._occ[i] if kind in (COMPUTE, RECV, SEND) else 1
        by_unit.setdefault(timer._eu[i], []).append((issue, busy, i))
    for eu, rows in sorted(by_unit.items()):
        start = np.array([r[0] for r in rows], dtype=np.int64)
        end = start + np.array([r[1] for r in rows], dtype=np.int64)
        end[:-1] = np.minimum(end[:-1], start[1:])  # no overlap on a thread (issue width > 1 on scalar units)
        ids = [r[2] for r in rows]
        names = [mnemonic[timer._pc[i]] for i in ids]
        args = [f'"instruction":{i},"pc":{timer._pc[i]}' for i in ids]
        _emit(t, pid, eu, names, start * period, end * period, window, args, omitted, "instructions")


def _stalls(t: Timeline, pid: int, records: list, period: float, window: Window, omitted: dict[str, int]) -> None:
    names, start, end, args = [], [], [], []
    for i, earliest, issue, cause, split in records:
        if issue <= earliest:
            continue
        parts = [(cause, earliest, issue)]
        if cause == _COMPUTED:  # as the stats split it: the producer's occupancy is compute, the rest dependency
            cut = earliest + min(max(split - earliest, 0), issue - earliest)
            parts = [(COMP, earliest, cut), (DEP, cut, issue)]
        for c, a, b in parts:
            if b > a:
                names.append(f"stall: {STALL_CAUSES[c]}")
                start.append(a)
                end.append(b)
                args.append(f'"instruction":{i}' if i >= 0 else '"waiting":"barrier"')
    _emit(t, pid, STALLS_TID, names, np.array(start, dtype=np.int64) * period,
          np.array(end, dtype=np.int64) * period, window, args, omitted, "stalls")


def _transfers(t: Timeline, timer: Any, pid: int, issued: list, period: float, window: Window,
               omitted: dict[str, int]) -> None:
    mnemonic = _mnemonics(timer)
    # transfer k is the k-th load or store issued; records are in issue order, which is program order
    loads = [i for i, *_ in issued if timer._kind[i] in (LOAD, STORE)]
    index = {i: k for k, i in enumerate(i for i, *_ in timer.record if i >= 0 and timer._kind[i] in (LOAD, STORE))}
    begin = np.array([timer.t_issue[index[i]] for i in loads], dtype=np.int64)
    done = np.array([timer.comp[index[i]] for i in loads], dtype=np.int64)
    lanes = interval_lanes(begin, done)
    for lane in range(int(lanes.max()) + 1 if len(lanes) else 0):
        mine = np.flatnonzero(lanes == lane)
        t.name_thread(pid, LANE_TID + lane, f"DMA lane {lane}")
        names = [mnemonic[timer._pc[loads[k]]] for k in mine.tolist()]
        args = [f'"instruction":{loads[k]},"transfer":{index[loads[k]]}' for k in mine.tolist()]
        _emit(t, pid, LANE_TID + lane, names, begin[mine] * period, done[mine] * period, window, args, omitted,
              "transfers")
    _in_flight(t, timer, pid, loads, index, period, window)


def _in_flight(t: Timeline, timer: Any, pid: int, loads: list[int], index: dict[int, int], period: float,
               window: Window) -> None:
    if not loads:
        return
    begin = np.sort(np.array([timer.t_issue[index[i]] for i in loads], dtype=np.float64) * period)
    done = np.sort(np.array([timer.comp[index[i]] for i in loads], dtype=np.float64) * period)
    lo, hi = max(float(begin[0]), window.start_ns), min(float(done[-1]), window.end_ns)
    if hi <= lo:
        return
    bin_ns, n = _bins(lo, hi)
    edges = lo + np.arange(n) * bin_ns
    inflight = np.searchsorted(begin, edges, "right") - np.searchsorted(done, edges, "right")
    t.counters(pid, "transfers in flight", "transfers", lo, bin_ns, inflight.astype(np.float64))


__all__ = ["pnm_timeline"]
