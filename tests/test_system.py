"""The system model's sanity laws on the shipped presets: what crosses the link with and without PNM, G1.5 never
slower than G2.5, no link or DRAM above its peak, energy that adds up, the analytic estimate beside each result."""

from __future__ import annotations

import copy
import math

import pytest
import yaml

from archsim.kvlayout import kv_geometry
from archsim.system import load_system_config, load_workload, simulate_step, system_config_from_mapping
from tests.conftest import REPO

pytestmark = pytest.mark.system

CONTEXTS = (4096, 32768, 131072)


@pytest.fixture(scope="module")
def workload():
    return load_workload("llama3-70b-b16")


@pytest.fixture(scope="module")
def systems():
    return {name: load_system_config(name) for name in ("g25", "g15", "g25-nopnm", "g15-nopnm", "gpu-hbm",
                                                        "host-dram", "nvme", "rdma-pool")}


@pytest.fixture(scope="module")
def results(systems, workload):
    return {(name, c): simulate_step(cfg, workload, c) for name, cfg in systems.items() for c in CONTEXTS}


def _layer_bytes(workload, context):
    geo = kv_geometry(workload.shape, workload.dtype, workload.batch, context)
    return geo


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("name", ["g25", "g15"])
def test_with_pnm_the_link_carries_queries_outputs_and_appends_only(results, workload, name, context):
    r = results[(name, context)]
    geo = _layer_bytes(workload, context)
    expected = geo.layers * (geo.query_layer_bytes + geo.output_layer_bytes + geo.append_layer_bytes)
    # queries: 16 sequences x 64 heads x 128 x fp32 = 512 KiB per layer, outputs the same, appends 64 KiB
    assert expected == 80 * (524288 + 524288 + 65536)
    assert r.gpu_link_bytes == pytest.approx(expected, rel=1e-12)
    assert r.gpu_link_bytes * 200 < r.kv_bytes  # orders of magnitude below the KV the PNM reads


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("name", ["g25-nopnm", "g15-nopnm", "host-dram", "rdma-pool"])
def test_without_pnm_the_link_carries_the_kv(results, workload, name, context):
    r = results[(name, context)]
    geo = _layer_bytes(workload, context)
    assert r.kv_bytes == geo.step_bytes == 16 * (context + 1) * 80 * 8 * 2 * 128 * 2
    assert r.gpu_link_bytes == pytest.approx(geo.step_bytes + geo.layers * geo.append_layer_bytes, rel=1e-12)


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("pair", [("g15", "g25"), ("g15-nopnm", "g25-nopnm")])
def test_g15_is_never_slower_than_g25_on_the_same_pool(results, pair, context):
    fast, slow = results[(pair[0], context)], results[(pair[1], context)]
    assert fast.ok and slow.ok
    assert fast.decode_step_ns <= slow.decode_step_ns
    assert fast.attention_ns <= slow.attention_ns


def test_g15_is_never_slower_than_g25_for_a_single_sequence(systems):
    w = load_workload("llama3-70b-b1")
    for pair in (("g15", "g25"), ("g15-nopnm", "g25-nopnm")):
        for c in CONTEXTS:
            assert (simulate_step(systems[pair[0]], w, c).decode_step_ns
                    <= simulate_step(systems[pair[1]], w, c).decode_step_ns)


def test_no_link_or_dram_carries_more_than_its_peak(results, systems):
    for (name, context), r in results.items():
        if not r.ok:
            continue
        if r.link_peak_utilization is not None:
            assert r.link_peak_utilization <= 1 + 1e-9, (name, context)
        cfg = systems[name]
        if r.dram_utilization is not None:
            assert 0 < r.dram_utilization <= 1, (name, context)
            pool = cfg.pool
            org, timing = pool.memory.organization, pool.memory.timing
            peak = pool.devices * org.n_pseudo_channels * org.bus_width_bits * timing.data_rate_gbps / 8
            dram_ns = r.term_ns("pool_dram") or r.term_ns("pnm")
            assert r.kv_bytes / dram_ns <= peak, (name, context)  # the pool's DRAM moved the KV below its peak
        if r.gpu_link_bytes and cfg.attention == "gpu":
            # the KV cannot cross the GPUs' links faster than their summed payload bandwidth
            gpu_link = min(h.capacity_GBps for h in cfg.topology.route(cfg.kv_endpoint, "gpu0").hops)
            assert r.kv_bytes / r.attention_ns <= 8 * gpu_link * (1 + 1e-9), (name, context)


def test_g1_is_capacity_bound_and_the_pool_is_not(results):
    assert results[("gpu-hbm", 32768)].ok
    assert results[("gpu-hbm", 131072)].status.startswith("infeasible: KV 640.0 GiB")
    assert results[("g25", 131072)].ok and results[("g15", 131072)].ok


def test_pnm_beats_fetching_the_kv_back_and_the_gap_grows_with_context(results):
    gains = [results[("g25-nopnm", c)].decode_step_ns / results[("g25", c)].decode_step_ns for c in CONTEXTS]
    assert all(g > 1 for g in gains)
    assert gains == sorted(gains)
    # without PNM the step cannot beat the KV's crossing of the CXL links; with PNM only queries cross them
    for c in CONTEXTS:
        fetch = results[("g25-nopnm", c)]
        assert fetch.decode_step_ns >= fetch.term_ns("kv_fetch") > results[("g25", c)].term_ns("link_queries")
    # PNM reads the KV at the controller: fewer pJ per token than moving it over CXL to the GPUs
    for c in CONTEXTS:
        assert results[("g25", c)].energy_pJ_per_token < results[("g25-nopnm", c)].energy_pJ_per_token


def test_simulated_step_lies_near_its_analytic_estimate(results):
    for (name, context), r in results.items():
        if r.ok:
            ratio = r.decode_step_ns / r.analytic_decode_step_ns
            assert 0.99 <= ratio <= 1.5, (name, context, ratio)  # the analytic figure assumes peak rates


def test_energy_breakdown_adds_up_and_prices_the_links(results, workload):
    r = results[("g25-nopnm", 32768)]
    assert math.isclose(sum(r.energy_breakdown_pJ_per_token.values()), r.energy_pJ_per_token, rel_tol=1e-9)
    wire_bytes = sum(v / 0.9265 for k, v in r.link_bytes.items())  # CXL 2.0 flit efficiency
    assert r.energy_breakdown_pJ_per_token["link.cxl.bit"] == pytest.approx(wire_bytes * 8 * 5.5 / r.tokens)
    pnm = results[("g25", 32768)].energy_breakdown_pJ_per_token
    assert pnm["pnm.fp16_mult"] > 0 and pnm["sram.byte"] > 0 and "interposer.io" in pnm


def test_pnm_model_is_reported_and_the_roofline_is_the_fallback(monkeypatch, workload):
    tree = yaml.safe_load((REPO / "configs/systems/g25.yaml").read_text())
    roof = copy.deepcopy(tree)
    roof["system"]["pool"]["pnm"]["model"] = "roofline"
    r = simulate_step(system_config_from_mapping(roof), workload, 4096)
    assert r.pnm_model == "roofline"
    import archsim.system.attention as attention

    monkeypatch.setattr(attention, "_timed_api", lambda: "timed PNM model unavailable (test)")
    r = simulate_step(system_config_from_mapping(tree), workload, 4096)
    assert r.pnm_model == "roofline" and "unavailable" in r.pnm_note
    assert r.as_dict()["pnm_model"] == "roofline"


def test_small_sram_rereads_the_kv_per_query_subgroup(workload):
    tree = yaml.safe_load((REPO / "configs/systems/g25.yaml").read_text())
    tree["system"]["pool"]["pnm"]["model"] = "roofline"
    big = simulate_step(system_config_from_mapping(copy.deepcopy(tree)), workload, 32768)
    # four 64-token K/V tiles take 64 KiB; queries, scores and partial records 3372 B per query head: 4 fit
    tree["system"]["pool"]["pnm"]["sram"] = "80KiB"
    small = simulate_step(system_config_from_mapping(tree), workload, 32768)
    assert big.sram_hit_rate == pytest.approx(1 - 1 / 8)
    assert small.sram_hit_rate == pytest.approx(1 - 2 / 8)  # group of 8 in two passes
    assert small.term_ns("pnm") > 1.9 * big.term_ns("pnm")


def test_the_timed_unit_counts_the_sram_hit_rate(systems, workload):
    from archsim.system import workload_from_mapping

    # Llama-2-7B is MHA: every KV byte brought into SRAM is read once (no reuse); Llama-3.1-70B's GQA group of 8
    # reads it 8 times; with an SRAM holding 4 query heads the group runs in two passes, each re-loading the KV
    mha = workload_from_mapping({"workload": {"name": "mha", "model": "llama-2-7b", "layers": 2, "batch": 1,
                                              "tensor_parallel": 1, "instances": 1, "contexts": [2048]}})
    r = simulate_step(systems["g25"], mha, 2048)
    assert r.pnm_model == "timed" and r.sram_hit_rate < 0.001 and r.sram_reuse_factor == pytest.approx(1, rel=1e-3)
    r = simulate_step(systems["g25"], workload, 4096)
    assert r.pnm_model == "timed" and r.sram_hit_rate == pytest.approx(1 - 1 / 8, abs=1e-4)
    assert r.sram_reuse_factor == pytest.approx(8, rel=1e-3)
    tree = yaml.safe_load((REPO / "configs/systems/g25.yaml").read_text())
    tree["system"]["pool"]["pnm"]["sram"] = "80KiB"
    small = simulate_step(system_config_from_mapping(tree), workload, 4096)
    assert small.pnm_model == "timed" and small.sram_hit_rate == pytest.approx(1 - 2 / 8, abs=1e-4)


DEVICE_ENERGY = {"gpu-hbm": "gpu.hbm_bit", "host-dram": "host_dram.bit", "nvme": "nvme.active",
                 "rdma-pool": "host_dram.bit", "g25": "dram.cell", "g15": "dram.cell", "g25-nopnm": "dram.cell",
                 "g15-nopnm": "dram.cell"}


@pytest.mark.parametrize("context", CONTEXTS)
def test_every_system_prices_the_device_its_kv_sits_on(results, workload, context):
    from archsim.energy import EnergyTable, energy_by_action

    table = EnergyTable.load()
    geo = _layer_bytes(workload, context)
    store_bytes = geo.step_bytes + geo.layers * geo.append_layer_bytes
    for name, key in DEVICE_ENERGY.items():
        r = results[(name, context)]
        if not r.ok:
            continue
        assert r.energy_breakdown_pJ_per_token.get(key, 0) > 0, (name, key)
        if name in ("host-dram", "rdma-pool"):  # every KV bit fetched and appended, at DDR5's pJ/bit
            per_bit = energy_by_action({"host_dram.bit": 1}, table)["host_dram.bit"]
            assert r.energy_breakdown_pJ_per_token[key] == pytest.approx(8 * store_bytes * per_bit / 16, rel=1e-9)
        if name == "nvme":
            per_byte = energy_by_action({"nvme.byte": 1}, table)["nvme.byte"]
            assert r.energy_breakdown_pJ_per_token[key] == pytest.approx(store_bytes * per_byte / 16, rel=1e-9)
    rdma = results[("rdma-pool", context)].energy_breakdown_pJ_per_token
    nic_bits = 2 * 8 * store_bytes  # the GPU's NIC and the memory server's: both ends of the Ethernet path
    assert rdma["nic.optics_bit"] == pytest.approx(nic_bits * 20.0 / 16, rel=1e-6)
    assert rdma["nic.asic_bit"] == pytest.approx(nic_bits * 62.5 / 16, rel=1e-6)
