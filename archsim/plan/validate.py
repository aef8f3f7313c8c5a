"""The planner against the step model: rank candidates by prediction, simulate each (simulate_step on the
candidate's system variant), and score the planner's choice over a grid (docs/planner.md).

Agreement counts feasible points (at least one candidate runs in simulation); a point is contested when at
least two feasible candidates lie within 2x of each other in simulated cost. Regret = simulated cost of the
planner's choice / the best simulated cost - 1, on the objective.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from archsim.config.yaml_files import read_yaml
from archsim.errors import ConfigError
from archsim.limits import INT64_MAX
from archsim.plan.inputs import candidate_system, plan_inputs, scaled_links_system
from archsim.plan.model import PlanInputs, Prediction, objective_value, plan
from archsim.system.config import SystemConfig, resolve_system_path
from archsim.system.decode import StepResult, simulate_step
from archsim.system.workload import Workload, parse_tokens

OBJECTIVES = ("step_latency", "energy_per_token")
CONTESTED_RATIO = 2.0


@dataclass(frozen=True)
class Grid:
    contexts: tuple[int, ...]
    batches: tuple[int, ...]
    link_scales: tuple[float, ...]

    @property
    def size(self) -> int:
        return len(self.contexts) * len(self.batches) * len(self.link_scales)


def default_grid(workload: Workload) -> Grid:
    """Contexts 1K to the model's maximum (powers of two), batches 1-256, links x0.5, x1, x2."""
    top = workload.max_context or 131072
    contexts = []
    c = 1024
    while c < top:
        contexts.append(c)
        c *= 2
    contexts.append(top)
    return Grid(tuple(contexts), (1, 2, 4, 8, 16, 32, 64, 128, 256), (0.5, 1.0, 2.0))


def parse_grid(text: str, workload: Workload) -> Grid:
    """`contexts=1K,8K;batches=1,16;links=0.5,1,2` (any part omitted: the default grid's)."""
    base = default_grid(workload)
    parts: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in text.split(";"))):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in ("contexts", "batches", "links"):
            raise ConfigError(f"expected contexts=..;batches=..;links=.., got {item!r}", where="--grid")
        if key in parts:
            raise ConfigError(f"{key} is given twice in {text!r}", where="--grid")
        if not value.strip():
            raise ConfigError(f"{key} has no values in {text!r}", where="--grid")
        parts[key] = value
    try:
        contexts = tuple(parse_tokens(v.strip(), "--grid contexts") for v in parts["contexts"].split(",")
                         if v.strip()) if "contexts" in parts else base.contexts
        batches = tuple(int(v) for v in parts["batches"].split(",") if v.strip()) if "batches" in parts \
            else base.batches
        scales = tuple(float(v) for v in parts["links"].split(",") if v.strip()) if "links" in parts \
            else base.link_scales
    except ValueError as exc:
        raise ConfigError(f"not a number in {text!r} ({exc})", where="--grid") from None
    if any(not 0 < b <= INT64_MAX for b in batches) or any(not 0 < s < math.inf for s in scales):
        raise ConfigError(f"batches and link scales must be positive and finite in {text!r}", where="--grid")
    grid = Grid(contexts, batches, scales)
    if grid.size == 0:
        raise ConfigError(f"the grid {text!r} has no points", where="--grid")
    return grid


def sim_cost(result: StepResult, objective: str) -> float:
    if not result.ok or result.decode_step_ns is None:
        return math.inf
    if objective == "energy_per_token":
        return float(result.energy_pJ_per_token or math.inf)
    return result.decode_step_ns / result.tokens


class Evaluator:
    """Plans and simulates the candidates of systems at request states; simulations are memoized."""

    def __init__(self, systems: list[SystemConfig], workload: Workload, objective: str = "step_latency") -> None:
        self.systems = {s.name: s for s in systems}
        self.workload = workload
        self.objective = objective
        self._trees: dict[str, Any] = {}
        self._scaled: dict[tuple[str, float], SystemConfig] = {}
        self._inputs: dict[tuple[str, float, int], PlanInputs] = {}
        self._sims: dict[tuple[str, str, float, int, int], StepResult] = {}

    def system(self, name: str, scale: float) -> SystemConfig:
        key = (name, scale)
        if key not in self._scaled:
            base = self.systems[name]
            if scale == 1.0:
                self._scaled[key] = base
            else:
                if name not in self._trees:
                    path = base.file or str(resolve_system_path(name))
                    self._trees[name] = read_yaml(path)
                self._scaled[key] = scaled_links_system(base, self._trees[name], scale)
        return self._scaled[key]

    def inputs(self, name: str, scale: float, batch: int) -> PlanInputs:
        key = (name, scale, batch)
        if key not in self._inputs:
            wl = replace(self.workload, batch=batch)
            self._inputs[key] = plan_inputs(self.system(name, scale), wl)
        return self._inputs[key]

    def predictions(self, name: str, scale: float, context: int, batch: int,
                    names: tuple[str, ...] | None = None) -> list[Prediction]:
        return plan(self.inputs(name, scale, batch), context, batch, self.objective, names)

    def simulate(self, name: str, scale: float, cand_name: str, context: int, batch: int) -> StepResult:
        inp = self.inputs(name, scale, batch)
        cand = next(c for c in inp.candidates if c.name == cand_name)
        eff_scale = 1.0 if cand.kv_tier == "hbm" else scale  # KV in HBM never crosses the scaled links
        key = (name, cand_name, eff_scale, context, batch)
        if key not in self._sims:
            wl = replace(self.workload, batch=batch)
            self._sims[key] = simulate_step(candidate_system(self.system(name, eff_scale), cand), wl, context)
        return self._sims[key]

    def point(self, name: str, scale: float, context: int, batch: int,
              names: tuple[str, ...] | None = None) -> dict[str, Any] | None:
        """One validation point, or None when no candidate is feasible in simulation."""
        preds = self.predictions(name, scale, context, batch, names)
        sims = {p.candidate: sim_cost(self.simulate(name, scale, p.candidate, context, batch), self.objective)
                for p in preds}
        feasible = sorted(c for c in sims.values() if math.isfinite(c))
        if not feasible:
            return None
        best_name = min((n for n in sims if math.isfinite(sims[n])), key=lambda n: (sims[n], n))
        choice = preds[0].candidate
        regret = sims[choice] / sims[best_name] - 1.0 if math.isfinite(sims[choice]) else math.inf
        contested = len(feasible) >= 2 and feasible[1] <= CONTESTED_RATIO * feasible[0]
        agree = choice == best_name or regret == 0.0
        return {"system": name, "context": context, "batch": batch, "link_scale": scale,
                "planner_choice": choice, "simulated_best": best_name,
                "regret": round(regret, 6) if math.isfinite(regret) else None,
                "agree": agree, "contested": contested,
                "predicted": {p.candidate: _r(objective_value(p, self.objective)) for p in preds},
                "simulated": {n: _r(v) for n, v in sorted(sims.items())}}


def _r(v: float) -> float | None:
    return round(float(v), 3) if math.isfinite(v) else None


def validate(ev: Evaluator, grid: Grid, names: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The validation block of archsim.plan/1 over `grid` for every system of `ev`."""
    points = []
    for name in ev.systems:
        for scale in grid.link_scales:
            for batch in grid.batches:
                for context in grid.contexts:
                    p = ev.point(name, scale, context, batch, names)
                    if p is not None:
                        points.append(p)
    return summarize(points)


def summarize(points: list[dict[str, Any]]) -> dict[str, Any]:
    contested = [p for p in points if p["contested"]]
    regrets = [p["regret"] if p["regret"] is not None else math.inf for p in points]

    def frac(ps: list[dict[str, Any]]) -> float | None:
        return round(sum(p["agree"] for p in ps) / len(ps), 6) if ps else None

    mean = sum(regrets) / len(regrets) if regrets else 0.0
    return {"agreement": frac(points), "contested_agreement": frac(contested),
            "mean_regret": round(mean, 6) if math.isfinite(mean) else None,
            "max_regret": round(max(regrets), 6) if regrets and math.isfinite(max(regrets)) else None,
            "feasible_points": len(points), "contested_points": len(contested),
            "points": points, "disagreements": [p for p in points if not p["agree"]]}
