"""`archsim report` figure of an `archsim.gpu/1` tree (`archsim gpu predict --json`): per tensor-parallel
degree, a decoder layer's non-attention time against the tokens of the batch, stacked by kernel, with its
all-reduce on top (log tokens axis)."""

from __future__ import annotations

from typing import Any


def gpu_figure(tree: dict[str, Any]) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    from archsim.system.report import system_style  # lazily: system imports gpu

    results = tree["results"]
    degrees = sorted({r["tp"] for r in results})
    kernels = list(tree.get("kernels") or sorted({k for r in results for k in r["kernels_ns"]}))
    fig, axes = plt.subplots(1, len(degrees), figsize=(6 * len(degrees), 4.8), layout="constrained", squeeze=False)
    colors = plt.get_cmap("tab20").colors
    for ax, tp in zip(axes[0], degrees, strict=True):
        rows = sorted((r for r in results if r["tp"] == tp), key=lambda r: r["tokens"])
        tokens = [r["tokens"] for r in rows]
        layers = [[r["kernels_ns"].get(k, 0.0) / 1e3 for r in rows] for k in kernels]
        layers.append([r["allreduce_ns"] / 1e3 for r in rows])
        ax.stackplot(tokens, layers, labels=[*kernels, "all-reduce"], colors=colors[:len(layers)], alpha=0.85)
        marker, style = system_style(0)
        ax.plot(tokens, [r["layer_ns"] / 1e3 for r in rows], color="black", marker=marker, linestyle=style,
                linewidth=1, label="layer", gid=f"layer:tp{tp}")
        if len(tokens) > 1:
            ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(tokens))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("tokens in the batch")
        ax.set_ylabel("time per layer (us)")
        ax.set_title(f"tensor parallel {tp}", fontsize=10)
        ax.grid(True, alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper", fontsize=7, title="kernel")
    fig.suptitle(f"{tree.get('gpu', 'gpu')}: a decoder layer's non-attention kernels and all-reduce")
    return fig


__all__ = ["gpu_figure"]
