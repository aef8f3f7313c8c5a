"""Every shipped system and workload preset loads and runs; the pool's L2 on the host path."""

from __future__ import annotations

import copy

import pytest
import yaml

from archsim.models import load_preset
from archsim.system import load_system_config, load_workload, simulate_step, system_config_from_mapping
from tests.conftest import REPO

pytestmark = pytest.mark.system

SYSTEMS = sorted(p.stem for p in (REPO / "configs/systems").glob("*.yaml"))
WORKLOADS = sorted(p.stem for p in (REPO / "configs/workloads").glob("*.yaml"))


def test_the_issue_presets_ship():
    assert {"g25", "g15", "gpu-hbm", "host-dram", "nvme", "rdma-pool", "g25-nopnm", "g15-nopnm"} <= set(SYSTEMS)


@pytest.mark.parametrize("name", SYSTEMS)
def test_system_preset_runs_a_decode_step(name):
    cfg = load_system_config(name)
    r = simulate_step(cfg, load_workload("llama3-70b-b1"), 4096)
    assert r.ok, r.status
    assert r.attention_ns > 0
    assert r.decode_step_ns >= r.term_ns("gpu_weights") > 0
    assert r.energy_pJ_per_token > 0
    assert (r.row_hit_rate is None) == (cfg.kv_location != "pool")


@pytest.mark.parametrize("name", WORKLOADS)
def test_workload_preset_loads_with_its_shape(name):
    w = load_workload(name)
    spec = yaml.safe_load((REPO / "configs/workloads" / f"{name}.yaml").read_text())["workload"]
    preset = load_preset(spec["model"]).shape()  # the shape comes from the model preset, cut by `layers` if set
    assert w.shape.num_layers == spec.get("layers", preset.num_layers)
    assert w.shape.hidden_size == preset.hidden_size and w.shape.kv_cache_heads == preset.kv_cache_heads
    assert w.batch >= 1 and w.contexts and all(c >= 4096 for c in w.contexts)
    assert w.decode_steps == 64
    assert w.instances_on(8, None) * w.tensor_parallel <= 8


def test_the_llama3_8b_batch_64_workload_outgrows_one_gpu():
    r = simulate_step(load_system_config("gpu-hbm"), load_workload("llama3-8b-b64"), 16384)
    assert r.status.startswith("infeasible: KV 128.0 GiB")


def test_an_l2_on_the_host_path_sees_no_reuse_in_a_kv_stream():
    tree = yaml.safe_load((REPO / "configs/systems/g15-nopnm.yaml").read_text())
    w = load_workload("llama3-70b-b16")
    base = simulate_step(system_config_from_mapping(copy.deepcopy(tree)), w, 4096)
    tree["system"]["pool"]["l2"] = {"capacity": "64MiB", "line_size": "128B", "ways": 16, "replacement": "lru",
                                    "hit_latency_cycles": 20, "mshrs": 64}
    cached = simulate_step(system_config_from_mapping(tree), w, 4096)
    # every KV byte is read once per step: the other three 32 B accesses of a 128 B line merge into its
    # outstanding fill (MSHR), they do not hit; the DRAM still moves every byte
    assert cached.l2_hit_rate is not None and cached.l2_hit_rate < 0.01
    assert cached.term_ns("pool_dram") == pytest.approx(base.term_ns("pool_dram"), rel=0.02)
    assert cached.energy_breakdown_pJ_per_token["l2.line"] > 0
    assert base.l2_hit_rate is None and "l2.line" not in base.energy_breakdown_pJ_per_token


@pytest.mark.slow
def test_no_shipped_workload_at_any_shipped_context_aborts_and_the_critical_terms_add_up():
    from archsim.system.report import attention_split_ns, run_comparison

    systems = [load_system_config(name) for name in SYSTEMS]
    for wname in WORKLOADS:
        w = load_workload(wname)
        for r in run_comparison(systems, w):
            assert r.ok or r.status.startswith("infeasible: "), (wname, r.system, r.context, r.status)
            if not r.ok:
                assert r.decode_step_ns is None and len(r.status) > len("infeasible: ") + 10
                continue
            critical = r.breakdown_ns["critical"]
            assert sum(critical.values()) == pytest.approx(r.decode_step_ns, abs=1.0), (wname, r.system, r.context)
            assert all(v >= 0 for v in critical.values()) and all(v >= 0 for v in r.breakdown_ns["overlapped"].values())
            attn, hidden = attention_split_ns(r)
            assert attn <= r.decode_step_ns and attn + hidden == pytest.approx(r.attention_ns, abs=1.0)
