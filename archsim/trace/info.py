"""Summaries of trace files for `archsim trace info` (computed from the data, which is verified): logical traces,
physical traces in every format `replay` reads, and Mooncake request traces (JSONL)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from archsim.errors import TraceError
from archsim.inputs import check_input
from archsim.trace.logical import KINDS, OP_READ, OP_WRITE, PHASES, LogicalTrace, is_logical_trace
from archsim.trace.text_formats import is_request_trace


def summarize_logical(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Totals of a logical trace. Stable keys: steps, records, bytes.<kind>.{read,written}."""
    with LogicalTrace(path) as trace:
        header = trace.header
        by_kind_op = np.zeros((len(KINDS), 2), dtype=np.int64)
        phase_of_step: dict[int, int] = {}
        records = 0
        layers: set[int] = set()
        requests: set[int] = set()
        for chunk in trace.chunks(["step", "phase", "op", "kind", "layer", "bytes", "request"]):
            records += len(chunk["step"])
            np.add.at(
                by_kind_op, (chunk["kind"].astype(np.intp), chunk["op"].astype(np.intp)), chunk["bytes"]
            )
            steps, first = np.unique(chunk["step"], return_index=True)
            phase_of_step.update(zip(steps.tolist(), chunk["phase"][first].tolist(), strict=True))
            layers.update(np.unique(chunk["layer"]).tolist())
            requests.update(np.unique(chunk["request"]).tolist())
        if records != trace.records:
            raise TraceError(f"manifest says {trace.records} records, chunks hold {records}", file=str(path))
        model = header.get("model", {})
        return {
            "path": str(path),
            "format": "logical",
            "schema": header["schema"],
            "version": header["version"],
            "source": header.get("source"),
            "model": model.get("name"),
            "dtype": header.get("dtype"),
            "steps": len(phase_of_step),
            "records": records,
            "phases": {
                name: sum(1 for p in phase_of_step.values() if p == code) for code, name in enumerate(PHASES)
            },
            "layers": len(layers - {-1}),
            "requests": len(requests - {-1}),
            "operators": len(trace.operators),
            "shapes": header.get("shapes", {}),
            "bytes": {
                kind: {"read": int(by_kind_op[k, OP_READ]), "written": int(by_kind_op[k, OP_WRITE])}
                for k, kind in enumerate(KINDS)
            },
            "created_by": header.get("created_by", {}),
            "file_bytes": Path(path).stat().st_size,
        }


def summarize_physical(path: str | os.PathLike[str], file_format: str = "npz") -> dict[str, Any]:
    """Totals of a physical (address-level) trace: archsim's native .npz, DRAMSim3 or Ramulator 2 text."""
    from archsim.trace.text_formats import read_trace

    physical = read_trace(path, file_format)
    writes = int(np.count_nonzero(physical.is_write))
    return {
        "path": str(path),
        "format": "physical",
        "file_format": file_format,
        "records": len(physical),
        "reads": len(physical) - writes,
        "writes": writes,
        "sources": {name: int(count) for name, count in
                    zip(physical.sources, np.bincount(physical.source, minlength=len(physical.sources)), strict=True)},
        "last_timestamp_cycles": int(physical.timestamp_cycles.max()) if len(physical) else 0,
        "metadata": physical.header,
        "file_bytes": Path(path).stat().st_size,
    }


def summarize(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Summary of any trace archsim reads: logical, or physical in any format (told apart as --format auto)."""
    from archsim.trace.text_formats import detect_format

    check_input(path, TraceError)
    if is_logical_trace(path):
        return summarize_logical(path)
    if is_request_trace(path):
        from archsim.serving.mooncake import summarize_mooncake

        return summarize_mooncake(path)
    return summarize_physical(path, detect_format(path))


def _size(value: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value} B"


def format_summary(summary: dict[str, Any]) -> str:
    """Human-readable text of `summarize`'s result."""
    if summary["format"] == "mooncake":
        return (f"{summary['path']}: request trace (Mooncake JSONL), {summary['records']:,} requests over "
                f"{summary['first_timestamp_ms']:g}-{summary['last_timestamp_ms']:g} ms; {summary['input_tokens']:,} "
                f"prompt and {summary['output_tokens']:,} output tokens; {summary['distinct_hash_ids']:,} distinct "
                f"of {summary['hash_ids']:,} prefix blocks")
    if summary["format"] == "physical":
        lines = [
            f"{summary['path']}: physical trace ({summary['file_format']}), {summary['records']:,} requests "
            f"({summary['reads']:,} reads, {summary['writes']:,} writes; "
            + ", ".join(f"{name} {count:,}" for name, count in summary["sources"].items()) + ")"
        ]
        return "\n".join(lines)
    phases = ", ".join(f"{n} {name}" for name, n in summary["phases"].items())
    lines = [
        f"{summary['path']}: logical trace v{summary['version']} ({summary['source']}), "
        f"{_size(summary['file_bytes'])}",
        f"  model     {summary['model']}  dtype {summary['dtype']}  layers {summary['layers']}  "
        f"requests {summary['requests']}",
        f"  steps     {summary['steps']} ({phases})",
        f"  records   {summary['records']:,}  operators {summary['operators']}",
        f"  {'kind':<10}{'read':>16}{'written':>16}",
    ]
    for kind, totals in summary["bytes"].items():
        lines.append(f"  {kind:<10}{_size(totals['read']):>16}{_size(totals['written']):>16}")
    return "\n".join(lines)
