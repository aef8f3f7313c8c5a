"""Streaming replay: a trace of any length through the controller kernel in bounded memory, with exactly the
results of a whole-trace `memory.replay`.

The kernel's request arrays are a window of slots, in trace order: the requests accepted and still queued, then
each port's next ones (its lookahead). Between kernel calls the window is rebuilt: the requests done and out of
every queue are handed to the sinks (stats, timeline, the caller's) and dropped, each port's lookahead is topped
up from the trace, and the survivors and newcomers get new slots, still in trace order. Every request index the
kernel keeps (the bank lists' links, heads and tails, the oldest heads of closed banks, the bank-queue mode's
transaction queues, the ports' orders) is rewritten through the old-to-new slot map; as the order is kept, every
comparison of indices (age, priority keys) comes out as in the whole-trace run.

A call must not let the kernel see less of the trace than a whole-trace run would: the kernel reads only each
port's next request, so a port that has used up its lookahead while the trace holds more of its requests may not
run a cycle at or past the next one's timestamp. A port whose next request lies ahead in time bounds the call in
time (`S_TLIMIT`); one whose next request is due already (a backlog: the trace is faster than the memory) bounds
it in requests injected (`stop_ptr`), with a margin of the most requests a port can hand over in one cycle. That
bound misses only a run of requests merged in the write queue (forwarded) within one cycle: the call then starts
over from a snapshot (`_Snapshot`) with a longer lookahead for that port.

Memory: the window (WINDOW_REQUESTS slots, about 130 B each, grown only while a port needs a longer lookahead)
plus the sinks' own (docs/memory.md). Each port (the host and the PNM, or the hosts and the PNM of a
trace with a source table: archsim/trace/native.py) reads the trace through its own cursor, so a port whose
requests are rare does not make another port's requests pile up in the window.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from archsim.config.memory import MemoryConfig
from archsim.controller import codes as K  # noqa: N812 - the kernel's codes read as K.INF
from archsim.controller.kernel import run_kernel
from archsim.controller.records import RequestArrays, RequestOutcomes
from archsim.dram.commands import CommandLog
from archsim.dram.timing_table import compile_timing_table
from archsim.errors import EMPTY_TRACE, TraceError
from archsim.kernel_cache import _PREPARED, describe_variant, prepare_kernel
from archsim.memory import _kernel_state, _log_arrays, kernel_params, kernel_variant, request_fields
from archsim.trace.stream import BATCH_REQUESTS, ArraySource, Batch, RequestSource

WINDOW_REQUESTS = 1 << 18

# the window's arrays per slot: dtype and the value of a slot before its request is injected
_SLOT_ARRAYS: dict[str, tuple[type, int]] = {
    "ts": (np.int64, int(K.INF)), "pc": (np.int32, 0), "bank": (np.int32, 0), "row": (np.int32, 0),
    "write": (np.uint8, 0), "addr": (np.int64, 0), "gb": (np.int64, 0), "bgf": (np.int64, 0), "rf": (np.int64, 0),
    "src": (np.uint8, 0),
    "accept": (np.int64, -1), "ready": (np.int64, int(K.INF)), "done": (np.int64, -1), "klass": (np.int8, -1),
    "conflict": (np.uint8, 0), "bnext": (np.int64, -1), "bprev": (np.int64, -1),
    "pos": (np.int64, -1), "trace_ts": (np.int64, 0),
}
_INPUTS = ("ts", "pc", "bank", "row", "write", "addr", "gb", "bgf", "rf", "src")
_OUTCOMES = ("accept", "ready", "done", "klass", "conflict")
_KERNEL_WRITES = (*_OUTCOMES, "bnext", "bprev")  # the per-slot arrays a kernel call changes


def requests_source(requests: Any, batch_requests: int = BATCH_REQUESTS) -> ArraySource:
    """`memory.Requests` as a streaming source."""
    return ArraySource(requests.timestamp_cycles, requests.address, requests.is_write, requests.source,
                       batch_requests, requests.sources)


class _PortFeed:
    """One port's requests not yet in the window, read ahead batch by batch."""

    def __init__(self, batches: Iterator[Batch], clock: list[float]) -> None:
        self._batches = batches
        self._held: list[Batch] = []
        self._clock = clock  # time spent reading the trace, kept apart from the simulation's
        self.buffered = 0
        self.exhausted = False

    def _read(self) -> None:
        start = time.perf_counter()
        try:
            batch = next(self._batches)
        except StopIteration:
            self.exhausted = True
            return
        finally:
            self._clock[0] += time.perf_counter() - start
        if len(batch):
            self._held.append(batch)
            self.buffered += len(batch)

    def more(self) -> bool:
        while not self.buffered and not self.exhausted:
            self._read()
        return self.buffered > 0

    def next_timestamp(self) -> int:
        """The kernel's timestamp (never below 0) of the next request; call `more` first."""
        return max(int(self._held[0].timestamp_cycles[0]), 0)

    def take(self, count: int) -> list[Batch]:
        while self.buffered < count and not self.exhausted:
            self._read()
        out: list[Batch] = []
        while count > 0 and self._held:
            head = self._held[0]
            if len(head) <= count:
                out.append(self._held.pop(0))
            else:
                out.append(head.select(slice(0, count)))
                self._held[0] = head.select(slice(count, None))
            count -= len(out[-1])
            self.buffered -= len(out[-1])
        return out


class Sink(Protocol):
    """What a streaming replay hands over: `retire(fields)` the requests done (arrays by name: pos, trace_ts, src,
    write, pc, gb, accept, done, klass, conflict); `commands(log)` each stretch of the command log (if it asked
    for one: `wants_commands`). A sink with a `begin(sources)` method is told the trace's ports first."""

    wants_commands: bool

    def retire(self, fields: dict[str, np.ndarray]) -> None: ...

    def commands(self, log: CommandLog) -> None: ...


@dataclass
class StreamResult:
    total_cycles: int
    command_counts: np.ndarray
    qos_counts: np.ndarray
    requests: int
    wall_s: float  # the simulation's host time: the kernel and the window, not the reading (addresses decoded
    # included), sinks or compile
    read_s: float
    compile_s: float
    kernel_cache: str | None
    window_slots: int  # the window's largest size
    restarts: int  # calls started over with a longer lookahead (write-queue merges in one cycle)


@dataclass
class _Snapshot:
    scal: np.ndarray
    state: list[np.ndarray]
    live: np.ndarray  # slots injected before the call
    saved: dict[str, np.ndarray]  # their per-slot values the kernel may change


class StreamingReplay:
    """A replay of a `RequestSource` whose done requests go to `sinks` as it runs; `run()` returns the run's
    figures. `window_requests` sets the window (tests make it small so that it is rebuilt often)."""

    def __init__(self, cfg: MemoryConfig, source: RequestSource, sinks: list[Sink], *,
                 window_requests: int = WINDOW_REQUESTS, tick_every_cycle: bool = False,
                 progress: Callable[[int], None] | None = None) -> None:
        self.cfg = cfg
        self.sinks = sinks
        self.logging = any(s.wants_commands for s in sinks)
        org, c = cfg.organization, cfg.controller
        self.sources = tuple(source.sources)  # the ports' names, by source index
        ports = len(self.sources)
        for sink in sinks:
            if hasattr(sink, "begin"):
                sink.begin(self.sources)
        self.prm = kernel_params(cfg, 1 if self.logging else 0, tick_every_cycle, self.sources)
        self.variant = kernel_variant(self.prm)
        self.gaps = compile_timing_table(cfg.timing).reshape(-1)
        self.scal = np.zeros(K.N_SCALARS, dtype=np.int64)
        self.scratch = np.zeros(K.SCR_DUE + org.n_channels, dtype=np.int64)
        # the most requests one port hands over in a cycle that take a queue slot (the rest merge in the write queue)
        queue_room = org.n_pseudo_channels * (c.read_queue_depth + c.write_queue_depth)
        cap = cfg.frontend.max_injections_per_cycle
        self.margin = min(queue_room, cap) if cap > 0 else queue_room
        self.clock = [0.0]
        self.feeds = [_PortFeed(source.open(p), self.clock) if p in source.ports else None for p in range(ports)]
        share = max(window_requests // max(len(source.ports), 1), 1)
        self.lookahead = [share] * ports
        self.cap = 0
        self.a: dict[str, np.ndarray] = {}
        self.port_idx = np.zeros(0, dtype=np.int64)
        self.port_end = np.zeros(ports + 1, dtype=np.int64)
        self.m = 0  # slots in use
        self.state, _ = _kernel_state(cfg, 1, ports)
        self.bstate = self.state.bstate.reshape(-1, K.BANK_COLUMNS)
        self.pstate = self.state.pstate.reshape(-1, K.PC_COLUMNS)
        self.log = _log_arrays(max(4 * window_requests, 1024) if self.logging else 1)
        # room for the lookaheads, every request the queues can hold (every port's share, the bank queues) and
        # the spare slot (`_call`); taken at the first rebuild, unless the whole trace is in the window by then
        self.full_slots = window_requests + ports * queue_room + org.n_banks * c.bank_queue_depth + 1
        self._grow(2)  # one slot and the spare, until the first rebuild knows the trace's length
        self.progress = progress
        self.retired = 0
        self.restarts = 0
        self.window_slots = 0
        self.compile_s = 0.0
        self.sinks_s = 0.0  # the sinks' own time (stats, checker, timeline), kept out of `wall_s` with the reading
        self.kernel_cache: str | None = None

    # ---- the window
    def _grow(self, slots: int) -> None:
        if slots <= self.cap + 1:
            return
        old = self.a
        self.cap = max(slots, self.cap + self.cap // 2 + 1) - 1  # and one spare slot (`_call`)
        self.a = {name: np.full(self.cap + 1, fill, dtype=dtype) for name, (dtype, fill) in _SLOT_ARRAYS.items()}
        for name, array in old.items():
            self.a[name][:self.m] = array[:self.m]
        self.port_idx = np.zeros(self.cap + 1, dtype=np.int64)  # the ports' waiting slots back to back

    def _queued(self, m: int) -> np.ndarray:
        """Slots whose request is in a queue: a bank list (a head, or its predecessor's successor: links of a
        request that left are stale, never pointed back at), or a bank-queue mode's transaction queue."""
        a = self.a
        queued = np.zeros(m, dtype=bool)
        heads = self.bstate[:, K.B_HEAD:K.B_HEAD + 2].ravel()
        queued[heads[heads >= 0]] = True
        linked = np.flatnonzero(a["bprev"][:m] >= 0)
        queued[linked[a["bnext"][a["bprev"][linked]] == linked]] = True
        if self.prm[K.P_BQD] > 0:
            for queue, column in ((self.state.rq, K.PC_RQ_UNMOVED), (self.state.wq, K.PC_WQ_UNMOVED)):
                held = np.arange(queue.shape[1]) < self.pstate[:, column, None]
                queued[queue[held]] = True
        return queued

    def _retire(self, slots: np.ndarray) -> None:
        a = self.a
        fields = {name: a[name][slots] for name in ("pos", "trace_ts", "src", "write", "pc", "gb", "accept", "done",
                                                     "klass", "conflict")}
        start = time.perf_counter()
        for sink in self.sinks:
            sink.retire(fields)
        self.sinks_s += time.perf_counter() - start
        self.retired += slots.size

    def _trace_left(self) -> bool:
        """Whether any port has requests not yet in the window."""
        return any(feed is not None and feed.more() for feed in self.feeds)

    def _newcomers(self, kept: np.ndarray) -> Batch | None:
        """Each port's next requests, enough to top its lookahead up, merged in trace order."""
        src = self.a["src"][kept]
        ahead = np.bincount(src[self.a["accept"][kept] < 0], minlength=len(self.sources))
        parts: list[Batch] = []
        for port, feed in enumerate(self.feeds):
            if feed is not None and feed.more():
                parts += feed.take(self.lookahead[port] - int(ahead[port]))
        parts = [p for p in parts if len(p)]
        if not parts:
            return None
        merged = Batch(*(np.concatenate([getattr(p, f) for p in parts]) for f in
                         ("position", "timestamp_cycles", "address", "is_write", "source")))
        return merged.select(np.argsort(merged.position, kind="stable")) if len(parts) > 1 else merged

    def _rebuild(self) -> None:
        """Drop the done requests, take in newcomers, renumber every slot the kernel keeps (module docstring)."""
        a, m = self.a, self.m
        live = (a["accept"][:m] < 0) | self._queued(m)
        if not live.all():
            self._retire(np.flatnonzero(~live))
        kept = np.flatnonzero(live)
        new = self._newcomers(kept)
        n_new = 0 if new is None else len(new)
        total = kept.size + n_new
        self._grow(max(total + 1, self.full_slots) if self._trace_left() else total + 1)  # short trace: 30 MB less
        a = self.a
        kept_pos = a["pos"][kept]
        kept_to: np.ndarray | slice = slice(0, kept.size)  # a slice where the slots are consecutive: faster
        new_to: np.ndarray | slice = slice(kept.size, total)
        if new is not None and kept.size and new.position[0] < kept_pos[-1]:  # the ports' requests interleave
            kept_to = np.arange(kept.size) + np.searchsorted(new.position, kept_pos)
            new_to = np.arange(n_new) + np.searchsorted(kept_pos, new.position)
        remap = np.full(max(m, 1), -1, dtype=np.int64)
        remap[kept] = np.arange(total)[kept_to]
        if kept.size < m or not isinstance(kept_to, slice):  # else nothing moves
            for array in a.values():
                array[kept_to] = array[kept]
        if new is not None:
            self._place(new, new_to)
        self.m = total
        self.window_slots = max(self.window_slots, total)
        self._renumber(remap, total)

    def _place(self, new: Batch, slots: np.ndarray | slice) -> None:
        a = self.a
        start = time.perf_counter()
        fields = request_fields(self.cfg, new.address)
        # decoding the addresses prepares the trace's input (a whole-trace session does it before the run): it
        # counts with the reading, not the simulation (`StreamResult.wall_s`)
        self.clock[0] += time.perf_counter() - start
        for name, values in fields.items():
            a[name][slots] = values
        a["ts"][slots] = np.maximum(new.timestamp_cycles, 0)
        a["trace_ts"][slots] = new.timestamp_cycles
        a["write"][slots] = new.is_write
        a["src"][slots] = new.source
        a["pos"][slots] = new.position
        for name in _KERNEL_WRITES:
            a[name][slots] = _SLOT_ARRAYS[name][1]

    def _renumber(self, remap: np.ndarray, total: int) -> None:
        """Rewrite every request index the kernel keeps through `remap` (old slot -> new), and the ports' orders."""
        a = self.a
        for name in ("bnext", "bprev"):
            links = a[name][:total]
            on = links >= 0
            links[on] = _through(remap, links[on])
        for table in (self.bstate[:, K.B_HEAD:K.B_HEAD + 2], self.bstate[:, K.B_TAIL:K.B_TAIL + 2]):
            on = table >= 0
            table[on] = _through(remap, table[on])
        heads = self.pstate[:, K.PC_CLOSED_HEAD:K.PC_CLOSED_HEAD + 2]
        on = heads < K.INF
        heads[on] = _through(remap, heads[on])
        if self.prm[K.P_BQD] > 0:
            for queue, column in ((self.state.rq, K.PC_RQ_UNMOVED), (self.state.wq, K.PC_WQ_UNMOVED)):
                held = np.arange(queue.shape[1]) < self.pstate[:, column, None]
                queue[held] = _through(remap, queue[held])
        waiting = np.flatnonzero(a["accept"][:total] < 0)
        src = a["src"][waiting]
        counts = np.bincount(src, minlength=len(self.sources))
        self.port_idx[:waiting.size] = waiting[np.argsort(src, kind="stable")]  # each port's in trace order
        self.port_end[1:] = np.cumsum(counts)
        self.state.port_ptr[:] = self.port_end[1:] - counts
        self.scal[K.S_PTR] = total - waiting.size

    # ---- the kernel calls
    def _limits(self, final: bool) -> tuple[int, int, bool]:
        """The call's time limit, its stop (requests injected in the window) and whether it may overrun a port's
        lookahead (module docstring)."""
        t = int(self.scal[K.S_T])
        view = self.m if final else self.m + 1
        tlimit, stop, guarded = int(K.INF), view, False
        waiting = self.a["accept"][:self.m] < 0
        ahead = np.bincount(self.a["src"][:self.m][waiting], minlength=len(self.sources))
        ptr = int(self.scal[K.S_PTR])
        for port, feed in enumerate(self.feeds):
            if feed is None or not feed.more():
                continue
            due = feed.next_timestamp()
            if due > t:
                tlimit = min(tlimit, due)
            else:
                guarded = True
                stop = min(stop, ptr + max(1, int(ahead[port]) - self.margin))
        return tlimit, stop, guarded

    def _overran(self) -> list[int]:
        """Ports that used up their lookahead and whose next request was due before the cycle the call reached."""
        t = int(self.scal[K.S_T])
        ptr = self.state.port_ptr
        return [port for port, feed in enumerate(self.feeds)
                if feed is not None and feed.more() and ptr[port] >= self.port_end[port + 1]
                and feed.next_timestamp() < t]

    def _snapshot(self) -> _Snapshot:
        live = np.flatnonzero(self.a["accept"][:self.m] >= 0)
        state = [array.copy() for name, array in self.state._asdict().items() if name not in ("bnext", "bprev")]
        return _Snapshot(self.scal.copy(), state, live, {name: self.a[name][live] for name in _KERNEL_WRITES})

    def _restore(self, snap: _Snapshot) -> None:
        self.scal[:] = snap.scal
        arrays = [array for name, array in self.state._asdict().items() if name not in ("bnext", "bprev")]
        for array, saved in zip(arrays, snap.state, strict=True):
            array[...] = saved
        fresh = np.ones(self.m, dtype=bool)
        fresh[snap.live] = False
        for name in _KERNEL_WRITES:
            self.a[name][:self.m][fresh] = _SLOT_ARRAYS[name][1]
            self.a[name][snap.live] = snap.saved[name]

    def _arguments(self, view: int) -> tuple:
        a = self.a
        inputs = RequestArrays(*(a[name][:view] for name in _INPUTS), self.port_idx, self.port_end)
        outcomes = RequestOutcomes(*(a[name][:view] for name in _OUTCOMES))
        state = self.state._replace(bnext=a["bnext"], bprev=a["bprev"])
        return inputs, outcomes, state

    def _call(self) -> bool:
        """One kernel call, started over from a snapshot with a longer lookahead if it overran a port's; returns
        whether the whole trace was in the window (the last stretch: the kernel then sees the trace's end)."""
        while True:
            final = not self._trace_left()
            tlimit, stop, guarded = self._limits(final)
            snap = self._snapshot() if guarded else None
            inputs, outcomes, state = self._arguments(self.m if final else self.m + 1)
            self.scal[K.S_TLIMIT] = tlimit
            self._prepare(stop, inputs, outcomes, state)
            run_kernel(self.variant, stop, self.prm, self.gaps, self.scal, self.scratch, inputs, outcomes, state,
                       self.log)
            if self.scal[K.S_STALLED]:
                raise RuntimeError(f"the memory controller stalled: {int(self.scal[K.S_QUEUED])} requests queued "
                                   f"and no column command for {K.STALL_CYCLES:,} cycles (cycle "
                                   f"{int(self.scal[K.S_T]):,}); a scheduler livelock, please report it with the "
                                   f"trace and config")
            over = self._overran() if snap is not None else []
            if not over:
                return final
            self._restore(snap)
            self.restarts += 1
            for port in over:
                self.lookahead[port] *= 2
            self._rebuild()

    def _prepare(self, stop: int, inputs: tuple, outcomes: tuple, state: tuple) -> None:
        """Compile or load the kernel variant once per process, timed apart (`compile_s`, `kernel_cache`)."""
        if self.variant in _PREPARED:
            return
        start = time.perf_counter()
        args = (stop, self.prm, self.gaps, self.scal, self.scratch, inputs, outcomes, state, self.log)
        self.kernel_cache = prepare_kernel(self.variant, args, describe_variant(self.cfg, self.variant))
        self.compile_s += time.perf_counter() - start

    def _drain_log(self) -> None:
        k = int(self.scal[K.S_NLOG])
        if self.logging and k:
            start = time.perf_counter()
            log = CommandLog(*(array[:k].copy() for array in self.log))
            for sink in self.sinks:
                if sink.wants_commands:
                    sink.commands(log)
            self.sinks_s += time.perf_counter() - start
        self.scal[K.S_NLOG] = 0
        self.scal[K.S_LOGOVF] = 0

    def run(self) -> StreamResult:
        start = time.perf_counter()
        self._rebuild()
        if self.m == 0:
            raise TraceError(EMPTY_TRACE)
        while True:
            before = self.retired + int(self.scal[K.S_PTR])
            self._call()
            self._drain_log()
            if self.progress is not None:
                self.progress(self.retired + int(self.scal[K.S_PTR]) - before)
            if self.scal[K.S_DONE]:
                break
            if self.scal[K.S_T] >= K.INF:
                raise RuntimeError("streaming replay: the kernel ran out of requests before the trace's end")
            self._rebuild()
        self._rebuild()  # hands the last requests over
        wall = time.perf_counter() - start - self.clock[0] - self.sinks_s - self.compile_s
        return StreamResult(int(self.scal[K.S_LAST]), self.state.cmd_count.copy(), self.state.qos_counts.copy(),
                            self.retired, wall, self.clock[0], self.compile_s, self.kernel_cache, self.window_slots,
                            self.restarts)


def _through(remap: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Old slots to new; a kept index of a request that was dropped would be a bug in the retirement test."""
    out = remap[indices]
    if (out < 0).any():
        raise RuntimeError("streaming replay: the kernel keeps a request that had left every queue")
    return out


@dataclass
class FileReplay:
    """A streaming replay of a trace file: its figures, and how many requests `--sort` moved (None: not sorted)."""

    run: StreamResult
    moved: int | None


class PortAlone:
    """One port's requests of a source as a source of its own: the port running alone, as it would without the
    others (same timestamps), for its slowdown."""

    requests = None

    def __init__(self, source: RequestSource, port: int) -> None:
        self.source, self.port = source, port
        self.sources = source.sources
        self.ports = (port,) if port in source.ports else ()

    def open(self, port: int | None = None) -> Iterator[Batch]:
        if port in (None, self.port) and self.ports:
            yield from self.source.open(self.port)


def replay_file(cfg: MemoryConfig, path: str, fmt: str, sinks: list[Sink], *, sort: bool = False,
                wrap: bool = False, progress: bool = False, window_requests: int | None = None,
                on_sorted: Callable[[int, int], None] | None = None, port: int | None = None) -> FileReplay:
    """Replay the trace at `path` streaming (its batches through `StreamingReplay` into `sinks`); with `sort`
    the trace is read whole and sorted first (`on_sorted(moved, requests)` is told before the run); with `port`
    that port's requests alone (`PortAlone`)."""
    from archsim.memory import check_addresses
    from archsim.progress import progress_bar
    from archsim.trace.stream import open_source, sorted_source

    def check(address: np.ndarray, first: int) -> np.ndarray:
        return check_addresses(cfg, address, wrap, path, first)

    moved = None
    if sort:
        source, moved = sorted_source(path, fmt, check)
        if on_sorted is not None:
            on_sorted(moved, source.requests)
    else:
        source, _fmt = open_source(path, fmt, check)
    if port is not None:
        source = PortAlone(source, port)
    with progress_bar(source.requests, "req", "replay", quiet=not progress) as bar:
        run = StreamingReplay(cfg, source, sinks, window_requests=window_requests or WINDOW_REQUESTS,
                              progress=bar.update).run()
    return FileReplay(run, moved)
