"""Physical traces of several hosts merged into one trace of a shared memory (`archsim trace merge`).

Each input is one host's trace (archsim .npz, DRAMSim3 or Ramulator 2 text): its host requests become that
host's port (`host0`, `host1`, ... or the names given), its PNM requests the shared `pnm` port. The output is a
version-2 .npz whose header names the ports (archsim/trace/native.py), its requests in timestamp order; requests
with equal timestamps keep the inputs' order, then each input's own. It streams: each input is read batch by
batch, and only what the next merged batch needs is held.

A batch of input k can be written up to the frontier f, the smallest last timestamp any unfinished input holds:
everything before f, and the requests at f of the inputs up to the first one that may still have more at f
(an input's later requests are never earlier, and ties go by input order). That input is read further next.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from archsim.config.memory import is_port_name
from archsim.errors import TraceError
from archsim.trace.native import MAX_SOURCES
from archsim.trace.stream import Batch, RequestSource


def merged_sources(inputs: Sequence[RequestSource], names: Sequence[str], files: Sequence[str]) -> tuple[str, ...]:
    """The merged trace's ports: the hosts' names, then `pnm` if any input has PNM requests. Each input must be
    one host's (its table: host and pnm, or one host<k> and pnm)."""
    for source, file in zip(inputs, files, strict=True):
        hosts = [p for p in source.ports if source.sources[p] != "pnm"]
        if len(hosts) > 1:
            raise TraceError(f"the trace has {len(hosts)} hosts ({', '.join(source.sources[p] for p in hosts)}); "
                             f"merge takes one host's trace per input", file=file)
    pnm = any("pnm" in (source.sources[p] for p in source.ports) for source in inputs)
    return (*names, "pnm") if pnm else tuple(names)


def host_names(count: int, names: str | None) -> tuple[str, ...]:
    """`--names host0,host1,...` checked (port names, distinct, as many as inputs); by default host0..host<n-1>."""
    if count > MAX_SOURCES - 1:  # every input is a host; the PNM port is the last one a trace holds
        raise TraceError(f"{count} traces are {count} hosts; a trace holds at most {MAX_SOURCES - 1} hosts and the "
                         "PNM", where="PATHS")
    if names is None:
        return tuple(f"host{k}" for k in range(count))
    parts = tuple(p.strip() for p in names.split(","))
    bad = [p for p in parts if not is_port_name(p) or p == "pnm"]
    if bad:
        raise TraceError(f"{bad[0]!r} is not a host's port name (host, host0, host1, ...)", where="--names")
    if len(set(parts)) != len(parts):
        raise TraceError("a host is named twice", where="--names")
    if len(parts) != count:
        raise TraceError(f"{len(parts)} names for {count} input traces", where="--names")
    return parts


def merge_batches(inputs: Sequence[RequestSource], sources: tuple[str, ...]) -> Iterator[tuple[np.ndarray, ...]]:
    """The inputs' requests in merged order (module docstring) as (timestamps, addresses, writes?, ports) batches,
    each input's host requests on port k (its index) and its PNM requests on `sources`' pnm."""
    streams = [source.open() for source in inputs]
    remap = [_port_map(source, k, sources) for k, source in enumerate(inputs)]
    held: list[list[Batch]] = [[] for _ in inputs]
    done = [False] * len(inputs)
    while True:
        for k in range(len(inputs)):
            while not done[k] and not held[k]:
                batch = next(streams[k], None)
                if batch is None:
                    done[k] = True
                elif len(batch):
                    held[k].append(batch)
        if not any(held):
            return
        yield _emit(held, done, remap)


def _port_map(source: RequestSource, k: int, sources: tuple[str, ...]) -> np.ndarray:
    """Input k's port index -> the merged trace's: its host to port k, its pnm to the merged pnm."""
    out = np.full(max(len(source.sources), 1), k, dtype=np.uint8)
    if "pnm" in source.sources:
        out[source.sources.index("pnm")] = sources.index("pnm") if "pnm" in sources else k
    return out


def _emit(held: list[list[Batch]], done: list[bool], remap: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    """The requests the frontier lets go, in merged order; the rest stay held (see the module docstring)."""
    open_lasts = [int(held[k][-1].timestamp_cycles[-1]) for k in range(len(held)) if held[k] and not done[k]]
    frontier = min(open_lasts) if open_lasts else None
    first_open = next((k for k in range(len(held)) if held[k] and not done[k]
                       and int(held[k][-1].timestamp_cycles[-1]) == frontier), len(held))
    parts = []
    for k, batches in enumerate(held):
        if not batches:
            continue
        merged = batches[0] if len(batches) == 1 else Batch(*(np.concatenate([getattr(b, f) for b in batches])
                                                              for f in ("position", "timestamp_cycles", "address",
                                                                        "is_write", "source")))
        ts = merged.timestamp_cycles
        go = np.ones(len(merged), dtype=bool) if frontier is None else (ts < frontier) | (
            (ts == frontier) & (k <= first_open))
        cut = int(np.count_nonzero(go))  # a prefix: an input's timestamps do not decrease
        if cut:
            part = merged.select(slice(0, cut))
            parts.append((part.timestamp_cycles, np.full(cut, k, dtype=np.int64), part.position, part.address,
                          part.is_write, remap[k][part.source]))
        held[k] = [merged.select(slice(cut, None))] if cut < len(merged) else []
    ts, which, position, address, is_write, port = (np.concatenate(c) for c in zip(*parts, strict=True))
    order = np.lexsort((position, which, ts))
    return ts[order], address[order], is_write[order], port[order]
