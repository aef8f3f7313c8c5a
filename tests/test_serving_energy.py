"""Serving energy: counted from what the run did, priced by the energy table."""

from __future__ import annotations

import pytest

from archsim.serving.energy import run_counts, run_energy
from archsim.serving.run import run_system
from archsim.serving.scenario import load_scenario
from archsim.system.config import load_system_config
from archsim.system.gpu import gpu_work

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


def _workload(run):
    from archsim.serving.build import serving_workload
    from archsim.serving.run import model_limits

    shape, dtype, max_context = model_limits(load_scenario("multiturn"))
    return serving_workload(run.system, shape, dtype, max_context, "multiturn")


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
    offload = runs["host-dram"].metrics["energy_breakdown_mJ_per_token"]
    assert offload.get("host_dram.bit", 0) > 0  # the write-through lands in DDR5


def test_per_token_and_per_request_add_up(runs):
    for run in runs.values():
        energy = run_energy(run.system, _workload(run), run.result, run.cost)
        tokens = run.result.output_tokens[run.result.completed].sum()
        requests = run.result.completed.sum()
        total_mj = sum(energy["energy_breakdown_mJ_per_token"].values()) * tokens
        assert energy["energy_J_per_token"] * tokens * 1e3 == pytest.approx(total_mj, rel=1e-4)
        assert energy["energy_J_per_request"] * requests == pytest.approx(energy["energy_J_per_token"] * tokens)
