"""Writing results: deterministic JSON written atomically, and plain-text tables for the terminal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from archsim.trace.native import atomic_write_bytes


def dumps_json(tree: dict[str, Any]) -> str:
    """Sorted keys and fixed separators: the same tree always gives the same bytes."""
    return json.dumps(tree, indent=2, sort_keys=True) + "\n"


def write_json(path: str | Path, tree: dict[str, Any]) -> None:
    text = dumps_json(tree).encode()
    atomic_write_bytes(path, lambda handle: handle.write(text), suffix=".json")


def table(rows: list[tuple[str, str]], title: str | None = None) -> str:
    width = max(len(name) for name, _ in rows)
    lines = [title] if title else []
    lines += [f"  {name.ljust(width)}  {value}" for name, value in rows]
    return "\n".join(lines)


def memory_summary_rows(stats: dict[str, Any]) -> list[tuple[str, str]]:
    sim, mem = stats["sim"], stats["memory"]
    lat, lat_ns = mem["read_latency_cycles"], mem["read_latency_ns"]
    cmds = mem["commands"]
    return [
        ("requests", f"{sim['requests']:,} ({mem['reads']:,} reads, {mem['writes']:,} writes)"),
        ("simulated time", f"{sim['cycles']:,} cycles = {sim['time_ns'] / 1000:,.3f} us"),
        ("bandwidth", f"{mem['bandwidth_GBps']:,.2f} GB/s of {mem['peak_bandwidth_GBps']:,.1f} GB/s peak "
                      f"({100 * mem['bandwidth_utilization']:.1f} %)"),
        ("read latency", f"mean {lat['mean']:.1f} / p50 {lat['p50']:.0f} / p99 {lat['p99']:.0f} cycles "
                         f"({lat_ns['mean']:.1f} / {lat_ns['p50']:.1f} / {lat_ns['p99']:.1f} ns)"),
        ("row buffer", f"{mem['row_hits']:,} hits, {mem['row_misses']:,} misses, {mem['row_conflicts']:,} "
                       f"conflicts (hit rate {100 * mem['row_hit_rate']:.1f} %)"),
        ("bank conflicts", f"{mem['bank_conflicts']:,} requests"),
        ("commands", ", ".join(f"{k} {v:,}" for k, v in cmds.items() if v)),
        ("simulator speed", f"{sim['requests_per_s'] / 1e6:.2f} M requests/s "
                            f"(loop {sim['wall_s']:.2f} s, JIT {sim['compile_s']:.2f} s)"),
    ]
