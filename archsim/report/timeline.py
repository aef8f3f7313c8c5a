"""Timelines in the Chrome trace-event JSON format (object form), which ui.perfetto.dev and chrome://tracing open.

    {"displayTimeUnit": "ns", "metadata": {...}, "traceEvents": [...]}

Times (`ts`, `dur`) are microseconds, as the format wants; `displayTimeUnit` only sets how the viewer prints them.

* `archsim replay --timeline`: one process per pseudo-channel, one thread per bank; every DRAM command of the
  command log is a complete slice (`ph: X`) named ACT, PRE, RD, WR, RDA, WRA or REFpb on its bank's thread, and
  PREA and REF (all banks of a rank) on the rank's own thread; `args.bank` is the bank as the log gives it, and
  `args.row` the row where the command has one. A slice lasts its command's own timing (ACT tRCDRD, PRE and
  PREA tRP, RD CL + tBURST, WR CWL + tBURST, REF tRFC, REFpb tRFCpb), cut short where the next command on the
  same thread starts, so slices never overlap. Counters (`ph: C`) per pseudo-channel, in `COUNTER_BINS` equal
  bins over the window: requests in flight (accepted, not yet done: the controller's queues and banks) at each
  bin's start, and the bandwidth of the requests completed in the bin (GB/s).
* `archsim serve --timeline`: one process per system, one thread per request; a request's life as slices:
  queued (arrival to the start of its KV load or prefill), KV load, prefill (to its first token), decode (first
  to last token); a counter of the system's requests in flight; after the requests' threads, each instance's
  batch iterations and each link's timed transfers (on lanes where they overlap), from the run's
  `ServingResult.activity` (archsim/serving/activity.py), writes away from the GPUs on their link's own direction.
  Decode appends are counted, not timed, so not drawn.

`--timeline-window START:END` (durations with units, e.g. `0:20us`; either side may be empty) keeps the events
that overlap the window, cut to it; `--timeline-requests N` keeps the first N requests (in trace or request
order; for a replay, the window closes when the last of them is done). What is left out is counted in
`metadata.omitted_events`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from archsim.dram import commands as C  # noqa: N812 - the command codes read as C.ACT
from archsim.dram.commands import CommandLog
from archsim.errors import ConfigError

SCHEMA = "archsim.timeline/1"
COUNTER_BINS = 500
SERVE_PHASES = ("queued", "KV load", "prefill", "decode")


@dataclass(frozen=True)
class Window:
    """The part of the run a timeline shows: [start_ns, end_ns) and at most `requests` requests."""

    start_ns: float = 0.0
    end_ns: float = float("inf")
    requests: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"start_ns": self.start_ns, "end_ns": None if self.end_ns == float("inf") else self.end_ns,
                "requests": self.requests}


def parse_window(text: str | None, requests: int | None = None, where: str = "--timeline-window",
                 timeline: str | None = "") -> Window:
    """`START:END` with units (`10us:2ms`, `:50us`, `1ms:`); None: the whole run. `timeline` is the command's
    --timeline path: a window or request bound without it is refused (it would bound nothing)."""
    from archsim.units import parse_time_option_ns

    if timeline is None and (text is not None or requests is not None):
        option = where if text is not None else "--timeline-requests"
        raise ConfigError("bounds a timeline: give --timeline OUT.json too", where=option)
    if requests is not None and requests < 1:
        raise ConfigError(f"must be at least 1, got {requests}", where="--timeline-requests")
    if text is None:
        return Window(requests=requests)
    start, sep, end = text.partition(":")
    if not sep:
        raise ConfigError(f"{text!r}: give START:END (e.g. 0:20us; either side may be empty)", where=where)
    start_ns = parse_time_option_ns(start, where) if start.strip() else 0.0
    end_ns = parse_time_option_ns(end, where) if end.strip() else float("inf")
    if start_ns < 0 or end_ns <= start_ns:
        raise ConfigError(f"{text!r}: need 0 <= START < END", where=where)
    return Window(start_ns, end_ns, requests)


@dataclass
class Timeline:
    """Events as JSON text (one object each) and the file's metadata."""

    events: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    omitted: dict[str, int] = field(default_factory=dict)

    def name_process(self, pid: int, name: str, sort_index: int | None = None) -> None:
        self.events.append(_meta("process_name", pid, 0, name))
        if sort_index is not None:
            self.events.append(json.dumps({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                                           "args": {"sort_index": sort_index}}))

    def name_thread(self, pid: int, tid: int, name: str) -> None:
        self.events.append(_meta("thread_name", pid, tid, name))

    def counters(self, pid: int, name: str, key: str, start_ns: float, bin_ns: float, values: np.ndarray) -> None:
        for k, value in enumerate(values.tolist()):
            self.events.append(f'{{"ph":"C","name":"{name}","pid":{pid},"tid":0,'
                               f'"ts":{_us(start_ns + k * bin_ns)},"args":{{"{key}":{_num(value)}}}}}')

    def write(self, path: str | Path) -> None:
        meta = {"schema": SCHEMA, **self.metadata, "omitted_events": dict(sorted(self.omitted.items())),
                "events": len(self.events)}
        with open(path, "w", encoding="utf-8") as handle:
            handle.write('{"displayTimeUnit":"ns",\n"metadata":')
            handle.write(json.dumps(meta, sort_keys=True))
            handle.write(',\n"traceEvents":[\n')
            for start in range(0, len(self.events), 10_000):
                chunk = ",\n".join(self.events[start:start + 10_000])
                handle.write(chunk if start == 0 else ",\n" + chunk)
            handle.write("\n]}\n")


def _meta(kind: str, pid: int, tid: int, name: str) -> str:
    return json.dumps({"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {"name": name}})


def _us(ns: float) -> str:
    return f"{ns / 1000.0:.6f}"  # 1 ps resolution; fixed digits, so the same run gives the same bytes


def _span_us(start_ns: np.ndarray, end_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and duration in us, both from ends rounded to 1 ps, so a slice ending where the next one starts
    does not overlap it after rounding."""
    start = np.round(np.asarray(start_ns, dtype=np.float64) / 1000.0, 6)
    return start, np.maximum(np.round(np.asarray(end_ns, dtype=np.float64) / 1000.0, 6) - start, 0.0)


def _num(value: float) -> str:
    return f"{value:.6g}" if np.isfinite(value) else "0"


def _bins(start_ns: float, end_ns: float) -> tuple[float, int]:
    span = max(end_ns - start_ns, 1e-3)
    return span / COUNTER_BINS, COUNTER_BINS


# ---- replay ------------------------------------------------------------------------------------------------
def command_duration_cycles(timing: Any) -> np.ndarray:
    """Each command's own duration (cycles), indexed by its code."""
    d = np.zeros(C.N_COMMANDS, dtype=np.int64)
    d[C.ACT] = timing.tRCDRD
    d[C.PRE] = d[C.PREA] = timing.tRP
    d[C.RD] = d[C.RDA] = timing.CL + timing.tBURST
    d[C.WR] = d[C.WRA] = timing.CWL + timing.tBURST
    d[C.REF] = timing.tRFC
    d[C.REFPB] = timing.tRFCpb
    return np.maximum(d, 1)


def replay_window_cycles(result: Any, window: Window) -> tuple[int, int]:
    """The window in command-clock cycles [start, end); `window.requests` closes it when the last of the first N
    requests (trace order) is done."""
    tck = result.config.timing.tCK_ns
    start = int(np.ceil(window.start_ns / tck))
    last = int(result.total_cycles) + 1
    end = last if window.end_ns == float("inf") else int(np.ceil(window.end_ns / tck))
    if window.requests is not None and window.requests < len(result.done_cycle):
        end = min(end, int(result.done_cycle[: window.requests].max()) + 1)
    return start, max(min(end, last), start)


def replay_timeline(result: Any, window: Window, source: str = "", pid_base: int = 0, into: Timeline | None = None
                    ) -> Timeline:
    """The timeline of a replay run with its command log (see the module docstring); `into` adds it to another
    timeline (a PNM run's), its processes numbered from `pid_base`."""
    if result.command_log is None:
        raise ValueError("replay_timeline needs a run with command_log=True")
    start, end = replay_window_cycles(result, window)
    return window_timeline(result.config, result.command_log, result, np.unique(result.pseudo_channel), start, end,
                           window, source, pid_base, into)


def window_timeline(cfg: Any, log: Any, requests: Any, request_channels: np.ndarray, start: int, end: int,
                    window: Window, source: str = "", pid_base: int = 0, into: Timeline | None = None,
                    omitted_before: int = 0) -> Timeline:
    """The replay timeline of cycles [start, end) from the commands of `log` (those outside the window count as
    omitted, with `omitted_before` left out already) and the requests' `pseudo_channel`, `accept_cycle` and
    `done_cycle` (at least those in flight or done within the window); `request_channels` the pseudo-channels
    any request went to."""
    org, timing, tck = cfg.organization, cfg.timing, cfg.timing.tCK_ns
    bpp, bpr = org.banks_per_pseudo_channel, org.banks_per_rank
    meta = {"source": source, "kind": "replay", "tCK_ns": tck, "standard": cfg.standard,
            "window": window.as_dict(), "window_cycles": [start, end],
            "banks_per_pseudo_channel": bpp, "banks_per_rank": bpr}
    t = into if into is not None else Timeline(metadata=meta)
    if into is not None:
        t.metadata["dram"] = {**meta, "pid_base": pid_base}
    keep = (log.cycle >= start) & (log.cycle < end)
    t.omitted["commands"] = omitted_before + int((~keep).sum())
    cycle, cmd, pc = log.cycle[keep], log.command[keep].astype(np.int64), log.pseudo_channel[keep].astype(np.int64)
    bank, row = log.bank[keep].astype(np.int64), log.row[keep]
    wide = (cmd == C.PREA) | (cmd == C.REF)
    tid = np.where(wide, bpp + bank // bpr, bank)  # all-bank commands on their rank's thread
    # duration: the command's own, cut where the next command on the same thread starts (no overlaps)
    natural = command_duration_cycles(timing)[cmd]
    order = np.lexsort((cycle, tid, pc))
    nxt = np.full(len(cycle), np.iinfo(np.int64).max, dtype=np.int64)
    if len(order) > 1:
        same = (pc[order[1:]] == pc[order[:-1]]) & (tid[order[1:]] == tid[order[:-1]])
        nxt[order[:-1][same]] = cycle[order[1:]][same]
    dur = np.minimum(np.minimum(natural, nxt - cycle), end - cycle)
    channels = sorted(set(pc.tolist()) | set(np.asarray(request_channels).tolist()))
    for p in channels:
        t.name_process(pid_base + int(p), f"pseudo-channel {p}", pid_base + int(p))
    threads = sorted(set(zip(pc.tolist(), tid.tolist(), strict=True)))
    for p, th in threads:
        t.name_thread(pid_base + p, th, f"bank {th}" if th < bpp else f"rank {th - bpp} (all banks: PREA, REF)")
    names = C.COMMAND_NAMES
    ts_us, dur_us = _span_us(cycle * tck, (cycle + dur) * tck)
    for code, c, p, th, b, r, d in zip(cmd.tolist(), ts_us.tolist(), pc.tolist(), tid.tolist(), bank.tolist(),
                                       row.tolist(), dur_us.tolist(), strict=True):
        row_arg = f',"row":{r}' if r >= 0 else ""
        t.events.append(f'{{"ph":"X","name":"{names[code]}","pid":{pid_base + p},"tid":{th},"ts":{c:.6f},'
                        f'"dur":{d:.6f},"args":{{"bank":{b}{row_arg}}}}}')
    _replay_counters(t, cfg, requests, start, end, channels, pid_base)
    return t


class ReplayWindowCollector:
    """A streaming replay's sink for its timeline (archsim/replay_stream.py): it keeps only the window's commands
    and the requests in flight or done within it (those alone move the counters), so memory follows the window,
    not the trace; a window without an end keeps the run's from its start on. `timeline()` at the end."""

    wants_commands = True

    def __init__(self, cfg: Any, window: Window) -> None:
        tck = cfg.timing.tCK_ns
        self.cfg, self.window = cfg, window
        self.start = int(np.ceil(window.start_ns / tck))
        self.end = None if window.end_ns == float("inf") else int(np.ceil(window.end_ns / tck))
        self.first_done = -1  # the first `window.requests` requests' last done cycle
        self.first_seen = 0
        self.requests = 0
        self.channels = np.zeros(cfg.organization.n_pseudo_channels, dtype=bool)
        self.logs: list[Any] = []
        self.kept: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.omitted = 0

    def _bound(self) -> int:
        """The window's end as far as known (the run's end is not): no kept event lies at or past it."""
        end = self.end if self.end is not None else np.iinfo(np.int64).max - 2
        if self.window.requests is not None and self.first_seen >= self.window.requests:
            end = min(end, self.first_done + 1)
        return end

    def retire(self, fields: dict[str, np.ndarray]) -> None:
        pc, accept, done = fields["pc"], fields["accept"], fields["done"]
        self.requests += len(pc)
        self.channels[pc] = True
        if self.window.requests is not None:
            first = fields["pos"] < self.window.requests
            if first.any():
                self.first_seen += int(first.sum())
                self.first_done = max(self.first_done, int(done[first].max()))
        keep = (done >= self.start - 1) & (accept <= self._bound() + 1)
        self.kept.append((pc[keep], accept[keep], done[keep]))

    def commands(self, log: Any) -> None:
        keep = (log.cycle >= self.start) & (log.cycle < self._bound())
        self.omitted += int((~keep).sum())
        if keep.any():
            self.logs.append(CommandLog(*(getattr(log, f.name)[keep] for f in fields(CommandLog))))

    def timeline(self, total_cycles: int, source: str = "") -> Timeline:
        last = total_cycles + 1
        end = last if self.end is None else self.end
        if self.window.requests is not None and self.window.requests < self.requests:
            end = min(end, self.first_done + 1)
        end = max(min(end, last), self.start)
        empty = CommandLog(*(np.zeros(0, dtype=d) for d in (np.int64, np.int8, np.int32, np.int32, np.int64)))
        log = CommandLog(*(np.concatenate([getattr(p, f.name) for p in self.logs]) for f in fields(CommandLog))) \
            if self.logs else empty
        pc, accept, done = (np.concatenate(parts) for parts in zip(*self.kept, strict=True))
        requests = _Requests(pc, accept, done)
        return window_timeline(self.cfg, log, requests, np.flatnonzero(self.channels), self.start, end, self.window,
                               source, omitted_before=self.omitted)


@dataclass(frozen=True)
class _Requests:
    pseudo_channel: np.ndarray
    accept_cycle: np.ndarray
    done_cycle: np.ndarray


def _replay_counters(t: Timeline, cfg: Any, requests: Any, start: int, end: int, channels: Iterable[int],
                     pid_base: int = 0) -> None:
    tck = cfg.timing.tCK_ns
    access = cfg.organization.access_bytes
    bin_ns, n = _bins(start * tck, end * tck)
    edges_ns = start * tck + np.arange(n + 1) * bin_ns
    accept_ns, done_ns = requests.accept_cycle * tck, requests.done_cycle * tck
    for p in channels:
        mine = requests.pseudo_channel == p
        acc, done = np.sort(accept_ns[mine]), np.sort(done_ns[mine])
        inflight = np.searchsorted(acc, edges_ns[:-1], "right") - np.searchsorted(done, edges_ns[:-1], "right")
        completed = np.diff(np.searchsorted(done, edges_ns, "left"))
        t.counters(pid_base + int(p), "requests in flight", "requests", edges_ns[0], bin_ns,
                   inflight.astype(np.float64))
        t.counters(pid_base + int(p), "bandwidth GB/s", "GB/s", edges_ns[0], bin_ns, completed * access / bin_ns)


def interval_lanes(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """A lane per interval such that intervals of one lane do not overlap (greedy, in start order)."""
    import heapq

    lanes = np.zeros(len(start), dtype=np.int64)
    free: list[tuple[float, int]] = []
    count = 0
    for k in np.argsort(start, kind="stable").tolist():
        if free and free[0][0] <= start[k]:
            _, lane = heapq.heappop(free)
        else:
            lane, count = count, count + 1
        lanes[k] = lane
        heapq.heappush(free, (float(end[k]), lane))
    return lanes


def _link_counter(t: Timeline, pid: int, name: str, start: np.ndarray, end: np.ndarray, size: np.ndarray,
                  window: Window) -> None:
    """A link's delivered bandwidth over time (GB/s, `COUNTER_BINS` bins): each timed transfer's bytes spread
    evenly over its duration, as processor sharing delivers them on average."""
    if not len(start):
        return
    lo, hi = max(float(start.min()), window.start_ns), min(float(end.max()), window.end_ns)
    if hi <= lo:
        return
    bin_ns, n = _bins(lo, hi)
    edges = lo + np.arange(n + 1) * bin_ns
    rate = size / np.maximum(end - start, 1e-9)  # bytes per ns = GB/s
    delivered = np.zeros(n)
    for k in range(0, len(start), 2048):  # bounded memory: transfers x bins in blocks
        a, b, r = start[k:k + 2048, None], end[k:k + 2048, None], rate[k:k + 2048, None]
        overlap = np.clip(np.minimum(b, edges[None, 1:]) - np.maximum(a, edges[None, :-1]), 0.0, None)
        delivered += (overlap * r).sum(axis=0)
    t.counters(pid, f"link {name} GB/s", "GB/s", lo, bin_ns, delivered / bin_ns)


def _serve_activity(t: Timeline, pid: int, activity: dict, first_tid: int, window: Window) -> int:
    """Each instance's batch iterations and each link's timed transfers (on lanes, as they overlap), on threads
    after the requests' ones; returns the slices outside the window."""
    from archsim.serving.activity import TRANSFER_KINDS

    omitted = 0
    inst = activity["iteration_instance"]
    threads = [(first_tid + i, f"instance {i}: iterations") for i in np.unique(inst).tolist()]
    rows = [(first_tid + inst, activity["iteration_start_ns"], activity["iteration_end_ns"],
             [f"iteration ({s} seqs, {k} tokens)" for s, k in zip(activity["iteration_sequences"].tolist(),
                                                                   activity["iteration_tokens"].tolist(), strict=True)],
             [f'"sequences":{s},"tokens":{k},"prefill_chunks":{c}' for s, k, c in
              zip(activity["iteration_sequences"].tolist(), activity["iteration_tokens"].tolist(),
                  activity["iteration_prefills"].tolist(), strict=True)])]
    base = first_tid + (int(inst.max()) + 1 if len(inst) else 0)
    link, start, end = activity["transfer_link"], activity["transfer_start_ns"], activity["transfer_end_ns"]
    for j, name in enumerate(activity["links"]):
        mine = np.flatnonzero(link == j)
        lanes = interval_lanes(start[mine], end[mine])
        tids = base + lanes
        threads += [(base + k, f"link {name}, lane {k}") for k in range(int(lanes.max()) + 1 if len(lanes) else 0)]
        rows.append((tids, start[mine], end[mine],
                     [TRANSFER_KINDS[k] for k in activity["transfer_kind"][mine].tolist()],
                     [f'"bytes":{b:.0f},"link":"{name}"' for b in activity["transfer_bytes"][mine].tolist()]))
        base += int(lanes.max()) + 1 if len(lanes) else 0
        _link_counter(t, pid, name, start[mine], end[mine], activity["transfer_bytes"][mine], window)
    for tid, name in threads:
        t.name_thread(pid, tid, name)
    for tids, a, b, names, args in rows:
        lo, hi = np.maximum(a, window.start_ns), np.minimum(b, window.end_ns)
        show = hi > lo
        omitted += int((~show).sum())
        ts_us, dur_us = _span_us(lo[show], hi[show])
        for k, tid, ts, d in zip(np.flatnonzero(show).tolist(), np.asarray(tids)[show].tolist(), ts_us.tolist(),
                                 dur_us.tolist(), strict=True):
            t.events.append(f'{{"ph":"X","name":"{names[k]}","pid":{pid},"tid":{tid},"ts":{ts:.6f},'
                            f'"dur":{d:.6f},"args":{{{args[k]}}}}}')
    return omitted


def load_command_counts(tree: dict[str, Any]) -> dict[tuple[int, int, str], int]:
    """Per (pseudo-channel, bank as the command log gives it, command name): the slices of a replay timeline."""
    counts: dict[tuple[int, int, str], int] = {}
    for e in tree["traceEvents"]:
        if e["ph"] == "X":
            key = (int(e["pid"]), int(e["args"]["bank"]), e["name"])
            counts[key] = counts.get(key, 0) + 1
    return counts


def command_log_counts(log: Any, start_cycle: int, end_cycle: int) -> dict[tuple[int, int, str], int]:
    """The same counts straight from a command log, for the commands issued in [start_cycle, end_cycle)."""
    keep = (log.cycle >= start_cycle) & (log.cycle < end_cycle)
    keys = np.stack([log.pseudo_channel[keep].astype(np.int64), log.bank[keep].astype(np.int64),
                     log.command[keep].astype(np.int64)], axis=1)
    uniq, counts = np.unique(keys, axis=0, return_counts=True)
    return {(int(p), int(b), C.COMMAND_NAMES[int(c)]): int(k) for (p, b, c), k in zip(uniq, counts, strict=True)}


# ---- serve -------------------------------------------------------------------------------------------------
def serving_timeline(runs: Sequence[Any], window: Window, source: str = "") -> Timeline:
    """Each system's requests' lives (see the module docstring); `runs` are archsim.serving.run.SystemRuns."""
    t = Timeline(metadata={"source": source, "kind": "serve", "window": window.as_dict(),
                           "not_in_timeline": ["decode appends and demotions (counted in bytes, not timed)"]})
    omitted_requests = omitted_slices = 0
    for pid, run in enumerate(runs, start=1):
        t.name_process(pid, f"{run.system.name} ({run.status})", pid)
        r = run.result
        if r is None:
            continue
        n = len(r.arrival_ns)
        limit = n if window.requests is None else min(n, window.requests)
        omitted_requests += n - limit
        ids = np.arange(limit)
        done = np.isfinite(r.last_token_ns[ids])
        omitted_requests += int((~done).sum())  # rejected or never finished: no complete life to draw
        ids = ids[done]
        arrival = r.arrival_ns[ids]
        load_at = arrival + r.queueing_ns[ids]
        prefill_at = load_at + r.kv_load_ns[ids]
        bounds = (arrival, load_at, prefill_at, r.first_token_ns[ids], r.last_token_ns[ids])
        for k, phase in enumerate(SERVE_PHASES):
            a = np.maximum(bounds[k], window.start_ns)
            b = np.minimum(bounds[k + 1], window.end_ns)
            show = b > a
            omitted_slices += int(((bounds[k + 1] > bounds[k]) & ~show).sum())
            ts_us, dur_us = _span_us(a[show], b[show])
            for i, ts, d in zip(ids[show].tolist(), ts_us.tolist(), dur_us.tolist(), strict=True):
                t.events.append(f'{{"ph":"X","name":"{phase}","pid":{pid},"tid":{i},"ts":{ts:.6f},'
                                f'"dur":{d:.6f},"args":{{"request":{i}}}}}')
        if len(ids):
            lo = max(float(arrival.min()), window.start_ns)
            hi = min(float(r.last_token_ns[ids].max()), window.end_ns)
            bin_ns, nb = _bins(lo, hi)
            edges = lo + np.arange(nb) * bin_ns
            inflight = (np.searchsorted(np.sort(arrival), edges, "right")
                        - np.searchsorted(np.sort(r.last_token_ns[ids]), edges, "right"))
            t.counters(pid, "requests in flight", "requests", lo, bin_ns, inflight.astype(np.float64))
        if r.activity is not None:
            omitted_slices += _serve_activity(t, pid, r.activity, n, window)
    t.omitted["requests"] = omitted_requests
    t.omitted["slices_outside_window"] = omitted_slices
    return t
