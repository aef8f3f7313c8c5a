"""Text trace formats of other simulators, read and written, and format auto-detection.

DRAMSim3: one request per line, `0x<hex address> READ|WRITE <cycle>`, the cycle in memory command-clock
cycles (DRAMSim3's trace CPU runs at the memory clock); its other spellings (read/write, P_MEM_RD, P_FETCH,
P_MEM_WR, BOFF) are read too. Timestamps must not decrease (the first decreasing line is an error naming it;
`read_trace(..., sort=True)`, the CLI's `--sort`, sorts stably by timestamp instead).
Ramulator 2 LoadStore: `LD 0x<hex>` / `ST 0x<hex>`, no timestamps: requests are injected as fast as the
controller accepts them (timestamp 0).
Blank lines and lines starting with `#` are skipped. A line that does not parse is an error naming it.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np

from archsim.errors import EMPTY_TRACE, TraceError
from archsim.inputs import check_input
from archsim.progress import progress_bar
from archsim.trace.native import PhysicalTrace, atomic_write_bytes, load_physical_trace
from archsim.trace.text_scan import MAX_CYCLE, ST_DECREASE, ST_ERROR, scan_file
from archsim.trace.text_write import text_lines

FORMATS: tuple[str, ...] = ("auto", "npz", "dramsim3", "ramulator")
# DRAMSim3 reads these spellings (its common.cc); P_MEM_WR and BOFF are writes there too
_DRAMSIM3_OPS = {"READ": 0, "WRITE": 1, "read": 0, "write": 1, "P_MEM_RD": 0, "P_FETCH": 0, "P_MEM_WR": 1,
                 "BOFF": 1}
_RAMULATOR_OPS = {"LD": 0, "ST": 1}
# auto-detection reads no more than this of a file's head
_DETECT_BYTES = 4096


def _open(path: Path):  # noqa: ANN202 - a binary file
    checked = check_input(path, TraceError)
    try:
        return open(checked, "rb")
    except OSError as exc:
        raise TraceError(f"cannot read: {exc.strerror}", file=str(path)) from None


def _hex(token: str, file: str, lineno: int) -> int:
    try:
        value = int(token, 16)
    except ValueError:
        raise TraceError(f"bad hex address {token!r}", file=file, where=f"line {lineno}") from None
    if value < 0 or value >= 1 << 64:
        raise TraceError(f"address {token!r} does not fit 64 bits", file=file, where=f"line {lineno}")
    return value


def _check_dramsim3_line(parts: list[str], line: str, file: str, lineno: int) -> None:
    if len(parts) != 3 or parts[1] not in _DRAMSIM3_OPS:
        raise TraceError(f"expected `0x<hex address> READ|WRITE <cycle>`, got {line.strip()!r}", file=file,
                         where=f"line {lineno}")
    _hex(parts[0], file, lineno)
    if not parts[2].isdigit():
        raise TraceError(f"cycle {parts[2]!r} is not a non-negative integer", file=file, where=f"line {lineno}")
    if int(parts[2]) > MAX_CYCLE:
        raise TraceError(f"cycle {parts[2]} is beyond the largest the simulator can hold ({MAX_CYCLE:,})",
                         file=file, where=f"line {lineno}")


def _check_ramulator_line(parts: list[str], line: str, file: str, lineno: int) -> None:
    if len(parts) != 2 or parts[0] not in _RAMULATOR_OPS:
        raise TraceError(f"expected `LD 0x<hex>` or `ST 0x<hex>`, got {line.strip()!r}", file=file,
                         where=f"line {lineno}")
    _hex(parts[1], file, lineno)


def _raise_for_line(path: Path, lineno: int, dramsim3: bool) -> None:
    """Say what is wrong with line `lineno`, which the scanner stopped at."""
    file = str(path)
    with open(path, "rb") as handle:
        raw = next(itertools.islice(handle, lineno - 1, None), b"")
    try:
        line = raw.decode()
    except UnicodeDecodeError:
        line = ""
    if not line or "\0" in line:
        raise TraceError("not a text trace file (binary data)", file=file, where=f"line {lineno}")
    (_check_dramsim3_line if dramsim3 else _check_ramulator_line)(line.split(), line, file, lineno)
    form = "`0x<hex address> READ|WRITE <cycle>`" if dramsim3 else "`LD 0x<hex>` or `ST 0x<hex>`"
    raise TraceError(f"expected {form}, got {line.strip()!r}", file=file, where=f"line {lineno}")


def _read_text(path: str | Path, fmt: str) -> tuple[PhysicalTrace, int]:
    """The text trace and the line of its first decreasing timestamp (0: none), both from one scan."""
    path = Path(path)
    dramsim3 = fmt == "dramsim3"
    with _open(path) as handle:
        size_bytes = os.fstat(handle.fileno()).st_size
        with progress_bar(size_bytes, "B", f"parse {path.name}") as bar:
            address, is_write, cycle, state = scan_file(handle, dramsim3,
                                                        _DRAMSIM3_OPS if dramsim3 else _RAMULATOR_OPS, size_bytes, bar)
    if state[ST_ERROR]:
        _raise_for_line(path, int(state[ST_ERROR]), dramsim3)
    if not address.size:
        raise TraceError(EMPTY_TRACE, file=str(path))
    trace = PhysicalTrace(cycle, address, is_write, np.zeros(address.size, dtype=np.uint8), {"format": fmt})
    return trace, int(state[ST_DECREASE])


def read_dramsim3(path: str | Path) -> PhysicalTrace:
    return _read_text(path, "dramsim3")[0]


def read_ramulator(path: str | Path) -> PhysicalTrace:
    return _read_text(path, "ramulator")[0]


def write_dramsim3(path: str | Path, timestamp_cycles: np.ndarray, address: np.ndarray,
                   is_write: np.ndarray) -> None:
    atomic_write_bytes(path, lambda handle: handle.write(text_lines("dramsim3", timestamp_cycles, address, is_write)))


def write_ramulator(path: str | Path, address: np.ndarray, is_write: np.ndarray) -> None:
    atomic_write_bytes(path, lambda handle: handle.write(text_lines("ramulator", None, address, is_write)))


def _utf8_head(data: bytes) -> bool:
    """Whether `data` decodes as UTF-8, allowing a character cut at the end of the head."""
    try:
        data.decode()
    except UnicodeDecodeError as exc:
        return exc.start >= len(data) - 3
    return True


def is_request_trace(path: str | Path) -> bool:
    """Whether the file's first non-blank byte opens a JSON object: a Mooncake request trace (JSONL)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(_DETECT_BYTES).lstrip().startswith(b"{")
    except OSError:
        return False


def detect_format(path: str | Path) -> str:
    path = check_input(path, TraceError)
    try:
        with open(path, "rb") as handle:
            head = handle.read(_DETECT_BYTES + 1)
    except OSError as exc:
        raise TraceError(f"cannot read: {exc.strerror}", file=str(path)) from None
    if head.startswith(b"PK"):
        return "npz"
    text = head[:_DETECT_BYTES]
    if b"\0" in text or not _utf8_head(text):
        raise TraceError("binary data, not a trace archsim reads (an archsim .npz, DRAMSim3 or Ramulator 2 text)",
                         file=str(path))
    if text.lstrip().startswith(b"{"):
        raise TraceError("a request trace (Mooncake JSONL), not a memory trace: `archsim serve` reads it through a "
                         "scenario's `requests: {trace: PATH, format: mooncake}`", file=str(path))
    for raw in head[:_DETECT_BYTES].decode(errors="replace").splitlines():
        parts = raw.split()
        if not parts or parts[0].startswith("#"):
            continue
        if parts[0] in _RAMULATOR_OPS:
            return "ramulator"
        if len(parts) >= 2 and parts[1] in _DRAMSIM3_OPS:
            return "dramsim3"
        break
    else:
        if len(head) <= _DETECT_BYTES:  # read whole: only blank and comment lines, no requests in any format
            raise TraceError(EMPTY_TRACE, file=str(path))
    raise TraceError("cannot tell the trace format (not an archsim .npz, DRAMSim3 or Ramulator LoadStore text); "
                     "pass --format", file=str(path))


def read_trace(path: str | Path, fmt: str = "auto", *, sort: bool = False) -> PhysicalTrace:
    """Any physical trace archsim reads; timestamps must not decrease unless `sort` (a stable sort by
    timestamp, counted in the header's `sorted_requests`)."""
    if fmt == "auto":
        fmt = detect_format(path)
    drop_line = 0
    if fmt == "npz":
        physical = load_physical_trace(path)
    elif fmt in ("dramsim3", "ramulator"):
        physical, drop_line = _read_text(path, fmt)
    else:
        raise TraceError(f"unknown trace format {fmt!r} (choose one of {', '.join(FORMATS)})", file=str(path))
    return ordered(physical, str(path), sort=sort, drop_line=drop_line)


def ordered(physical: PhysicalTrace, file: str, *, sort: bool = False, drop_line: int = 0) -> PhysicalTrace:
    """The trace if its timestamps never decrease (and none is negative); sorted stably when `sort`; else the
    first decreasing request is an error naming its line (`drop_line`, the text scanner's) or request index."""
    ts = physical.timestamp_cycles
    where = (lambda i: f"line {drop_line}") if drop_line else (lambda i: f"request {i}")
    negative = np.flatnonzero(ts < 0)
    if negative.size:
        i = int(negative[0])
        raise TraceError(f"timestamp {int(ts[i])} is negative", file=file, where=where(i))
    drops = np.flatnonzero(ts[1:] < ts[:-1])
    if not drops.size:
        return physical
    if not sort:
        i = int(drops[0]) + 1
        raise TraceError(f"timestamp {int(ts[i])} is below the previous request's {int(ts[i - 1])}: timestamps must "
                         "not decrease (replay and trace convert take --sort)", file=file, where=where(i))
    order = np.argsort(ts, kind="stable")
    moved = int(np.count_nonzero(order != np.arange(len(order))))
    return PhysicalTrace(ts[order], physical.address[order], physical.is_write[order], physical.source[order],
                         {**physical.header, "sorted_requests": moved}, physical.sources)
