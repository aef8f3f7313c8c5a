"""The mixed-batch iteration: the uniform decode step is its special case; prefill adds what it should."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from archsim.system.config import load_system_config
from archsim.system.decode import simulate_step
from archsim.system.mixed import decode_terms, mixed_step, ring_stretch
from archsim.system.workload import load_workload

pytestmark = pytest.mark.system

SYSTEMS = ("g25", "g15", "g25-nopnm", "g15-nopnm", "gpu-hbm", "host-dram", "nvme", "rdma-pool")


@pytest.fixture(scope="module")
def workload():
    return load_workload("llama3-70b-b16")


@pytest.mark.parametrize("name", SYSTEMS)
@pytest.mark.parametrize(("batch", "context"), [(16, 4096), (3, 30000)])
def test_uniform_decode_is_the_decode_step(name, batch, context, workload):
    system = load_system_config(name)
    step = simulate_step(system, replace(workload, batch=batch), context)
    mix = mixed_step(system, workload, np.full(batch, context), np.ones(batch, dtype=np.int64))
    assert mix.time_ns == pytest.approx(step.decode_step_ns, rel=1e-12)
    assert sum(mix.parts_ns.values()) == pytest.approx(mix.time_ns, rel=1e-12)


def test_a_prefill_chunk_adds_gpu_work_and_its_kv_write(workload):
    g1 = load_system_config("gpu-hbm")
    decode_only = mixed_step(g1, workload, np.array([4000, 100]), np.array([1, 1]))
    with_chunk = mixed_step(g1, workload, np.array([4000, 100, 0]), np.array([1, 1, 2048]))
    assert with_chunk.time_ns > decode_only.time_ns
    # 2048 more tokens through the GEMMs: compute-bound instead of weight-bound (36 ms of FLOPs at peak)
    assert with_chunk.parts_ns["gpu_weights"] > max(5 * decode_only.parts_ns["gpu_weights"], 36e6)
    assert "prefill_kv_write" not in with_chunk.parts_ns  # G1 keeps its KV where it computes
    # a prefill alone on NVMe: the drive's write path is narrower than the layer's compute, so part is exposed
    nvme = mixed_step(load_system_config("nvme"), workload, np.array([0]), np.array([2048]))
    assert nvme.parts_ns["prefill_kv_write"] > 0
    assert nvme.time_ns > mixed_step(g1, workload, np.array([0]), np.array([2048])).time_ns


def test_prefix_attention_runs_in_the_pnm_pool(workload):
    g25, g25n = load_system_config("g25"), load_system_config("g25-nopnm")
    cached, new = np.array([30000]), np.array([512])
    pnm = mixed_step(g25, workload, cached, new)
    gpu = mixed_step(g25n, workload, cached, new)
    no_prefix = mixed_step(g25, workload, np.array([0]), new)
    assert pnm.parts_ns["prefill_attention"] > no_prefix.parts_ns["prefill_attention"]
    # on the GPU the prefix is read from HBM (the engine loaded it); in the pool it is read beside the DRAM
    assert gpu.parts_ns["prefill_attention"] > no_prefix.parts_ns["prefill_attention"]


def test_decode_terms_replay_the_pool(workload):
    terms = decode_terms(load_system_config("g25"), workload, 4, 8000)
    assert terms.kind == "pnm" and terms.step is not None
    assert terms.step.sampling["replayed_requests"] > 0 and terms.step.row_hit_rate > 0.5


@pytest.mark.parametrize("decoding", [1, 4, 16])
def test_a_prefill_chunks_ring_is_slowed_as_the_flow_model_slows_it(decoding, workload):
    """g15's all-reduces share the fabric with the pool's queries and outputs; the table's stretch is measured
    on a ring of one token per decoding sequence, and the same pool traffic slows a larger ring by the flow
    model's (simulated) amount, which ring_stretch scales to."""
    from archsim.kvlayout import kv_geometry
    from archsim.system.decode import _allreduce_stretch
    from archsim.system.placements import placement_of

    system = load_system_config("g15")
    tp = workload.tensor_parallel
    geo = kv_geometry(workload.shape, workload.dtype, decoding, 16384)
    measured = _allreduce_stretch(system, placement_of(system), geo, tp, tp, replace(workload, batch=decoding))
    assert measured > 1.01  # the fabric is shared: the ring is slowed
    for ring_tokens in (2 * decoding, decoding + 512, 8192):
        simulated = _allreduce_stretch(system, placement_of(system), geo, tp, tp, replace(workload, batch=ring_tokens))
        assert ring_stretch(measured, decoding, ring_tokens) - 1 == pytest.approx(simulated - 1, rel=1e-4)
    assert ring_stretch(measured, decoding, decoding) == measured
