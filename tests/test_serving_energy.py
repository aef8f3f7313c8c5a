"""Serving energy: counted from what the run did, priced by the energy table."""

from __future__ import annotations

import numpy as np
import pytest

from archsim.energy import energy_breakdown
from archsim.serving import engine
from archsim.serving.build import serving_workload
from archsim.serving.energy import run_counts, run_energy
from archsim.serving.run import model_limits, requests_source, run_system
from archsim.serving.scenario import load_scenario
from archsim.system.config import load_system_config
from archsim.system.gpu import gpu_work
from archsim.system.mixed import attention_constants

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def runs():
    scenario = load_scenario("multiturn")
    cache = {}

    def requests_for(block_tokens):
        if block_tokens not in cache:
            cache[block_tokens] = scenario.requests(n_requests=60, seed=1, block_tokens=block_tokens)
        return cache[block_tokens]

    return {name: run_system(load_system_config(name), scenario, requests_for, warmup=0)
            for name in ("gpu-hbm", "g25", "host-dram")}


def _workload(run, scenario: str = "multiturn"):
    shape, dtype, max_context = model_limits(load_scenario(scenario))
    return serving_workload(run.system, shape, dtype, max_context, scenario)


def test_weights_are_read_once_per_iteration_and_g1_moves_nothing(runs):
    run = runs["gpu-hbm"]
    workload = _workload(run)
    counts = run_counts(run.system, workload, run.result, run.cost)
    weights = gpu_work(workload.shape, workload.dtype, 1, workload.element_bytes).weight_bytes
    kv_reads = counts["gpu.hbm_bit"] / 8 - weights * run.result.iterations
    assert kv_reads > 0  # attention's KV reads come on top of the weights
    assert not any(k.startswith(("link.", "nvme", "host_dram", "dram.")) for k in counts)


def test_a_pnm_pool_pays_its_dram_and_the_links(runs):
    parts = runs["g25"].metrics["energy_breakdown_mJ_per_token"]
    assert any(k.startswith("dram.") for k in parts) and any(k.startswith("link.") for k in parts)


def test_kv_moved_to_and_from_host_dram_costs_its_bits_by_value():
    # 8 shared 17K-token prefixes and a 25 % HBM budget: most requests load their prefix back from host DRAM.
    # Every byte loaded or written down (the prefills' write-through) crosses each PCIe and DDR5 hop of the
    # route at that hop's efficiency, and is read or written in DDR5 once
    scenario = load_scenario("shared-prefix", ["scenario.shared_prefix.groups=8", "scenario.shared_prefix.fraction=1.0",
                                               "scenario.arrivals.rate_per_s=0.3"])
    system = load_system_config("host-dram", ["system.gpus.memory_utilization=0.25"])
    run = run_system(system, scenario, requests_source(scenario, 100, None, 0), warmup=0)
    res = run.result
    moved = float(res.tier_read_bytes[1] + res.tier_write_bytes[1])
    assert res.tier_read_bytes[1] > 0.3 * moved and res.tier_write_bytes[1] > 0
    counts = run_counts(system, _workload(run, "shared-prefix"), res, run.cost)
    assert counts["host_dram.bit"] == pytest.approx(8 * moved, rel=1e-12)
    wire: dict[str, float] = {}
    for hop in system.topology.route(system.kv_tiers[1].endpoint, system.gpu_endpoints(1)[0]).hops:
        key = f"link.{hop.link.protocol}.bit"
        wire[key] = wire.get(key, 0.0) + 8 * moved / hop.link.efficiency
    assert wire and all(counts[k] == pytest.approx(v, rel=1e-12) for k, v in wire.items())
    # priced by the energy table, per output token
    tokens = float(res.output_tokens[res.completed].sum())
    parts = run.metrics["energy_breakdown_mJ_per_token"]
    for action in ("host_dram.bit", *wire):
        for part, pj in energy_breakdown({action: counts[action]}, system.energy).items():
            assert parts[part] == pytest.approx(pj / tokens * 1e-9, abs=1e-6)


def test_per_token_and_per_request_add_up(runs):
    for run in runs.values():
        energy = run_energy(run.system, _workload(run), run.result, run.cost)
        tokens = run.result.output_tokens[run.result.completed].sum()
        requests = run.result.completed.sum()
        total_mj = sum(energy["energy_breakdown_mJ_per_token"].values()) * tokens
        assert energy["energy_J_per_token"] * tokens * 1e3 == pytest.approx(total_mj, rel=1e-4)
        assert energy["energy_J_per_request"] * requests == pytest.approx(energy["energy_J_per_token"] * tokens)


def test_energy_counts_every_token_the_engine_computed_with_recompute_preemptions(monkeypatch):
    # reasoning's long answers outgrow a 30 % HBM budget: 200-odd decode sequences are preempted and prefill
    # prompt plus answer again. Every iteration is recorded (the event path), and the run's FLOPs must be those
    # of the (cached, new) tokens the iterations computed: 2 per weight element per token, and each new token's
    # attention over the context before it
    from tests.test_serving_system import _built, _serve

    system_set = ("system.gpus.memory_utilization=0.3",)
    scenario_set = ["scenario.arrivals.users=64", "scenario.reasoning.output={dist: uniform, min: 4096, max: 12288}"]
    config, workload, _, _ = _built("gpu-hbm", system_set)
    iterations: list[tuple[np.ndarray, np.ndarray]] = []
    real = engine._Engine._launch

    def spy(self, i, t, batch, *args):         # every iteration the event path starts is launched here
        ids, news, _ = batch
        iterations.append((self.ctx[ids].copy(), news.copy()))
        return real(self, i, t, batch, *args)

    monkeypatch.setattr(engine._Engine, "fast_decode", False)
    monkeypatch.setattr(engine._Engine, "_launch", spy)
    table, _, cost, res = _serve("gpu-hbm", "reasoning", 96, scenario_set=scenario_set, system_set=system_set)
    assert res.completed.all() and res.preemptions.sum() > 100
    cached = np.concatenate([c for c, _ in iterations])
    new = np.concatenate([n for _, n in iterations])
    assert new.sum() == res.tokens_computed
    recomputed = res.tokens_computed - int(table.input_tokens.sum() + (table.output_tokens - 1).sum())
    assert recomputed > 0.3 * res.tokens_computed            # what the preempted sequences computed again
    work = gpu_work(workload.shape, workload.dtype, 1, workload.element_bytes)
    layers = workload.shape.num_layers
    per_pair = 2.0 * workload.shape.num_attention_heads * attention_constants(workload.shape, workload.dtype)[3]
    pairs = float((new * cached + new * (new + 1) // 2).sum())
    flops = (work.layer_flops * layers + work.epilogue_flops) * float(new.sum()) + per_pair * layers * pairs
    assert run_counts(config, workload, res, cost)["gpu.flop"] == pytest.approx(flops, rel=1e-12)
