"""The step model's GPU side: the calibrated kernels and all-reduces, and collectives on a shared fabric."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from archsim.errors import ConfigError
from archsim.gpu import layer_allreduce_ns, layer_time_ns, load_gpu_preset
from archsim.interconnect import Flow
from archsim.kvlayout import kv_geometry
from archsim.models.presets import load_preset
from archsim.system.config import load_system_config
from archsim.system.decode import simulate_step
from archsim.system.gpu import gpu_layer_time, gpu_work
from archsim.system.links import allreduce_stretch, collectives_on_fabric, pnm_flows
from archsim.system.workload import load_workload

pytestmark = pytest.mark.component


def _work(shape, batch):
    return gpu_work(shape, "bfloat16", batch, 2)


def test_dense_layer_is_the_calibrated_layer_plus_two_allreduces():
    shape = load_preset("llama-2-70b").shape()
    g25 = load_system_config("g25")
    t = gpu_layer_time(shape, "bfloat16", 16, 16, 8, g25.gpus, _work(shape, 16))
    preset = load_gpu_preset("h100")
    assert t.calibrated
    assert t.kernels_ns == pytest.approx(float(layer_time_ns(shape, 16, 8, preset).layer_ns), rel=1e-12)
    assert t.allreduce_ns == pytest.approx(2 * float(layer_allreduce_ns(shape, 16, 8, preset)), rel=1e-12)
    # the measured layer at TP 8 and 16 tokens takes about 0.11 ms (issue 21; docs/gpu.md), a roofline 0.064 ms
    assert 0.09e6 < t.kernels_ns < 0.13e6
    assert gpu_layer_time(shape, "bfloat16", 16, 16, 1, g25.gpus, _work(shape, 16)).allreduce_ns == 0.0


def test_without_a_preset_the_gpu_is_a_roofline_without_collectives():
    shape = load_preset("llama-3.1-8b").shape()
    gpus = replace(load_system_config("g25").gpus, preset=None)
    work = _work(shape, 4)
    t = gpu_layer_time(shape, "bfloat16", 4, 4, 2, gpus, work)
    per_gpu = work.per_gpu(2)
    assert not t.calibrated and t.allreduce_ns == 0.0
    assert t.kernels_ns == pytest.approx(per_gpu.layer_weight_bytes / gpus.hbm_bandwidth_GBps)


@pytest.mark.parametrize("model", ["deepseek-v2-lite", "deepseek-v2"])
def test_moe_and_mla_layers_use_the_same_kernel_model(model):
    shape = load_preset(model).shape()
    gpus = load_system_config("g25").gpus
    times = [gpu_layer_time(shape, "bfloat16", n, n, 1, gpus, _work(shape, n)).kernels_ns for n in (1, 64, 4096)]
    assert times[0] < times[1] < times[2]  # more tokens pick more experts and fill more tiles
    # one token reads its experts' weights at least once: not faster than those bytes at datasheet bandwidth
    expert_bytes = 3 * shape.moe_intermediate_size * shape.hidden_size * 2 * shape.num_experts_per_tok
    assert times[0] > expert_bytes / gpus.hbm_bandwidth_GBps


def test_allreduce_slows_when_pool_traffic_shares_the_scale_up_fabric():
    g15 = load_system_config("g15")
    names = g15.gpu_endpoints(8)
    assert collectives_on_fabric(g15.topology, names)
    assert not collectives_on_fabric(load_system_config("g25").topology, names)
    shape = load_preset("llama-3.1-70b").shape()
    geo = kv_geometry(shape, "bfloat16", 64, 32768)
    ring_bytes = 2 * 7 / 8 * 64 * shape.hidden_size * 2
    inbound, outbound = pnm_flows(names, "pool", geo)
    one = allreduce_stretch(g15.topology, [names], ring_bytes, inbound + outbound)
    doubled = [Flow(f.src, f.dst, 2 * f.size_bytes, name=f.name) for f in inbound + outbound]
    two = allreduce_stretch(g15.topology, [names], ring_bytes, doubled)
    assert allreduce_stretch(g15.topology, [names], ring_bytes, []) == 1.0
    assert 1.0 < one < two
    # the stretched bandwidth term makes the all-reduce longer; its latency floor does not move
    work = _work(shape, 64)
    alone = gpu_layer_time(shape, "bfloat16", 64, 64, 8, g15.gpus, work).allreduce_ns
    assert gpu_layer_time(shape, "bfloat16", 64, 64, 8, g15.gpus, work, allreduce_stretch=two).allreduce_ns > alone


def test_step_breakdown_carries_the_allreduces():
    workload = load_workload("llama3-70b-b16")
    for name in ("g25", "g15", "gpu-hbm"):
        r = simulate_step(load_system_config(name), workload, 4096)
        crit = r.breakdown_ns["critical"]
        assert crit["allreduce"] > 0
        assert sum(crit.values()) == pytest.approx(r.decode_step_ns, abs=1.0)
    g25 = simulate_step(load_system_config("g25"), workload, 4096)
    assert g25.breakdown_ns["critical"]["allreduce"] == pytest.approx(
        80 * gpu_layer_time(workload.shape, "bfloat16", 16, 16, 8, load_system_config("g25").gpus,
                            _work(workload.shape, 16)).allreduce_ns)


def test_an_unknown_gpu_preset_names_its_key(tmp_path):
    path = tmp_path / "s.yaml"
    source = Path(load_system_config("gpu-hbm").file or "").read_text().replace("preset: h100", "preset: a100")
    path.write_text(source)
    with pytest.raises(ConfigError) as err:
        load_system_config(path)
    assert "system.gpus.preset" in str(err.value) and "a100" in str(err.value)
