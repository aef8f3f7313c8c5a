"""The native physical trace: address-level requests as numpy columns in an .npz, written atomically.

Columns (one entry per request, in trace order):
  timestamp_cycles  int64   earliest injection cycle, in cycles of the memory's command clock
  address           uint64  byte address within the memory device
  is_write          uint8   0 read, 1 write
  source            uint8   the request's port: an index into the header's `sources`
plus `header`, a JSON document (uint8 bytes) with schema, version, request count, the ports' names (`sources`,
version 2: several hosts and the PNM, `host0` ... `pnm`; a version-1 file has none and reads as host and pnm),
free-form metadata and the sha256 of the four columns' bytes. A truncated, corrupted or tampered file is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from archsim.config.memory import SOURCES, is_port_name
from archsim.errors import TraceError
from archsim.inputs import check_input, parse_json
from archsim.outputs import atomic_write

SCHEMA = "archsim.physical_trace"
VERSION = 2
MAX_SOURCES = 65  # 64 hosts (serving's largest pool of servers) and the PNM
COLUMNS: tuple[tuple[str, str], ...] = (
    ("timestamp_cycles", "int64"), ("address", "uint64"), ("is_write", "uint8"), ("source", "uint8"),
)


@dataclass(frozen=True)
class PhysicalTrace:
    timestamp_cycles: np.ndarray
    address: np.ndarray
    is_write: np.ndarray
    source: np.ndarray
    header: dict[str, Any]
    sources: tuple[str, ...] = SOURCES  # the ports' names, by source index

    def __len__(self) -> int:
        return int(self.address.shape[0])


def _digest(columns: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name, _dtype in COLUMNS:
        h.update(np.ascontiguousarray(columns[name]).tobytes())
    return h.hexdigest()


def atomic_write_bytes(path: str | Path, writer: Any, suffix: str = "") -> None:
    """Call `writer(file_object)` on a temp file beside `path`, then rename it over `path` (archsim.outputs)."""
    del suffix  # the temp name keeps the target's own suffix
    atomic_write(path, writer)


class PhysicalTraceWriter:
    """An archsim .npz physical trace written batch by batch into an open binary file: the columns go to unnamed
    temporary files beside it (18 bytes a request on disk, not in memory) and into the archive at `finish`, with
    the header and the columns' sha256. The archive is what `np.savez_compressed` writes: `np.load` reads it."""

    def __init__(self, handle: BinaryIO, header: dict[str, Any] | None = None,
                 sources: tuple[str, ...] = SOURCES) -> None:
        self.handle = handle
        self.header = header or {}
        self.sources = check_sources(list(sources), getattr(handle, "name", None))
        where = os.path.dirname(getattr(handle, "name", "") or "") or None
        self.parts = {name: tempfile.TemporaryFile(dir=where) for name, _dtype in COLUMNS}  # noqa: SIM115
        self.n = 0

    def __enter__(self) -> PhysicalTraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        for part in self.parts.values():  # left by an error before `finish`
            part.close()

    def add(self, timestamp_cycles: np.ndarray, address: np.ndarray, is_write: np.ndarray,
            source: np.ndarray | None = None) -> None:
        n = len(address)
        columns = {"timestamp_cycles": timestamp_cycles, "address": address, "is_write": is_write,
                   "source": np.zeros(n, dtype=np.uint8) if source is None else source}
        for name, dtype in COLUMNS:
            array = np.ascontiguousarray(columns[name], dtype=dtype)
            if array.shape != (n,):
                raise ValueError(f"column {name} has shape {array.shape}, expected ({n},)")
            self.parts[name].write(array.tobytes())
        self.n += n

    def finish(self) -> None:
        """Write the archive: the columns, then the header."""
        digest = hashlib.sha256()
        with zipfile.ZipFile(self.handle, mode="w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as archive:
            for name, dtype in COLUMNS:
                part = self.parts.pop(name)
                part.seek(0)
                with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                    header = {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": (self.n,)}
                    np.lib.format.write_array_header_1_0(member, header)
                    while block := part.read(1 << 24):
                        digest.update(block)
                        member.write(block)
                part.close()
            meta = {"schema": SCHEMA, "version": VERSION, "requests": self.n, "sha256": digest.hexdigest(),
                    "columns": {name: dtype for name, dtype in COLUMNS}, "sources": list(self.sources),
                    "metadata": self.header}
            with archive.open("header.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.frombuffer(json.dumps(meta, sort_keys=True).encode(),
                                                                dtype=np.uint8))


def save_physical_trace(path: str | Path, timestamp_cycles: np.ndarray, address: np.ndarray,
                        is_write: np.ndarray, source: np.ndarray | None = None,
                        header: dict[str, Any] | None = None, sources: tuple[str, ...] = SOURCES) -> None:
    def write(handle: BinaryIO) -> None:
        with PhysicalTraceWriter(handle, header, sources) as writer:
            writer.add(timestamp_cycles, address, is_write, source)
            writer.finish()

    atomic_write_bytes(path, write)


def check_meta(meta: dict[str, Any], file: str) -> tuple[str, ...]:
    """The header's schema and version are ones this archsim reads; returns the ports' names (a version-1 file:
    host and pnm)."""
    if not isinstance(meta, dict):
        raise TraceError("the header is not a JSON object", file=file, where="header")
    if not isinstance(meta.get("metadata", {}), dict):
        raise TraceError("expected an object", file=file, where="header.metadata")
    if meta.get("schema") != SCHEMA:
        raise TraceError(f"schema {meta.get('schema')!r} is not {SCHEMA!r}", file=file)
    if not isinstance(meta.get("version"), int) or meta["version"] > VERSION:
        raise TraceError(f"trace version {meta.get('version')} is newer than this archsim reads ({VERSION})",
                         file=file)
    if meta["version"] < 2:
        return SOURCES
    return check_sources(meta.get("sources"), file)


def check_sources(sources: object, file: str | None) -> tuple[str, ...]:
    """A source table: distinct port names (`host`, `pnm`, `host<k>`), at most MAX_SOURCES."""
    if not isinstance(sources, list) or not sources:
        raise TraceError(f"the header's sources must be a list of port names, got {sources!r}", file=file,
                         where="header.sources")
    bad = [name for name in sources if not is_port_name(name)]
    if bad:
        raise TraceError(f"{bad[0]!r} is not a port name (host, pnm, host0, host1, ...)", file=file,
                         where="header.sources")
    if len(set(sources)) != len(sources):
        raise TraceError("a port is named twice", file=file, where="header.sources")
    if len(sources) > MAX_SOURCES:
        raise TraceError(f"{len(sources)} ports, more than the {MAX_SOURCES} archsim replays", file=file,
                         where="header.sources")
    return tuple(sources)


def check_ports(source: np.ndarray, sources: tuple[str, ...], file: str, first: int = 0) -> None:
    """Every request's port is an index into `sources`; the first that is not is named."""
    beyond = np.flatnonzero(source >= len(sources))
    if beyond.size:
        i = int(beyond[0])
        raise TraceError(f"source {int(source[i])} is not a port of the trace ({', '.join(sources)})", file=file,
                         where=f"request {first + i}")


def load_physical_trace(path: str | Path) -> PhysicalTrace:
    path = check_input(path, TraceError)
    file = str(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            names = set(data.files)
            if "header" not in names:
                if any(name.startswith("chunks/") for name in names):
                    raise TraceError("this is a logical (tensor-level) trace; map it to requests first with "
                                     "`archsim trace convert TRACE --to native -o OUT.npz`", file=file)
                raise TraceError("not an archsim physical trace (no header)", file=file)
            meta = parse_json(bytes(data["header"]).decode())
            columns = {}
            for name, dtype in COLUMNS:
                if name not in names:
                    raise TraceError(f"column {name!r} is missing", file=file)
                columns[name] = data[name]
                if columns[name].dtype != np.dtype(dtype):
                    raise TraceError(f"column {name!r} has dtype {columns[name].dtype}, expected {dtype}",
                                     file=file)
    except TraceError:
        raise
    except FileNotFoundError:
        raise TraceError("no such file", file=file) from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, KeyError, UnicodeDecodeError) as exc:
        raise TraceError(f"truncated or corrupted native trace ({type(exc).__name__}: {exc})", file=file) from None
    sources = check_meta(meta, file)
    lengths = {len(c) for c in columns.values()}
    if len(lengths) != 1 or lengths.pop() != meta.get("requests"):
        raise TraceError("column lengths disagree with the header's request count (truncated?)", file=file)
    if _digest(columns) != meta.get("sha256"):
        raise TraceError("integrity check failed: column data do not match the header's sha256", file=file)
    check_ports(columns["source"], sources, file)
    return PhysicalTrace(columns["timestamp_cycles"], columns["address"], columns["is_write"], columns["source"],
                         meta.get("metadata", {}), sources)
