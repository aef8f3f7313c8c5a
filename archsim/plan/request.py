"""`archsim plan SYSTEM... --scenario S --objective request_e2e`: rank the candidates by a request's end-to-end
latency, predicted in closed form (`model.predict_request`) and simulated by serving the scenario's requests
with the system fixed to that candidate (the serving engine, archsim/serving/).

The planner's request: the median prompt and answer of the scenario's requests; its batch, the sequences in
flight by Little's law at the scenario's request rate and the predicted end-to-end latency, solved by fixed
point (a closed loop: its users). A candidate as a served system: `hbm/gpu` keeps the KV in HBM alone (tier 0
only); `T/gpu` keeps tier T below HBM without compute, so a prefix found there is loaded into HBM and decoded
there; `pool/pnm` is the system's PNM pool with attention in its units.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from archsim.plan.inputs import candidate_system, plan_inputs
from archsim.plan.model import Candidate, PlanInputs, predict_request
from archsim.system.config import SystemConfig

FIXED_POINT_ROUNDS = 8


def serving_candidate(system: SystemConfig, cand: Candidate) -> SystemConfig:
    """The system served with the candidate's placement fixed (see the module docstring)."""
    fixed = candidate_system(system, cand)
    hbm = system.kv_tiers[0]
    if cand.kv_tier == "hbm":
        return replace(fixed, kv_tiers=(hbm,))
    tier = next(t for t in system.kv_tiers if t.name == cand.tier_name)
    return replace(fixed, kv_tiers=(hbm, replace(tier, compute="pnm" if cand.attention == "pnm" else "none")))


def request_shape(table: Any, scenario: Any) -> tuple[int, int, float | None, int | None]:
    """(median prompt, median answer, requests per second or None, closed-loop users or None)."""
    context = int(np.median(table.input_tokens))
    output = int(np.median(table.output_tokens))
    arrivals = scenario.arrivals
    if arrivals is not None and arrivals.process == "closed_loop":
        return context, output, None, int(arrivals.users)
    starts = table.arrival_ns[np.isfinite(table.arrival_ns)]
    turns = len(table) / max(len(starts), 1)
    if arrivals is not None and arrivals.rate_per_s:
        return context, output, arrivals.rate_per_s * turns, None
    span_s = (float(starts.max()) - float(starts.min())) / 1e9 if len(starts) > 1 else 0.0
    return context, output, (len(starts) - 1) / span_s * turns if span_s > 0 else None, None


def planned_batch(inp: PlanInputs, cand: Candidate, context: int, output: int, rate: float | None,
                  users: int | None, max_batch: int) -> int:
    """Sequences in flight: a closed loop's users, else Little's law (rate x predicted E2E) by fixed point."""
    if users is not None:
        return max(1, min(users, max_batch))
    batch = 1
    for _ in range(FIXED_POINT_ROUNDS):
        e2e_ns = predict_request(inp, cand, context, batch, output)
        if rate is None or not math.isfinite(e2e_ns):
            return batch
        nxt = max(1, min(max_batch, math.ceil(rate * e2e_ns / 1e9)))
        if nxt == batch:
            break
        batch = nxt
    return batch


def rank_requests(system: SystemConfig, workload: Any, table: Any, scenario: Any, wanted: tuple[str, ...] | None,
                  serve: Any, max_batch: int) -> list[dict[str, Any]]:
    """The candidates of `system`, ranked by predicted end-to-end, each with the served run's (`serve(system)`:
    an archsim.serving.run.SystemRun) median end to end; `max_batch`: the engine's sequence limit."""
    context, output, rate, users = request_shape(table, scenario)
    rows = []
    base = plan_inputs(system, workload)
    for cand in base.candidates:
        if wanted is not None and cand.name not in wanted:
            continue
        batch = planned_batch(base, cand, context, output, rate, users, max_batch)
        inp = plan_inputs(system, replace(workload, batch=batch))
        predicted = predict_request(inp, cand, context, batch, output)
        run = serve(serving_candidate(system, cand))
        e2e = (run.metrics or {}).get("e2e_ms") or {}
        simulated = e2e.get("p50") * 1e6 if run.status == "ok" and e2e.get("p50") is not None else None
        rows.append({"system": system.name, "name": cand.name, "attention": cand.attention, "kv_tier": cand.kv_tier,
                     "context": context, "output_tokens": output, "batch": batch,
                     "requests_per_s": None if rate is None else round(rate, 6),
                     "predicted": {"request_e2e_ns": _r(predicted), "feasible": math.isfinite(predicted)},
                     "simulated": {"request_e2e_p50_ns": _r(simulated), "status": run.status}})
    rows.sort(key=lambda r: (r["predicted"]["request_e2e_ns"] is None, r["predicted"]["request_e2e_ns"] or 0.0,
                             r["name"]))
    best = min((r for r in rows if r["simulated"]["request_e2e_p50_ns"] is not None),
               key=lambda r: r["simulated"]["request_e2e_p50_ns"], default=None)
    for rank, r in enumerate(rows, start=1):
        r["rank"] = rank
        r["simulated_best"] = best is not None and r is best
        r["reason"] = _reason(r, rows[0], best)
    return rows


def _reason(r: dict[str, Any], first: dict[str, Any], best: dict[str, Any] | None) -> str:
    if r["predicted"]["request_e2e_ns"] is None:
        return "infeasible in the planner's closed form"
    text = f"predicted {r['predicted']['request_e2e_ns'] / 1e6:.1f} ms at batch {r['batch']}"
    if r is not first and first["predicted"]["request_e2e_ns"]:
        text += f", {r['predicted']['request_e2e_ns'] / first['predicted']['request_e2e_ns']:.3f}x the first"
    if best is not None and r is best:
        text += "; the simulated best"
    return text


def _r(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else round(float(v), 3)


__all__ = ["rank_requests", "serving_candidate", "request_shape", "planned_batch"]
