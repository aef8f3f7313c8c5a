"""`system.kv.placement`: a fixed home (HBM or the PNM tier) or `auto`, where the planner's closed forms place
each sequence's KV; the split iteration cost, the placer against the simulated step, and auto against every
fixed placement on the shipped mix of 4K and 124K prompts."""

from __future__ import annotations

import numpy as np
import pytest

from archsim.errors import ConfigError
from archsim.plan.place import placer_for
from archsim.serving.build import cost_table, serving_spec, serving_workload
from archsim.serving.costs import SplitCost
from archsim.serving.run import model_limits, requests_source, run_system
from archsim.serving.scenario import load_scenario
from archsim.system.config import load_system_config
from archsim.system.gpu import roofline_ns
from archsim.system.mixed import _decode_hbm_work

pytestmark = pytest.mark.system

SCENARIO = "long-short-mix"


def _built(placement: str):
    scenario = load_scenario(SCENARIO)
    system = load_system_config("g25", [f"system.kv.placement={placement}", f"system.name=g25-{placement}"])
    shape, dtype, max_context = model_limits(scenario)
    workload = serving_workload(system, shape, dtype, max_context, scenario.name)
    spec = serving_spec(system, workload, max_context)
    return system, workload, spec, cost_table(system, workload, spec)


@pytest.mark.parametrize(("overrides", "needle"), [
    (["system.kv.placement=nvme"], "must be auto or one of hbm, pool"),
    (["system.kv.placement=auto", "system.attention=gpu"], "no PNM tier"),
    (["system.kv.placement=auto", "system.kv.decode=stream"], "give placement only with decode: load"),
])
def test_a_placement_the_system_cannot_hold_is_refused_naming_the_key(overrides, needle):
    with pytest.raises(ConfigError) as err:
        load_system_config("g25", overrides)
    assert err.value.where == "system.kv.placement" and needle in str(err.value)


def test_fixed_placements_name_their_home_and_the_default_is_the_pnm_tier():
    *_, spec_pool, _ = _built("pool")
    *_, spec_hbm, cost_hbm = _built("hbm")
    assert spec_pool.kv_home == 1 and spec_pool.placement == "fixed"
    assert spec_hbm.kv_home == 0 and not cost_hbm.tabulated      # the HBM roofline, exact
    system = load_system_config("g25")
    scenario = load_scenario(SCENARIO)
    shape, dtype, max_context = model_limits(scenario)
    default = serving_spec(system, serving_workload(system, shape, dtype, max_context, scenario.name), max_context)
    assert default.kv_home == spec_pool.kv_home and default.placement == "fixed"


def test_the_split_cost_is_each_side_alone_and_the_slower_attention_when_mixed():
    _, workload, _, cost = _built("auto")
    assert isinstance(cost, SplitCost)
    cached = np.array([4096, 4096, 126976, 8000], dtype=np.int64)
    ones = np.ones(4, dtype=np.int64)
    none, every = np.zeros(4, dtype=bool), np.ones(4, dtype=bool)
    assert cost.iteration_ns(cached, ones, none) == cost.hbm.iteration_ns(cached, ones)
    assert cost.iteration_ns(cached, ones, every) == cost.pool.iteration_ns(cached, ones)
    pooled = np.array([False, False, True, False])
    mixed = cost.iteration_ns(cached, ones, pooled)
    # the same batch with every sequence in HBM, its layer's HBM attention replaced by the slower of the
    # HBM side's and the PNM side's
    L, gpus = workload.shape.num_layers, cost.hbm.system.gpus
    all_hbm = roofline_ns(*_decode_hbm_work(workload, 4, int(cached.sum())), gpus)
    hbm_side = roofline_ns(*_decode_hbm_work(workload, 3, int(cached[~pooled].sum())), gpus)
    pool_side = cost.pool.decode_part(1, 126976).pool_ns
    expected = cost.hbm.iteration_ns(cached, ones) + L * (max(hbm_side, pool_side) - all_hbm)
    assert mixed == pytest.approx(expected, rel=1e-9)
    assert mixed < min(cost.iteration_ns(cached, ones, none), cost.iteration_ns(cached, ones, every))


@pytest.mark.parametrize(("sequences", "context"), [(1, 4096), (8, 4096), (1, 126976), (4, 126976), (16, 30000)])
def test_the_placers_closed_forms_agree_with_the_simulated_decode_step(sequences, context):
    system, workload, spec, cost = _built("auto")
    placer = placer_for(system, workload, spec.tiers[spec.kv_home].name)
    n = sequences * context
    simulated_pool = cost.pool.decode_part(sequences, n).pool_ns
    assert placer.side_ns(True, sequences, n) == pytest.approx(simulated_pool, rel=0.05)
    simulated_hbm = roofline_ns(*_decode_hbm_work(workload, sequences, n), system.gpus)
    assert placer.side_ns(False, sequences, n) == pytest.approx(simulated_hbm, rel=0.01)


def test_a_long_prompt_pays_for_its_prefix_attention_in_the_pool_and_a_short_one_does_not():
    system, workload, spec, _ = _built("auto")
    placer = placer_for(system, workload, "pool")
    assert placer.prefill_penalty_ns(4096, spec.max_batch_tokens) == 0.0      # one chunk: no cached prefix
    assert placer.prefill_penalty_ns(126976, spec.max_batch_tokens) > 100e6   # 15 chunks over a long prefix
    # alone, a long context decodes faster in the pool, a short one in HBM
    assert placer.side_ns(True, 1, 126976) < placer.side_ns(False, 1, 126976)
    assert placer.side_ns(True, 1, 4096) > placer.side_ns(False, 1, 4096)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["g25", "g15"])
@pytest.mark.parametrize("scenario_name", [SCENARIO, "shared-prefix", "mooncake-sample", "reasoning"])
def test_auto_uses_both_homes_and_serves_the_mix_no_slower_than_the_best_fixed_placement(name, scenario_name):
    """On G1.5 too: its all-reduces' slowdown by the pool traffic shrinks with a prefill chunk's larger ring, and a
    pool sequence reads its prefix where the pool holds it (written through by HBM sequences)."""
    scenario = load_scenario(scenario_name)
    source = requests_source(scenario, 64, None, 0)
    p50, runs = {}, {}
    for placement in ("hbm", "pool", "auto"):
        system = load_system_config(name, [f"system.kv.placement={placement}", f"system.name={name}-{placement}"])
        run = runs[placement] = run_system(system, scenario, source, warmup=0)
        assert run.status == "ok" and run.metrics is not None
        p50[placement] = run.metrics["e2e_ms"]["p50"]
    summary = runs["auto"].metrics["placement"]
    assert summary["mode"] == "auto" and sum(summary["requests_by_tier"].values()) == 64
    assert len(summary["requests_by_tier"]) == 2
    assert p50["auto"] <= min(p50["hbm"], p50["pool"]) * 1.02
    assert "placement" not in runs["pool"].metrics          # fixed placements report as before


@pytest.mark.slow
def test_a_replan_moves_kv_when_it_pays_and_charges_the_move_on_the_link():
    scenario = load_scenario(SCENARIO, ["scenario.output.value=2048"])
    system = load_system_config("g25", ["system.kv.placement=auto", "system.kv.replan_tokens=128"])
    run = run_system(system, scenario, requests_source(scenario, 32, None, 0), warmup=0)
    assert run.status == "ok" and run.result is not None and run.metrics is not None
    result, summary = run.result, run.metrics["placement"]
    assert summary["moves"] == int(result.moves.sum()) > 0
    # a move happens when the context reaches a multiple of replan_tokens: its whole KV crosses the link
    per_replan = result.spec.kv_bytes_per_token * 128
    assert result.move_bytes > 0 and result.move_bytes % per_replan == 0
    assert run.metrics["tier_link_bytes"]["pool->gpu"] >= result.move_bytes
    assert result.completed.all()


@pytest.mark.slow
def test_a_sequence_squeezed_out_of_hbm_moves_to_the_pool_instead_of_computing_its_context_again():
    """Long answers in a small HBM: a decode sequence that needs a block HBM no longer has takes room only from
    HBM sequences, and each one squeezed out moves to the pool over the link (the pool has room), so nothing is
    preempted and recomputed (before: 849 preemptions, auto 725 s E2E p50 against the pool's 478 s)."""
    scenario = load_scenario("reasoning")
    source = requests_source(scenario, 60, None, 0)
    runs = {p: run_system(load_system_config("g25", [f"system.kv.placement={p}", "system.gpus.memory_utilization=0.35",
                                                       f"system.name=g25-{p}"]), scenario, source, warmup=0)
            for p in ("hbm", "pool", "auto")}
    assert all(run.status == "ok" and run.result is not None for run in runs.values())
    assert runs["hbm"].result.preemptions.sum() > 0                 # HBM alone does not hold the answers
    auto = runs["auto"].result
    assert auto.preemptions.sum() == 0 and auto.moves.sum() > 0 and auto.completed.all()
    p50 = {p: run.metrics["e2e_ms"]["p50"] for p, run in runs.items()}
    assert p50["auto"] <= min(p50["hbm"], p50["pool"]) * 1.02
