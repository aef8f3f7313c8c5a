"""A set-associative, write-back, write-allocate L2 with MSHRs, run by one compiled loop over request arrays.

Timing contract (all times are cycles of the cache clock; see docs/cache.md):

* Accesses issue in input order (in-order, one shared pipeline): issue = max(arrival, previous issue), plus any
  stall below. Tag lookups have no per-cycle limit; bandwidth limits come from memory.
* Hit: the line is resident at issue. Data at issue + `hit_latency_cycles`.
* Primary miss: needs a free MSHR; the read goes to memory at issue + hit_latency (after the tag check) and the
  fill returns `memory latency` later. With a scalar latency every read takes it; with an array, entry k is the
  latency of the k-th memory read this run issues (e.g. per-read latencies measured by replaying the previous
  run's miss stream through the memory model -- iterate until the miss stream stops changing).
* Secondary miss: the line already has an MSHR: the access merges into it (no memory read) and gets its data
  when the fill returns. An MSHR merges at most `mshr_targets` accesses (0 = unlimited).
* Stall: with every MSHR busy (or the matching MSHR's targets full) the access waits until the earliest fill
  returns, and so does everything behind it (head-of-line blocking).
* Allocate on fill: when a fill returns, the replacement policy picks the victim; a dirty victim is written
  back at the fill cycle (write-backs are posted: no MSHR, no stall). The filled line is dirty if any access
  merged into its MSHR was a write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from archsim.cache.replacement import REPLACEMENT_POLICIES, choose_victim, on_fill, on_hit, policy_id
from archsim.controller.codes import SOURCES
from archsim.jit import njit
from archsim.section import Section
from archsim.units import parse_size_bytes

KINDS: tuple[str, ...] = ("weight", "kv", "activation")
STATS: tuple[str, ...] = ("hits", "misses", "merged", "evictions", "writebacks")
HITS, MISSES, MERGED, EVICTIONS, WRITEBACKS = range(5)
HIT, MISS, MERGE = 0, 1, 2  # per-access outcome codes
INF = np.int64(1) << np.int64(62)


@dataclass(frozen=True)
class L2Config:
    capacity_bytes: int
    line_size_bytes: int
    ways: int
    replacement: str  # a name in REPLACEMENT_POLICIES
    rrpv_bits: int  # RRIP policies: bits of the re-reference prediction value
    bimodal_interval: int  # brrip: one fill in this many is inserted "long" instead of "distant"
    hit_latency_cycles: int
    mshrs: int
    mshr_targets: int  # accesses one MSHR can hold (primary included); 0 = unlimited

    @property
    def sets(self) -> int:
        return self.capacity_bytes // (self.line_size_bytes * self.ways)

    @property
    def lines(self) -> int:
        return self.sets * self.ways


def parse_l2(section: Section) -> L2Config:
    """Read an `l2:` mapping strictly; every error names its dotted path."""
    capacity = section.parsed("capacity", parse_size_bytes)
    line = section.parsed("line_size", parse_size_bytes)
    ways = section.int("ways", minimum=1)
    value = section.raw("replacement")
    sub = Section({"impl": value} if isinstance(value, str) else value, section.where("replacement"), section.file)
    replacement = sub.choice("impl", REPLACEMENT_POLICIES.names())
    rrip = replacement in ("srrip", "brrip")
    rrpv_bits = sub.int("rrpv_bits", 2, minimum=1) if rrip else 2
    bimodal = sub.int("bimodal_interval", 32, minimum=1) if replacement == "brrip" else 32
    sub.done()
    hit_latency = section.int("hit_latency_cycles", minimum=1)
    mshrs = section.int("mshrs", minimum=1)
    targets = section.int("mshr_targets", 0, minimum=0)
    section.done()
    if line == 0 or line & (line - 1):
        raise section.error("line_size", f"must be a power of two, got {line} B")
    if capacity == 0 or capacity % (line * ways):
        raise section.error("capacity", f"{capacity} B is not a whole number of sets of {ways} x {line} B lines")
    if capacity // line > 1 << 26:
        raise section.error("capacity", f"{capacity // line} lines is more than the simulator supports (2^26)")
    if rrpv_bits > 8:
        raise sub.error("rrpv_bits", f"must be <= 8, got {rrpv_bits}")
    return L2Config(capacity, line, ways, replacement, rrpv_bits, bimodal, hit_latency, mshrs, targets)


def l2_config_from_mapping(data: Any, *, path: str = "l2", file: str | None = None) -> L2Config:
    return parse_l2(Section(data, path, file))


@dataclass(frozen=True)
class MissStream:
    """What the cache sends to memory, ordered by cycle (stable: equal cycles keep emission order)."""

    address: np.ndarray  # uint64 byte address of the line
    is_write: np.ndarray  # uint8: 0 fill read, 1 write-back
    cycle: np.ndarray  # int64 cache-clock cycle the request leaves the cache
    source: np.ndarray  # uint8: source that filled (reads: the missing access; write-backs: the line's owner)
    kind: np.ndarray  # uint8 data kind, same rule

    def __len__(self) -> int:
        return int(self.address.shape[0])


@dataclass(frozen=True)
class L2Result:
    config: L2Config
    outcome: np.ndarray  # uint8 per access: HIT, MISS (primary, made a memory read), MERGE (secondary miss)
    issue_cycle: np.ndarray  # int64 per access
    done_cycle: np.ndarray  # int64 per access: data returned / write accepted
    misses: MissStream
    counters: np.ndarray  # int64 [source, kind, stat]; evictions/write-backs count the victim line's owner
    cross_evictions: np.ndarray  # int64 [evicting source, victim's source]: host/PNM interference
    issue_delay_cycles: int  # sum over accesses of issue - arrival (MSHR stalls and head-of-line blocking)
    flush_writebacks: int  # write-backs of dirty lines at the end (flush=True), included in the counters
    end_cycle: int

    def count(self, stat: str, source: str | None = None, kind: str | None = None) -> int:
        """A counter summed over every source and/or kind left unspecified (an unknown name is a ValueError)."""
        sel: list[Any] = [slice(None), slice(None), STATS.index(stat)]
        if source is not None:
            sel[0] = SOURCES.index(source)
        if kind is not None:
            sel[1] = KINDS.index(kind)
        return int(self.counters[tuple(sel)].sum())

    def hit_rate(self, source: str | None = None, kind: str | None = None) -> float:
        hits = self.count("hits", source, kind)
        total = hits + self.count("misses", source, kind) + self.count("merged", source, kind)
        return hits / total if total else 0.0

    def stats(self) -> dict[str, float]:
        """Flat dotted stats (`l2.hits`, `l2.sources.pnm.misses`, `l2.kinds.kv.writebacks`, ...)."""
        out: dict[str, float] = {}
        for stat in STATS:
            out[f"l2.{stat}"] = self.count(stat)
        out["l2.hit_rate"] = self.hit_rate()
        out["l2.memory_reads"] = int((self.misses.is_write == 0).sum())
        out["l2.memory_writes"] = int((self.misses.is_write == 1).sum())
        out["l2.issue_delay_cycles"] = self.issue_delay_cycles
        out["l2.end_cycle"] = self.end_cycle
        for name in SOURCES:
            for stat in STATS:
                out[f"l2.sources.{name}.{stat}"] = self.count(stat, source=name)
            out[f"l2.sources.{name}.hit_rate"] = self.hit_rate(source=name)
        for name in KINDS:
            for stat in STATS:
                out[f"l2.kinds.{name}.{stat}"] = self.count(stat, kind=name)
            out[f"l2.kinds.{name}.hit_rate"] = self.hit_rate(kind=name)
        for a, by in enumerate(SOURCES):
            for b, of in enumerate(SOURCES):
                out[f"l2.evictions_by.{by}.of.{of}"] = int(self.cross_evictions[a, b])
        return out


@njit(cache=True)
def _retire_fills(t, line_of, fill_of, write_of, src_of, kind_of, busy, tags, valid, dirty, own_src, own_kind,
                  repl, n_sets, ways, policy, rrpv_max, bimodal, scal, counters, cross,
                  o_addr, o_write, o_cycle, o_src, o_kind):
    """Install every outstanding fill that returns at or before `t`, earliest first (ties: lowest MSHR)."""
    while True:
        m = -1
        for j in range(busy.shape[0]):
            if busy[j] and fill_of[j] <= t and (m < 0 or fill_of[j] < fill_of[m]):
                m = j
        if m < 0:
            return
        line = line_of[m]
        s = line % n_sets
        w = choose_victim(policy, repl, valid, s, ways, rrpv_max)
        if valid[s, w]:
            counters[own_src[s, w], own_kind[s, w], EVICTIONS] += 1
            cross[src_of[m], own_src[s, w]] += 1
            if dirty[s, w]:
                counters[own_src[s, w], own_kind[s, w], WRITEBACKS] += 1
                k = scal[0]
                o_addr[k], o_write[k], o_cycle[k] = tags[s, w], 1, fill_of[m]
                o_src[k], o_kind[k] = own_src[s, w], own_kind[s, w]
                scal[0] = k + 1
        tags[s, w] = line
        valid[s, w] = 1
        dirty[s, w] = write_of[m]
        own_src[s, w], own_kind[s, w] = src_of[m], kind_of[m]
        scal[1] += 1  # touch stamp
        on_fill(policy, repl, s, w, scal[1], rrpv_max, scal[2], bimodal)
        scal[2] += 1  # fill ordinal
        busy[m] = 0


@njit(cache=True)
def _run(line, is_write, source, kind, arrival, n_sets, ways, policy, rrpv_max, bimodal, hit_lat, n_mshr,
         targets, mem_lat, mem_lat_arr, flush):
    n = line.shape[0]
    tags = np.zeros((n_sets, ways), np.int64)
    valid = np.zeros((n_sets, ways), np.uint8)
    dirty = np.zeros((n_sets, ways), np.uint8)
    own_src = np.zeros((n_sets, ways), np.uint8)
    own_kind = np.zeros((n_sets, ways), np.uint8)
    repl = np.zeros((n_sets, ways), np.int64)
    busy = np.zeros(n_mshr, np.uint8)
    line_of = np.zeros(n_mshr, np.int64)
    fill_of = np.zeros(n_mshr, np.int64)
    write_of = np.zeros(n_mshr, np.uint8)
    src_of = np.zeros(n_mshr, np.uint8)
    kind_of = np.zeros(n_mshr, np.uint8)
    count_of = np.zeros(n_mshr, np.int64)
    cap = 2 * n + n_sets * ways
    o_addr = np.zeros(cap, np.int64)
    o_write = np.zeros(cap, np.uint8)
    o_cycle = np.zeros(cap, np.int64)
    o_src = np.zeros(cap, np.uint8)
    o_kind = np.zeros(cap, np.uint8)
    outcome = np.zeros(n, np.uint8)
    issue = np.zeros(n, np.int64)
    done = np.zeros(n, np.int64)
    counters = np.zeros((2, 3, 5), np.int64)
    cross = np.zeros((2, 2), np.int64)
    # scal: 0 emitted, 1 touch stamp, 2 fill ordinal, 3 memory reads, 4 latency array overrun, 5 delay, 6 flushes
    scal = np.zeros(8, np.int64)
    prev = -INF
    end = 0
    for i in range(n):
        t = max(arrival[i], prev)
        ln = line[i]
        s = ln % n_sets
        while True:
            _retire_fills(t, line_of, fill_of, write_of, src_of, kind_of, busy, tags, valid, dirty, own_src,
                          own_kind, repl, n_sets, ways, policy, rrpv_max, bimodal, scal, counters, cross,
                          o_addr, o_write, o_cycle, o_src, o_kind)
            w = -1
            for x in range(ways):
                if valid[s, x] and tags[s, x] == ln:
                    w = x
                    break
            if w >= 0:
                outcome[i] = HIT
                done[i] = t + hit_lat
                scal[1] += 1
                on_hit(policy, repl, s, w, scal[1])
                if is_write[i]:
                    dirty[s, w] = 1
                counters[source[i], kind[i], HITS] += 1
                break
            m = -1
            for j in range(n_mshr):
                if busy[j] and line_of[j] == ln:
                    m = j
                    break
            if m >= 0:
                if targets > 0 and count_of[m] >= targets:
                    t = fill_of[m]  # the line is resident once this fill returns: retry as a hit
                    continue
                outcome[i] = MERGE
                done[i] = fill_of[m]
                count_of[m] += 1
                if is_write[i]:
                    write_of[m] = 1
                counters[source[i], kind[i], MERGED] += 1
                break
            free = -1
            soonest = INF
            for j in range(n_mshr):
                if not busy[j]:
                    free = j
                    break
                soonest = min(soonest, fill_of[j])
            if free < 0:
                t = soonest
                continue
            read_at = t + hit_lat
            k = scal[3]
            if mem_lat_arr.shape[0] > 0:
                if k >= mem_lat_arr.shape[0]:
                    scal[4] = 1
                    lat = mem_lat_arr[mem_lat_arr.shape[0] - 1]
                else:
                    lat = mem_lat_arr[k]
            else:
                lat = mem_lat
            scal[3] = k + 1
            busy[free], line_of[free], fill_of[free] = 1, ln, read_at + lat
            write_of[free], src_of[free], kind_of[free], count_of[free] = is_write[i], source[i], kind[i], 1
            e = scal[0]
            o_addr[e], o_write[e], o_cycle[e], o_src[e], o_kind[e] = ln, 0, read_at, source[i], kind[i]
            scal[0] = e + 1
            outcome[i] = MISS
            done[i] = read_at + lat
            counters[source[i], kind[i], MISSES] += 1
            break
        issue[i] = t
        scal[5] += t - arrival[i]
        prev = t
        end = max(end, done[i])
    for j in range(n_mshr):
        if busy[j]:
            end = max(end, fill_of[j])
    _retire_fills(INF, line_of, fill_of, write_of, src_of, kind_of, busy, tags, valid, dirty, own_src, own_kind,
                  repl, n_sets, ways, policy, rrpv_max, bimodal, scal, counters, cross,
                  o_addr, o_write, o_cycle, o_src, o_kind)
    if flush:
        for s in range(n_sets):
            for w in range(ways):
                if valid[s, w] and dirty[s, w]:
                    counters[own_src[s, w], own_kind[s, w], WRITEBACKS] += 1
                    e = scal[0]
                    o_addr[e], o_write[e], o_cycle[e] = tags[s, w], 1, end
                    o_src[e], o_kind[e] = own_src[s, w], own_kind[s, w]
                    scal[0] = e + 1
                    scal[6] += 1
                    dirty[s, w] = 0
    m = scal[0]
    return (outcome, issue, done, o_addr[:m], o_write[:m], o_cycle[:m], o_src[:m], o_kind[:m], counters, cross,
            scal, end)


def _column(values: Any, n: int, dtype: type, name: str, limit: int | None = None) -> np.ndarray:
    if values is None:
        return np.zeros(n, dtype=dtype)
    arr = np.asarray(values)
    if arr.shape != (n,):
        raise ValueError(f"{name} has shape {arr.shape}, expected ({n},)")
    if limit is not None and n and (arr.min() < 0 or arr.max() >= limit):
        raise ValueError(f"{name} values must lie in 0..{limit - 1}")
    return arr.astype(dtype)


def simulate_l2(config: L2Config, address: np.ndarray, *, is_write: np.ndarray | None = None,
                source: np.ndarray | None = None, kind: np.ndarray | None = None,
                arrival_cycle: np.ndarray | None = None, memory_latency_cycles: int | np.ndarray = 100,
                flush: bool = False) -> L2Result:
    """Run the access stream through a cold cache. Arrays are per access; `arrival_cycle` must not decrease.

    `address` is a byte address (uint64). `memory_latency_cycles` is a scalar or one latency per memory read
    in the order the run issues them (see the module docstring). `flush=True` writes every dirty line back at
    the end, so write-backs equal the dirty lines the stream produced.
    """
    addr = np.asarray(address, dtype=np.uint64)
    if addr.ndim != 1:
        raise ValueError("address must be a 1-D array")
    n = addr.shape[0]
    writes = _column(is_write, n, np.uint8, "is_write", 2)
    src = _column(source, n, np.uint8, "source", len(SOURCES))
    knd = _column(kind, n, np.uint8, "kind", len(KINDS))
    arrival = _column(arrival_cycle, n, np.int64, "arrival_cycle")
    if n and (np.diff(arrival) < 0).any():
        raise ValueError("arrival_cycle must be non-decreasing (accesses issue in input order)")
    if np.ndim(memory_latency_cycles) == 0:
        scalar = int(memory_latency_cycles)
        if scalar < 0:
            raise ValueError("memory_latency_cycles must be >= 0")
        lat_arr = np.zeros(0, dtype=np.int64)
    else:
        scalar = 0
        lat_arr = np.asarray(memory_latency_cycles, dtype=np.int64)
        if lat_arr.ndim != 1 or lat_arr.shape[0] == 0 or (lat_arr < 0).any():
            raise ValueError("memory_latency_cycles as an array must be 1-D, non-empty and >= 0")
    shift = config.line_size_bytes.bit_length() - 1
    lines = (addr >> np.uint64(shift)).astype(np.int64)
    rrpv_max = (1 << config.rrpv_bits) - 1
    (outcome, issue, done, o_line, o_write, o_cycle, o_src, o_kind, counters, cross, scal, end) = _run(
        lines, writes, src, knd, arrival, config.sets, config.ways, policy_id(config.replacement), rrpv_max,
        config.bimodal_interval, config.hit_latency_cycles, config.mshrs, config.mshr_targets, scalar, lat_arr,
        flush)
    if scal[4]:
        raise ValueError(f"memory_latency_cycles has {lat_arr.shape[0]} entries but the run issued {int(scal[3])} "
                         "memory reads; supply one latency per read")
    order = np.argsort(o_cycle, kind="stable")
    misses = MissStream(
        (o_line[order].astype(np.uint64) << np.uint64(shift)), o_write[order], o_cycle[order], o_src[order],
        o_kind[order])
    return L2Result(config, outcome, issue, done, misses, counters, cross, int(scal[5]), int(scal[6]), int(end))

