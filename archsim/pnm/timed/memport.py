"""The pnm port of one memory domain: a MemorySession shared by the PNM units whose requests meet there.

Units release requests as their DMA engines push them (closed loop). A MemorySession needs requests
released in index order with non-decreasing cycles, so a domain keeps each unit's released-but-
uncommitted requests in a FIFO and *commits* them to the session in global time order, only up to a
horizon H before which no unit can release anything any more (conservative parallel discrete-event
simulation): `commit(H)` then `run_until(H)`. With several units in one session the order of session
slots is only known when requests are committed, so their addresses are bound to slots at commit time
(late binding, see `MemorySession.bind`); a single-unit domain's slots are simply its program order.

Lower bounds used for H (memory cycles, from the controller kernel's semantics): a read request whose
column command has not issued completes no earlier than max(now, its release) + CL + tBURST, and the
k-th of k such reads in one pseudo-channel no earlier than (k - 1) * min(tCCD_S, tBURST) later (one
column command per tCCD_S, one burst on the pseudo-channel's data bus at a time); a posted write
completes when accepted, no earlier than max(now, release).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from archsim.config.memory import MemoryConfig
from archsim.dram.commands import CommandLog
from archsim.jit import numba
from archsim.memory import MemorySession, ReplayResult, Requests, warm_up

PNM_SOURCE = 1  # index of "pnm" in archsim.config.memory.SOURCES
_NEVER = 1 << 62


@numba.njit(cache=True)
def _lower_bound(done, slots, offset, committed, release, is_read, pc, first, last, now, n_pc, spacing,
                 read_latency):  # pragma: no cover - compiled
    """See MemoryDomain.lower_bound and the module docstring."""
    per_pc = np.zeros(n_pc, dtype=np.int64)
    any_pending = False
    max_release = now
    min_read_release = 1 << 62
    reads = False
    for i in range(first, last):
        if i < committed:
            slot = slots[i] if slots.shape[0] else offset + i
            if done[slot] >= 0:
                continue
        any_pending = True
        r = release[i]
        if r > max_release:
            max_release = r
        if is_read[offset + i]:
            reads = True
            per_pc[pc[offset + i]] += 1
            if r < min_read_release:
                min_read_release = r
    if not any_pending:
        return now
    bound = max_release
    if reads:
        start = max(now, min_read_release)
        bound = max(bound + read_latency, start + (per_pc.max() - 1) * spacing + read_latency)
    return bound


@dataclass
class _UnitQueue:
    offset: int  # first index of this unit in the domain's source order
    count: int
    release: np.ndarray  # int64 memory cycle each request may be injected (-1: not yet pushed)
    slot: np.ndarray  # int64 session slot of each request (-1: not committed)
    committed: int = 0  # requests [0, committed) have slots
    pushed: int = 0  # requests [0, pushed) have release cycles
    chunks: list[tuple[int, int]] = field(default_factory=list)


class MemoryDomain:
    """Units `units` (with their physical request streams) sharing one MemorySession."""

    def __init__(self, cfg: MemoryConfig, units: list[int], address: list[np.ndarray],
                 is_write: list[np.ndarray], command_log: bool = False) -> None:
        warm_up(cfg)
        self.cfg = cfg
        self.units = list(units)
        counts = [int(a.size) for a in address]
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        all_address = np.concatenate(address).astype(np.uint64) if counts else np.empty(0, np.uint64)
        all_write = np.concatenate(is_write).astype(np.uint8) if counts else np.empty(0, np.uint8)
        self.n = int(all_address.size)
        self.session = MemorySession(cfg, all_address.copy(), all_write.copy(),
                                     np.full(self.n, PNM_SOURCE, dtype=np.uint8), command_log=command_log)
        self.late_bound = len(self.units) > 1
        self._pc_source = self.session.pseudo_channel.astype(np.int64)  # source order
        self._is_read = all_write == 0
        self._no_slots = np.empty(0, dtype=np.int64)
        # slots are bound to a unit's request when it commits (MemorySession.bind): keep the source order
        self._src_address = all_address
        self._src_is_write = all_write
        self.queues = {u: _UnitQueue(int(offsets[i]), counts[i], np.full(counts[i], -1, dtype=np.int64),
                                     np.full(counts[i], -1, dtype=np.int64)) for i, u in enumerate(self.units)}
        self._offset_of_unit = np.zeros(max(self.units, default=0) + 1, dtype=np.int64)
        for u in self.units:
            self._offset_of_unit[u] = self.queues[u].offset
        self.next_slot = 0
        t = cfg.timing
        self.read_latency_cycles = t.CL + t.tBURST
        self.read_spacing_cycles = min(t.tCCD_S, t.tBURST)
        self.n_pseudo_channels = cfg.organization.n_pseudo_channels
        self.iterations = 0
        self.late_requests = 0  # diagnostics: requests whose release cycle the memory had already passed
        self.late_cycles = 0

    # ------------------------------------------------------------------ the units' side
    @property
    def now(self) -> int:
        return self.session.now

    def push(self, unit: int, first: int, last: int, release_cycles: np.ndarray) -> None:
        """Requests [first, last) of `unit` may be injected from these (non-decreasing) memory cycles."""
        q = self.queues[unit]
        if first != q.pushed:
            raise ValueError(f"unit {unit} pushes [{first}, {last}) after {q.pushed}")
        if last > first:
            q.release[first:last] = release_cycles
            q.chunks.append((first, last))
        q.pushed = last

    def completion(self, unit: int, first: int, last: int) -> int | None:
        """Memory cycle the last of requests [first, last) of `unit` completes, None while unknown."""
        q = self.queues[unit]
        if q.committed < last:
            return None
        done = self.session.done_cycle
        d = done[q.offset + first:q.offset + last] if not self.late_bound else done[q.slot[first:last]]
        if d.size == 0:
            return 0
        low = int(d.min())
        return None if low < 0 else int(d.max())

    def lower_bound(self, unit: int, first: int, last: int) -> int:
        """A memory cycle before which requests [first, last) of `unit` cannot all have completed."""
        q = self.queues[unit]
        if last <= first:
            return self.now
        slots = q.slot if self.late_bound else self._no_slots
        return int(_lower_bound(self.session.done_cycle, slots, q.offset, q.committed, q.release, self._is_read,
                                self._pc_source, first, last, self.now, self.n_pseudo_channels,
                                self.read_spacing_cycles, self.read_latency_cycles))

    # ------------------------------------------------------------------ the memory's side
    def commit(self, horizon: int) -> None:
        """Release to the session, in time order, every pushed request with a release cycle < horizon."""
        units, local, cycles = [], [], []
        for u in self.units:
            q = self.queues[u]
            while q.chunks:
                first, last = q.chunks[0]
                first = max(first, q.committed)
                rel = q.release[first:last]
                take = int(np.searchsorted(rel, horizon, side="left"))
                if take:
                    units.append(np.full(take, u, dtype=np.int64))
                    local.append(np.arange(first, first + take, dtype=np.int64))
                    cycles.append(rel[:take])
                    q.committed = first + take
                if first + take < last:
                    break
                q.chunks.pop(0)
        if not cycles:
            return
        unit_of, index, release = np.concatenate(units), np.concatenate(local), np.concatenate(cycles)
        if len(units) > 1:
            order = np.lexsort((index, unit_of, release))
            unit_of, index, release = unit_of[order], index[order], release[order]
        first = self.next_slot
        last = first + index.size
        late = release < self.now
        if late.any():  # released after the memory passed its cycle: the horizon was not conservative
            self.late_requests += int(late.sum())
            self.late_cycles += int((self.now - release[late]).sum())
        if self.late_bound:
            source_index = self._offset_of_unit[unit_of] + index
            self.session.bind(first, last, self._src_address[source_index], self._src_is_write[source_index])
            slots = np.arange(first, last, dtype=np.int64)
            for u in np.unique(unit_of).tolist():
                sel = unit_of == u
                self.queues[u].slot[index[sel]] = slots[sel]
        self.session.release(first, last, release)
        self.next_slot = last

    def run_until(self, horizon: int) -> None:
        self.iterations += 1
        self.session.run_until(horizon)

    def finish(self) -> None:
        """Commit everything and simulate until every request completed."""
        self.commit(_NEVER)
        if self.next_slot != self.n:
            raise RuntimeError(f"{self.n - self.next_slot} requests were never pushed")
        while not self.session.finished and self.n:
            before = self.now
            self.session.run_until(_NEVER)
            if self.now == before and not self.session.finished:
                raise RuntimeError("the memory stopped making progress")

    def result(self) -> ReplayResult:
        return self.session.result()

    def committed_requests(self) -> Requests:
        """The domain's requests in session (commit) order, stamped cycle 0: its open-loop stream."""
        req = self.session.requests
        return Requests.build(np.zeros(self.n, dtype=np.int64), req.address.copy(), req.is_write.copy(),
                              req.source.copy())


def _merge_logs(logs: list[CommandLog | None]) -> CommandLog | None:
    if any(log is None for log in logs):
        return None
    fields = [f.name for f in dataclasses.fields(CommandLog)]
    joined = {name: np.concatenate([getattr(log, name) for log in logs]) for name in fields}
    order = np.argsort(joined["cycle"], kind="stable")
    return CommandLog(**{name: column[order] for name, column in joined.items()})


def merge_results(results: list[ReplayResult]) -> ReplayResult:
    """One device-level ReplayResult from domains that share no channel (independent controllers):
    per-request arrays are concatenated, counters summed, the simulated time is the longest domain's."""
    if len(results) == 1:
        return results[0]
    first = results[0]
    merged: dict[str, object] = {}
    for f in dataclasses.fields(first):
        values = [getattr(r, f.name) for r in results]
        if f.name == "requests":
            merged[f.name] = Requests(*(np.concatenate([getattr(v, g.name) for v in values])
                                        for g in dataclasses.fields(Requests) if g.name != "sources"),
                                      values[0].sources)
        elif f.name == "total_cycles":
            merged[f.name] = max(values)
        elif f.name in ("wall_s", "compile_s"):
            merged[f.name] = sum(values)
        elif f.name == "kernel_cache":
            merged[f.name] = next((v for v in values if v is not None), None)  # how the shared variant came
        elif f.name == "config":
            merged[f.name] = values[0]
        elif f.name == "command_log":  # domains own disjoint channels: their logs together, in issue order
            merged[f.name] = _merge_logs(values)
        elif isinstance(values[0], np.ndarray) and values[0].shape[:1] == (len(first.requests),):
            merged[f.name] = np.concatenate(values)  # per request
        elif f.name == "command_counts":
            merged[f.name] = _merge_command_counts(results)
        elif isinstance(values[0], np.ndarray):
            merged[f.name] = np.sum(values, axis=0)  # counters
        else:
            merged[f.name] = values[0]
    return ReplayResult(**merged)


def _merge_command_counts(results: list[ReplayResult]) -> np.ndarray:
    """Sum the domains' commands, except refreshes when every session refreshed the whole device.

    The controller kernel refreshes every rank on schedule whether or not the session sends it requests,
    so each domain's session issues the device's refreshes; counting them once per device means taking
    the longest session's count. (Should a kernel refresh only channels with traffic, a session's REF
    count stays within its own ranks' share and the counts are summed.)"""
    from archsim.dram.commands import REF, REFPB

    counts = np.sum([r.command_counts for r in results], axis=0)
    cfg = results[0].config
    org, t = cfg.organization, cfg.timing
    for code, interval in ((REF, t.tREFI), (REFPB, max(1, t.tREFI // max(1, org.banks_per_rank)))):
        per_session = [int(r.command_counts[code]) for r in results]
        used_ranks = [len(np.unique(r.pseudo_channel)) * org.ranks for r in results]
        own_bound = max(u * (r.total_cycles // interval + 1) for u, r in zip(used_ranks, results, strict=True))
        if max(per_session) > own_bound:
            counts[code] = max(per_session)
    return counts
