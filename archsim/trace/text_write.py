"""Compiled writers of the DRAMSim3 and Ramulator 2 text traces: request arrays in, the lines' bytes out, at tens
of millions of lines per second (a Python f-string per line writes about one million), so that `trace convert`
writes a trace of any length batch by batch.

DRAMSim3: `0x<hex address> READ|WRITE <cycle>`; Ramulator 2 LoadStore: `LD|ST 0x<hex address>`; lower-case hex
without leading zeros, as Python's `f"{address:#x}"`.
"""

from __future__ import annotations

import numpy as np

from archsim.jit import njit

_LINE_BYTES = 48  # the longest line: 0x + 16 hex digits, WRITE, a 20-digit cycle, spaces and the newline
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_OPS = {"dramsim3": (b"READ", b"WRITE"), "ramulator": (b"LD", b"ST")}


@njit(cache=True)
def _put_hex(out, k, value, hex_digits):
    out[k] = 48  # 0x
    out[k + 1] = 120
    k += 2
    digits = 1
    while digits < 16 and (value >> np.uint64(4 * digits)) != 0:
        digits += 1
    for d in range(digits - 1, -1, -1):
        out[k] = hex_digits[(value >> np.uint64(4 * d)) & np.uint64(15)]
        k += 1
    return k


@njit(cache=True)
def _put_op(out, k, op, write_op, length, write_length, is_write):
    if is_write:
        for j in range(write_length):
            out[k + j] = write_op[j]
        return k + write_length
    for j in range(length):
        out[k + j] = op[j]
    return k + length


@njit(cache=True)
def _lines(dramsim3, cycle, address, is_write, read_op, write_op, hex_digits, out):
    """The lines of every request into `out`; returns the bytes written."""
    k = 0
    for i in range(address.shape[0]):
        if dramsim3:
            k = _put_hex(out, k, address[i], hex_digits)
            out[k] = 32
            k = _put_op(out, k + 1, read_op, write_op, read_op.shape[0], write_op.shape[0], is_write[i] != 0)
            out[k] = 32
            k += 1
            c = cycle[i]
            if c < 0:
                out[k] = 45  # -
                k += 1
                c = -c
            first = k
            while True:  # the digits backwards, then turned around
                out[k] = 48 + c % 10
                k += 1
                c //= 10
                if c == 0:
                    break
            last = k - 1
            while first < last:
                out[first], out[last] = out[last], out[first]
                first += 1
                last -= 1
        else:
            k = _put_op(out, k, read_op, write_op, read_op.shape[0], write_op.shape[0], is_write[i] != 0)
            out[k] = 32
            k = _put_hex(out, k + 1, address[i], hex_digits)
        out[k] = 10
        k += 1
    return k


def text_lines(fmt: str, timestamp_cycles: np.ndarray | None, address: np.ndarray, is_write: np.ndarray) -> bytes:
    """The text lines of the requests in `fmt` ("dramsim3" or "ramulator", which has no timestamps)."""
    read_op, write_op = (np.frombuffer(op, dtype=np.uint8) for op in _OPS[fmt])
    address = np.ascontiguousarray(address, dtype=np.uint64)
    cycle = np.zeros(address.size, np.int64) if timestamp_cycles is None else np.ascontiguousarray(
        timestamp_cycles, dtype=np.int64)
    out = np.empty(address.size * _LINE_BYTES, dtype=np.uint8)
    used = _lines(fmt == "dramsim3", cycle, address, np.ascontiguousarray(is_write, dtype=np.uint8), read_op,
                  write_op, _HEX, out)
    return out[:used].tobytes()
