"""`archsim report INPUT... -o report.html`: one self-contained HTML file of the inputs' plots.

An INPUT is an `archsim.system` (compare/simulate), `archsim.serving` (serve), `archsim.plan` (plan),
`archsim.gpu` (gpu predict) or `archsim.stats` (replay) JSON, or a directory: a sweep's `--out` (its store's
points, archsim/sweep/figure.py) or any directory whose `*.json` files of those schemas are read in name
order. Every plot is
an inline `<svg>` in a `<div class="plot" id=...>` placed at a fixed position and size, so the page has no
external reference (no http(s)://, no src) and the plots' boxes are known without a browser: the report
carries them as JSON in `<script type="application/json" id="plot-boxes">` (CSS pixels, page coordinates).
"""

from __future__ import annotations

import html
import io
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from archsim.errors import ConfigError
from archsim.inputs import read_json_input
from archsim.report.inputs import check_input_tree

PAGE_WIDTH_PX = 1200
MARGIN_PX = 24
HEADING_PX = 40
SWEEP_DIR = "archsim.sweep-dir"  # read_inputs' stand-in tree for a sweep's --out directory
SUPPORTED = ("archsim.system/", "archsim.serving/", "archsim.stats/", "archsim.plan/", "archsim.gpu/")


@dataclass
class Plot:
    id: str
    title: str
    svg: str
    width_px: int
    height_px: int


def read_inputs(paths: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
    """(file, tree) per input JSON; a directory gives its *.json files of a supported schema."""
    out = []
    for text in paths:
        path = Path(text)
        if path.is_dir() and (path / "points.sqlite").is_file():  # a sweep's --out: plotted from its store
            out.append((text, {"schema": SWEEP_DIR, "path": text}))
        elif path.is_dir():
            found = [(str(p), _load(p)) for p in sorted(path.glob("*.json"))]
            found = [(f, t) for f, t in found if str(t.get("schema", "")).startswith(SUPPORTED)]
            if not found:
                raise ConfigError(f"no {', '.join(s + '*' for s in SUPPORTED)} JSON in this directory", file=text)
            out += found
        else:
            tree = _load(path)
            if not str(tree.get("schema", "")).startswith(SUPPORTED):
                raise ConfigError(f"schema {tree.get('schema')!r} has no report plots (supported: "
                                  f"{', '.join(s + '*' for s in SUPPORTED)})", file=text, where="schema")
            out.append((text, tree))
    for file, tree in out:
        check_input_tree(tree, file)
    return out


def _load(path: Path) -> dict[str, Any]:
    tree = read_json_input(path, ConfigError)
    if not isinstance(tree, dict):
        raise ConfigError("not a JSON object", file=str(path))
    return tree


def figures_for(file: str, tree: dict[str, Any]) -> list[tuple[str, Any]]:
    """(title, matplotlib figure) per plot of one input."""
    schema = tree["schema"]
    name = Path(file).name
    if schema.startswith("archsim.system/"):
        from archsim.system.decode import StepResult
        from archsim.system.report import breakdown_figure, comparison_figure

        results = [StepResult(r["system"], r.get("tier", ""), int(r["context"]), r["status"],
                              decode_step_ns=r.get("decode_step_ns"), energy_pJ_per_token=r.get("energy_pJ_per_token"))
                   for r in tree["results"]]
        return [(f"{name}: decode step and energy per token", comparison_figure(results)),
                (f"{name}: where the step's time and energy go", breakdown_figure(tree["results"]))]
    if schema == SWEEP_DIR:
        from archsim.sweep.figure import sweep_figures

        return sweep_figures(Path(tree["path"]))
    if schema.startswith("archsim.plan/"):
        from archsim.plan.figure import plan_figure

        what = "planner against simulation" if "validation" in tree else "planner's candidates"
        return [(f"{name}: {what}", plan_figure(tree))]
    if schema.startswith("archsim.gpu/"):
        from archsim.gpu.figure import gpu_figure

        return [(f"{name}: GPU layer time", gpu_figure(tree))]
    if schema.startswith("archsim.serving/") and tree.get("rates_per_s"):  # serve --rates: a load sweep
        from archsim.serving.load_plot import load_figure

        return [(f"{name}: serving ({tree.get('scenario')}) against the offered load",
                 load_figure(tree["results"], tree["rates_per_s"]))]
    if schema.startswith("archsim.serving/"):
        from archsim.serving.plots import serving_figure

        return [(f"{name}: serving ({tree.get('scenario')})", serving_figure([], tree["results"]))]
    plots = [(f"{name}: DRAM replay", stats_figure(tree))]
    if "banks" in tree["memory"]:
        plots.append((f"{name}: per-bank heat map", bank_heat_figure(tree)))
    return plots


def bank_heat_figure(tree: dict[str, Any]) -> Any:
    """Per-bank heat maps of an archsim.stats/1 replay: requests that opened a row (misses + conflicts) and
    bank conflicts, pseudo-channel by bank."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    banks = tree["memory"]["banks"]
    opened = np.asarray(banks["row_misses"]) + np.asarray(banks["row_conflicts"])
    conflicts = np.asarray(banks["bank_conflicts"])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), layout="constrained")
    for ax, grid, label in ((axes[0], opened, "requests that opened a row (misses + conflicts)"),
                            (axes[1], conflicts, "bank conflicts (requests)")):
        image = ax.imshow(grid, aspect="auto", cmap="viridis", interpolation="nearest")
        ax.set_xlabel("bank in the pseudo-channel")
        ax.set_ylabel("pseudo-channel")
        ax.set_title(label, fontsize=10)
        fig.colorbar(image, ax=ax, label="requests")
    return fig


def stats_figure(tree: dict[str, Any]) -> Any:
    """An archsim.stats/1 replay: commands issued by kind, and bandwidth and row-hit rate per pseudo-channel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mem = tree["memory"]
    fig, (cmd_ax, ch_ax) = plt.subplots(1, 2, figsize=(12, 4.5), layout="constrained")
    names = list(mem["commands"])
    cmd_ax.bar(names, [mem["commands"][n] for n in names], color=plt.get_cmap("tab10").colors[: len(names)])
    cmd_ax.set_xlabel("DRAM command")
    cmd_ax.set_ylabel("commands issued (count)")
    cmd_ax.set_title(f"{mem.get('standard', '')}: {tree['sim']['requests']:,} requests", fontsize=10)
    channels = sorted(mem["channels"], key=int)
    bw = [mem["channels"][c]["bandwidth_GBps"] for c in channels]
    ch_ax.bar(range(len(channels)), bw, color="tab:blue", label="bandwidth (GB/s)")
    ch_ax.set_xticks(range(len(channels)), channels, fontsize=7)
    ch_ax.set_xlabel("pseudo-channel")
    ch_ax.set_ylabel("bandwidth (GB/s)")
    hit = ch_ax.twinx()
    hit.plot(range(len(channels)), [100 * (mem["channels"][c]["row_hit_rate"] or 0) for c in channels],
             color="tab:red", marker="o", label="row-hit rate (%)")
    hit.set_ylabel("row-hit rate (%)")
    hit.set_ylim(0, 100)
    handles = [*ch_ax.get_legend_handles_labels()[0], *hit.get_legend_handles_labels()[0]]
    fig.legend(handles=handles, loc="outside right upper", fontsize=8)
    return fig


def _svg(fig: Any) -> tuple[str, int, int]:
    import matplotlib
    import matplotlib.pyplot as plt

    dpi = 96  # CSS pixels
    width, height = (round(v * dpi) for v in fig.get_size_inches())
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": "archsim", "svg.fonttype": "path"}):
        fig.savefig(buffer, format="svg", dpi=dpi, metadata={"Date": None})
    plt.close(fig)
    text = buffer.getvalue()
    text = text[text.index("<svg"):]  # no XML declaration or DOCTYPE inside HTML
    # inline SVG in HTML needs no namespace declarations, and the page holds no URL: drop the Dublin Core block,
    # the xmlns attributes, and spell xlink:href as SVG 2's href
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    text = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", text).replace("xlink:href=", "href=")
    text = re.sub(r'<svg([^>]*?) width="[^"]*" height="[^"]*"', rf'<svg\1 width="{width}" height="{height}"',
                  text, count=1)
    return text, width, height


def build_report(inputs: Sequence[tuple[str, dict[str, Any]]], title: str = "archsim report") -> str:
    plots: list[Plot] = []
    for file, tree in inputs:  # read_inputs checked every key the figures read
        for k, (plot_title, fig) in enumerate(figures_for(file, tree)):
            svg, w, h = _svg(fig)
            plots.append(Plot(f"plot-{len(plots) + 1}", plot_title if k == 0 else f"{plot_title} ({k + 1})", svg, w, h))
    return render(plots, title, [f for f, _ in inputs])


def render(plots: Sequence[Plot], title: str, sources: Sequence[str]) -> str:
    y = MARGIN_PX + HEADING_PX + 20 * len(sources)
    parts, boxes = [], []
    for p in plots:
        scale = min(1.0, (PAGE_WIDTH_PX - 2 * MARGIN_PX) / p.width_px)
        w, h = round(p.width_px * scale), round(p.height_px * scale)
        svg = re.sub(r'width="\d+" height="\d+"', f'width="{w}" height="{h}"', p.svg, count=1)
        parts.append(f'<h2 style="position:absolute;left:{MARGIN_PX}px;top:{y}px;margin:0;height:{HEADING_PX}px;'
                     f'font-size:16px">{html.escape(p.title)}</h2>')
        y += HEADING_PX
        parts.append(f'<div class="plot" id="{p.id}" style="position:absolute;left:{MARGIN_PX}px;top:{y}px;'
                     f'width:{w}px;height:{h}px">{svg}</div>')
        boxes.append({"id": p.id, "title": p.title, "x": MARGIN_PX, "y": y, "width": w, "height": h})
        y += h + MARGIN_PX
    listing = "".join(f"<li>{html.escape(s)}</li>" for s in sources)
    page = {"width": PAGE_WIDTH_PX, "height": y}
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title>"
            "<style>html,body{margin:0;padding:0;background:#ffffff;font-family:sans-serif}"
            f"body{{position:relative;width:{PAGE_WIDTH_PX}px;height:{y}px}}"
            f"header{{position:absolute;left:{MARGIN_PX}px;top:{MARGIN_PX // 2}px}}"
            "ul{margin:0;font-size:12px}</style></head><body>\n"
            f"<header><h1 style=\"margin:0;font-size:20px\">{html.escape(title)}</h1><ul>{listing}</ul></header>\n"
            + "\n".join(parts)
            + '\n<script type="application/json" id="plot-boxes">'
            + json.dumps({"page": page, "plots": boxes}, sort_keys=True)
            + "</script>\n</body></html>\n")


def plot_boxes(page_html: str) -> dict[str, Any]:
    """The boxes JSON a report carries."""
    match = re.search(r'<script type="application/json" id="plot-boxes">(.*?)</script>', page_html, re.S)
    if match is None:
        raise ValueError("no plot-boxes JSON in the report")
    return json.loads(match.group(1))
