"""The native physical trace: address-level requests as numpy columns in an .npz, written atomically.

Columns (one entry per request, in trace order):
  timestamp_cycles  int64   earliest injection cycle, in cycles of the memory's command clock
  address           uint64  byte address within the memory device
  is_write          uint8   0 read, 1 write
  source            uint8   0 host port, 1 PNM port
plus `header`, a JSON document (uint8 bytes) with schema, version, request count, free-form metadata and
the sha256 of the four columns' bytes. A truncated, corrupted or tampered file is refused.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from archsim.errors import TraceError
from archsim.inputs import check_input, parse_json
from archsim.outputs import atomic_write

SCHEMA = "archsim.physical_trace"
VERSION = 1
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


def save_physical_trace(path: str | Path, timestamp_cycles: np.ndarray, address: np.ndarray,
                        is_write: np.ndarray, source: np.ndarray | None = None,
                        header: dict[str, Any] | None = None) -> None:
    n = len(address)
    columns = {
        "timestamp_cycles": np.asarray(timestamp_cycles, dtype=np.int64),
        "address": np.asarray(address, dtype=np.uint64),
        "is_write": np.asarray(is_write, dtype=np.uint8),
        "source": np.zeros(n, dtype=np.uint8) if source is None else np.asarray(source, dtype=np.uint8),
    }
    for name, array in columns.items():
        if array.shape != (n,):
            raise ValueError(f"column {name} has shape {array.shape}, expected ({n},)")
    meta = {"schema": SCHEMA, "version": VERSION, "requests": n, "sha256": _digest(columns),
            "columns": {name: dtype for name, dtype in COLUMNS}, "metadata": header or {}}
    payload = dict(columns)
    payload["header"] = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)
    atomic_write_bytes(path, lambda handle: np.savez_compressed(handle, **payload), suffix=".npz")


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
            if not isinstance(meta, dict):
                raise TraceError("the header is not a JSON object", file=file, where="header")
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
    if meta.get("schema") != SCHEMA:
        raise TraceError(f"schema {meta.get('schema')!r} is not {SCHEMA!r}", file=file)
    if not isinstance(meta.get("version"), int) or meta["version"] > VERSION:
        raise TraceError(f"trace version {meta.get('version')} is newer than this archsim reads ({VERSION})",
                         file=file)
    if not isinstance(meta.get("metadata", {}), dict):
        raise TraceError("expected an object", file=file, where="header.metadata")
    lengths = {len(c) for c in columns.values()}
    if len(lengths) != 1 or lengths.pop() != meta.get("requests"):
        raise TraceError("column lengths disagree with the header's request count (truncated?)", file=file)
    if _digest(columns) != meta.get("sha256"):
        raise TraceError("integrity check failed: column data do not match the header's sha256", file=file)
    return PhysicalTrace(columns["timestamp_cycles"], columns["address"], columns["is_write"], columns["source"],
                         meta.get("metadata", {}))
