"""Sampling shortcuts against the full simulation, and the KV layout the streams are built from."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import yaml

from archsim.config.memory import memory_config_from_preset
from archsim.kvlayout import Chunk, channel_bounds, channel_footprint_bytes, channel_share, kv_geometry
from archsim.system import simulate_step, system_config_from_mapping, workload_from_mapping
from archsim.system.config import load_system_config
from archsim.system.kvstream import channel_local_to_physical, channel_stream
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


@pytest.mark.slow
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
        assert sampled.term_ns(part) == pytest.approx(full.term_ns(part), rel=0.03), window
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
    assert ([c.tokens for c in share.chunks], share.appends) == ([701] * 6, 6)
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
    assert [(c.head, c.first_token, c.tokens) for c in share.chunks] == [(0, 0, 1024)]
    assert share.max_splits == 4 and share.appends == 0
    assert channel_share(geo, 128, 127).chunks == (Chunk(31, 3072, 1024),)


def _covered(geo, channels):
    """Per head context, the token ranges the channels hold; checks every token is held exactly once."""
    held = {}
    for c in range(channels):
        for chunk in channel_share(geo, channels, c).chunks:
            held.setdefault(chunk.head, []).append((chunk.first_token, chunk.tokens))
    assert sorted(held) == list(range(geo.head_contexts))
    for ranges in held.values():
        ranges.sort()
        assert ranges[0][0] == 0 and sum(n for _, n in ranges) == geo.tokens
        assert all(a + n == b for (a, n), (b, _) in zip(ranges, ranges[1:], strict=False))  # contiguous


@pytest.mark.slow  # maps a 128K-context KV stream: about 21 s
def test_llama2_class_kv_at_128k_uses_every_channel_of_the_pool_evenly():
    # 8 sequences of Llama-2-7B-class MHA at 128K: 512 GiB of KV in the 768 GiB g25 pool (512 channels)
    cfg = load_system_config("g25")
    pool = cfg.pool
    geo = kv_geometry(MEDIUM.shape, "bfloat16", 8, 131072)
    geo = dataclasses.replace(geo, layers=32)
    assert geo.step_bytes == 8 * 131073 * 32 * 32 * 512 and pool.channels == 512
    bounds = channel_bounds(geo, pool.channels)
    share_tokens = np.diff(bounds)
    mean = geo.head_contexts * geo.tokens / pool.channels
    assert np.all(np.abs(share_tokens - mean) <= 1)  # within one token row (a block is 64 of them)
    _covered(geo, pool.channels)
    per_channel = pool.memory.organization.capacity_bytes // pool.channels_per_device
    assert channel_footprint_bytes(geo, pool.channels) <= per_channel
    assert channel_footprint_bytes(geo, pool.channels) * pool.channels >= geo.step_bytes
    # the streams of a channel's first and last layer: distinct addresses inside the channel and its capacity,
    # each layer's reads exactly its share, the layers' regions disjoint
    for c in (0, 257, 511):
        share = channel_share(geo, pool.channels, c)
        local_channel = c % pool.channels_per_device
        seen = []
        for layer in (0, 1, geo.layers - 1):
            s = channel_stream(pool.memory, geo, share, "pnm", tile_tokens=64, interleave_bytes=256, window=0,
                               channel=local_channel, layer=layer)
            reads = s.local[s.is_write == 0]
            assert len(np.unique(reads)) == len(reads) == share.read_bytes(geo) // 32
            assert reads.min() >= layer * share.region_bytes
            assert reads.max() < layer * share.region_bytes + share.read_bytes(geo)
            assert np.all(pool.memory.mapping.decode(s.address).channel == local_channel)
            assert s.address.max() < pool.memory.organization.capacity_bytes
            seen.append(s.address[s.is_write == 0])
        everything = np.concatenate(seen)
        assert len(np.unique(everything)) == len(everything)


@pytest.mark.slow
def test_every_channel_stream_together_reads_each_kv_byte_once():
    # 5 sequences x 32 heads = 160 head contexts over 48 channels: ranges straddle head contexts
    cfg = memory_config_from_preset("HBM3", extra=CH_TOP)
    geo = dataclasses.replace(kv_geometry(MEDIUM.shape, "bfloat16", 5, 300), layers=2)
    channels = cfg.organization.n_channels
    _covered(geo, channels)
    addresses, appends = [], 0
    for c in range(channels):
        share = channel_share(geo, channels, c)
        appends += share.appends
        for layer in range(geo.layers):
            s = channel_stream(cfg, geo, share, "host", tile_tokens=64, interleave_bytes=256, window=0, channel=c,
                               layer=layer)
            addresses.append(s.address[s.is_write == 0])
    everything = np.concatenate(addresses)
    assert len(everything) == len(np.unique(everything)) == geo.step_bytes // 32
    assert appends == geo.head_contexts
