"""Physical traces read in batches, for the streaming replay (archsim/replay_stream.py) and `trace convert`: memory
bounded by a batch, whatever the trace's length.

`open_source(path, fmt)` gives a `RequestSource`: each `open(port)` is a fresh pass over one port's requests in
trace order. A DRAMSim3 or Ramulator text trace (one port: host) is scanned chunk by chunk
(`text_scan.scan_parts`), and its bad line, decreasing timestamp or out-of-range address is an error when the
pass reaches it: the first in the file is the one named. An archsim .npz is checked whole first, column by column
(its sha256, negative or decreasing timestamps, ports, addresses), then read in slices of its four columns.
`--sort` needs the whole trace in memory (a stable sort): `sorted_source` reads it so, about 18 bytes a request.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

import numpy as np

from archsim.config.memory import SOURCES
from archsim.errors import TraceError
from archsim.inputs import check_input
from archsim.trace.native import COLUMNS, check_meta, check_ports

BATCH_REQUESTS = 1 << 18  # requests a source hands over at a time


@dataclass(frozen=True)
class Batch:
    """Requests in trace order: their index in the trace, timestamp, address, direction and port."""

    position: np.ndarray  # int64
    timestamp_cycles: np.ndarray  # int64
    address: np.ndarray  # uint64
    is_write: np.ndarray  # uint8
    source: np.ndarray  # uint8

    def __len__(self) -> int:
        return int(self.position.shape[0])

    def select(self, which: slice | np.ndarray) -> Batch:
        return Batch(self.position[which], self.timestamp_cycles[which], self.address[which],
                     self.is_write[which], self.source[which])


class RequestSource(Protocol):
    """A physical trace read in batches: `open(port)` is a fresh pass over the requests of one port (an index into
    `sources`, the ports' names: host and pnm, or a trace's own table; None: all), in trace order; `ports` the
    ports that may have any; `requests` the count if known up front."""

    sources: tuple[str, ...]
    ports: tuple[int, ...]
    requests: int | None

    def open(self, port: int | None = None) -> Iterator[Batch]: ...


AddressCheck = Callable[[np.ndarray, int], np.ndarray]  # (addresses, index of the first) -> checked addresses


class ArraySource:
    """Requests already in memory (columns in trace order), handed over in batches."""

    def __init__(self, timestamp_cycles: np.ndarray, address: np.ndarray, is_write: np.ndarray, source: np.ndarray,
                 batch_requests: int = BATCH_REQUESTS, sources: tuple[str, ...] = SOURCES) -> None:
        self.columns = (np.asarray(timestamp_cycles, np.int64), np.asarray(address, np.uint64),
                        np.asarray(is_write, np.uint8), np.asarray(source, np.uint8))
        self.sources = tuple(sources)
        self.requests = int(self.columns[0].shape[0])
        self.ports = tuple(int(p) for p in np.unique(self.columns[3]))
        self.batch_requests = batch_requests

    def open(self, port: int | None = None) -> Iterator[Batch]:
        for first in range(0, self.requests, self.batch_requests):
            part = [column[first:first + self.batch_requests] for column in self.columns]
            yield _of_port(Batch(np.arange(first, first + part[0].size, dtype=np.int64), *part), port)


def _of_port(batch: Batch, port: int | None) -> Batch:
    if port is None or (batch.source == port).all():
        return batch
    return batch.select(np.flatnonzero(batch.source == port))


class TextSource:
    """A DRAMSim3 or Ramulator 2 text trace (host port only), scanned as it is read."""

    sources = SOURCES
    ports = (0,)
    requests = None

    def __init__(self, path: str, fmt: str, check: AddressCheck | None = None, bar: Any = None) -> None:
        self.path, self.fmt, self.check, self.bar = path, fmt, check, bar

    def open(self, port: int | None = None) -> Iterator[Batch]:
        from archsim.trace.text_formats import _DRAMSIM3_OPS, _RAMULATOR_OPS, _open, _raise_for_line
        from archsim.trace.text_scan import N_STATE, ST_DECREASE, ST_ERROR, scan_parts

        if port not in (None, 0):
            return
        dramsim3 = self.fmt == "dramsim3"
        state = np.zeros(N_STATE, dtype=np.int64)
        arrays: list[tuple[np.ndarray, ...]] = []

        def room(_position: int, _cut: int) -> tuple[np.ndarray, ...]:
            arrays.append((np.empty(BATCH_REQUESTS, np.uint64), np.empty(BATCH_REQUESTS, np.uint8),
                           np.empty(BATCH_REQUESTS, np.int64)))
            return arrays[-1]

        first, last_cycle = 0, -1
        with _open(self.path) as handle:
            for count in scan_parts(handle, dramsim3, _DRAMSIM3_OPS if dramsim3 else _RAMULATOR_OPS, state, room,
                                    self.bar):
                address, is_write, cycle = (a[:count] for a in arrays.pop())
                if state[ST_DECREASE]:
                    _decreasing(self.path, cycle, last_cycle, f"line {int(state[ST_DECREASE])}")
                if count:
                    if self.check is not None:
                        address = self.check(address, first)
                    last_cycle = int(cycle[-1])
                    yield Batch(np.arange(first, first + count, dtype=np.int64), cycle, address, is_write,
                                np.zeros(count, dtype=np.uint8))
                    first += count
                if state[ST_ERROR]:
                    _raise_for_line(self.path, int(state[ST_ERROR]), dramsim3)


def _decreasing(file: str, cycle: np.ndarray, before: int, where: str) -> None:
    """The error for the first request of `cycle` (its predecessor's cycle `before`) whose cycle decreases."""
    previous = np.concatenate(([before], cycle[:-1]))
    i = int(np.flatnonzero(cycle < previous)[0])
    raise TraceError(f"timestamp {int(cycle[i])} is below the previous request's {int(previous[i])}: timestamps "
                     "must not decrease (replay and trace convert take --sort)", file=file, where=where)


class _NpyColumn:
    """One column of an .npz, read in slices straight from its zip member (never whole)."""

    def __init__(self, archive: zipfile.ZipFile, name: str) -> None:
        self.handle: IO[bytes] = archive.open(f"{name}.npy")
        version = np.lib.format.read_magic(self.handle)
        shape, fortran, self.dtype = (np.lib.format.read_array_header_1_0(self.handle) if version == (1, 0)
                                      else np.lib.format.read_array_header_2_0(self.handle))
        if len(shape) != 1 or fortran:
            raise ValueError(f"column {name} is not one-dimensional")
        self.length = int(shape[0])

    def read(self, count: int) -> np.ndarray:
        data = self.handle.read(count * self.dtype.itemsize)
        if len(data) != count * self.dtype.itemsize:
            raise EOFError("the column ends early")
        return np.frombuffer(data, dtype=self.dtype)


class NpzSource:
    """An archsim .npz physical trace: checked whole on opening (module docstring), then read in slices."""

    def __init__(self, path: str, check: AddressCheck | None = None) -> None:
        self.path, self.check = path, check
        self.requests = 0
        self.sources: tuple[str, ...] = SOURCES
        self.ports: tuple[int, ...] = ()
        self.header: dict[str, Any] = {}
        self._guarded(self._verify)

    def _guarded(self, action: Callable[[], Any]) -> Any:
        """Run `action` with a damaged file's errors turned into one line naming it."""
        try:
            return action()
        except TraceError:
            raise
        except (OSError, ValueError, zipfile.BadZipFile, EOFError, KeyError, json.JSONDecodeError,
                UnicodeDecodeError) as exc:
            raise TraceError(f"truncated or corrupted native trace ({type(exc).__name__}: {exc})",
                             file=self.path) from None

    def _columns(self, archive: zipfile.ZipFile) -> list[_NpyColumn]:
        return [_NpyColumn(archive, name) for name, _dtype in COLUMNS]

    def _verify(self) -> None:
        file = self.path
        with zipfile.ZipFile(self.path) as archive:
            names = {n[:-4] for n in archive.namelist() if n.endswith(".npy")}
            if "header" not in names:
                if any(name.startswith("chunks/") for name in names):
                    raise TraceError("this is a logical (tensor-level) trace; map it to requests first with "
                                     "`archsim trace convert TRACE --to native -o OUT.npz`", file=file)
                raise TraceError("not an archsim physical trace (no header)", file=file)
            with archive.open("header.npy") as handle:
                meta = json.loads(bytes(np.lib.format.read_array(handle, allow_pickle=False)).decode())
            for name, dtype in COLUMNS:
                if name not in names:
                    raise TraceError(f"column {name!r} is missing", file=file)
                found = _NpyColumn(archive, name).dtype
                if found != np.dtype(dtype):
                    raise TraceError(f"column {name!r} has dtype {found}, expected {dtype}", file=file)
            self.sources = check_meta(meta, file)
            self._scan_columns(archive, meta)
        self.header = meta.get("metadata", {})

    def _scan_columns(self, archive: zipfile.ZipFile, meta: dict[str, Any]) -> None:
        """One pass per column: the digest over the columns in order, and each column's own checks."""
        file = self.path
        digest = hashlib.sha256()
        lengths = set()
        ports: set[int] = set()
        for (name, _dtype), column in zip(COLUMNS, self._columns(archive), strict=True):
            lengths.add(column.length)
            last = None
            for first in range(0, column.length, BATCH_REQUESTS):
                values = column.read(min(BATCH_REQUESTS, column.length - first))
                digest.update(values.tobytes())
                if name == "timestamp_cycles":
                    last = _check_timestamps(values, first, last, file)
                elif name == "address" and self.check is not None:
                    self.check(values, first)
                elif name == "source":
                    check_ports(values, self.sources, file, first)
                    ports |= set(np.unique(values).tolist())
        if len(lengths) != 1 or lengths.pop() != meta.get("requests"):
            raise TraceError("column lengths disagree with the header's request count (truncated?)", file=file)
        if digest.hexdigest() != meta.get("sha256"):
            raise TraceError("integrity check failed: column data do not match the header's sha256", file=file)
        self.requests = int(meta["requests"])
        self.ports = tuple(sorted(ports))

    def open(self, port: int | None = None) -> Iterator[Batch]:
        archive = zipfile.ZipFile(self.path)
        try:
            columns = self._guarded(lambda: self._columns(archive))
            for first in range(0, self.requests, BATCH_REQUESTS):
                count = min(BATCH_REQUESTS, self.requests - first)
                ts, address, is_write, source = self._guarded(lambda: [c.read(count) for c in columns])  # noqa: B023
                if self.check is not None:
                    address = self.check(address, first)
                yield _of_port(Batch(np.arange(first, first + count, dtype=np.int64), ts, address, is_write, source),
                               port)
        finally:
            archive.close()


def _check_timestamps(values: np.ndarray, first: int, last: int | None, file: str) -> int:
    """Timestamps of requests first.. (the one before: `last`): none negative, none below its predecessor."""
    negative = np.flatnonzero(values < 0)
    if negative.size:
        i = int(negative[0])
        raise TraceError(f"timestamp {int(values[i])} is negative", file=file, where=f"request {first + i}")
    previous = np.concatenate(([values[0] if last is None else last], values[:-1]))
    drops = np.flatnonzero(values < previous)
    if drops.size:
        _decreasing(file, values, values[0] if last is None else last, f"request {first + int(drops[0])}")
    return int(values[-1]) if values.size else (last or 0)


def open_source(path: str, fmt: str = "auto", check: AddressCheck | None = None,
                bar: Any = None) -> tuple[RequestSource, str]:
    """The trace at `path` as a streaming source, and its format (`fmt` auto: detected). `check` sees every
    batch's addresses first (with the index of its first request) and returns them (wrapped) or raises; `bar`
    advances with the bytes of a text trace read."""
    from archsim.trace.text_formats import FORMATS, detect_format

    if fmt == "auto":
        fmt = detect_format(path)
    check_input(path, TraceError)
    if fmt == "npz":
        return NpzSource(path, check), fmt
    if fmt in ("dramsim3", "ramulator"):
        return TextSource(path, fmt, check, bar), fmt
    raise TraceError(f"unknown trace format {fmt!r} (choose one of {', '.join(FORMATS)})", file=path)


def sorted_source(path: str, fmt: str = "auto", check: AddressCheck | None = None) -> tuple[ArraySource, int]:
    """The trace sorted stably by timestamp, read whole (`--sort`), and how many requests moved."""
    from archsim.trace.text_formats import read_trace

    physical = read_trace(path, fmt, sort=True)
    address = physical.address if check is None else check(physical.address, 0)
    return (ArraySource(physical.timestamp_cycles, address, physical.is_write, physical.source,
                        sources=physical.sources), int(physical.header.get("sorted_requests", 0)))



def write_batches(path: Path, target: str, batches: Iterator[tuple[np.ndarray, ...]],
                  header: dict[str, Any] | None = None, sources: tuple[str, ...] = SOURCES) -> tuple[int, int]:
    """Write request batches (timestamps, addresses, writes?, ports: indices into `sources`) as they come to
    `path` in `target` ("dramsim3", "ramulator" or "native"; the text formats carry no port); returns the requests
    and writes written. Memory: one batch."""
    from archsim.trace.native import PhysicalTraceWriter
    from archsim.trace.text_write import text_lines

    n = writes = 0
    with open(path, "wb") as handle, (PhysicalTraceWriter(handle, header, sources) if target == "native"
                                      else contextlib.nullcontext()) as native:
        for ts, address, is_write, source in batches:
            if native is not None:
                native.add(ts, address, is_write, source)
            else:
                handle.write(text_lines(target, ts if target == "dramsim3" else None, address, is_write))
            n += len(address)
            writes += int(np.count_nonzero(is_write))
        if native is not None:
            native.finish()
    return n, writes
