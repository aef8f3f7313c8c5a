"""Utilization over time: what a run's links and its pool DRAM did, bin by bin.

A link's utilization in a bin is the fraction of the bin in which it moved data (processor sharing runs a link at
its full bandwidth whenever a transfer is in its data phase: archsim.serving.transfers). The pool DRAM's is the
bytes it served in the bin over its peak bandwidth times the bin: the KV the PNM units read for decode and for
prefill prefixes, the KV written into the pool, streamed KV, and loads, moves and swaps over the pool's link,
each spread evenly over the iteration or transfer that moved it.
"""

from __future__ import annotations

import numpy as np

BINS = 50  # bins over the run's span [first arrival, last departure]


class Intervals:
    """Amounts moved over time intervals, appended as a run goes (three floats each, one by one or as arrays).
    `arrays` gives them sorted, so the bins do not depend on the order they were appended in (the serving
    engine's decode fast path appends a stretch's steps ahead of other instances' iterations inside it)."""

    def __init__(self) -> None:
        self._start: list[float] = []
        self._end: list[float] = []
        self._amount: list[float] = []
        self._blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, start_ns: float, end_ns: float, amount: float) -> None:
        if amount > 0:
            self._start.append(start_ns)
            self._end.append(max(start_ns, end_ns))
            self._amount.append(amount)

    def add_many(self, start_ns: np.ndarray, end_ns: np.ndarray, amount: np.ndarray) -> None:
        keep = amount > 0
        self._blocks.append((start_ns[keep], np.maximum(start_ns, end_ns)[keep], amount[keep]))

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        start = np.concatenate([np.array(self._start, dtype=np.float64), *(b[0] for b in self._blocks)])
        end = np.concatenate([np.array(self._end, dtype=np.float64), *(b[1] for b in self._blocks)])
        amount = np.concatenate([np.array(self._amount, dtype=np.float64), *(b[2] for b in self._blocks)])
        order = np.lexsort((amount, end, start))
        return start[order], end[order], amount[order]


def binned(start_ns: np.ndarray, end_ns: np.ndarray, amount: np.ndarray, edges_ns: np.ndarray) -> np.ndarray:
    """The amount falling in each bin [edges[k], edges[k + 1]) (the last bin holds its end too), each interval's
    amount spread evenly over it; an interval of zero length counts in the bin holding its instant. Amounts outside
    the edges are dropped."""
    out = np.zeros(len(edges_ns) - 1, dtype=np.float64)
    instant = end_ns <= start_ns
    if instant.any():
        at = start_ns[instant]
        k = np.searchsorted(edges_ns, at, side="right") - 1
        k[at == edges_ns[-1]] = len(out) - 1  # the span's last instant belongs to the last bin
        inside = (k >= 0) & (k < len(out))
        np.add.at(out, k[inside], amount[instant][inside])
    s, e, a = start_ns[~instant], end_ns[~instant], amount[~instant]
    if len(s):
        rate = a / (e - s)
        times = np.concatenate([s, e])
        order = np.argsort(times, kind="stable")
        times = times[order]
        rate_after = np.cumsum(np.concatenate([rate, -rate])[order])  # total rate right after each breakpoint
        moved = np.concatenate([[0.0], np.cumsum(rate_after[:-1] * np.diff(times))])  # moved by each breakpoint
        j = np.searchsorted(times, edges_ns, side="right") - 1
        at_edge = np.where(j >= 0, moved[np.maximum(j, 0)] + rate_after[np.maximum(j, 0)]
                           * (edges_ns - times[np.maximum(j, 0)]), 0.0)
        out += np.diff(at_edge)
    return out


def utilization_over_time(span_ns: tuple[float, float], link_busy: dict[str, tuple[np.ndarray, np.ndarray]],
                          pool_bytes: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
                          pool_peak_GBps: float) -> dict | None:
    """The `utilization_over_time` entry of archsim.serving/1: BINS bins over the span, each link's busy fraction
    and the pool DRAM's bytes over peak (None without a modelled pool). None when the span is empty."""
    first, last = span_ns
    if not last > first:
        return None
    edges = np.linspace(first, last, BINS + 1)
    width = edges[1] - edges[0]
    links = {}
    for name, (start, end) in sorted(link_busy.items()):
        busy = binned(start, end, end - start, edges) / width
        links[name] = [float(x) for x in np.clip(busy, 0.0, 1.0)]
    dram = None
    if pool_bytes is not None and pool_peak_GBps > 0:
        dram = [float(x) for x in binned(*pool_bytes, edges) / (pool_peak_GBps * width)]
    return {"bins": BINS, "start_ms": first / 1e6, "bin_ms": width / 1e6, "links": links, "pool_dram": dram}
