"""The `archsim serve --rates ... --plot` figure: per system, against the offered load (session arrivals per
second), the throughput it delivered (output tokens per second, and goodput under the scenario's SLOs) and
its latency (TTFT and TPOT at p50 and p99, on a log axis where they spread over more than 20x). A system
saturates where its throughput stops following the offered load and its TTFT climbs.

Each system keeps one (colour, marker, line style) across the panels; a rate at which a system could not
serve is a hollow marker on the throughput axis's floor, named with its reason; the legend sits outside the
axes; a run where no system served at any rate says so in every panel."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

NONE_SERVED = "no system served at any rate: nothing to plot"


def _series(entries: Sequence[dict], system: str, key: str, stat: str | None = None) -> tuple[list, list]:
    """(rates, values) of one system's served points; `stat` picks p50/p99 of a distribution key."""
    xs, ys = [], []
    for e in entries:
        if e["system"] != system or e["status"] != "ok":
            continue
        value = e.get(key)
        if stat is not None:
            value = (value or {}).get(stat)
        if value is not None and value > 0:
            xs.append(e["rate_per_s"])
            ys.append(value)
    return xs, ys


def _mark_infeasible(ax: Any, entries: Sequence[dict], system: str, style: tuple[str, str, str]) -> None:
    color, marker, _ = style
    for e in entries:
        if e["system"] == system and e["status"] != "ok":
            x = e["rate_per_s"]
            ax.plot([x], [0], marker=marker, markerfacecolor="none", color=color, linestyle="none",
                    clip_on=False, gid=f"infeasible:{system}:{x:g}")
            ax.annotate(f"{system}: {e['status']}", xy=(x, 0), xytext=(3, 6), textcoords="offset points",
                        fontsize=6.5, color="firebrick", rotation=20, gid=f"reason:{system}:{x:g}")


def load_figure(entries: Sequence[dict], rates: Sequence[float], title: str = "") -> Any:
    """The four panels (see the module docstring) from `archsim.serving/1` entries that carry `rate_per_s`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    from archsim.system.report import system_style

    systems = list(dict.fromkeys(e["system"] for e in entries))
    colors = plt.get_cmap("tab10").colors
    styles = {name: (colors[i % len(colors)], *system_style(i)) for i, name in enumerate(systems)}
    fig, axes = plt.subplots(2, 2, figsize=(14, 9), layout="constrained")
    (tput_ax, good_ax), (ttft_ax, tpot_ax) = axes
    panels = ((tput_ax, "throughput_tokens_per_s", None, "output tokens/s", "throughput"),
              (good_ax, "goodput_requests_per_s", None, "requests/s within the SLOs", "goodput"),
              (ttft_ax, "ttft_ms", "p99", "TTFT (ms), p99 solid, p50 thin", "time to first token"),
              (tpot_ax, "tpot_ms", "p99", "TPOT (ms), p99 solid, p50 thin", "time per output token"))
    for ax, key, stat, ylabel, name in panels:
        for system in systems:
            color, marker, style = styles[system]
            ax.plot(*_series(entries, system, key, stat), color=color, marker=marker, linestyle=style,
                    label=system, gid=f"{key}:{system}")
            if stat is not None:
                ax.plot(*_series(entries, system, key, "p50"), color=color, marker=marker, linestyle=style,
                        linewidth=0.7, markersize=3, alpha=0.7, gid=f"{key}.p50:{system}")
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(FixedLocator(sorted(rates)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("offered load (session arrivals/s)")
        ax.set_ylabel(ylabel)
        ax.set_title(name, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ys = [y for line in ax.get_lines() for y in line.get_ydata() if y > 0]
        if stat is not None and ys and max(ys) / min(ys) > 20:  # a log axis only where the spread needs one
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
            ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: ""))
    for system in systems:
        _mark_infeasible(tput_ax, entries, system, styles[system])
    tput_ax.set_ylim(bottom=0)
    good_ax.set_ylim(bottom=0)
    if not any(e["status"] == "ok" for e in entries):
        for ax in axes.flat:
            ax.text(0.5, 0.5, NONE_SERVED, transform=ax.transAxes, ha="center", va="center", fontsize=11,
                    color="firebrick", gid="none-served")
    handles = [ax_line for ax_line in tput_ax.get_lines() if ax_line.get_gid().startswith("throughput_tokens")]
    fig.legend(handles=handles, loc="outside right upper", fontsize=8, title="system")
    if title:
        fig.suptitle(title)
    return fig


def plot_load(entries: Sequence[dict], rates: Sequence[float], path: str | Path, title: str = "") -> None:
    from archsim.system.report import save_figure

    save_figure(load_figure(entries, rates, title), path)


__all__ = ["load_figure", "plot_load", "NONE_SERVED"]
