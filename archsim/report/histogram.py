"""Exact integer histograms: counts of every value seen, folded chunk by chunk, with the percentiles
`np.percentile(values, q)` (its default linear method) would give on all the values at once, bit for bit.

A streaming replay (archsim/replay_stream.py) cannot keep one latency per request; it keeps a count per distinct
latency instead (`IntHistogram`): read latencies take a few thousand distinct values; latencies from a trace
timestamp in a trace that outpaces the memory take one per cycle of the run, 4 bytes each (docs/memory.md).
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

    Two forms, whichever is smaller: sparse, the sorted distinct values with their counts (16 bytes per distinct
    value; each chunk's counted apart and merged in once the chunks waiting hold as many values as the kept ones,
    so merging costs O(log) passes per value), and dense, a count per value of the range they span (4 bytes per
    value of the range, 8 once a count passes 2**32). Latencies a trace's timestamps start span the run when the
    trace outpaces the memory: then nearly every cycle is a value and dense is a quarter of sparse."""

    def __init__(self) -> None:
        self.values = np.zeros(0, dtype=np.int64)
        self.counts = np.zeros(0, dtype=np.int64)
        self._waiting: list[tuple[np.ndarray, np.ndarray]] = []
        self._waiting_size = 0
        self.dense: np.ndarray | None = None  # counts of low, low + 1, ...
        self.low = 0
        self.n = 0
        self.total = 0  # exact sum of the values

    def add(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=np.int64)
        if values.size == 0:
            return
        self.n += int(values.size)
        self.total += exact_sum(values)
        lo, hi = int(values.min()), int(values.max())
        narrow = hi - lo < 4 * values.size + 1024
        local = np.bincount(values - lo, minlength=hi - lo + 1) if narrow else None
        if self.dense is not None and self._cover(lo, hi, values.size):
            start = lo - self.low
            if local is None:
                if int(self.dense.max()) + values.size >= 2**32:
                    self.dense = self.dense.astype(np.int64)
                np.add.at(self.dense, values - self.low, 1)
                return
            if int(self.dense[start:start + local.size].max()) + int(local.max()) >= 2**32:
                self.dense = self.dense.astype(np.int64)
            self.dense[start:start + local.size] += local.astype(self.dense.dtype)
            return
        if local is not None:
            present = np.flatnonzero(local)
            distinct, counts = present.astype(np.int64) + lo, local[present]
        else:
            distinct, counts = np.unique(values, return_counts=True)
        self._waiting.append((distinct, counts.astype(np.int64)))
        self._waiting_size += distinct.size
        if self._waiting_size > max(self.values.size, 1 << 16):
            self._merge()

    def _cover(self, lo: int, hi: int, coming: int) -> bool:
        """Grow the dense range (at least doubling it) to hold [lo, hi]; if it would be much larger than the
        sparse form, turn sparse instead and return False."""
        size = self.dense.size
        if lo >= self.low and hi < self.low + size:
            return True
        new_low = min(lo, self.low - size) if lo < self.low else self.low
        new_end = max(hi + 1, self.low + 2 * size) if hi >= self.low + size else self.low + size
        if new_end - new_low > 4 * (int(np.count_nonzero(self.dense)) + coming) + (1 << 20):
            present = np.flatnonzero(self.dense)
            self.values, self.counts = present.astype(np.int64) + self.low, self.dense[present].astype(np.int64)
            self.dense = None
            return False
        grown = np.zeros(new_end - new_low, dtype=self.dense.dtype)
        grown[self.low - new_low:self.low - new_low + size] = self.dense
        self.low, self.dense = new_low, grown
        return True

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
        span = int(self.values[-1] - self.values[0]) + 1
        if span <= 4 * self.values.size and self.counts.max() < 2**32:  # dense is no larger: turn dense
            self.low = int(self.values[0])
            self.dense = np.zeros(span, dtype=np.uint32)
            self.dense[self.values - self.low] = self.counts
            self.values, self.counts = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)

    def _sorted(self) -> tuple[np.ndarray, np.ndarray]:
        """Distinct values and the cumulative counts up to each."""
        if self.dense is not None:
            cumulative = np.cumsum(self.dense, dtype=np.int64)
            return np.arange(self.low, self.low + self.dense.size, dtype=np.int64), cumulative
        self._merge()
        if self.dense is not None:
            return self._sorted()
        return self.values, np.cumsum(self.counts)

    def percentile(self, q: float) -> float:
        """`float(np.percentile(values, q))` of every value added (method "linear"), bit for bit."""
        if self.n == 0:
            raise ValueError("percentile of no values")
        values, cumulative = self._sorted()

        def at(rank: int) -> np.int64:
            return values[int(np.searchsorted(cumulative, rank, side="right"))]

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
        values, cumulative = self._sorted()
        return int(values[int(np.searchsorted(cumulative, self.n - 1, side="right"))])

    @property
    def nbytes(self) -> int:
        dense = 0 if self.dense is None else self.dense.nbytes
        return int(self.values.nbytes + self.counts.nbytes) + 16 * self._waiting_size + dense
