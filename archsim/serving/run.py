"""One serving run per system on the same requests: build the spec and the cost table, run the engine, and
turn its result into an `archsim.serving/1` entry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from archsim.errors import ArchsimError
from archsim.interconnect import Flow, simulate_flows
from archsim.kvlayout import kv_bytes_per_token
from archsim.models import dtype_bytes
from archsim.models.presets import load_preset
from archsim.serving.build import cost_table, serving_spec, serving_workload
from archsim.serving.costs import StepCostTable
from archsim.serving.energy import run_energy
from archsim.serving.engine import ServingResult, simulate
from archsim.serving.gpu_l2 import GpuL2Sampler
from archsim.serving.metrics import summarize
from archsim.serving.pool_l2 import PoolL2Sampler
from archsim.serving.requests import RequestTable
from archsim.serving.scenario import Scenario
from archsim.serving.spec import ServingSpec
from archsim.serving.speculative import Speculation
from archsim.system.config import SystemConfig
from archsim.system.gpu import gpu_work
from archsim.system.workload import Workload

SCHEMA = "archsim.serving/1"


@dataclass
class SystemRun:
    system: SystemConfig
    status: str
    result: ServingResult | None = None
    cost: StepCostTable | None = None
    metrics: dict[str, Any] | None = None


@dataclass
class RequestSource:
    """The scenario's requests keyed in blocks of a given size (`source(block_tokens)`), drawn once per block size,
    so every system of a comparison with that size serves the same table (`transform`: applied once to each drawn
    table). `seed` also seeds what the engine draws per request (speculative acceptances)."""

    scenario: Scenario
    n_requests: int | None
    duration_ns: float | None
    seed: int
    transform: Callable[[RequestTable], RequestTable] | None = None

    def __post_init__(self) -> None:
        self._tables: dict[int, RequestTable] = {}

    def __call__(self, block_tokens: int) -> RequestTable:
        if block_tokens not in self._tables:
            table = self.scenario.requests(n_requests=self.n_requests, duration_ns=self.duration_ns, seed=self.seed,
                                           block_tokens=block_tokens)
            self._tables[block_tokens] = self.transform(table) if self.transform else table
        return self._tables[block_tokens]


def requests_source(scenario: Scenario, n_requests: int | None, duration_ns: float | None, seed: int,
                    transform: Callable[[RequestTable], RequestTable] | None = None) -> RequestSource:
    """The scenario's requests for `seed` (see RequestSource)."""
    return RequestSource(scenario, n_requests, duration_ns, seed, transform)


def model_limits(scenario: Scenario) -> tuple[Any, str, int]:
    """The scenario's model shape, dtype and maximum context (max_position_embeddings)."""
    preset = load_preset(scenario.model)
    limit = preset.hf_config_dict().get("max_position_embeddings")
    return preset.shape(), preset.dtype, int(limit) if limit else 1 << 62


def run_system(system: SystemConfig, scenario: Scenario, requests_for: Any, *, warmup: int,
               record: bool = False) -> SystemRun:
    """Serve the scenario's requests (`requests_for(block_tokens)` gives the table) on `system`; `record` keeps
    its iterations and transfers (for a timeline)."""
    shape, dtype, max_context = model_limits(scenario)
    workload = serving_workload(system, shape, dtype, max_context, scenario.name)
    spec = serving_spec(system, workload, max_context)
    verifier = None  # its weights first: the draft's KV bound reads the HBM room left
    if scenario.branching is not None and scenario.branching.verifier is not None:
        spec, verifier = verifier_for(system, scenario.branching.verifier, spec)
    speculation = None
    if scenario.speculative is not None:
        spec, speculation = speculation_for(system, scenario, spec, getattr(requests_for, "seed", 0))
    cost = cost_table(system, workload, spec)
    table: RequestTable = requests_for(spec.block_tokens)
    placer = None
    if spec.placement == "auto":
        from archsim.plan.place import placer_for

        placer = placer_for(system, workload, spec.tiers[spec.kv_home].name)
    try:
        result = simulate(table, spec, cost, record=record, placer=placer, speculation=speculation,
                          l2=gpu_l2_sampler(system, workload, spec), pool_l2=pool_l2_sampler(system, workload, spec),
                          verifier=verifier[1] if verifier is not None else None)
    except ArchsimError as exc:
        if exc.file is not None:
            raise  # bad input, not a system that cannot serve
        return SystemRun(system, f"infeasible: {exc.detail}", cost=cost)
    slo = scenario.slo
    metrics = summarize(result, warmup_requests=warmup, ttft_target_ns=slo.ttft_ns if slo else None,
                        tpot_target_ns=slo.tpot_ns if slo else None)
    metrics.update(run_energy(system, workload, result, cost,
                              draft=speculation.draft_model if speculation is not None else None,
                              verifier=verifier[0] if verifier is not None else None))
    metrics["tier_link_bytes"] = metrics.pop("link_bytes")
    metrics["link_bytes"] = hop_link_bytes(system, workload, result)
    if result.home_tier is not None:
        metrics["placement"] = placement_summary(result)
    metrics["cache_reuse"] = cache_reuse(workload, result)
    emitted = float(np.maximum(result.output_tokens[result.completed] - 1, 0).sum())
    metrics["kv_read_bytes_per_token"] = result.kv_fetched_bytes / emitted if emitted else None
    if result.speculation is not None:
        metrics["speculative"] = dict(result.speculation, draft=scenario.speculative.draft)
    if verifier is not None:
        metrics["verifier"] = verifier_summary(verifier[0], result)
    return SystemRun(system, "ok", result, cost, metrics)


def gpu_l2_sampler(system: SystemConfig, workload: Workload, spec: ServingSpec) -> GpuL2Sampler | None:
    """The GPU's L2 (its preset's datasheet capacity) when attention runs on the GPUs from HBM."""
    preset = system.gpus.preset
    if preset is None or not preset.l2_capacity_bytes or spec.kv_home != 0 or spec.placement != "fixed":
        return None
    from archsim.kvlayout import kv_geometry

    geo = kv_geometry(workload.shape, workload.dtype, 1, 0)
    tp = spec.tensor_parallel
    kv_per_gpu = max(1, geo.kv_heads // tp)
    q_per_gpu = max(kv_per_gpu, geo.kv_heads * geo.query_group // tp)
    return GpuL2Sampler(preset.l2_capacity_bytes, spec.block_tokens * geo.row_bytes, q_per_gpu, kv_per_gpu)


def pool_l2_sampler(system: SystemConfig, workload: Workload, spec: ServingSpec) -> PoolL2Sampler | None:
    """The pool's host-path L2 (`system.pool.l2`) when the system has one and a pool tier."""
    pool = system.pool
    if pool is None or pool.l2 is None or not any(t.kind == "pool" for t in spec.tiers):
        return None
    from archsim.kvlayout import kv_geometry

    geo = kv_geometry(workload.shape, workload.dtype, 1, 0)
    return PoolL2Sampler.of(pool.l2, pool.channels_per_device, pool.channels,
                            spec.block_tokens * geo.kv_heads * geo.row_bytes, geo.layers)


def cache_reuse(workload: Workload, result: ServingResult) -> dict[str, Any]:
    """The GPU L2's sampled KV hit rate (attention on the GPUs) and its weights' (an iteration reads each GPU's
    share of the weights once, so a weight line's reuse distance is that share: a hit only if it fits), and
    the PNM SRAM's (attention in the pool): the share of the datapath's KV operand reads served without a DRAM
    fetch, 1 - fetched / (query rows x read)."""
    from archsim.kvlayout import kv_geometry

    read, fetched = result.pool_decode_tokens
    group = kv_geometry(workload.shape, workload.dtype, 1, 0).query_group
    gpu_l2 = result.gpu_l2
    if gpu_l2 is not None:  # weights: every iteration reads each GPU's share once, the rest of it in between
        weights = gpu_work(workload.shape, workload.dtype, 1, dtype_bytes(workload.dtype)).weight_bytes
        per_gpu = weights / result.spec.tensor_parallel
        gpu_l2 = {**gpu_l2, "weight_reuse_distance_bytes": per_gpu,
                  "weight_hit_rate": 1.0 if per_gpu < gpu_l2["capacity_bytes"] else 0.0}
    pnm = result.spec.tiers[result.spec.kv_home].compute == "pnm"  # else the pool's KV is streamed to the GPUs
    return {"gpu_l2": gpu_l2, "pool_l2": result.pool_l2,
            "pnm_sram_kv_hit_rate": 1.0 - fetched / (group * read) if read and pnm else None,
            "pool_decode_kv_tokens_read": read, "pool_decode_kv_tokens_fetched": fetched}


def speculation_for(system: SystemConfig, scenario: Scenario, spec: ServingSpec,
                    seed: int) -> tuple[ServingSpec, Speculation]:
    """The draft model on the instance's GPUs (its weights taken from HBM's KV room, its KV in HBM, priced
    exactly like a KV-in-HBM system's), and the engine's speculation settings."""
    sp = scenario.speculative
    assert sp is not None
    preset = load_preset(sp.draft)
    draft = serving_workload(system, preset.shape(), preset.dtype, spec.max_context_tokens, scenario.name)
    weights = gpu_work(draft.shape, draft.dtype, 1, dtype_bytes(draft.dtype)).weight_bytes
    spec = replace(spec, tiers=tiers_with_draft(spec, weights, kv_bytes_per_token(draft.shape, draft.dtype)))
    on_gpu = replace(system, kv_location="gpu", attention="gpu")
    draft_cost = StepCostTable(on_gpu, draft, spec.max_batch_seqs, spec.max_context_tokens, decode_from_hbm=True)
    return spec, Speculation(sp.k, sp.acceptance, seed, draft_cost, draft)


def verifier_for(system: SystemConfig, name: str, spec: ServingSpec) -> tuple[ServingSpec, tuple[Workload, Any]]:
    """A tree's own verifier model on the instance's GPUs: its weights come out of HBM's KV room, its passes are
    priced as a KV-in-HBM system's (its KV of a path sits beside its weights)."""
    preset = load_preset(name)
    model = serving_workload(system, preset.shape(), preset.dtype, spec.max_context_tokens, name)
    weights = gpu_work(model.shape, model.dtype, 1, dtype_bytes(model.dtype)).weight_bytes
    hbm = spec.tiers[0]
    spec = replace(spec, tiers=(replace(hbm, capacity_bytes=max(0, hbm.capacity_bytes - int(weights))),
                                *spec.tiers[1:]))
    on_gpu = replace(system, kv_location="gpu", attention="gpu")
    return spec, (model, StepCostTable(on_gpu, model, spec.max_batch_seqs, spec.max_context_tokens,
                                       decode_from_hbm=True))


def verifier_summary(model: Workload, result: ServingResult) -> dict[str, Any]:
    rows = result.verifier_rows
    assert rows is not None
    done = rows & result.completed
    return {"model": model.name, "evaluations": int(done.sum()), "passes": result.verifier_passes,
            "prompt_tokens": int(result.input_tokens[done].sum())}


def tiers_with_draft(spec: ServingSpec, weight_bytes: float, draft_kv_bytes_per_token: int) -> tuple:
    """The KV tiers once the draft is on the instance's GPUs: its weights come out of HBM's KV room, and every
    token a sequence holds also has the draft's KV in HBM. Where the engine keeps running KV in HBM a held token
    costs both (the room's share for the target's KV scales by target / (target + draft) bytes per token); where
    it keeps it below HBM (a PNM pool, a streamed tier) the draft's KV of those tokens must fit in HBM's room, so
    that tier holds no more tokens than the room has for the draft (the bound applies to every block there,
    cached ones too: conservative). Placement auto keeps KV on both sides, so both rules apply."""
    hbm, kvb, dkvb = spec.tiers[0], spec.kv_bytes_per_token, draft_kv_bytes_per_token
    room = max(0, hbm.capacity_bytes - int(weight_bytes))
    auto = spec.placement == "auto"
    home = spec.kv_home if auto or spec.decode == "load" else spec.kv_home + 1  # where running KV lives
    tiers = list(spec.tiers)
    tiers[0] = replace(hbm, capacity_bytes=room * kvb // (kvb + dkvb) if auto or home == 0 else room)
    if auto or home > 0:
        draft_tokens = room // dkvb * spec.instances
        tiers[home] = replace(tiers[home], capacity_bytes=min(tiers[home].capacity_bytes, draft_tokens * kvb))
    return tuple(tiers)


def placement_summary(result: ServingResult) -> dict[str, Any]:
    """placement auto: completed requests per tier their KV ended in, and the moves between them."""
    done = result.completed
    assert result.home_tier is not None and result.moves is not None
    names = [t.name for t in result.spec.tiers]
    homes = np.bincount(result.home_tier[done].astype(np.int64), minlength=len(names))
    return {"mode": "auto", "replan_tokens": result.spec.replan_tokens,
            "requests_by_tier": {names[t]: int(c) for t, c in enumerate(homes) if c},
            "moves": int(result.moves.sum()), "move_bytes": float(result.move_bytes)}


def hop_link_bytes(system: SystemConfig, workload: Workload, result: ServingResult) -> dict[str, float]:
    """The bytes the run moved per tier, on every link direction of the topology they cross, named as in
    `archsim.system` (`host_link0:cxl_switch->gpu0`): each tier's reads (and a PNM pool's attention outputs)
    spread evenly over the GPUs in use on the route tier -> GPU, its writes (and the PNM's queries) on the
    route back (the flow model's own link accounting)."""
    if system.topology is None:
        return {}
    spec = result.spec
    gpus = system.gpu_endpoints(spec.instances * spec.tensor_parallel)
    out: dict[str, float] = {}
    pnm_in, pnm_out = _pnm_io_bytes(system, workload, result)
    for t, tier in enumerate(system.kv_tiers[1:], start=1):
        flows = []
        extra_in, extra_out = (pnm_in, pnm_out) if tier.compute == "pnm" else (0.0, 0.0)
        for size, toward_gpu in ((result.tier_read_bytes[t] + extra_out, True),
                                 (result.tier_write_bytes[t] + extra_in, False)):
            if size > 0 and tier.endpoint is not None:
                flows += [Flow(tier.endpoint, g, size / len(gpus)) if toward_gpu else
                          Flow(g, tier.endpoint, size / len(gpus)) for g in gpus]
        if flows:
            for usage in simulate_flows(system.topology, flows).links:
                out[usage.name] = out.get(usage.name, 0.0) + usage.payload_bytes
    return dict(sorted(out.items()))


def _pnm_io_bytes(system: SystemConfig, workload: Workload, result: ServingResult) -> tuple[float, float]:
    """A PNM pool's decode traffic: per decode token and layer its queries in (fp32) and outputs back (the
    new token's K and V are in the tier's written bytes)."""
    if system.attention != "pnm":
        return 0.0, 0.0
    from archsim.kvlayout import kv_geometry

    geo = kv_geometry(workload.shape, workload.dtype, 1, 0)
    done = result.completed
    tokens = float(np.maximum(result.output_tokens[done] - 1, 0).sum())
    return tokens * geo.query_layer_bytes * geo.layers, tokens * geo.output_layer_bytes * geo.layers


def _r6(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _r6(v) for k, v in value.items()}
    if isinstance(value, float | np.floating):
        return round(float(value), 6)
    if isinstance(value, np.integer):
        return int(value)
    return value


# wall-clock figures stay out of the JSON, so the same inputs and seed give byte-identical files
NOT_IN_JSON = ("events_per_s",)
NULL_METRICS = ("requests_completed", "requests_rejected", "ttft_ms", "tpot_ms", "e2e_ms", "breakdown_ms",
                "throughput_tokens_per_s", "throughput_requests_per_s", "goodput_requests_per_s",
                "prefix_hit_rate", "prefix_hit_rate_by_tier", "link_bytes", "energy_J_per_token", "cache_reuse",
                "kv_read_bytes_per_token")


def result_entry(run: SystemRun, scenario: Scenario) -> dict[str, Any]:
    s = run.system
    entry: dict[str, Any] = {"system": s.name, "tier": s.tier, "scenario": scenario.name, "status": run.status,
                             "kv_decode": s.kv_decode}
    if run.metrics is None:
        entry.update({key: None for key in NULL_METRICS})
    else:
        entry.update({k: _r6(v) for k, v in run.metrics.items() if k not in NOT_IN_JSON})
    entry["cost_model"] = run.cost.declaration() if run.cost is not None and run.result is not None else None
    return entry


def requests_lines(run: SystemRun) -> list[dict[str, Any]]:
    """One record per request for `--requests-out` (times in ms, None where a request never got there)."""
    r = run.result
    if r is None:
        return []

    def ms(v: float) -> float | None:
        return None if not np.isfinite(v) else round(float(v) / 1e6, 6)

    out = []
    for i in range(len(r.arrival_ns)):
        ttft = r.first_token_ns[i] - r.arrival_ns[i]
        out_tokens = int(r.output_tokens[i])
        tpot = (r.last_token_ns[i] - r.first_token_ns[i]) / (out_tokens - 1) if out_tokens > 1 else np.nan
        out.append({"system": run.system.name, "request": i, "arrival_ms": ms(r.arrival_ns[i]),
                    "ttft_ms": ms(ttft), "tpot_ms": ms(tpot), "e2e_ms": ms(r.last_token_ns[i] - r.arrival_ns[i]),
                    "input_tokens": int(r.input_tokens[i]), "output_tokens": out_tokens,
                    "hit_blocks": [int(x) for x in r.hit_blocks[i]], "completed": bool(r.completed[i]),
                    "rejected": int(r.rejected[i])})
    return out
