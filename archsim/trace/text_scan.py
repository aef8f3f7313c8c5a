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

from typing import Any

import numpy as np
from numba import njit

# cycles at or above this cannot be simulated (the kernel's INF is 2^62)
MAX_CYCLE = (1 << 62) - 1
CHUNK_BYTES = 1 << 26

# scanner state slots
ST_LINE, ST_PREV, ST_DECREASE, ST_ERROR, ST_ERROR_KIND = range(5)
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
    """Parse the complete lines of buf[:end] into the arrays from index 0; return how many requests. Stops at
    the first bad line (state[ST_ERROR] = its number, state[ST_ERROR_KIND] = why); state[ST_LINE] counts the
    lines before `buf`, state[ST_PREV] and state[ST_DECREASE] track the first line whose cycle decreases.
    One pass over the bytes, no calls: a call per token cost ten times the parse."""
    n = 0
    i = 0
    line = state[ST_LINE]
    limit10 = MAX_CYCLE // 10
    while i < end:
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
    return n


def scan_file(handle, dramsim3: bool, ops: dict[str, int],
              bar: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Scan an open binary file chunk by chunk; the request arrays and the scanner state. `bar` (a progress bar
    in bytes) is advanced per chunk."""
    table, lengths, codes = op_table(ops)
    state = np.zeros(5, dtype=np.int64)
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    carry = b""
    while True:
        block = handle.read(CHUNK_BYTES)
        if bar is not None:
            bar.update(len(block))
        data = carry + block
        if not data:
            break
        if block:
            cut = data.rfind(b"\n") + 1  # complete lines only; the rest waits for the next block
            if cut == 0:
                carry = data
                continue
        else:
            cut = len(data)  # the file's last line, without a newline
            data += b"\n"
        buf = np.frombuffer(data, dtype=np.uint8)
        lines = int(np.count_nonzero(buf[:cut] == 10)) + 1
        address = np.empty(lines, dtype=np.uint64)
        is_write = np.empty(lines, dtype=np.uint8)
        cycle = np.empty(lines, dtype=np.int64)
        n = scan(buf, cut if block else len(data), dramsim3, table, lengths, codes, state, address, is_write, cycle)
        parts.append((address[:n], is_write[:n], cycle[:n]))
        if state[ST_ERROR] or not block:
            break
        carry = data[cut:]
    join = [np.concatenate([p[k] for p in parts]) if parts else np.empty(0) for k in range(3)]
    return join[0].astype(np.uint64), join[1].astype(np.uint8), join[2].astype(np.int64), state
