"""Compiled scanners of the DRAMSim3 and Ramulator 2 text traces: bytes in, request arrays out.

A Python loop over lines parses about 1 M lines/s, most of a replay's time; these scan the file's bytes in
chunks (bounded memory for the text) at tens of millions of lines per second. They accept exactly the lines
the format allows and stop at the first that is not one, returning its number: `text_formats` then reads that
line alone to say what is wrong with it.

A line is `<address> <op> <cycle>` (DRAMSim3) or `<op> <address>` (Ramulator), tokens separated by spaces or
tabs, optional trailing white space and `\\r`; the address hexadecimal with an optional 0x, at most 64 bits;
the cycle decimal, below `MAX_CYCLE`. Blank lines and lines whose first token starts with `#` are skipped.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from typing import Any

import numpy as np

from archsim.jit import njit

# cycles at or above this cannot be simulated (the kernel's INF is 2^62)
MAX_CYCLE = (1 << 62) - 1
CHUNK_BYTES = 1 << 26
PART_REQUESTS = 1 << 22  # requests scanned into one set of arrays

# scanner state slots (the last, bytes of the file scanned before the current chunk, is the Python loop's)
ST_LINE, ST_PREV, ST_DECREASE, ST_ERROR, ST_ERROR_KIND, ST_POS, ST_BYTES = range(7)
N_STATE = 7
ERR_NONE, ERR_SYNTAX, ERR_ADDRESS_WIDTH, ERR_CYCLE_RANGE = range(4)


def op_table(ops: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The op spellings as a padded byte table, their lengths and their codes (0 read, 1 write)."""
    width = max(len(name) for name in ops)
    table = np.zeros((len(ops), width), dtype=np.uint8)
    for k, name in enumerate(ops):
        table[k, :len(name)] = np.frombuffer(name.encode(), dtype=np.uint8)
    return table, np.array([len(n) for n in ops], dtype=np.int64), np.array(list(ops.values()), dtype=np.uint8)


# hex digit value per byte, -1 for the others
HEX_VALUE = np.full(256, -1, dtype=np.int64)
for _k, _c in enumerate(b"0123456789abcdef"):
    HEX_VALUE[_c] = _k
for _k, _c in enumerate(b"ABCDEF"):
    HEX_VALUE[_c] = 10 + _k


@njit(cache=True)
def scan(buf, end, dramsim3, table, lengths, codes, state, address, is_write, cycle):  # noqa: C901 - one pass
    """Parse the complete lines of buf[state[ST_POS]:end] into the arrays from index 0, until they are full;
    return how many requests (state[ST_POS]: where it stopped). Stops at the first bad line (state[ST_ERROR]
    = its number, state[ST_ERROR_KIND] = why); state[ST_LINE] counts the
    lines before `buf`, state[ST_PREV] and state[ST_DECREASE] track the first line whose cycle decreases.
    One pass over the bytes, no calls: a call per token cost ten times the parse."""
    n = 0
    i = state[ST_POS]
    line = state[ST_LINE]
    capacity = address.shape[0]
    limit10 = MAX_CYCLE // 10
    while i < end and n < capacity:
        line += 1
        while buf[i] == 32 or buf[i] == 9 or buf[i] == 13:
            i += 1
        if buf[i] == 10:
            i += 1
            continue  # blank
        if buf[i] == 35:
            while buf[i] != 10:
                i += 1
            i += 1
            continue  # comment
        kind = ERR_NONE
        op = -1
        t = 0
        value = np.uint64(0)
        for field in range(2):
            if (field == 0) == dramsim3:
                # the address: optional 0x, hex digits, at most 16 significant
                if buf[i] == 48 and (buf[i + 1] == 120 or buf[i + 1] == 88):
                    i += 2
                digits = 0
                significant = 0
                while HEX_VALUE[buf[i]] >= 0:
                    d = HEX_VALUE[buf[i]]
                    significant += significant > 0 or d != 0
                    value = (value << np.uint64(4)) | np.uint64(d)
                    digits += 1
                    i += 1
                if digits == 0:
                    kind = ERR_SYNTAX
                elif significant > 16:
                    kind = ERR_ADDRESS_WIDTH
            else:
                # the op: one of the table's spellings
                a = i
                while buf[i] != 32 and buf[i] != 9 and buf[i] != 13 and buf[i] != 10:
                    i += 1
                for k in range(table.shape[0]):
                    if lengths[k] == i - a:
                        m = 0
                        while m < i - a and table[k, m] == buf[a + m]:
                            m += 1
                        if m == i - a:
                            op = codes[k]
                            break
                if op < 0:
                    kind = ERR_SYNTAX
            if kind != ERR_NONE:
                break
            if buf[i] != 32 and buf[i] != 9 and not (field == 1 and not dramsim3):
                kind = ERR_SYNTAX
                break
            while buf[i] == 32 or buf[i] == 9:
                i += 1
        if kind == ERR_NONE and dramsim3:
            # the cycle: decimal digits below MAX_CYCLE
            digits = 0
            while 48 <= buf[i] <= 57:
                d = buf[i] - 48
                if t > limit10 or (t == limit10 and d > MAX_CYCLE % 10):
                    kind = ERR_CYCLE_RANGE
                t = t * 10 + d
                digits += 1
                i += 1
            if digits == 0:
                kind = ERR_SYNTAX
        if kind == ERR_NONE:
            while buf[i] == 32 or buf[i] == 9 or buf[i] == 13:
                i += 1
            if buf[i] != 10:
                kind = ERR_SYNTAX
        if kind != ERR_NONE:
            state[ST_ERROR] = line
            state[ST_ERROR_KIND] = kind
            return n
        i += 1  # past the newline
        if t < state[ST_PREV] and state[ST_DECREASE] == 0:
            state[ST_DECREASE] = line
        state[ST_PREV] = t
        address[n] = value
        is_write[n] = op
        cycle[n] = t
        n += 1
    state[ST_LINE] = line
    state[ST_POS] = i
    return n


class _Requests:
    """The scanned requests: arrays sized from the file's length and the bytes per request seen so far (so the
    requests are written once, not gathered and copied), grown by half when a file holds more."""

    def __init__(self, capacity: int) -> None:
        self.arrays = (np.empty(capacity, np.uint64), np.empty(capacity, np.uint8), np.empty(capacity, np.int64))
        self.n = 0

    def room(self, at_least: int) -> tuple[np.ndarray, ...]:
        if self.arrays[0].shape[0] - self.n < at_least:
            capacity = max(self.n + at_least, self.arrays[0].shape[0] * 3 // 2)
            grown = tuple(np.empty(capacity, a.dtype) for a in self.arrays)
            for new, old in zip(grown, self.arrays, strict=True):
                new[:self.n] = old[:self.n]
            self.arrays = grown
        return tuple(a[self.n:] for a in self.arrays)

    def result(self) -> tuple[np.ndarray, ...]:
        return tuple(a[:self.n] for a in self.arrays)


def _chunk_bytes(handle) -> int:
    """`CHUNK_BYTES`, or less for a smaller regular file: zeroing a 64 MiB buffer costs a short trace's process
    30 ms. A pipe gets whole chunks; a regular file that grows as it is read, chunks of its size when opened."""
    try:
        status = os.fstat(handle.fileno())
    except (AttributeError, OSError, ValueError):  # not a file with a descriptor (a test's BytesIO)
        return CHUNK_BYTES
    if not stat.S_ISREG(status.st_mode):
        return CHUNK_BYTES
    return min(CHUNK_BYTES, max(status.st_size + 1, 1 << 16))


def scan_parts(handle, dramsim3: bool, ops: dict[str, int], state: np.ndarray, room: Any,
               bar: Any = None) -> Iterator[int]:
    """Scan an open binary file chunk by chunk into the arrays `room(at_least)` hands out (address, is_write,
    cycle: filled from index 0), yielding how many requests went into each; `state` carries the scanner's state
    (stops at the first bad line: `state[ST_ERROR]`). `bar` (a progress bar in bytes) is advanced per chunk. The
    text in memory is one chunk."""
    table, lengths, codes = op_table(ops)
    chunk_bytes = _chunk_bytes(handle)
    data = bytearray(chunk_bytes + 1)
    held = 0  # bytes of an incomplete last line kept at the front of `data`
    while True:
        if len(data) < held + chunk_bytes + 1:
            data.extend(bytes(held + chunk_bytes + 1 - len(data)))  # a line longer than a chunk
        got = handle.readinto(memoryview(data)[held:held + chunk_bytes])
        if bar is not None:
            bar.update(got)
        size = held + got
        if size == 0:
            break
        if got:
            cut = data.rfind(b"\n", 0, size) + 1  # complete lines only; the rest waits for the next chunk
            if cut == 0:
                held = size
                continue
        else:
            data[size] = 10  # the file's last line, without a newline
            cut = size + 1
        buf = np.frombuffer(data, dtype=np.uint8)
        state[ST_POS] = 0
        while state[ST_POS] < cut and not state[ST_ERROR]:
            yield scan(buf, cut, dramsim3, table, lengths, codes, state, *room(int(state[ST_POS]), cut))
        del buf  # `data` is resized and refilled below: no view of it may stay
        state[ST_BYTES] += cut
        if state[ST_ERROR] or not got:
            break
        held = size - cut
        data[:held] = data[cut:size]


def scan_file(handle, dramsim3: bool, ops: dict[str, int], size_bytes: int,
              bar: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Scan an open binary file of `size_bytes` whole: the request arrays and the scanner state. The arrays are
    sized from the bytes per request seen so far, so the requests are written once."""
    state = np.zeros(N_STATE, dtype=np.int64)
    requests = _Requests(min(PART_REQUESTS, size_bytes // 4 + 1))

    def room(position: int, _cut: int) -> tuple[np.ndarray, ...]:
        seen = int(state[ST_BYTES]) + position
        per_request = seen / requests.n if requests.n else 16.0
        return requests.room(min(PART_REQUESTS, int((size_bytes - seen) / per_request * 1.02) + 1024))

    for count in scan_parts(handle, dramsim3, ops, state, room, bar):
        requests.n += count
    return (*requests.result(), state)
