"""Processor-sharing links for KV loads and writes in the serving engine's discrete-event loop.

A transfer of `size_bytes` started on a link at t spends the link's fixed `latency_ns` in flight without
using bandwidth (propagation, DMA setup, the first flit), then shares the link's bandwidth equally with every
other transfer in its data phase (processor sharing: n transfers each get bandwidth / n) until its bytes are
through. Two transfers of b bytes started together both finish at t + latency + 2 b / bandwidth; one alone at
t + latency + b / bandwidth. This is the fluid limit of a link arbitrating round-robin between DMA streams;
it is the serving layer's model of contention and does not replace the flit-level interconnect model that
times one decode step (archsim.interconnect).

Use in an event loop (times in float ns, never decreasing):

    links = LinkSharing([Link("pcie", bandwidth_GBps=64.0, latency_ns=1000.0)])
    tid = links.start("pcie", size_bytes, now_ns)       # a transfer id (0, 1, 2, ... in start order)
    links.next_completion()  -> (time_ns, id) | None    # the earliest completion if nothing else starts first
    links.advance(now_ns)    -> [(time_ns, id), ...]    # every transfer done by now_ns, in (time, id) order
    links.complete_next()    -> (time_ns, id) | None    # advance to the next completion and report it

next_completion is exact for the current state: advance(t) with the time it returned completes that transfer
(the same arithmetic runs both). Ties are broken by transfer id, so runs are deterministic. Each start and
completion costs O(log n) in the link's active transfers; next_completion walks only the transfers still in
their latency phase ahead of the first completion (about 30 us per transfer in all, measured). A completion
that a later start() passed is still reported at its own time. links_of_tiers() builds the links from a
ServingSpec's tiers; ps_finish_times() computes the same schedule offline (an independent implementation,
for tests and analytic estimates), and concurrent_transfer_ns() is the closed form for n equal transfers
started together.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Link:
    """A shared link. bandwidth_GBps is GB/s = bytes per ns; latency_ns is paid once per transfer."""

    name: str
    bandwidth_GBps: float
    latency_ns: float = 0.0

    def __post_init__(self) -> None:
        if not (self.bandwidth_GBps > 0 and math.isfinite(self.bandwidth_GBps)):
            raise ValueError(f"link {self.name}: bandwidth_GBps must be positive and finite, got {self.bandwidth_GBps}")
        if not (self.latency_ns >= 0 and math.isfinite(self.latency_ns)):
            raise ValueError(f"link {self.name}: latency_ns must be >= 0 and finite, got {self.latency_ns}")


@dataclass
class LinkCounters:
    transfers_started: int = 0
    transfers_completed: int = 0
    bytes_started: float = 0  # ints stay ints when sizes are ints
    bytes_completed: float = 0
    busy_ns: float = 0.0  # time with at least one transfer in its data phase (the link moves bandwidth bytes/ns)


class _LinkState:
    """One link: a virtual clock `s` of the bytes each active transfer has received (all receive the same), a
    heap of active transfers by the `s` at which they finish, and a FIFO of transfers in their latency phase
    (latency is fixed per link, so they enter the data phase in start order)."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.bw = float(link.bandwidth_GBps)
        self.t_ns = 0.0
        self.s = 0.0
        self.active: list[tuple[float, int]] = []  # (s at finish, id)
        self.pending: deque[tuple[float, int, float]] = deque()  # (data-phase entry ns, id, size bytes)
        self.counters = LinkCounters()
        self.busy_from: list[float] = []  # the busy periods, adjacent ones merged (utilization over time)
        self.busy_to: list[float] = []

    def elapse(self, t_ns: float) -> None:
        n = len(self.active)
        if n and t_ns > self.t_ns:
            self.s += (t_ns - self.t_ns) * self.bw / n
            self.counters.busy_ns += t_ns - self.t_ns
            if self.busy_to and self.busy_to[-1] == self.t_ns:
                self.busy_to[-1] = t_ns
            else:
                self.busy_from.append(self.t_ns)
                self.busy_to.append(t_ns)
        self.t_ns = t_ns

    def finish_ns(self) -> float:
        """When the first active transfer finishes at the current share (inf when none is active)."""
        n = len(self.active)
        return self.t_ns + (self.active[0][0] - self.s) * n / self.bw if n else math.inf

    def run_until(self, t_ns: float, done: list[tuple[float, int]]) -> None:
        """Process the link's entries and finishes up to t_ns (finishes first on a tie), appending finishes."""
        while True:
            tf = self.finish_ns()
            te = self.pending[0][0] if self.pending else math.inf
            if min(tf, te) > t_ns:
                break
            if tf <= te:
                self.elapse(tf)
                s_finish = self.active[0][0]
                self.s = max(self.s, s_finish)  # snap: the float sum may fall an ulp short of the finish
                while self.active and self.active[0][0] <= self.s:
                    done.append((tf, heapq.heappop(self.active)[1]))
            else:
                self.elapse(te)
                _, tid, size = self.pending.popleft()
                heapq.heappush(self.active, (self.s + size, tid))
        self.elapse(t_ns)

    def peek(self) -> tuple[float, int] | None:
        """The first finish if nothing else starts, without changing the state (same arithmetic as run_until)."""
        t, s = self.t_ns, self.s
        n = len(self.active)
        first = self.active[0] if n else (math.inf, -1)
        for te, tid, size in self.pending:
            tf = t + (first[0] - s) * n / self.bw if n else math.inf
            if tf <= te:
                return tf, first[1]
            if n:
                s += (te - t) * self.bw / n
            t = te
            n += 1
            first = min(first, (s + size, tid))
        if not n:
            return None
        return t + (first[0] - s) * n / self.bw, first[1]


class LinkSharing:
    """Every link of a system; see the module docstring."""

    def __init__(self, links: Iterable[Link]) -> None:
        self._links = {name: _LinkState(link) for name, link in links_by_name(links).items()}
        self.now_ns = 0.0
        self._next_id = 0
        self._done: list[tuple[float, int]] = []  # finished but not yet reported by advance
        self._link_of: dict[int, str] = {}  # in-flight transfer id -> link name
        self._size_of: dict[int, float] = {}

    @property
    def names(self) -> list[str]:
        return list(self._links)

    def link(self, name: str) -> Link:
        return self._links[name].link

    def start(self, link: str, size_bytes: float, now_ns: float) -> int:
        """Start a transfer at now_ns (>= the last time given); returns its id."""
        if link not in self._links:
            raise ValueError(f"unknown link {link!r} (links: {', '.join(self._links)})")
        if not (size_bytes >= 0 and math.isfinite(size_bytes)):
            raise ValueError(f"transfer size must be >= 0 bytes and finite, got {size_bytes}")
        self._clock(now_ns)
        state = self._links[link]
        state.run_until(now_ns, self._done)
        tid = self._next_id
        self._next_id += 1
        state.pending.append((now_ns + state.link.latency_ns, tid, float(size_bytes)))
        state.counters.transfers_started += 1
        state.counters.bytes_started += size_bytes
        self._link_of[tid] = link
        self._size_of[tid] = size_bytes
        return tid

    def next_completion(self) -> tuple[float, int] | None:
        """(time_ns, id) of the earliest completion if nothing else starts first; None when all are done."""
        candidates = [p for p in (s.peek() for s in self._links.values()) if p is not None]
        candidates.extend(self._done)
        return min(candidates) if candidates else None

    def advance(self, now_ns: float) -> list[tuple[float, int]]:
        """Move the clock to now_ns; every transfer finished by then, as (time_ns, id) in that order."""
        self._run(now_ns)
        done, self._done = sorted(self._done), []
        self._report(done)
        return done

    def complete_next(self) -> tuple[float, int] | None:
        """Advance to the next completion and report it alone (others at the same instant stay queued)."""
        nxt = self.next_completion()
        if nxt is None:
            return None
        self._run(max(nxt[0], self.now_ns))  # a completion found by a later start() lies in the past
        self._done.remove(nxt)  # present: peek and run_until do the same arithmetic
        self._report([nxt])
        return nxt

    def in_flight(self, link: str | None = None) -> int:
        """Transfers started and not yet reported complete (on one link, or on all)."""
        if link is None:
            return len(self._link_of)
        return sum(1 for name in self._link_of.values() if name == link)

    def counters(self, link: str) -> LinkCounters:
        return self._links[link].counters

    def busy_periods(self, link: str) -> tuple[np.ndarray, np.ndarray]:
        """Start and end (ns) of each period the link moved data, in time order."""
        state = self._links[link]
        return np.array(state.busy_from, dtype=np.float64), np.array(state.busy_to, dtype=np.float64)

    def bytes_by_link(self) -> dict[str, float]:
        """Bytes of the transfers completed so far, per link (the run totals the results report)."""
        return {name: s.counters.bytes_completed for name, s in self._links.items()}

    def _clock(self, now_ns: float) -> None:
        if not now_ns >= self.now_ns:
            raise ValueError(f"time runs backwards: {now_ns} ns after {self.now_ns} ns")
        self.now_ns = float(now_ns)

    def _run(self, now_ns: float) -> None:
        self._clock(now_ns)
        for state in self._links.values():
            state.run_until(now_ns, self._done)

    def _report(self, done: list[tuple[float, int]]) -> None:
        for _, tid in done:
            counters = self._links[self._link_of.pop(tid)].counters
            counters.transfers_completed += 1
            counters.bytes_completed += self._size_of.pop(tid)


def links_of_tiers(tiers: Iterable) -> list[Link]:
    """The distinct links a system's tiers are reached over (TierSpec.link, link_GBps, link_latency_ns; tiers
    without a link, such as HBM, are skipped), in tier order. Tiers naming one link must agree on it."""
    links: dict[str, Link] = {}
    for tier in tiers:
        if tier.link is None:
            continue
        link = Link(tier.link, float(tier.link_GBps), float(tier.link_latency_ns))
        if links.setdefault(link.name, link) != link:
            raise ValueError(f"tier {tier.name}: link {link.name} is {link.bandwidth_GBps} GB/s, "
                             f"{link.latency_ns} ns here but {links[link.name].bandwidth_GBps} GB/s, "
                             f"{links[link.name].latency_ns} ns for an earlier tier")
    return list(links.values())


def links_by_name(links: Iterable[Link]) -> dict[str, Link]:
    """The links keyed by name, in order; a name given twice is an error."""
    out: dict[str, Link] = {}
    for link in links:
        if link.name in out:
            raise ValueError(f"link {link.name} given twice")
        out[link.name] = link
    return out


def server_link_name(name: str, server: int) -> str:
    """Server `server`'s own port of link `name`: "pool->gpu" gives "pool->server3"."""
    head, sep, _ = name.partition("->")
    return f"{head}->server{server}" if sep else f"{name} (server{server})"


def write_link_name(name: str) -> str:
    """The direction of link `name` away from the GPUs: "pool->gpu" gives "gpu->pool"."""
    head, sep, tail = name.partition("->")
    return f"{tail}->{head}" if sep else f"{name} (write)"


def concurrent_transfer_ns(size_bytes: float, n: int, bandwidth_GBps: float, latency_ns: float = 0.0) -> float:
    """When each of n transfers of size_bytes started together on one link finishes: latency + n x size / BW."""
    return latency_ns + n * size_bytes / bandwidth_GBps


def ps_finish_times(start_ns: np.ndarray, size_bytes: np.ndarray, bandwidth_GBps: float,
                    latency_ns: float = 0.0) -> np.ndarray:
    """Finish times of transfers sharing one link by processor sharing, computed offline by tracking each
    transfer's remaining bytes (independent of LinkSharing's virtual-clock method)."""
    start_ns = np.asarray(start_ns, dtype=np.float64)
    remaining_all = np.asarray(size_bytes, dtype=np.float64).copy()
    entry = start_ns + latency_ns
    order = np.lexsort((np.arange(len(entry)), entry))
    finish = np.full(len(entry), np.nan)
    active: list[int] = []
    t = 0.0
    k = 0
    while k < len(order) or active:
        n = len(active)
        rem = remaining_all[active] if n else np.empty(0)
        tf = t + rem.min() * n / bandwidth_GBps if n else math.inf
        te = entry[order[k]] if k < len(order) else math.inf
        if tf <= te:
            remaining_all[active] -= (tf - t) * bandwidth_GBps / n
            gone = [i for i, r in zip(active, rem, strict=True) if r == rem.min()]
            for i in gone:
                finish[i] = tf
            active = [i for i in active if i not in gone]
            t = tf
        else:
            if n:
                remaining_all[active] -= (te - t) * bandwidth_GBps / n
            t = te
            active.append(int(order[k]))
            k += 1
    return finish
