"""`archsim report` figures of an `archsim.plan/1` tree (the decision maps need the planner itself: `plan --plot`).

* Without validation: per system and context, each candidate's predicted and simulated cost (the objective,
  per output token), the planner's choice marked; an infeasible candidate named where its bars would be.
* With validation: the planner's predicted cost against the simulated one of every candidate at every grid
  point (the diagonal is agreement in value), and the regret of its choice per point against the context, per
  system and link scale, titled with the agreement and regret figures.
"""

from __future__ import annotations

from typing import Any


def plan_figure(tree: dict[str, Any]) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    if "validation" in tree:
        return _validation_figure(tree)
    return _candidates_figure(tree)


def _candidates_figure(tree: dict[str, Any]) -> Any:
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    groups: dict[tuple[str, int], list[dict]] = {}
    for c in tree["candidates"]:
        groups.setdefault((c["system"], c["context"]), []).append(c)
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.45 * len(tree["candidates"])), layout="constrained")
    labels, ticks, y = [], [], 0.0
    for (system, context), cands in groups.items():
        for c in sorted(cands, key=lambda c: c["rank"]):
            predicted = c["predicted"].get("cost") if c["predicted"].get("feasible") else None
            simulated = c["simulated"].get("cost") if c["simulated"].get("status") == "ok" else None
            if predicted is not None:
                ax.barh(y - 0.2, predicted / 1e6, height=0.38, color="tab:blue", gid=f"predicted:{y}")
            if simulated is not None:
                ax.barh(y + 0.2, simulated / 1e6, height=0.38, color="tab:orange", gid=f"simulated:{y}")
            if predicted is None and simulated is None:
                reason = c["simulated"].get("status") or c["predicted"].get("reason") or "infeasible"
                ax.annotate(str(reason), xy=(0, y), xycoords=("axes fraction", "data"), xytext=(4, 0),
                            textcoords="offset points", va="center", fontsize=7, color="firebrick")
            labels.append(f"{system} {context // 1024}K {c['name']}" + (" (chosen)" if c["rank"] == 1 else ""))
            ticks.append(y)
            y += 1
        y += 0.5
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"{tree.get('objective', 'cost')} (ms per output token)")
    fig.legend(handles=[Patch(color="tab:blue", label="planner (closed form)"),
                        Patch(color="tab:orange", label="simulated (step model)")],
               loc="outside right upper", fontsize=8)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title("candidates per system and context, ranked by the planner", fontsize=10)
    return fig


def _validation_figure(tree: dict[str, Any]) -> Any:
    import matplotlib.pyplot as plt

    from archsim.system.report import context_axis, system_style  # lazily, as a command would

    v = tree["validation"]
    points = v["points"]
    fig, (cost_ax, regret_ax) = plt.subplots(1, 2, figsize=(14, 5.5), layout="constrained")
    pred = [p["predicted"][k] / 1e6 for p in points for k in p["predicted"] if k in p.get("simulated", {})
            and p["predicted"][k] is not None and p["simulated"][k] is not None]
    sim = [p["simulated"][k] / 1e6 for p in points for k in p["predicted"] if k in p.get("simulated", {})
           and p["predicted"][k] is not None and p["simulated"][k] is not None]
    cost_ax.scatter(sim, pred, s=10, color="tab:blue", gid="cost-scatter")
    if sim:
        lo, hi = min(sim + pred), max(sim + pred)
        cost_ax.plot([lo, hi], [lo, hi], color="0.4", linestyle="--", linewidth=0.8, label="predicted = simulated")
        cost_ax.set_xscale("log")
        cost_ax.set_yscale("log")
    cost_ax.set_xlabel("simulated cost (ms per output token)")
    cost_ax.set_ylabel("planner's predicted cost (ms per output token)")
    cost_ax.set_title("every candidate at every grid point", fontsize=10)
    cost_ax.grid(True, which="both", alpha=0.3)
    series: dict[tuple[str, float], list[tuple[int, float]]] = {}
    for p in points:
        if p.get("regret") is not None:
            series.setdefault((p["system"], p["link_scale"]), []).append((p["context"], 100 * p["regret"]))
    for k, ((system, scale), values) in enumerate(sorted(series.items())):
        marker, style = system_style(k)
        values.sort()
        regret_ax.plot([c for c, _ in values], [r for _, r in values], marker=marker, linestyle="none",
                       label=f"{system}, links x{scale:g}", gid=f"regret:{system}:{scale:g}")
    context_axis(regret_ax, [p["context"] for p in points])
    regret_ax.set_xlabel("context (tokens)")
    regret_ax.set_ylabel("regret of the planner's choice (%)")
    regret_ax.grid(True, alpha=0.3)
    regret_ax.set_title(f"agreement {100 * v['agreement']:.1f} % ({100 * v['contested_agreement']:.1f} % contested), "
                        f"mean regret {100 * v['mean_regret']:.3f} %, max {100 * v['max_regret']:.3f} %", fontsize=10)
    fig.legend(*regret_ax.get_legend_handles_labels(), loc="outside right upper", fontsize=8)
    return fig


__all__ = ["plan_figure"]
