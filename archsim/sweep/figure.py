"""`archsim report` figures of a sweep's `--out` directory, read from its store (points.sqlite, opened
read-only): per axis with two values or more, each result series' median over the other axes at each value of
that axis. A series is what every point's tree holds: `decode_step_ns` per system and context for
`archsim.system` points, p99 TTFT and output tokens per second per system for `archsim.serving` points.
Points that are not `ok` are counted in the title."""

from __future__ import annotations

import json
import sqlite3
import statistics
from pathlib import Path
from typing import Any

from archsim.errors import ConfigError
from archsim.sweep.store import STORE_NAME

MAX_AXES = 8


def is_sweep_dir(path: Path) -> bool:
    return (path / STORE_NAME).is_file()


def read_points(out_dir: Path) -> list[dict[str, Any]]:
    """The store's rows (point, status, result tree), in key order."""
    try:
        conn = sqlite3.connect(f"file:{out_dir / STORE_NAME}?mode=ro", uri=True)
        try:
            rows = conn.execute("SELECT key, point, status, result FROM points ORDER BY key").fetchall()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise ConfigError(f"unreadable sweep store: {exc}", file=str(out_dir / STORE_NAME)) from None
    return [{"point": json.loads(p), "status": s, "result": None if r is None else json.loads(r)}
            for _, p, s, r in rows]


def series_of(tree: dict[str, Any]) -> dict[str, tuple[float, str]]:
    """(value, unit) of each headline series of one point's result tree."""
    out: dict[str, tuple[float, str]] = {}
    schema = str(tree.get("schema", ""))
    for e in tree.get("results", []):
        if e.get("status") != "ok":
            continue
        if schema.startswith("archsim.system/") and e.get("decode_step_ns") is not None:
            out[f"{e['system']} @ {e['context'] // 1024}K: decode step"] = (e["decode_step_ns"] / 1e6, "ms")
        elif schema.startswith("archsim.serving/"):
            if (e.get("ttft_ms") or {}).get("p99") is not None:
                out[f"{e['system']}: p99 TTFT"] = (e["ttft_ms"]["p99"], "ms")
            if e.get("throughput_tokens_per_s") is not None:
                out[f"{e['system']}: throughput"] = (e["throughput_tokens_per_s"], "tokens/s")
    return out


def sweep_figures(out_dir: Path) -> list[tuple[str, Any]]:
    import matplotlib

    matplotlib.use("Agg")
    points = read_points(out_dir)
    if not points:
        raise ConfigError("the sweep store holds no points yet", file=str(out_dir / STORE_NAME))
    ok = [p for p in points if p["status"] == "ok" and p["result"] is not None]
    values: dict[str, list] = {}
    for p in points:
        for key, value in p["point"].items():
            if value not in values.setdefault(key, []):
                values[key].append(value)
    axes = [k for k, vs in values.items() if len(vs) > 1][:MAX_AXES]
    counts = f"{len(ok)} of {len(points)} points ok"
    return [(f"{out_dir.name}: {key}", _axis_figure(key, values[key], ok, counts)) for key in axes]


def _axis_figure(key: str, axis_values: list, ok: list[dict[str, Any]], counts: str) -> Any:
    import matplotlib.pyplot as plt

    from archsim.system.report import system_style  # lazily, as a command would

    order = sorted(axis_values, key=lambda v: (isinstance(v, str), v))
    by_unit: dict[str, dict[str, dict[int, list[float]]]] = {}
    for p in ok:
        x = order.index(p["point"][key])
        for name, (value, unit) in series_of(p["result"]).items():
            by_unit.setdefault(unit, {}).setdefault(name, {}).setdefault(x, []).append(value)
    units = sorted(by_unit) or ["-"]
    fig, axs = plt.subplots(1, len(units), figsize=(7 * len(units), 4.6), layout="constrained", squeeze=False)
    for ax, unit in zip(axs[0], units, strict=True):
        for k, (name, per_x) in enumerate(sorted(by_unit.get(unit, {}).items())):
            marker, style = system_style(k)
            xs = sorted(per_x)
            ax.plot(xs, [statistics.median(per_x[x]) for x in xs], marker=marker, linestyle=style, label=name,
                    gid=f"series:{name}")
        ax.set_xticks(range(len(order)), [str(v) for v in order], fontsize=8)
        ax.set_xlabel(key)
        ax.set_ylabel(f"median over the other axes ({unit})")
        ax.grid(True, alpha=0.3)
        if not ax.has_data():
            ax.text(0.5, 0.5, "no point of this sweep is ok: nothing to plot", transform=ax.transAxes,
                    ha="center", va="center", color="firebrick", gid="none-ok")
        else:
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, borderaxespad=0)
    fig.suptitle(f"sweep: results against {key} ({counts})", fontsize=10)
    return fig


__all__ = ["sweep_figures", "is_sweep_dir", "read_points", "series_of"]
