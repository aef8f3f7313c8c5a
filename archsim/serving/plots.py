"""The `archsim serve --plot` figure: per system, the TTFT and TPOT distributions (empirical CDFs over the
measured requests, from the run's per-request arrays), the mean request time stacked as queueing, KV load,
prefill and decode (`breakdown_ms`), and the energy per output token stacked by component family
(`energy_breakdown_mJ_per_token`, grouped by the part before the first dot: dram, gpu, link, pnm, ...).

Each system keeps the comparison plot's (colour, marker, line style); a system that could not serve is named
with its reason where its bars would be; every legend sits outside the axes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from archsim.serving.metrics import measured_requests

PHASES = ("queueing", "kv_load", "prefill", "decode")
PHASE_LABELS = {"queueing": "queueing", "kv_load": "KV load", "prefill": "prefill", "decode": "decode"}
NONE_SERVED = "no system served a request: nothing to plot"


def request_latencies_ns(result: Any, warmup_requests: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """TTFT and TPOT (ns) of the measured requests, defined as in archsim.serving.metrics."""
    ids = measured_requests(result, warmup_requests)
    first, last, out = result.first_token_ns[ids], result.last_token_ns[ids], result.output_tokens[ids]
    several = out > 1
    return first - result.arrival_ns[ids], (last[several] - first[several]) / (out[several] - 1)


def cdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted values and the fraction of samples at or below each (the empirical CDF's steps)."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    return x, np.arange(1, len(x) + 1) / len(x)


def energy_groups(breakdown: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in sorted(breakdown.items()):
        group = key.split(".", 1)[0]
        out[group] = out.get(group, 0.0) + float(value)
    return out


def _num(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _cdf_axes(ax: Any, series: Sequence[tuple[str, np.ndarray]], styles: dict, label: str) -> None:
    from matplotlib.ticker import FuncFormatter

    for k, (name, values_ns) in enumerate(series):
        if len(values_ns):
            x, y = cdf(values_ns / 1e6)
            color, marker, style = styles[name]
            ax.step(x, y, where="post", color=color, linestyle=style, label=name, gid=f"cdf:{name}")
            every = max(len(x) // 8, 1)  # a few markers, staggered per system, tell overlapping lines apart
            start = (k * every) // max(len(series), 1)
            ax.plot(x[start::every], y[start::every], color=color, marker=marker, linestyle="none")
    values = [v for _, v in series if len(v)]
    low, high = (min(v.min() for v in values), max(v.max() for v in values)) if values else (0, 0)
    if low > 0 and high / low > 20:  # a log axis only where the spread needs one
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: ""))
    ax.set_xlabel(f"{label} (ms)")
    ax.set_ylabel("fraction of measured requests")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="both", alpha=0.3)


def _percentile_points(ax: Any, entries: Sequence[dict], key: str, styles: dict) -> None:
    label = {"ttft_ms": "time to first token, TTFT", "tpot_ms": "time per output token, TPOT"}[key]
    for e in entries:
        dist = e.get(key) or {}
        points = [(dist[f"p{p}"], p / 100) for p in (50, 90, 99) if dist.get(f"p{p}") is not None]
        if points:
            color, marker, style = styles[e["system"]]
            ax.plot(*zip(*points, strict=True), color=color, marker=marker, linestyle=style, label=e["system"],
                    gid=f"cdf:{e['system']}")
    ax.set_xlabel(f"{label} (ms); points: p50, p90, p99")
    ax.set_ylabel("fraction of measured requests")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="both", alpha=0.3)


def stacked_bars(ax: Any, entries: Sequence[dict], parts_of: Any, part_names: Sequence[str],
                  labels: dict[str, str], xlabel: str) -> None:
    from matplotlib.pyplot import get_cmap

    names = [e["system"] for e in entries]
    colors = get_cmap("Set2").colors
    left = np.zeros(len(entries))
    for k, part in enumerate(part_names):
        widths = np.array([(parts_of(e) or {}).get(part) or 0.0 for e in entries])
        ax.barh(range(len(entries)), widths, left=left, color=colors[k % len(colors)], edgecolor="0.2",
                linewidth=0.4, label=labels.get(part, part), gid=f"bar:{part}")
        left += widths
    for i, e in enumerate(entries):
        parts = parts_of(e) or {}
        if e["status"] == "ok" and left[i] > 0:  # the values, since a small part is a thin sliver
            text = " + ".join(f"{labels.get(p, p)} {_num(parts.get(p) or 0)}" for p in part_names if parts.get(p))
            ax.annotate(text, xy=(0, i), xycoords=("axes fraction", "data"), xytext=(4, -12),
                        textcoords="offset points", va="center", fontsize=6.5, color="0.1", gid=f"values:{i}")
        if e["status"] != "ok":
            ax.annotate(e["status"], xy=(0, i), xycoords=("axes fraction", "data"), xytext=(4, 0),
                        textcoords="offset points", va="center", fontsize=7, color="firebrick")
    ax.set_yticks(range(len(entries)), names, fontsize=8)
    ax.invert_yaxis()  # systems top to bottom in command-line order
    ax.set_xlabel(xlabel)
    ax.set_ylabel("system")
    ax.grid(True, axis="x", alpha=0.3)
    if part_names:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, borderaxespad=0)


def serving_figure(runs: Sequence[Any] | None, entries: Sequence[dict], title: str = "",
                   warmup_requests: int = 0) -> Any:
    """The four panels (see the module docstring); `runs` are `archsim.serving.run.SystemRun`s, `entries`
    their `archsim.serving/1` entries, in the same order; without runs (a JSON file alone) the CDF panels show
    the points the entries hold (p50, p90, p99)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from archsim.system.report import system_style

    colors = plt.get_cmap("tab10").colors
    styles = {e["system"]: (colors[i % len(colors)], *system_style(i)) for i, e in enumerate(entries)}
    fig, axes = plt.subplots(2, 2, figsize=(14, 9), layout="constrained")
    (ttft_ax, tpot_ax), (time_ax, energy_ax) = axes
    if runs is None:  # an archsim.serving/1 file alone: the CDF at the percentiles it holds
        for ax, key in ((ttft_ax, "ttft_ms"), (tpot_ax, "tpot_ms")):
            _percentile_points(ax, entries, key, styles)
        served_any = any((e.get("requests_completed") or 0) > 0 for e in entries)
    else:
        served = [(run.system.name, *request_latencies_ns(run.result, warmup_requests))
                  for run in runs if run.result is not None]
        _cdf_axes(ttft_ax, [(n, t) for n, t, _ in served], styles, "time to first token, TTFT")
        _cdf_axes(tpot_ax, [(n, p) for n, _, p in served], styles, "time per output token, TPOT")
        served_any = any(len(t) for _, t, _ in served)
    ttft_ax.set_title("TTFT distribution", fontsize=10)
    tpot_ax.set_title("TPOT distribution", fontsize=10)
    stacked_bars(time_ax, entries, lambda e: e.get("breakdown_ms"), PHASES, PHASE_LABELS,
                  "mean request time (ms): queueing + KV load + prefill = TTFT")
    time_ax.set_title("where a request's time goes", fontsize=10)
    groups = sorted({g for e in entries for g in energy_groups(e.get("energy_breakdown_mJ_per_token") or {})})
    stacked_bars(energy_ax, entries, lambda e: energy_groups(e.get("energy_breakdown_mJ_per_token") or {}),
                  groups, {}, "energy per output token (mJ/token)")
    energy_ax.set_title("energy by component", fontsize=10)
    if not served_any:
        for ax in axes.flat:
            ax.text(0.5, 0.5, NONE_SERVED, transform=ax.transAxes, ha="center", va="center", fontsize=11,
                    color="firebrick", gid="none-served")
    handles = [Line2D([], [], color=c, marker=m, linestyle=s, label=name + ("" if e["status"] == "ok"
                                                                         else " (infeasible)"))
               for e, (name, (c, m, s)) in zip(entries, styles.items(), strict=True)]
    fig.legend(handles=handles, loc="outside right upper", fontsize=8, title="system")
    if title:
        fig.suptitle(title)
    return fig


def plot(runs: Sequence[Any], entries: Sequence[dict], path: str | Path, title: str = "",
         warmup_requests: int = 0) -> None:
    from archsim.system.report import save_figure

    save_figure(serving_figure(runs, entries, title, warmup_requests), path)
