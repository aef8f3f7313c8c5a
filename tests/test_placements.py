"""Placements as strategies (archsim/system/placements/): one serves each system, and each one's layer, breakdown
and energy counts hold against its closed form."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from archsim.kvlayout import kv_geometry
from archsim.system import load_system_config, load_workload, simulate_step
from archsim.system.gpu import roofline_ns
from archsim.system.placements import PLACEMENTS, placement_of
from tests.conftest import REPO

pytestmark = pytest.mark.component

EXPECTED = {"gpu-hbm": "gpu", "g25": "pnm", "g15": "pnm", "g25-qos": "pnm", "g25-16s": "pnm", "g15-16s": "pnm",
            "g25-nopnm": "fetch", "g15-nopnm": "fetch", "host-dram": "fetch", "nvme": "fetch", "rdma-pool": "fetch"}


@pytest.fixture(scope="module")
def workload():
    return load_workload("llama3-70b-b16")


def test_every_shipped_system_is_served_by_exactly_one_placement():
    shipped = sorted(p.stem for p in (REPO / "configs" / "systems").glob("*.yaml"))
    assert set(shipped) == set(EXPECTED)
    for name in shipped:
        system = load_system_config(name)
        serving = [p.kind for p in PLACEMENTS.values() if p.serves(system)]
        assert serving == [EXPECTED[name]], name
        assert placement_of(system).kind == EXPECTED[name]


def test_hbm_attention_is_the_gpus_roofline_and_its_critical_terms_sum_to_the_step(workload):
    system = load_system_config("gpu-hbm")
    step = simulate_step(system, workload, 4096)
    geo = kv_geometry(workload.shape, workload.dtype, workload.batch * 1, 4096)
    gpus_used = workload.tensor_parallel
    per_layer = roofline_ns((geo.layer_bytes + geo.append_layer_bytes) / gpus_used, 2 * geo.layer_macs / gpus_used,
                            system.gpus)
    assert step.attention_ns == pytest.approx(geo.layers * per_layer, rel=1e-12)
    assert math.fsum(step.breakdown_ns["critical"].values()) == pytest.approx(step.decode_step_ns, rel=1e-12)
    assert step.pool_side_ns is None and step.link_bytes == {}


@pytest.mark.parametrize("mode", ["prefetch", "serial"])
def test_a_fetch_stages_the_kv_in_hbm_and_its_critical_terms_sum_to_the_step(workload, mode):
    system = replace(load_system_config("g15-nopnm"), gpu_fetch=mode)
    step = simulate_step(system, workload, 32768)
    assert math.fsum(step.breakdown_ns["critical"].values()) == pytest.approx(step.decode_step_ns, rel=1e-12)
    assert "link_fetch" in step.breakdown_ns["overlapped"] and "pool_dram" in step.breakdown_ns["overlapped"]
    fetch = PLACEMENTS["fetch"]
    assert fetch.staged_hbm_bytes(100.0, 7.0) == 200.0  # the copy engine writes it, the kernel reads it
    if mode == "serial":  # nothing overlaps: the fetch and the GPU's read of the staged KV are both critical
        assert {"kv_fetch", "gpu_attention", "gpu_weights"} <= set(step.breakdown_ns["critical"])
        assert step.breakdown_ns["critical"]["exposed_latency"] == 0.0


def test_pnm_moves_only_queries_appends_and_outputs_and_reads_through_the_pnm_port(workload):
    system = load_system_config("g25")
    geo = kv_geometry(workload.shape, workload.dtype, workload.batch, 32768)
    names = system.gpu_endpoints(workload.tensor_parallel)
    pnm = PLACEMENTS["pnm"]
    flows = pnm.background_flows(names, system.kv_endpoint, geo)
    moved = math.fsum(f.size_bytes for f in flows)
    assert moved == pytest.approx(geo.query_layer_bytes + geo.append_layer_bytes + geo.output_layer_bytes)
    assert pnm.dram_read_action == "dram.read_bit.pnm" and not pnm.gpu_attends
    assert pnm.staged_hbm_bytes(100.0, 7.0) == 0.0
    fetched = PLACEMENTS["fetch"].background_flows(names, system.kv_endpoint, geo)
    assert math.fsum(f.size_bytes for f in fetched) == pytest.approx(geo.layer_bytes + geo.append_layer_bytes)


def test_each_placement_refuses_what_does_not_fit_where_it_keeps_the_kv(workload):
    gpu = simulate_step(load_system_config("gpu-hbm"), workload, 131072)
    assert gpu.status.startswith("infeasible: KV") and "of HBM left after the weights" in gpu.status
    small = load_system_config("nvme")
    store = simulate_step(replace(small, kv_capacity_bytes=2**30), workload, 4096)
    assert store.status.startswith("infeasible:") and "exceeds the store's 1.0 GiB" in store.status
