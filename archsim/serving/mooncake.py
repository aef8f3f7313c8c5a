"""Mooncake-style request traces (JSONL) in and out.

One request per line, as Moonshot AI publishes them with the Mooncake paper (FAST'25; traces/NOTICE-mooncake):

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48, 2353]}

`timestamp`: arrival in ms from the start (non-decreasing); `input_length`, `output_length`: tokens (>= 1);
`hash_ids`: one id per `hash_block_tokens`-token block of the prompt (512 in Mooncake's traces), the last one
possibly partial; equal ids are equal content, and an id already encodes every block before it (the ids form
a prefix tree), so a request reuses the KV of every leading block it shares with an earlier one. A blank line
(but at the end), a key given twice on a line and a value beyond what the tables hold are refused, naming the
line.

Reading, a KV block of B tokens (B must divide `hash_block_tokens`) takes the key (hash_id, offset // B) of the
trace block holding it, offset being its first token's position inside that block; the last partial B-block
of a prompt gets a key unique to the request, as in requests.py. Arrivals are timestamp x 1e6 x time_scale ns.

Writing (`mooncake_jsonl`), a table's keys become dense ids in order of first appearance, and its block size
is the trace's `hash_block_tokens`. The format has no dependencies between requests: a later turn (arrival
NaN in the table) is written at its `prev` request's timestamp plus its think time, i.e. as if answers took
no time; lines are sorted by timestamp (stable). A prompt's last partial block gets an id of its own (only
full blocks are shared), so a Mooncake trace read and written again keeps its lengths, timestamps and full
blocks' sharing but not the ids of partial last blocks that the original repeats.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from archsim.errors import EMPTY_TRACE, ConfigError, TraceError
from archsim.inputs import JSONInputError, parse_json, read_text_input
from archsim.limits import INT64_MAX, MAX_TOKENS
from archsim.outputs import atomic_write_bytes
from archsim.serving.requests import RequestTable, block_offsets_for, mix, partial_keys

MOONCAKE_TAG = np.uint64(0x3C6EF372FE94F82B)
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_line(text: str, hash_block_tokens: int | None) -> tuple[float, int, int, list[int]] | str:
    """(timestamp ms, input, output, hash ids), or what is wrong with the line (None: any number of hash ids)."""
    try:
        row = parse_json(text)
    except JSONInputError as exc:
        return str(exc)
    if not isinstance(row, dict):
        return "expected a JSON object"
    missing = [k for k in FIELDS if k not in row]
    if missing:
        return f"missing key {missing[0]!r} (a line holds {', '.join(FIELDS)})"
    ts, n_in, n_out, ids = (row[k] for k in FIELDS)
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts) or ts < 0:
        return f"timestamp must be a non-negative number of ms, got {ts!r}"
    for name, length in (("input_length", n_in), ("output_length", n_out)):
        if not _int(length) or not 1 <= length <= MAX_TOKENS:
            return f"{name} must be an integer in [1, {MAX_TOKENS:,}], got {length!r}"
    if not isinstance(ids, list) or not all(_int(h) and 0 <= h < 2**64 for h in ids):
        return "hash_ids must be a list of integers in [0, 2^64)"
    blocks = len(ids) if hash_block_tokens is None else -(-n_in // hash_block_tokens)
    if len(ids) != blocks:
        return (f"{len(ids)} hash_ids for input_length {n_in}: expected {blocks} "
                f"(one per {hash_block_tokens}-token block)")
    return float(ts), n_in, n_out, ids


def _lines(path: str | os.PathLike[str], hash_block_tokens: int | None,
           time_scale: float = 1.0) -> Iterator[tuple[float, int, int, list[int]]]:
    """Every request line of the file, checked (see the module docstring)."""
    file = os.fspath(path)
    text = read_text_input(file, TraceError, what="JSONL")
    lines = text.splitlines()
    while lines and not lines[-1].strip():  # blank lines at the end: an editor's, not a missing request
        lines.pop()
    max_ms = INT64_MAX / 1e6 / time_scale
    previous = None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            raise TraceError("a blank line: JSONL holds one JSON object per line", file=file,
                             where=f"line {number}")
        parsed = _parse_line(line, hash_block_tokens)
        if isinstance(parsed, str):
            raise TraceError(parsed, file=file, where=f"line {number}")
        ts = parsed[0]
        if previous is not None and ts < previous:
            raise TraceError(f"timestamp {ts:g} is before the previous line's {previous:g}", file=file,
                             where=f"line {number}")
        if ts > max_ms:
            raise TraceError(f"timestamp {ts:g} ms (x time_scale {time_scale:g}) is beyond the latest arrival the "
                             f"simulator holds ({INT64_MAX:,} ns)", file=file, where=f"line {number}")
        previous = ts
        yield parsed
    if previous is None:
        raise TraceError(EMPTY_TRACE, file=file)


def summarize_mooncake(path: str | os.PathLike[str]) -> dict[str, Any]:
    """`archsim trace info` of a Mooncake trace: its requests, arrivals, lengths and prefix blocks."""
    rows = list(_lines(path, None))
    ids = [h for *_, hashes in rows for h in hashes]
    return {"path": os.fspath(path), "format": "mooncake", "records": len(rows),
            "first_timestamp_ms": rows[0][0], "last_timestamp_ms": rows[-1][0],
            "input_tokens": sum(r[1] for r in rows), "output_tokens": sum(r[2] for r in rows),
            "hash_ids": len(ids), "distinct_hash_ids": len(set(ids)), "file_bytes": Path(path).stat().st_size}


def read_mooncake(path: str | os.PathLike[str], *, block_tokens: int, hash_block_tokens: int = 512,
                  time_scale: float = 1.0) -> RequestTable:
    """A Mooncake JSONL trace as a RequestTable of B = `block_tokens` token blocks (see the module docstring)."""
    file = os.fspath(path)
    if block_tokens < 1 or hash_block_tokens < 1 or hash_block_tokens % block_tokens:
        raise ConfigError(f"KV blocks of {block_tokens} tokens must divide the trace's {hash_block_tokens}-token "
                          f"hash blocks", where="hash_block_tokens")
    if not time_scale > 0 or not math.isfinite(time_scale):
        raise ConfigError(f"must be a positive number, got {time_scale}", where="time_scale")
    stamps: list[float] = []
    inputs: list[int] = []
    outputs: list[int] = []
    hashes: list[int] = []
    hash_counts: list[int] = []
    for ts, n_in, n_out, ids in _lines(file, hash_block_tokens, time_scale):
        stamps.append(ts)
        inputs.append(n_in)
        outputs.append(n_out)
        hashes.extend(ids)
        hash_counts.append(len(ids))
    n = len(stamps)
    input_tokens = np.asarray(inputs, dtype=np.int64)
    hash_offsets = np.concatenate(([0], np.cumsum(hash_counts))).astype(np.int64)
    offsets, keys = _keys(input_tokens, np.asarray(hashes, dtype=np.uint64), hash_offsets, block_tokens,
                          hash_block_tokens)
    return RequestTable(np.asarray(stamps) * 1e6 * time_scale, np.full(n, -1, dtype=np.int64), np.zeros(n),
                        np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int32), input_tokens,
                        np.asarray(outputs, dtype=np.int64), offsets, keys, int(block_tokens))


def _keys(input_tokens: np.ndarray, hash_ids: np.ndarray, hash_offsets: np.ndarray, block_tokens: int,
          hash_block_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    offsets = block_offsets_for(input_tokens, block_tokens)
    req = np.repeat(np.arange(len(input_tokens), dtype=np.int64), np.diff(offsets))
    first_token = (np.arange(offsets[-1], dtype=np.int64) - offsets[req]) * block_tokens
    full = first_token + block_tokens <= input_tokens[req]
    holder = hash_ids[hash_offsets[req] + first_token // hash_block_tokens]
    keys = mix(mix(MOONCAKE_TAG, holder), (first_token % hash_block_tokens) // block_tokens)
    keys[~full] = partial_keys(req[~full])
    return offsets, keys


def _timestamps_ms(table: RequestTable) -> np.ndarray:
    """Arrivals in ms; a later turn at its prev's timestamp + think time (rows come after their prev)."""
    ms = table.arrival_ns / 1e6
    for i in np.flatnonzero(table.prev >= 0):
        ms[i] = ms[table.prev[i]] + table.think_ns[i] / 1e6
    return ms


def mooncake_jsonl(table: RequestTable) -> bytes:
    """The table as Mooncake JSONL with `hash_block_tokens` = table.block_tokens (see the module docstring)."""
    ms = np.rint(_timestamps_ms(table)).astype(np.int64)
    order = np.argsort(ms, kind="stable")
    # dense ids in order of first appearance in the written order
    keys = np.concatenate([table.keys(int(i)) for i in order]) if len(order) else np.zeros(0, np.uint64)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    dense = rank[inverse]
    lines = []
    at = 0
    for i in order:
        count = int(table.block_offsets[i + 1] - table.block_offsets[i])
        row = {"timestamp": int(ms[i]), "input_length": int(table.input_tokens[i]),
               "output_length": int(table.output_tokens[i]), "hash_ids": dense[at:at + count].tolist()}
        at += count
        lines.append(json.dumps(row))
    return ("\n".join(lines) + "\n").encode()


def write_mooncake(table: RequestTable, path: str | os.PathLike[str]) -> Path:
    """Write `mooncake_jsonl(table)` atomically (all or nothing)."""
    atomic_write_bytes(path, mooncake_jsonl(table))
    return Path(path)
