"""Comparison runs and their outputs: the `archsim.system/2` JSON tree, the side-by-side table and the plot.

The JSON's `results` list (one entry per system and context) is a stable contract: `system`, `context`,
`decode_step_ns`, `attention_ns`, `link_bytes`, `energy_pJ_per_token`, `bank_conflicts`, `row_hit_rate`
(null where a system has no such part, or for an infeasible point, whose `status` says why). No host
timings go into it, so the same inputs give byte-identical files.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from archsim.resources import display_path
from archsim.system.config import SystemConfig
from archsim.system.decode import StepResult, simulate_step
from archsim.system.workload import Workload

SCHEMA = "archsim.system/2"
CONTRACT = ("system", "context", "decode_step_ns", "attention_ns", "link_bytes", "energy_pJ_per_token",
            "bank_conflicts", "row_hit_rate")


DEFINITIONS = {
    "sram_hit_rate": "1 - (DRAM bytes the PNM unit's DMA brings into SRAM) / (KV bytes its datapath reads from SRAM, "
                     "one K or V element per QK / PV multiply-accumulate), counted by the timed PNM unit "
                     "(pnm_model timed; the roofline derives 1 - passes / group): ~0 for MHA decode, ~1 - 1/group "
                     "for GQA",
    "sram_reuse_factor": "KV bytes the datapath reads from SRAM per byte brought in (the query group for GQA)",
    "breakdown_ns": "critical: terms on the step's critical path, summing to decode_step_ns; overlapped: work "
                    "that runs under them",
    "pool_side_ns": "the pool's share of the step: queries + PNM + outputs, or the KV fetch (max of link and DRAM)",
}


def run_comparison(systems: Sequence[SystemConfig], workload: Workload,
                   contexts: Sequence[int] | None = None, quiet: bool = True) -> list[StepResult]:
    """Every system at every context; a progress bar of points on a terminal unless `quiet`."""
    from archsim.progress import progress_bar

    ctxs = tuple(contexts) if contexts else workload.contexts
    results = []
    with progress_bar(len(systems) * len(ctxs), "point", "simulate", quiet) as bar:
        for system in systems:
            for c in ctxs:
                results.append(simulate_step(system, workload, c))
                bar.update(1)
    return results


def _name(path: str | None) -> str | None:
    """Shipped files by their path in the repository, so that two checkouts give the same JSON."""
    return display_path(path) if path and path != "<mapping>" else path


def _system_summary(system: SystemConfig) -> dict[str, Any]:
    out: dict[str, Any] = {"name": system.name, "tier": system.tier, "description": system.description,
                           "file": _name(system.file), "attention": system.attention, "kv_location": system.kv_location,
                           "kv_endpoint": system.kv_endpoint, "gpus": system.gpus.count,
                           "interconnect": system.topology.description if system.topology else None,
                           "energy_table": _name(system.energy.file)}
    if system.pool is not None:
        pool = system.pool
        out["pool"] = {"memory": pool.memory.standard, "devices": pool.devices,
                       "stacks_per_device": pool.memory.organization.stacks, "channels": pool.channels,
                       "capacity_bytes": pool.capacity_bytes,
                       "pnm_units": pool.channels if pool.pnm else 0,
                       "pnm_model_requested": pool.pnm.model if pool.pnm else None,
                       "l2": pool.l2 is not None}
        s = system.sampling
        out["sampling"] = {"layers": s.layers, "channels": s.channels, "window_requests": s.window_requests,
                           "pnm_sample_tokens": list(s.pnm_sample_tokens)}
    return out


def result_tree(systems: Sequence[SystemConfig], workload: Workload, results: Sequence[StepResult]) -> dict[str, Any]:
    shape = workload.shape
    return {
        "schema": SCHEMA,
        "workload": {"name": workload.name, "model": shape.name, "layers": shape.num_layers, "dtype": workload.dtype,
                     "batch": workload.batch, "tensor_parallel": workload.tensor_parallel,
                     "instances": workload.instances, "decode_steps": workload.decode_steps,
                     "source": _name(workload.source)},
        "definitions": DEFINITIONS,
        "systems": [_system_summary(s) for s in systems],
        "results": [r.as_dict() for r in results],
    }


def _fmt(value: float | None, scale: float = 1.0, digits: int = 2) -> str:
    return "-" if value is None else f"{value / scale:,.{digits}f}"


def _tokens(n: int) -> str:
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


GPU_TERMS = ("gpu_weights", "allreduce", "epilogue")  # the GPUs' own non-attention work in `breakdown_ns`
HEADER = ("system", "ctx", "step ms", "Mcycles", "attn ms", "(hidden)", "tok/s", "GPU-link MB", "mJ/token",
          "bank confl", "row hit", "L2 hit", "SRAM hit", "QoS slowdn", "status")


def attention_split_ns(r: StepResult) -> tuple[float | None, float | None]:
    """Attention on the step's critical path (the critical terms other than the GPUs' non-attention kernels,
    their all-reduces and the epilogue)
    and the attention work hidden under other work (attention_ns minus that); None for an infeasible point."""
    if not r.ok or r.attention_ns is None:
        return None, None
    crit = sum(v for k, v in r.breakdown_ns["critical"].items() if k not in GPU_TERMS)
    hidden = r.attention_ns - crit
    return crit, hidden if hidden >= 1.0 else 0.0  # below 1 ns: rounding, not overlap


def table_rows(results: Sequence[StepResult]) -> list[tuple[str, ...]]:
    """One row per point; `attn ms` is attention on the critical path (the columns add up to `step ms` with the
    weights and epilogue), `(hidden)` the attention work overlapped with it (e.g. a prefetched KV fetch)."""
    rows = []
    for r in results:
        d = r.as_dict()
        attn_crit, attn_hidden = attention_split_ns(r)
        qos = "-"
        if d["qos"]:
            qos = "/".join(f"{k} {v:.2f}" for k, v in d["qos"]["slowdown"].items())
        rows.append((r.system, _tokens(r.context), _fmt(d["decode_step_ns"], 1e6, 3),
                     _fmt(d["decode_step_cycles"], 1e6, 2), _fmt(attn_crit, 1e6, 3),
                     "-" if not attn_hidden else f"({attn_hidden / 1e6:,.3f})",
                     _fmt(d["tokens_per_s"], 1, 0), _fmt(d["gpu_link_bytes"] if r.ok else None, 1e6, 1),
                     _fmt(d["energy_pJ_per_token"], 1e9, 1), _fmt(d["bank_conflicts"], 1, 0),
                     _fmt(d["row_hit_rate"], 0.01, 1), _fmt(d["l2_hit_rate"], 0.01, 1),
                     _fmt(d["sram_hit_rate"], 0.01, 1), qos, "ok" if r.ok else d["status"]))
    return rows


def render_table(results: Sequence[StepResult], title: str = "") -> str:
    rows = [HEADER, *table_rows(results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER) - 1)]
    lines = [title] if title else []
    for row in rows:
        cells = [c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row[:-1], widths, strict=True))]
        lines.append("  ".join(cells) + "  " + row[-1])
    return "\n".join(lines)


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINE_STYLES = ("-", "--", "-.", ":")
ALL_INFEASIBLE = "every point is infeasible: nothing to plot (each reason beside its hollow marker on the latency axes)"


def system_style(index: int) -> tuple[str, str]:
    """(marker, line style) of the index-th system: 32 distinct pairs, so overlapping lines stay apart."""
    return MARKERS[index % len(MARKERS)], LINE_STYLES[(index + index // len(MARKERS)) % len(LINE_STYLES)]


def context_axis(ax: Any, contexts: Sequence[int]) -> None:
    """A log-2 context axis ticked at the contexts run, labelled 4K/32K/128K rather than 2^12/2^15/2^17."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator

    ticks = sorted(set(contexts))
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FixedFormatter([_tokens(c) for c in ticks]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(ticks[0] / 1.6, ticks[-1] * 1.6)  # room for the end points' markers
    ax.set_xlabel("context (tokens per sequence)")


def _wrap(text: str, width: int = 34) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))


def _mark_infeasible(ax: Any, points: Sequence[tuple[int, str, str, str, int]], annotate: bool) -> None:
    """Infeasible points as hollow markers in a strip at the bottom of the axes (they have no y value), each
    annotated with its system and reason on the latency axes."""
    right = max((p[0] for p in points), default=0)
    for ctx, name, reason, color, index in points:
        marker, _ = system_style(index)
        level = 0.05 + 0.09 * [p[1] for p in points if p[0] == ctx].index(name)
        ax.plot([ctx], [level], transform=ax.get_xaxis_transform(), marker=marker, markersize=8,
                markerfacecolor="white", markeredgecolor=color, markeredgewidth=1.8, linestyle="none",
                gid=f"infeasible:{name}:{ctx}")
        if annotate:
            end = ctx == right  # the rightmost context's text runs leftwards, inside the axes
            ax.annotate(_wrap(f"{name} infeasible: {reason}"), xy=(ctx, level), xycoords=ax.get_xaxis_transform(),
                        xytext=(-8 if end else 8, 0), textcoords="offset points", fontsize=6.5, color=color,
                        ha="right" if end else "left", va="center")


def comparison_figure(results: Sequence[StepResult], title: str = "") -> Any:
    """Decode-step latency and energy per token against context, one (colour, marker, line style) per system;
    infeasible points marked and named; the legend outside the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter

    systems = list(dict.fromkeys(r.system for r in results))
    colors = plt.get_cmap("tab10").colors
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), layout="constrained")
    handles, infeasible = [], []
    for i, name in enumerate(systems):
        color, (marker, style) = colors[i % len(colors)], system_style(i)
        pts = [r for r in results if r.system == name and r.ok]
        for ax, value in zip(axes, (lambda r: r.decode_step_ns / 1e6, lambda r: r.energy_pJ_per_token / 1e9),
                             strict=True):
            if pts:
                ax.plot([r.context for r in pts], [value(r) for r in pts], color=color, marker=marker,
                        linestyle=style, markersize=7, label=name)
        infeasible += [(r.context, name, r.status.removeprefix("infeasible: "), color, i)
                       for r in results if r.system == name and not r.ok]
        handles.append(Line2D([], [], color=color, marker=marker, linestyle=style, label=name))
    if infeasible:
        handles.append(Line2D([], [], color="0.3", marker="o", markerfacecolor="white", linestyle="none",
                              label="infeasible (hollow, at the bottom; reason beside it)"))
    any_ok = any(r.ok for r in results)
    for k, (ax, label) in enumerate(zip(axes, ("decode step latency (ms)", "energy per token (mJ/token)"),
                                        strict=True)):
        context_axis(ax, [r.context for r in results] or [4096])
        ax.set_ylabel(label)
        if any_ok:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))  # 20, not 2 x 10^1
            ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: ""))
        else:
            ax.set_yticks([])
            ax.text(0.5, 0.55, _wrap(ALL_INFEASIBLE, 40), transform=ax.transAxes, ha="center", va="center",
                    fontsize=11, color="firebrick", gid="all-infeasible")
        ax.grid(True, which="both", alpha=0.3)
        _mark_infeasible(ax, infeasible, annotate=k == 0)
    fig.legend(handles=handles, loc="outside right upper", fontsize=8, title="system")
    if title:
        fig.suptitle(title)
    return fig


def breakdown_figure(results: Sequence[dict[str, Any]]) -> Any:
    """Per (system, context) of an archsim.system tree's `results`: the decode step's critical-path terms
    stacked (ms; they sum to decode_step_ns) and the energy per token stacked by component family (mJ/token);
    an infeasible point is named with its reason where its bars would be."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from archsim.serving.plots import energy_groups, stacked_bars

    rows = [{"system": f"{r['system']} @ {_tokens(int(r['context']))}", "status": r["status"],
             "step": {k: v / 1e6 for k, v in ((r.get("breakdown_ns") or {}).get("critical") or {}).items()},
             "energy": {k: v / 1e9 for k, v in energy_groups(r.get("energy_breakdown_pJ_per_token") or {}).items()}}
            for r in results]
    terms = list(dict.fromkeys(k for row in rows for k in row["step"]))
    groups = sorted({k for row in rows for k in row["energy"]})
    fig, (step_ax, energy_ax) = plt.subplots(1, 2, figsize=(13, 1.2 + 0.45 * max(len(rows), 2)), layout="constrained")
    stacked_bars(step_ax, rows, lambda e: e["step"], terms, {}, "decode step, critical path (ms)")
    stacked_bars(energy_ax, rows, lambda e: e["energy"], groups, {}, "energy per token (mJ/token)")
    step_ax.set_ylabel("system @ context")
    energy_ax.set_ylabel("system @ context")
    return fig


_NO_STAMP = {".png": {"Software": None}, ".svg": {"Date": None}, ".pdf": {"CreationDate": None}}  # same bytes each run


def save_figure(fig: Any, path: str | Path) -> None:
    """Save and close `fig`; atomic: a reader sees the old plot or the new one."""
    import matplotlib
    import matplotlib.pyplot as plt

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp{target.suffix}")
    with matplotlib.rc_context({"svg.hashsalt": "archsim"}):  # SVG ids from a fixed salt, not a random one
        fig.savefig(tmp, dpi=120, metadata=_NO_STAMP.get(target.suffix.lower()))
    plt.close(fig)
    tmp.replace(target)


def plot(results: Sequence[StepResult], path: str | Path, title: str = "") -> None:
    """The comparison figure (see `comparison_figure`) written to `path`."""
    save_figure(comparison_figure(results, title), path)
