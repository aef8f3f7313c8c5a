"""Decision maps: the planner's winning candidate over context x batch and over context x GPU-pool link
bandwidth (predictions only, no simulation), one row of two panels per system."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from archsim.plan.model import plan

MAP_SIDE = 20  # 20 x 20 = 400 points per panel
COLORS = {"hbm/gpu": "#4c72b0", "pool/pnm": "#dd8452", "pool/gpu": "#55a868", "host_dram/gpu": "#c44e52",
          "nvme/gpu": "#8172b3", "rdma/gpu": "#937860"}


def _axis(lo: float, hi: float, n: int) -> list[float]:
    return [lo * (hi / lo) ** (k / (n - 1)) for k in range(n)]


def decision_maps(ev: Any, objective: str) -> dict[str, Any]:  # noqa: ANN401 - an archsim.plan.validate.Evaluator
    """Per system: contexts, batches, link scales and the winner's name at every (context, batch) and
    (context, link scale) point (None: no candidate fits)."""
    wl = ev.workload
    top = wl.max_context or 131072
    contexts = sorted({int(c) for c in _axis(1024, top, MAP_SIDE)})
    batches = sorted({max(1, round(b)) for b in _axis(1, 256, MAP_SIDE)})
    scales = [round(s, 4) for s in _axis(0.25, 4.0, MAP_SIDE)]
    out: dict[str, Any] = {}
    for name in ev.systems:
        def winner(scale: float, context: int, batch: int, name: str = name) -> str | None:
            preds = plan(ev.inputs(name, scale, batch), context, batch, objective)
            return preds[0].candidate if preds and preds[0].feasible else None

        out[name] = {"contexts": contexts, "batches": batches, "link_scales": scales, "batch": wl.batch,
                     "by_batch": [[winner(1.0, c, b) for c in contexts] for b in batches],
                     "by_link": [[winner(s, c, wl.batch) for c in contexts] for s in scales]}
    return out


def plot_maps(maps: dict[str, Any], path: str | Path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    names = sorted({w for m in maps.values() for grid in (m["by_batch"], m["by_link"]) for row in grid
                    for w in row if w})
    index = {n: i for i, n in enumerate(names)}
    cmap = ListedColormap([COLORS.get(n, "#999999") for n in names] + ["#ffffff"])
    fig, axes = plt.subplots(len(maps), 2, figsize=(12, 4.2 * len(maps)), squeeze=False)
    for row, (system, m) in enumerate(maps.items()):
        for col, (key, ys, ylabel) in enumerate((("by_batch", m["batches"], "batch (sequences)"),
                                                 ("by_link", m["link_scales"], "GPU-pool link bandwidth (x)"))):
            ax = axes[row][col]
            z = [[index[w] if w else len(names) for w in r] for r in m[key]]
            ax.pcolormesh(m["contexts"], ys, z, cmap=cmap, vmin=-0.5, vmax=len(names) + 0.5, shading="nearest")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log", base=2)
            ax.set_xlabel("context (tokens)")
            ax.set_ylabel(ylabel)
            suffix = "" if col == 0 else f", batch {m['batch']}"
            ax.set_title(f"{system}: planner's choice{suffix}")
    handles = [Patch(color=COLORS.get(n, "#999999"), label=n) for n in names]
    handles.append(Patch(facecolor="#ffffff", edgecolor="#999999", label="nothing fits"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=9)
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.05, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)
