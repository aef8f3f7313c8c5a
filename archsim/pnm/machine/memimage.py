"""Memories of the functional PNM model: a sparse DRAM image and the SRAM scratchpad.

Both know which bytes were ever written, so reading a buffer nobody placed or produced is
detected. The DRAM image is sparse (segments the caller places at byte addresses), so a 16 GiB
pool costs only what is placed; `reserve` declares a readable all-zero region without storing
it (for access traces of caches too large to materialize).
"""

from __future__ import annotations

import bisect

import numpy as np
from numpy.lib.stride_tricks import as_strided


class MemoryAccessError(Exception):
    """An access the functional model rejects; the executor adds the instruction and line."""


class DramImage:
    """Sparse byte-addressed DRAM of `capacity_bytes`."""

    def __init__(self, capacity_bytes: int) -> None:
        if capacity_bytes <= 0:
            raise ValueError("DRAM capacity must be positive")
        self.capacity_bytes = int(capacity_bytes)
        self._starts: list[int] = []  # sorted, segments do not overlap
        self._segments: list[list] = []  # [start, end, data (uint8 array) or None (reserved zeros)]

    # ---------------------------------------------------------------- placement by the caller
    def write(self, address: int, data: bytes | np.ndarray) -> None:
        """Place bytes at `address` (they count as written)."""
        raw = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes | bytearray) else \
            np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        self._check_range(address, raw.size)
        self._write_bytes(int(address), raw)

    def reserve(self, address: int, size_bytes: int) -> None:
        """Declare [address, address+size) readable as zeros without storing it."""
        self._check_range(address, size_bytes)
        if self._overlapping(address, address + size_bytes):
            raise ValueError(f"reserved range 0x{address:x}+{size_bytes} overlaps placed data")
        self._insert([int(address), int(address + size_bytes), None])

    def segments(self) -> list[tuple[int, int, bool]]:
        """(start, end, stored) of every segment, in address order."""
        return [(s, e, d is not None) for s, e, d in self._segments]

    def _check_range(self, address: int, size_bytes: int) -> None:
        if address < 0 or size_bytes < 0 or address + size_bytes > self.capacity_bytes:
            raise ValueError(f"range 0x{address:x}+{size_bytes} is outside the "
                             f"{self.capacity_bytes}-byte DRAM")

    # ---------------------------------------------------------------- segment bookkeeping
    def _insert(self, segment: list) -> None:
        index = bisect.bisect_left(self._starts, segment[0])
        self._starts.insert(index, segment[0])
        self._segments.insert(index, segment)

    def _overlapping(self, lo: int, hi: int) -> list[int]:
        index = max(bisect.bisect_right(self._starts, lo) - 1, 0)
        found = []
        while index < len(self._segments) and self._segments[index][0] < hi:
            if self._segments[index][1] > lo:
                found.append(index)
            index += 1
        return found

    def _covering(self, lo: int, hi: int) -> list | None:
        index = bisect.bisect_right(self._starts, lo) - 1
        if index >= 0 and self._segments[index][1] >= hi:
            return self._segments[index]
        return None

    def _write_bytes(self, address: int, raw: np.ndarray) -> None:
        lo, hi = address, address + raw.size
        if raw.size == 0:
            return
        segment = self._covering(lo, hi)
        if segment is not None:
            if segment[2] is None:
                segment[2] = np.zeros(segment[1] - segment[0], dtype=np.uint8)
            segment[2][lo - segment[0]:hi - segment[0]] = raw
            return
        # Merge everything the write touches into one segment; the union is contiguous because
        # every merged segment intersects [lo, hi), so no unwritten gap becomes "written".
        indices = self._overlapping(lo, hi)
        merged_lo = min([lo] + [self._segments[i][0] for i in indices])
        merged_hi = max([hi] + [self._segments[i][1] for i in indices])
        data = np.zeros(merged_hi - merged_lo, dtype=np.uint8)
        for i in indices:
            start, end, old = self._segments[i]
            if old is not None:
                data[start - merged_lo:end - merged_lo] = old
        data[lo - merged_lo:hi - merged_lo] = raw
        for i in reversed(indices):
            del self._starts[i]
            del self._segments[i]
        self._insert([merged_lo, merged_hi, data])

    def _read_bytes(self, lo: int, hi: int) -> np.ndarray:
        out = np.empty(hi - lo, dtype=np.uint8)
        cursor = lo
        for index in self._overlapping(lo, hi):
            start, end, data = self._segments[index]
            if start > cursor:
                break
            take_hi = min(end, hi)
            out[cursor - lo:take_hi - lo] = 0 if data is None else data[cursor - start:take_hi - start]
            cursor = take_hi
        if cursor < hi:
            raise MemoryAccessError(f"reads DRAM [0x{cursor:x}, 0x{hi:x}) that was never written")
        return out

    # ---------------------------------------------------------------- strided transfers (DMA)
    def read_rows(self, address: int, rows: int, row_bytes: int, stride: int) -> np.ndarray:
        """`rows` rows of `row_bytes` bytes starting `stride` apart, concatenated (uint8)."""
        if rows == 0 or row_bytes == 0:
            return np.empty(0, dtype=np.uint8)
        lo, hi = address, address + (rows - 1) * stride + row_bytes
        segment = self._covering(lo, hi)
        if segment is not None:
            if segment[2] is None:
                return np.zeros(rows * row_bytes, dtype=np.uint8)
            base = segment[2][lo - segment[0]:]
            if stride == row_bytes:
                return base[:rows * row_bytes].copy()
            view = as_strided(base, shape=(rows, row_bytes), strides=(stride, 1), writeable=False)
            return view.reshape(-1).copy()
        return np.concatenate([self._read_bytes(address + i * stride, address + i * stride + row_bytes)
                               for i in range(rows)])

    def write_rows(self, address: int, data: np.ndarray, rows: int, row_bytes: int, stride: int) -> None:
        """Inverse of read_rows: row i of `data` goes to address + i*stride."""
        if rows == 0 or row_bytes == 0:
            return
        lo, hi = address, address + (rows - 1) * stride + row_bytes
        segment = self._covering(lo, hi)
        if segment is not None and stride >= row_bytes:
            if segment[2] is None:
                segment[2] = np.zeros(segment[1] - segment[0], dtype=np.uint8)
            base = segment[2][lo - segment[0]:]
            view = as_strided(base, shape=(rows, row_bytes), strides=(stride, 1))
            view[...] = data.reshape(rows, row_bytes)
            return
        for i, row in enumerate(data.reshape(rows, row_bytes)):
            self._write_bytes(address + i * stride, row)


class Scratchpad:
    """The SRAM: bytes plus a written-map for uninitialized-read detection."""

    def __init__(self, size_bytes: int) -> None:
        self.size_bytes = int(size_bytes)
        self.data = np.zeros(self.size_bytes, dtype=np.uint8)
        self.written = np.zeros(self.size_bytes, dtype=bool)

    def check_bounds(self, address: int, size_bytes: int) -> None:
        if address < 0 or size_bytes < 0 or address + size_bytes > self.size_bytes:
            raise MemoryAccessError(f"SRAM [0x{address:x}, 0x{address + size_bytes:x}) is outside the "
                                    f"{self.size_bytes}-byte scratchpad")

    def read(self, address: int, size_bytes: int) -> np.ndarray:
        self.check_bounds(address, size_bytes)
        hi = address + size_bytes
        if not self.written[address:hi].all():
            first = address + int(np.argmin(self.written[address:hi]))
            raise MemoryAccessError(f"reads SRAM [0x{address:x}, 0x{hi:x}) but byte 0x{first:x} was never "
                                    f"written")
        return self.data[address:hi].copy()

    def write(self, address: int, raw: np.ndarray) -> None:
        self.check_bounds(address, raw.size)
        self.data[address:address + raw.size] = raw
        self.written[address:address + raw.size] = True

    def mark_written(self, address: int, size_bytes: int) -> None:
        """Record a write whose value the run does not compute (access-trace mode)."""
        self.check_bounds(address, size_bytes)
        self.written[address:address + size_bytes] = True
