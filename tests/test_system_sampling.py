"""Sampling shortcuts against the full simulation, and the KV layout the streams are built from."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import yaml

from archsim.config.memory import memory_config_from_preset
from archsim.system import simulate_step, system_config_from_mapping, workload_from_mapping
from archsim.system.kvstream import channel_local_to_physical, channel_share, channel_stream, kv_geometry
from tests.conftest import REPO

pytestmark = pytest.mark.system

BASE = yaml.safe_load((REPO / "configs/systems/g25.yaml").read_text())
# medium case: 2 layers of a Llama-2-7B-class model (32 KV heads), 1000 cached tokens, one HBM3E stack of 16
# channels: 2 head contexts per channel per layer, 1.02 M requests in the full run
MEDIUM = workload_from_mapping({"workload": {"name": "medium", "model": "llama-2-7b", "layers": 2, "batch": 1,
                                             "tensor_parallel": 1, "instances": 1, "contexts": [1000]}})


def _system(pnm: bool, full: bool, window: int = 65536):
    tree = copy.deepcopy(BASE)
    s = tree["system"]
    s["pool"]["devices"], s["pool"]["stacks_per_device"] = 1, 1
    s["pool"]["pnm"]["model"] = "roofline"  # the sampled quantity is the DRAM replay
    if not pnm:
        s["attention"] = "gpu"
        del s["pool"]["pnm"]
    s["sampling"] = ({"layers": "all", "channels": "all", "window_requests": 0} if full
                     else {"layers": "once", "channels": "once", "window_requests": window})
    return system_config_from_mapping(tree)


@pytest.mark.parametrize("pnm", [True, False], ids=["pnm-stream", "host-fetch"])
def test_sampled_run_is_within_3_percent_of_the_full_simulation(pnm):
    full = simulate_step(_system(pnm, True), MEDIUM, 1000)
    assert full.sampling["replayed_requests"] == 2 * 16 * 2 * 1001 * 512 // 32 + 2 * 32 * 512 // 32
    part = "pnm" if pnm else "pool_dram"
    # the whole channel stream (32 064 requests), then the smallest window allowed: two refresh intervals
    for window in (65536, 18720):
        sampled = simulate_step(_system(pnm, False, window), MEDIUM, 1000)
        assert sampled.sampling["replayed_requests"] == min(window, 32064)
        for key in ("decode_step_ns", "attention_ns"):
            assert getattr(sampled, key) == pytest.approx(getattr(full, key), rel=0.03), (window, key)
        assert sampled.breakdown_ns[part] == pytest.approx(full.breakdown_ns[part], rel=0.03), window
        assert sampled.row_hit_rate == pytest.approx(full.row_hit_rate, abs=0.03)
        assert sampled.energy_pJ_per_token == pytest.approx(full.energy_pJ_per_token, rel=0.03)


XOR = {"address_mapping": {"scheme": "rorabacobgpcch", "xor": ["ch", "ba"]}}
CH_TOP = {"organization": {"stacks": 3}, "address_mapping": {"scheme": "chrorabacobgpc"}}  # 48 channels: top field


@pytest.mark.parametrize(("preset", "extra"), [("HBM3", {}), ("HBM3E", {}), ("HBM3", XOR), ("HBM3E", XOR),
                                               ("HBM3", CH_TOP)])
def test_channel_local_addresses_stay_in_their_channel_and_are_distinct(preset, extra):
    cfg = memory_config_from_preset(preset, extra={"organization": {"stacks": 2}, **extra})
    local = np.arange(0, 1 << 22, 32, dtype=np.uint64)
    for channel in (0, 5, cfg.organization.n_channels - 1):
        addr = channel_local_to_physical(cfg.mapping, local, channel)
        assert np.all(cfg.mapping.decode(addr).channel == channel)
        assert len(np.unique(addr)) == len(local)
        assert np.all(addr < cfg.organization.capacity_bytes)


@pytest.mark.parametrize("order", ["pnm", "host"])
def test_a_channel_stream_reads_every_kv_byte_of_its_chunks_once(order):
    cfg = memory_config_from_preset("HBM3")
    geo = kv_geometry(MEDIUM.shape, "bfloat16", 3, 700)  # 96 head contexts over 16 channels: 6 each
    share = channel_share(geo, 16)
    assert (share.chunks, share.chunk_tokens, share.appends) == (6, 701, 6)
    s = channel_stream(cfg, geo, share, order, tile_tokens=64, interleave_bytes=256, window=0, channel=3)
    reads = s.address[s.is_write == 0]
    assert len(reads) == 6 * 701 * 512 // 32 and len(np.unique(reads)) == len(reads)
    assert np.all(cfg.mapping.decode(s.address).channel == 3)
    writes = s.address[s.is_write == 1]
    assert len(writes) == 6 * 512 // 32 and np.all(np.isin(writes, reads))  # appends land in the read slots
    assert np.all(s.source[s.is_write == 1] == 0) and np.all(s.source[s.is_write == 0] == (1 if order == "pnm" else 0))


def test_few_head_contexts_split_their_tokens_over_every_channel():
    geo = kv_geometry(MEDIUM.shape, "bfloat16", 1, 4095)  # 32 head contexts, 128 channels: 4 chunks each
    share = channel_share(geo, 128)
    assert (share.chunks, share.chunk_tokens, share.active_channels) == (1, 1024, 128)
