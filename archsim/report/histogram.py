"""Exact integer histograms: counts of every value seen, folded chunk by chunk, with the percentiles
`np.percentile(values, q)` (its default linear method) would give on all the values at once, bit for bit.

A streaming replay (archsim/replay_stream.py) cannot keep one latency per request; it keeps one count per distinct
latency instead: 16 bytes per distinct value, not 8 per request. Read latencies take a few thousand distinct
values; latencies from a trace timestamp in a saturated trace take about one per cycle of the run
(docs/memory.md).
"""

from __future__ import annotations

import numpy as np

_LOW_BITS = np.int64(0xFFFFFFFF)


def exact_sum(values: np.ndarray) -> int:
    """The sum of int64 values as a Python int, without int64 overflow (high and low 32-bit halves apart)."""
    values = np.asarray(values, dtype=np.int64)
    return (int((values >> 32).sum()) << 32) + int((values & _LOW_BITS).sum())


class IntHistogram:
    """Exact counts of int64 values; `add` folds a chunk; `percentile`, `mean`, `max` read them back.

    The counts are kept as sorted distinct values with their counts; each chunk's are counted apart (a bincount
    over the chunk's range when it is narrow, a sort otherwise) and merged into the kept ones once the chunks
    waiting hold as many values as they do, so merging costs O(log) passes per value, not one per chunk."""

    def __init__(self) -> None:
        self.values = np.zeros(0, dtype=np.int64)
        self.counts = np.zeros(0, dtype=np.int64)
        self._waiting: list[tuple[np.ndarray, np.ndarray]] = []
        self._waiting_size = 0
        self.n = 0
        self.total = 0  # exact sum of the values

    def add(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=np.int64)
        if values.size == 0:
            return
        self.n += int(values.size)
        self.total += exact_sum(values)
        lo, hi = int(values.min()), int(values.max())
        if hi - lo < 4 * values.size + 1024:
            local = np.bincount(values - lo, minlength=hi - lo + 1)
            present = np.flatnonzero(local)
            distinct, counts = present.astype(np.int64) + lo, local[present]
        else:
            distinct, counts = np.unique(values, return_counts=True)
        self._waiting.append((distinct, counts.astype(np.int64)))
        self._waiting_size += distinct.size
        if self._waiting_size > max(self.values.size, 1 << 16):
            self._merge()

    def _merge(self) -> None:
        if not self._waiting:
            return
        values = np.concatenate([self.values, *(v for v, _ in self._waiting)])
        counts = np.concatenate([self.counts, *(c for _, c in self._waiting)])
        self._waiting, self._waiting_size = [], 0
        order = np.argsort(values, kind="stable")
        values, counts = values[order], counts[order]
        starts = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
        self.values, self.counts = values[starts], np.add.reduceat(counts, starts)

    def percentile(self, q: float) -> float:
        """`float(np.percentile(values, q))` of every value added (method "linear"), bit for bit."""
        if self.n == 0:
            raise ValueError("percentile of no values")
        self._merge()
        cumulative = np.cumsum(self.counts)

        def at(rank: int) -> np.int64:
            return self.values[int(np.searchsorted(cumulative, rank, side="right"))]

        # numpy's steps: the virtual index (n - 1) * q / 100; its floor and the next index (both the last one
        # at or past the end); gamma, the fraction; then a + (b - a) * gamma below one half, else
        # b - (b - a) * (1 - gamma), in float64
        virtual = (self.n - 1) * float(np.true_divide(q, 100))
        previous = float(np.floor(virtual))
        if virtual >= self.n - 1:
            low_rank = high_rank = self.n - 1
        else:
            low_rank, high_rank = int(previous), int(previous) + 1
        gamma = virtual - previous
        a, b = at(low_rank), at(high_rank)
        diff = b - a
        if gamma >= 0.5:
            return float(np.float64(b) - diff * (1 - gamma))
        return float(np.float64(a) + diff * gamma)

    def mean(self) -> float:
        """`float(values.mean())` of int64 values: the exact sum over the count (numpy's float64 sum is the
        exact sum while the values' partial sums stay below 2**53)."""
        return float(self.total) / self.n

    def max(self) -> int:
        self._merge()
        return int(self.values[-1])

    @property
    def nbytes(self) -> int:
        return int(self.values.nbytes + self.counts.nbytes) + 16 * self._waiting_size
