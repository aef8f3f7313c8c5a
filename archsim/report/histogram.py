"""Exact integer histograms: counts of every value seen, folded chunk by chunk, with the percentiles
`np.percentile(values, q)` (its default linear method) would give on all the values at once, bit for bit.

A streaming replay (archsim/replay_stream.py) cannot keep one latency per request; it keeps a count per distinct
latency instead (`IntHistogram`): read latencies take a few thousand distinct values; latencies from a trace
timestamp in a trace that outpaces the memory take one per cycle of the run, about 1 byte each (docs/memory.md).
"""

from __future__ import annotations

import numpy as np

_LOW_BITS = np.int64(0xFFFFFFFF)


def exact_sum(values: np.ndarray) -> int:
    """The sum of int64 values as a Python int, without int64 overflow (high and low 32-bit halves apart)."""
    values = np.asarray(values, dtype=np.int64)
    return (int((values >> 32).sum()) << 32) + int((values & _LOW_BITS).sum())


def _count_type(largest: int) -> type:
    """The narrowest unsigned count type that holds `largest`."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if largest <= np.iinfo(dtype).max:
            return dtype
    return np.int64


class IntHistogram:
    """Exact counts of int64 values; `add` folds a chunk; `percentile`, `mean`, `max` read them back.

    Two forms, whichever is smaller: sparse, the sorted distinct values with their counts (16 bytes per distinct
    value; each chunk's counted apart and merged in once the chunks waiting hold as many values as the kept ones,
    so merging costs O(log) passes per value), and dense, a count per value of the range they span, in the
    narrowest type that holds the largest (1 byte while no value is seen more than 255 times, up to 8).
    Latencies a trace's timestamps start span the run when the trace outpaces the memory: nearly every cycle is
    a value, seen a few times, and dense takes 1 byte a cycle."""

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
            if local is None:
                self._widen(int(self.dense.max()) + values.size)
                np.add.at(self.dense, values - self.low, 1)
                return
            start = lo - self.low
            window = slice(start, start + local.size)
            self._widen(int(self.dense[window].max()) + int(local.max()))
            self.dense[window] += local.astype(self.dense.dtype)
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

    def _widen(self, largest: int) -> None:
        """Give the dense counts a wider type if one may reach `largest`."""
        if largest > np.iinfo(self.dense.dtype).max:
            self.dense = self.dense.astype(_count_type(largest))

    def _cover(self, lo: int, hi: int, coming: int) -> bool:
        """Grow the dense range (by half at least) to hold [lo, hi]; if it would be much larger than the sparse
        form, turn sparse instead and return False."""
        size = self.dense.size
        if lo >= self.low and hi < self.low + size:
            return True
        new_low = min(lo, self.low - size // 2) if lo < self.low else self.low
        new_end = max(hi + 1, self.low + size + size // 2) if hi >= self.low + size else self.low + size
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
        if span <= 4 * self.values.size:  # dense is no larger (a count takes 1 to 8 bytes): turn dense
            self.low = int(self.values[0])
            self.dense = np.zeros(span, dtype=_count_type(int(self.counts.max())))
            self.dense[self.values - self.low] = self.counts
            self.values, self.counts = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)

    def _at_ranks(self, ranks: list[int]) -> list[int]:
        """The values at these 0-based ranks of the sorted values (ascending ranks). Dense counts are summed a
        block at a time, so no array as long as the range is made."""
        self._merge()
        if self.dense is None:
            cumulative = np.cumsum(self.counts)
            return [int(self.values[int(np.searchsorted(cumulative, r, side="right"))]) for r in ranks]
        block = 1 << 16
        whole = self.dense.size // block * block  # a reshaped sum with a dtype casts a buffer at a time
        sums = np.concatenate([self.dense[:whole].reshape(-1, block).sum(axis=1, dtype=np.int64),
                               [int(self.dense[whole:].sum(dtype=np.int64))]])
        before = np.concatenate(([0], np.cumsum(sums)))
        out = []
        for r in ranks:
            k = int(np.searchsorted(before, r, side="right")) - 1
            inside = np.cumsum(self.dense[k * block:(k + 1) * block], dtype=np.int64)
            out.append(self.low + k * block + int(np.searchsorted(inside, r - int(before[k]), side="right")))
        return out

    def percentile(self, q: float) -> float:
        """`float(np.percentile(values, q))` of every value added (method "linear"), bit for bit."""
        if self.n == 0:
            raise ValueError("percentile of no values")
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
        a, b = (np.int64(v) for v in self._at_ranks([low_rank, high_rank]))
        diff = b - a
        if gamma >= 0.5:
            return float(np.float64(b) - diff * (1 - gamma))
        return float(np.float64(a) + diff * gamma)

    def mean(self) -> float:
        """`float(values.mean())` of int64 values: the exact sum over the count (numpy's float64 sum is the
        exact sum while the values' partial sums stay below 2**53)."""
        return float(self.total) / self.n

    def max(self) -> int:
        return self._at_ranks([self.n - 1])[0]

    @property
    def nbytes(self) -> int:
        dense = 0 if self.dense is None else self.dense.nbytes
        return int(self.values.nbytes + self.counts.nbytes) + 16 * self._waiting_size + dense
