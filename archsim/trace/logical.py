"""The logical trace file: tensor-level memory traffic of a model run (see traces/FORMAT.md).

One file is a zip archive (readable by `numpy.load` as an .npz) holding
  chunks/NNNNNN/<column>.npy   one 1-D array per column per chunk
  manifest.json                schema, version, header, column table, operator table, chunk list with a
                               sha256 per chunk, totals - written last
Writing streams chunk by chunk (memory stays bounded by `chunk_records`) into a temp file beside the
target, which replaces the target only after a complete, closed archive exists. A reader therefore sees
either the old file or the complete new one; a truncated copy has no central directory or no manifest and
is rejected, and a flipped byte fails either zip's CRC or the chunk's sha256.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import platform
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import archsim
from archsim.errors import TraceError
from archsim.inputs import JSONInputError, check_input, parse_json

SCHEMA = "archsim.logical_trace"
VERSION = 1
MANIFEST_MEMBER = "manifest.json"
DEFAULT_CHUNK_RECORDS = 1 << 18

PHASES = ("prefill", "decode")
OPS = ("R", "W")
KINDS = ("weight", "k", "v", "activation", "other")
PHASE_PREFILL, PHASE_DECODE = 0, 1
OP_READ, OP_WRITE = 0, 1
KIND_WEIGHT, KIND_K, KIND_V, KIND_ACTIVATION, KIND_OTHER = range(5)


@dataclass(frozen=True)
class Column:
    name: str
    dtype: str
    unit: str
    description: str


COLUMNS: tuple[Column, ...] = (
    Column("step", "int32", "step", "forward pass (model call) index, 0-based, in execution order"),
    Column("phase", "uint8", "enum", "0 prefill (several new tokens per request), 1 decode (one new token)"),
    Column("op", "uint8", "enum", "0 read (R), 1 write (W)"),
    Column("kind", "uint8", "enum", "0 weight, 1 k, 2 v, 3 activation, 4 other"),
    Column("layer", "int16", "layer", "decoder layer index; -1 outside the decoder layers"),
    Column("head_start", "int32", "head",
           "first head of the range (KV heads for k/v, query heads for Q/O); -1 n/a"),
    Column("head_count", "int32", "heads", "number of heads in the range; 0 n/a"),
    Column("token_start", "int64", "token",
           "first token slot of the range in the request's sequence; -1 n/a"),
    Column("token_count", "int64", "tokens", "number of token slots per request in the range; 0 n/a"),
    Column("bytes", "int64", "B", "bytes moved by this access"),
    Column("operator", "int32", "index", "index into the manifest's operator table"),
    Column("request", "int32", "request",
           "batch element the access belongs to; -1 shared by the whole batch"),
)
COLUMN_NAMES: tuple[str, ...] = tuple(column.name for column in COLUMNS)
_DTYPES: dict[str, np.dtype] = {column.name: np.dtype(column.dtype) for column in COLUMNS}
_RESERVED_HEADER_KEYS = {"schema", "version", "columns", "operators", "chunks", "totals", "created_by"}


def empty_columns() -> dict[str, np.ndarray]:
    return {name: np.empty(0, dtype=dtype) for name, dtype in _DTYPES.items()}


def concat_columns(parts: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Concatenate record batches column by column (an empty list gives zero records)."""
    if not parts:
        return empty_columns()
    return {
        name: np.concatenate([np.asarray(part[name], dtype=dtype) for part in parts])
        for name, dtype in _DTYPES.items()
    }


def tool_versions() -> dict[str, str]:
    """Versions of the tools that shape a trace; capture adds torch and transformers."""
    return {"archsim": archsim.__version__, "numpy": np.__version__, "python": platform.python_version()}


def _check_columns(columns: Mapping[str, np.ndarray], where: str) -> tuple[dict[str, np.ndarray], int]:
    missing = set(COLUMN_NAMES) - columns.keys()
    extra = columns.keys() - set(COLUMN_NAMES)
    if missing or extra:
        raise ValueError(f"{where}: columns must be exactly {COLUMN_NAMES} (missing {sorted(missing)}, "
                         f"extra {sorted(extra)})")
    arrays: dict[str, np.ndarray] = {}
    length = -1
    for name, dtype in _DTYPES.items():
        array = np.asarray(columns[name])
        if array.ndim != 1:
            raise ValueError(f"{where}: column {name} must be 1-D")
        if length < 0:
            length = len(array)
        elif len(array) != length:
            raise ValueError(f"{where}: column {name} has {len(array)} records, expected {length}")
        arrays[name] = array.astype(dtype, copy=False)
    if length > 0:
        for name, limit in (("phase", len(PHASES)), ("op", len(OPS)), ("kind", len(KINDS))):
            if int(arrays[name].max()) >= limit:
                raise ValueError(f"{where}: column {name} holds a code >= {limit}")
        if int(arrays["bytes"].min()) < 0:
            raise ValueError(f"{where}: column bytes holds a negative value")
    return arrays, length


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


class LogicalTraceWriter:
    """Streams records into a logical trace file; use as a context manager.

    `header` is the self-description the caller owns (source, model, dtype, options, artefacts...); the
    writer adds schema, version, column table, operator table, chunk list, totals and tool versions.
    Leaving the `with` block through an exception removes the temp file: no partial output remains.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        header: Mapping[str, Any],
        *,
        operators: Sequence[str] = (),
        chunk_records: int = DEFAULT_CHUNK_RECORDS,
        compress: bool = True,
        extra_tools: Mapping[str, str] | None = None,
    ) -> None:
        reserved = _RESERVED_HEADER_KEYS & header.keys()
        if reserved:
            raise ValueError(f"header keys {sorted(reserved)} are written by the trace writer")
        for key in ("source", "model", "dtype"):
            if key not in header:
                raise ValueError(f"header needs key {key!r}")
        self._header = json.loads(json.dumps(dict(header)))  # deep copy; fails early on non-JSON values
        self._tools = {**tool_versions(), **dict(extra_tools or {})}
        if chunk_records < 1:
            raise ValueError("chunk_records must be >= 1")
        self.path = Path(path)
        self._chunk_records = chunk_records
        self._tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        compression = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
        self._compression = compression
        if not self.path.parent.is_dir():
            raise TraceError("the output directory does not exist", file=str(self.path))
        self._zip: zipfile.ZipFile | None = zipfile.ZipFile(self._tmp, "w", compression=compression,
                                                             allowZip64=True)
        self._operators: list[str] = []
        self._operator_index: dict[str, int] = {}
        self._operator_weight_bytes: dict[int, int] = {}
        for name in operators:
            self.operator_id(name)
        self._pending: list[dict[str, np.ndarray]] = []
        self._pending_records = 0
        self._chunks: list[dict[str, Any]] = []
        self._records = 0
        self._max_step = -1
        self._bytes = np.zeros((len(KINDS), len(OPS)), dtype=np.int64)

    def operator_id(self, name: str, weight_bytes: int | None = None) -> int:
        """Index of an operator name in the operator table (added on first use)."""
        index = self._operator_index.get(name)
        if index is None:
            index = len(self._operators)
            self._operators.append(name)
            self._operator_index[name] = index
        if weight_bytes is not None:
            self._operator_weight_bytes[index] = int(weight_bytes)
        return index

    def append(self, columns: Mapping[str, np.ndarray]) -> None:
        """Add a batch of records (a dict of equal-length 1-D arrays, one per column)."""
        if self._zip is None:
            raise ValueError("writer is closed")
        arrays, length = _check_columns(columns, "append")
        if length == 0:
            return
        if int(arrays["operator"].max()) >= len(self._operators) or int(arrays["operator"].min()) < 0:
            raise ValueError("append: operator index outside the operator table")
        self._pending.append(arrays)
        self._pending_records += length
        while self._pending_records >= self._chunk_records:
            self._flush_chunk(self._chunk_records)

    def _flush_chunk(self, size: int) -> None:
        merged = concat_columns(self._pending)
        chunk = {name: array[:size] for name, array in merged.items()}
        rest = {name: array[size:] for name, array in merged.items()}
        self._pending = [rest] if len(rest["step"]) else []
        self._pending_records = len(rest["step"])
        self._write_chunk(chunk)

    def _member(self, name: str) -> zipfile.ZipInfo:
        # a fixed timestamp keeps the same records byte-identical from run to run
        info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
        info.compress_type = self._compression
        return info

    def _write_chunk(self, chunk: dict[str, np.ndarray]) -> None:
        assert self._zip is not None
        index = len(self._chunks)
        digest = hashlib.sha256()
        for name in COLUMN_NAMES:
            payload = _npy_bytes(chunk[name])
            digest.update(payload)
            self._zip.writestr(self._member(f"chunks/{index:06d}/{name}.npy"), payload)
        count = len(chunk["step"])
        self._chunks.append({"index": index, "records": count, "sha256": digest.hexdigest()})
        self._records += count
        self._max_step = max(self._max_step, int(chunk["step"].max()))
        np.add.at(self._bytes, (chunk["kind"].astype(np.intp), chunk["op"].astype(np.intp)), chunk["bytes"])

    def close(self) -> Path:
        """Write the manifest and move the finished file into place; returns the path."""
        if self._zip is None:
            return self.path
        try:
            if self._pending_records:
                self._flush_chunk(self._pending_records)
            manifest = {
                "schema": SCHEMA,
                "version": VERSION,
                "created_by": self._tools,
                **self._header,
                "columns": [column.__dict__ for column in COLUMNS],
                "operators": [
                    {"name": name, "weight_bytes": self._operator_weight_bytes.get(i)}
                    for i, name in enumerate(self._operators)
                ],
                "chunks": self._chunks,
                "totals": {
                    "records": self._records,
                    "steps": self._max_step + 1,
                    "bytes": {
                        kind: {"read": int(self._bytes[k, OP_READ]), "written": int(self._bytes[k, OP_WRITE])}
                        for k, kind in enumerate(KINDS)
                    },
                },
            }
            self._zip.writestr(self._member(MANIFEST_MEMBER), json.dumps(manifest, indent=1, sort_keys=False))
            self._zip.close()
            self._zip = None
            with open(self._tmp, "rb") as handle:
                os.fsync(handle.fileno())
            os.replace(self._tmp, self.path)
        except BaseException:
            self.abort()
            raise
        return self.path

    def abort(self) -> None:
        """Drop everything written so far; the target path is left untouched."""
        if self._zip is not None:
            with contextlib.suppress(Exception):  # the file is being thrown away anyway
                self._zip.close()
            self._zip = None
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> LogicalTraceWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_logical_trace(
    path: str | os.PathLike[str],
    header: Mapping[str, Any],
    columns: Mapping[str, np.ndarray],
    operators: Sequence[str],
    *,
    operator_weight_bytes: Mapping[str, int] | None = None,
    chunk_records: int = DEFAULT_CHUNK_RECORDS,
) -> Path:
    """Write a whole in-memory record set in one call."""
    with LogicalTraceWriter(path, header, operators=operators, chunk_records=chunk_records) as writer:
        for name, size in (operator_weight_bytes or {}).items():
            writer.operator_id(name, size)
        writer.append(columns)
    return Path(path)


def _all(items: object, kind: type) -> bool:
    return isinstance(items, list) and all(isinstance(item, kind) for item in items)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_manifest(manifest: dict[str, Any], file: str) -> None:
    """The types of every manifest key a reader uses, so that a damaged manifest is one error naming its key."""
    def fail(where: str, expected: str) -> TraceError:
        return TraceError(f"expected {expected}", file=file, where=where)

    chunks = manifest["chunks"]
    if not _all(chunks, dict):
        raise fail("chunks", "a list of {index, records, sha256} objects")
    for i, chunk in enumerate(chunks):
        if not (_count(chunk.get("index")) and _count(chunk.get("records")) and isinstance(chunk.get("sha256"), str)):
            raise fail(f"chunks[{i}]", "{index, records, sha256}: two non-negative integers and a digest")
    operators = manifest["operators"]
    if not _all(operators, dict) or not all(isinstance(o.get("name"), str) for o in operators):
        raise fail("operators", "a list of {name, weight_bytes} objects")
    for i, operator in enumerate(operators):
        if operator.get("weight_bytes") is not None and not _count(operator["weight_bytes"]):
            raise fail(f"operators[{i}].weight_bytes", "a non-negative integer or null")
    totals = manifest["totals"]
    if not isinstance(totals, dict) or not (_count(totals.get("records")) and _count(totals.get("steps"))):
        raise fail("totals", "{records, steps, bytes}: non-negative integers")
    for key in ("model", "shapes", "created_by"):
        if key in manifest and not isinstance(manifest[key], dict):
            raise fail(key, "an object")
    model = manifest.get("model", {})
    if "name" in model and not isinstance(model["name"], str):
        raise fail("model.name", "a string")
    if "shape" in model and not isinstance(model["shape"], dict):
        raise fail("model.shape", "an object")
    for key in ("dtype", "source"):
        if key in manifest and not isinstance(manifest[key], str):
            raise fail(key, "a string")


class LogicalTrace:
    """A logical trace opened for reading; chunks are read (and verified) lazily."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = check_input(path, TraceError)
        where = str(self.path)
        try:
            self._zip = zipfile.ZipFile(self.path, "r")
        except (zipfile.BadZipFile, OSError) as exc:
            raise TraceError(
                f"not a readable trace archive (truncated or not a trace): {exc}", file=where
            ) from None
        try:
            self.manifest = self._read_manifest()
        except BaseException:
            self._zip.close()
            raise

    def _read_manifest(self) -> dict[str, Any]:
        where = str(self.path)
        try:
            raw = self._zip.read(MANIFEST_MEMBER)
        except KeyError:
            raise TraceError(
                "no manifest.json: not a logical trace, or an unfinished write", file=where
            ) from None
        except (zipfile.BadZipFile, OSError) as exc:
            raise TraceError(f"manifest unreadable: {exc}", file=where, where=MANIFEST_MEMBER) from None
        try:
            manifest = parse_json(raw.decode())
        except (JSONInputError, UnicodeDecodeError) as exc:
            raise TraceError(f"manifest is not JSON: {exc}", file=where, where=MANIFEST_MEMBER) from None
        if not isinstance(manifest, dict):
            raise TraceError(f"expected a JSON object, got {type(manifest).__name__}", file=where,
                             where=MANIFEST_MEMBER)
        schema = manifest.get("schema")
        if schema != SCHEMA:
            raise TraceError(f"schema is {schema!r}, expected {SCHEMA!r}", file=where, where="schema")
        version = manifest.get("version")
        if not isinstance(version, int) or version < 1:
            raise TraceError(f"bad format version {version!r}", file=where, where="version")
        if version > VERSION:
            raise TraceError(
                f"format version {version} is newer than this archsim reads (<= {VERSION}); upgrade archsim",
                file=where, where="version",
            )
        columns = manifest.get("columns", [])
        declared = [c.get("name") for c in columns] if _all(columns, dict) else None
        if declared != list(COLUMN_NAMES):
            raise TraceError(
                f"columns {declared} do not match version {version}", file=where, where="columns"
            )
        for key in ("chunks", "operators", "totals"):
            if key not in manifest:
                raise TraceError(f"manifest lacks {key!r}", file=where, where=key)
        _check_manifest(manifest, where)
        return manifest

    # -- metadata -----------------------------------------------------------------------------------
    @property
    def header(self) -> dict[str, Any]:
        """The manifest without the bookkeeping lists (what the producer described)."""
        return {k: v for k, v in self.manifest.items() if k not in ("columns", "chunks")}

    @property
    def operators(self) -> list[str]:
        return [entry["name"] for entry in self.manifest["operators"]]

    @property
    def operator_weight_bytes(self) -> list[int | None]:
        return [entry.get("weight_bytes") for entry in self.manifest["operators"]]

    @property
    def records(self) -> int:
        return int(self.manifest["totals"]["records"])

    @property
    def steps(self) -> int:
        return int(self.manifest["totals"]["steps"])

    # -- data ---------------------------------------------------------------------------------------
    def chunks(
        self, columns: Sequence[str] | None = None, *, verify: bool = True
    ) -> Iterator[dict[str, np.ndarray]]:
        """Yield the records chunk by chunk; `verify` checks each chunk's sha256 first."""
        wanted = list(COLUMN_NAMES if columns is None else columns)
        unknown = set(wanted) - set(COLUMN_NAMES)
        if unknown:
            raise ValueError(f"unknown columns {sorted(unknown)}")
        for chunk in self.manifest["chunks"]:
            yield self._read_chunk(chunk, wanted, verify)

    def _read_chunk(self, chunk: Mapping[str, Any], wanted: list[str], verify: bool) -> dict[str, np.ndarray]:
        where_file = str(self.path)
        index = chunk["index"]
        digest = hashlib.sha256()
        result: dict[str, np.ndarray] = {}
        for name in COLUMN_NAMES:
            if not verify and name not in wanted:
                continue
            member = f"chunks/{index:06d}/{name}.npy"
            try:
                payload = self._zip.read(member)
            except KeyError:
                raise TraceError("missing chunk member", file=where_file, where=member) from None
            except (zipfile.BadZipFile, OSError, EOFError) as exc:
                raise TraceError(f"corrupted chunk member: {exc}", file=where_file, where=member) from None
            digest.update(payload)
            if name not in wanted:
                continue
            try:
                array = np.lib.format.read_array(io.BytesIO(payload), allow_pickle=False)
            except (ValueError, OSError, EOFError) as exc:
                raise TraceError(f"unreadable column: {exc}", file=where_file, where=member) from None
            if array.dtype != _DTYPES[name] or array.ndim != 1 or len(array) != chunk["records"]:
                raise TraceError(
                    f"column has dtype {array.dtype} and {array.size} values, expected {_DTYPES[name]} "
                    f"and {chunk['records']}", file=where_file, where=member,
                )
            result[name] = array
        if verify and digest.hexdigest() != chunk["sha256"]:
            raise TraceError("sha256 mismatch: chunk is corrupted", file=where_file, where=f"chunk {index}")
        return result

    def read(self, columns: Sequence[str] | None = None, *, verify: bool = True) -> dict[str, np.ndarray]:
        """All records in memory (fine for the small traces; stream `chunks()` for large ones)."""
        wanted = list(COLUMN_NAMES if columns is None else columns)
        parts = list(self.chunks(wanted, verify=verify))
        if not parts:
            return {name: np.empty(0, dtype=_DTYPES[name]) for name in wanted}
        return {name: np.concatenate([part[name] for part in parts]) for name in wanted}

    def verify(self) -> None:
        """Check every chunk's integrity (raises TraceError)."""
        for _ in self.chunks(["step"], verify=True):
            pass

    def close(self) -> None:
        self._zip.close()

    def __enter__(self) -> LogicalTrace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def is_logical_trace(path: str | os.PathLike[str]) -> bool:
    """True when `path` is a zip archive whose manifest names the logical-trace schema (no other checks)."""
    try:
        with zipfile.ZipFile(path, "r") as archive:
            return json.loads(archive.read(MANIFEST_MEMBER)).get("schema") == SCHEMA
    except (zipfile.BadZipFile, OSError, KeyError, ValueError, AttributeError):
        return False
