"""Transfers over paths of several links, for a pool shared by several servers: a load from the pool to a
server's GPUs crosses that server's port and the pool's shared uplinks, and each link is shared by every
transfer crossing it.

A transfer of `size_bytes` on a path pays the sum of its links' `latency_ns` in flight, without using bandwidth,
then moves at its max-min fair rate over the links of every transfer in its data phase (progressive filling,
archsim.interconnect.max_min_rates), recomputed whenever a transfer enters its data phase or finishes. On a
path of one link this is processor sharing, as archsim.serving.transfers.LinkSharing computes it (a test holds
the two together); LinkSharing stays the engine's choice there, at O(log n) a transfer instead of this class's
O(n x links) an event.

The interface is LinkSharing's, with a path (a tuple of link names) where LinkSharing takes one name.
`next_completion` returns the next event of the current state, which may be a transfer entering its data phase
(its own id); `advance` to that time reports what finished by then, possibly nothing. Ties between finishes
at one instant go by transfer id, so runs are deterministic.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable

import numpy as np

from archsim.interconnect.flows import max_min_rates
from archsim.serving.transfers import Link, LinkCounters, links_by_name


class PathSharing:
    """Every link of a system and the transfers crossing them; see the module docstring."""

    def __init__(self, links: Iterable[Link]) -> None:
        self._links = links_by_name(links)
        self._names = list(self._links)
        self._index = {name: k for k, name in enumerate(self._names)}
        self._capacity = [float(link.bandwidth_GBps) for link in self._links.values()]
        self._counters = {name: LinkCounters() for name in self._links}
        self._busy: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in self._links}
        self.now_ns = 0.0
        self._next_id = 0
        self._pending: list[tuple[float, int]] = []        # (data-phase entry ns, id)
        self._path: dict[int, tuple[int, ...]] = {}       # in-flight id -> link indices
        self._size: dict[int, float] = {}
        self._left: dict[int, float] = {}                 # data phase: bytes still to move, by id
        self._rate: dict[int, float] = {}
        self._done: list[tuple[float, int]] = []          # finished but not yet reported

    def link(self, name: str) -> Link:
        return self._links[name]

    def start(self, path: tuple[str, ...], size_bytes: float, now_ns: float) -> int:
        """Start a transfer over `path` at now_ns (>= the last time given); returns its id."""
        unknown = [name for name in path if name not in self._links]
        if unknown or not path:
            raise ValueError(f"unknown link {unknown[0] if unknown else '(empty path)'!r} "
                             f"(links: {', '.join(self._links)})")
        if not (size_bytes >= 0 and math.isfinite(size_bytes)):
            raise ValueError(f"transfer size must be >= 0 bytes and finite, got {size_bytes}")
        self._run(now_ns)
        tid = self._next_id
        self._next_id += 1
        self._path[tid] = tuple(self._index[name] for name in path)
        self._size[tid] = float(size_bytes)
        heapq.heappush(self._pending, (now_ns + sum(self._links[name].latency_ns for name in path), tid))
        for name in path:
            counters = self._counters[name]
            counters.transfers_started += 1
            counters.bytes_started += size_bytes
        return tid

    def next_completion(self) -> tuple[float, int] | None:
        """(time_ns, id) of the next event (a finish, or an entry into the data phase); None when all are done."""
        candidates = list(self._done)
        nxt = self._next_event()
        if nxt is not None:
            candidates.append(nxt[:2])
        return min(candidates) if candidates else None

    def advance(self, now_ns: float) -> list[tuple[float, int]]:
        """Move the clock to now_ns; every transfer finished by then, as (time_ns, id) in that order."""
        self._run(now_ns)
        done, self._done = sorted(self._done), []
        for _, tid in done:
            for k in self._path.pop(tid):
                counters = self._counters[self._names[k]]
                counters.transfers_completed += 1
                counters.bytes_completed += self._size[tid]
            del self._size[tid]
        return done

    def in_flight(self, link: str | None = None) -> int:
        """Transfers started and not yet reported complete (crossing one link, or on all)."""
        if link is None:
            return len(self._path)
        k = self._index[link]
        return sum(1 for path in self._path.values() if k in path)

    def counters(self, link: str) -> LinkCounters:
        return self._counters[link]

    def busy_periods(self, link: str) -> tuple[np.ndarray, np.ndarray]:
        """Start and end (ns) of each period the link moved data, in time order."""
        start, end = self._busy[link]
        return np.array(start, dtype=np.float64), np.array(end, dtype=np.float64)

    # -- the fluid schedule ------------------------------------------------------------------------------------

    def _next_event(self) -> tuple[float, int, bool] | None:
        """(time, id, is_finish) of the earliest entry or finish at the current rates."""
        best: tuple[float, int, bool] | None = None
        if self._pending:
            best = (self._pending[0][0], self._pending[0][1], False)
        for tid, left in self._left.items():
            t = self.now_ns + left / self._rate[tid]
            if best is None or (t, tid) < best[:2]:
                best = (t, tid, True)
        return best

    def _run(self, until_ns: float) -> None:
        if not until_ns >= self.now_ns:
            raise ValueError(f"time runs backwards: {until_ns} ns after {self.now_ns} ns")
        while True:
            nxt = self._next_event()
            if nxt is None or nxt[0] > until_ns:
                break
            t, tid, finish = nxt
            self._elapse(max(t, self.now_ns))
            if finish:
                del self._left[tid], self._rate[tid]
                self._done.append((t, tid))
            else:
                heapq.heappop(self._pending)
                if self._size[tid] > 0:
                    self._left[tid] = self._size[tid]
                else:
                    self._done.append((t, tid))
            self._rerate()
        self._elapse(until_ns)

    def _elapse(self, t_ns: float) -> None:
        dt = t_ns - self.now_ns
        if dt > 0 and self._left:
            for tid in self._left:
                self._left[tid] = max(0.0, self._left[tid] - self._rate[tid] * dt)
            for k in {k for tid in self._left for k in self._path[tid]}:
                name = self._names[k]
                self._counters[name].busy_ns += dt
                start, end = self._busy[name]
                if end and end[-1] == self.now_ns:
                    end[-1] = t_ns
                else:
                    start.append(self.now_ns)
                    end.append(t_ns)
        self.now_ns = t_ns

    def _rerate(self) -> None:
        ids = list(self._left)
        rates = max_min_rates(self._capacity, [self._path[tid] for tid in ids])
        self._rate = dict(zip(ids, rates, strict=True))


__all__ = ["PathSharing"]
