"""LRU stack distances (archsim.cache.reuse) against a brute-force LRU, and the GPU L2 sampler of serving runs."""

from __future__ import annotations

import json
from collections import OrderedDict

import numpy as np
import pytest
from click.testing import CliRunner

from archsim.cache.reuse import hits_at, stack_distances
from archsim.cli import main
from archsim.serving.gpu_l2 import GpuL2Sampler

pytestmark = pytest.mark.component


def _lru_hits(stream: np.ndarray, capacity: int) -> int:
    cache: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for line in stream.tolist():
        if line in cache:
            hits += 1
            cache.move_to_end(line)
        else:
            cache[line] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return hits


@pytest.mark.parametrize("seed", range(5))
def test_stack_distances_give_the_hits_of_every_lru_size(seed):
    rng = np.random.default_rng(seed)
    stream = rng.zipf(1.3, size=3000) % 200  # skewed reuse, many distances
    distances = stack_distances(stream)
    for capacity in (1, 4, 16, 64, 199):
        assert hits_at(distances, capacity) == _lru_hits(stream, capacity)


def test_stack_distances_by_hand():
    assert stack_distances(np.array([7, 8, 7, 9, 8, 8, 7])).tolist() == [-1, -1, 1, -1, 2, 0, 2]
    assert stack_distances(np.array([], dtype=np.int64)).tolist() == []


def test_the_sampler_sees_query_heads_and_shared_blocks_reuse():
    """A GQA group of 4 query heads re-reads its KV head's blocks: 3 of 4 reads hit; a second sequence on the
    same blocks hits all of them; an L2 smaller than one sequence's blocks loses the group's reuse."""
    line = 8192
    blocks = np.arange(100, dtype=np.uint64)
    big = GpuL2Sampler(capacity_bytes=1000 * line, line_bytes=line, query_heads_per_gpu=4, kv_heads_per_gpu=1)
    big.sample(0, [blocks])
    assert big.summary()["kv_hit_rate"] == pytest.approx(0.75)
    shared = GpuL2Sampler(capacity_bytes=1000 * line, line_bytes=line, query_heads_per_gpu=4, kv_heads_per_gpu=1)
    shared.sample(0, [blocks, blocks])
    assert shared.summary()["kv_hit_rate"] == pytest.approx(7 / 8)
    small = GpuL2Sampler(capacity_bytes=50 * line, line_bytes=line, query_heads_per_gpu=4, kv_heads_per_gpu=1)
    small.sample(0, [blocks])
    assert small.summary()["kv_hit_rate"] == 0.0
    assert small.summary()["kv_hit_rate_by_capacity"]  # the size sweep is reported
    assert not small.due(5) and small.due(16)  # one iteration in every 16


def test_a_serving_run_reports_the_gpu_l2_and_the_pnm_sram(tmp_path):
    out = tmp_path / "out.json"
    result = CliRunner().invoke(main, ["serve", "gpu-hbm", "g25", "--scenario", "tree-search", "--requests", "120",
                                       "--quiet", "--json", str(out)])
    assert result.exit_code == 0, result.output
    gpu, pool = (r["cache_reuse"] for r in json.loads(out.read_text())["results"])
    assert gpu["gpu_l2"]["capacity_bytes"] == 50_000_000 and gpu["gpu_l2"]["sampled_iterations"] >= 1
    # Llama-3.1-70B at tp 8: 8 query heads read each GPU's one KV head, so at least 7 in 8 reads hit
    assert gpu["gpu_l2"]["kv_hit_rate"] >= 0.875 and gpu["pnm_sram_kv_hit_rate"] is None
    # each GPU's eighth of the 70B weights (17.4 GB) comes round once an iteration: never in a 50 MB L2
    assert gpu["gpu_l2"]["weight_reuse_distance_bytes"] == pytest.approx(17.38e9, rel=0.01)
    assert gpu["gpu_l2"]["weight_hit_rate"] == 0.0
    assert pool["gpu_l2"] is None
    read, fetched = pool["pool_decode_kv_tokens_read"], pool["pool_decode_kv_tokens_fetched"]
    assert 0 < fetched <= read and pool["pnm_sram_kv_hit_rate"] == pytest.approx(1 - fetched / (8 * read), abs=1e-6)


def test_kv_read_per_token_is_the_contexts_decode_reads(tmp_path):
    """One request of P = 2,000 prompt tokens and O = 65 answer tokens on G1: decode step j reads P + j tokens
    (j = 0 .. O - 2), so each decoded token reads P + (O - 2) / 2 tokens of 320 KiB on average."""
    out = tmp_path / "one.json"
    result = CliRunner().invoke(main, ["serve", "gpu-hbm", "--scenario", "fixed-input", "--requests", "1", "--quiet",
                                       "--set", "scenario.input.value=2000", "--set", "scenario.output.value=65",
                                       "--json", str(out)])
    assert result.exit_code == 0, result.output
    entry = json.loads(out.read_text())["results"][0]
    assert entry["kv_read_bytes_per_token"] == pytest.approx((2000 + 63 / 2) * 327_680, rel=1e-9)


def test_the_slow_thinking_verdict_reads_the_trend():
    from archsim.serving.slow_thinking_doc import _verdict

    falling = {"scenario.tree.backtrack": [{"l2": 0.85}, {"l2": 0.7}, {"l2": 0.55}],
               "scenario.tree.width": [{"l2": 0.9}, {"l2": 0.92}]}
    lines = _verdict(falling)
    assert "falls monotonically" in lines[0] and "does not fall" in lines[1]
    shallow = {"scenario.tree.backtrack": [{"l2": 0.85}, {"l2": 0.8}], "scenario.tree.width": [{"l2": 0.9}]}
    assert "does not fall" in _verdict(shallow)[0]


POOL_L2 = ("system.pool.l2={capacity: 64MiB, line_size: 128B, ways: 16, replacement: lru, hit_latency_cycles: 20, "
           "mshrs: 64}")


def _pool_sampler(capacity_bytes: int, ways: int, lines_per_block: int = 2):
    from archsim.cache.l2 import l2_config_from_mapping
    from archsim.serving.pool_l2 import PoolL2Sampler

    l2 = l2_config_from_mapping({"capacity": capacity_bytes, "line_size": "128B", "ways": ways,
                                 "replacement": "lru", "hit_latency_cycles": 20, "mshrs": 8})
    # one channel per device, so the slice is the whole L2; a block puts lines_per_block lines on it
    return PoolL2Sampler.of(l2, 1, 4, lines_per_block * 4 * 128, layers=80)


def test_the_pool_l2_sees_branches_share_a_prefix():
    """Four branches stream a 50-block shared prefix and 10 blocks of their own, one after another: with room for
    all of it, every re-read of a prefix line hits (the analytic 1 - distinct / reads), loads included; with
    room for fewer lines than a branch reads, LRU keeps none of the prefix for the next branch."""
    prefix = np.arange(50, dtype=np.uint64) + 1000
    branches = [np.concatenate([prefix, np.arange(10, dtype=np.uint64) + 100 * (b + 1)]) for b in range(4)]
    big = _pool_sampler(1 << 20, ways=8)
    big.read(prefix)  # a load of the prefix before the iteration
    big.iteration(branches)
    reads, distinct = (50 + 4 * 60) * 2, (50 + 40) * 2
    s = big.summary()
    assert s["kv_line_reads"] == reads and s["kv_hit_rate"] == pytest.approx(1 - distinct / reads)
    assert s["iteration_read_bytes"]["max"] == reads * 128 * 4 * 80  # one channel's layer, times both
    fully = _pool_sampler(100 * 128, ways=100)  # 100 lines, fully associative: a branch reads 120
    fully.iteration(branches)
    assert fully.summary()["kv_hit_rate"] == 0.0
    cold = _pool_sampler(1 << 20, ways=8)
    cold.iteration([np.arange(60, dtype=np.uint64) + 100 * b for b in range(4)])  # nothing shared
    assert cold.summary()["kv_hit_rate"] == 0.0


def test_the_pool_l2_starts_warm_only_when_an_iteration_fits():
    """A stream re-reads its 10 blocks every iteration. Sampled warm, every line hits (the previous iteration's
    80 layers of 20 lines fit the 1 MiB slice's 8,192 lines); with 500 blocks (80,000 lines an iteration) they do
    not, and the sample starts cold: every line misses."""
    small = np.arange(10, dtype=np.uint64)
    fits = _pool_sampler(1 << 20, ways=8)
    fits.stride = 2
    for _ in range(3):
        fits.iteration([small])  # sampled: the 1st (cold, no previous) and the 3rd (warm)
    s = fits.summary()
    assert s["sampled_iterations"] == 2 and s["warm_samples"] == 1 and s["kv_hit_rate"] == pytest.approx(0.5)
    big = np.arange(500, dtype=np.uint64)
    spills = _pool_sampler(1 << 20, ways=8)
    spills.stride = 2
    for _ in range(3):
        spills.iteration([big])
    s = spills.summary()
    assert s["warm_samples"] == 0 and s["kv_hit_rate"] == 0.0


def test_the_pool_l2_warms_with_what_every_instance_read_since():
    """Two instances stream their own 10 blocks in turn: instance 0's next iteration starts warm with its own
    previous reads and instance 1's since, and hits all of its lines."""
    sampler = _pool_sampler(1 << 20, ways=8)
    sampler.stride = 2
    own, other = np.arange(10, dtype=np.uint64), np.arange(10, dtype=np.uint64) + 1000
    sampler.iteration([own], 0)    # sampled, cold
    sampler.iteration([other], 1)
    sampler.iteration([own], 0)    # sampled, warm with [own, other]
    s = sampler.summary()
    assert s["warm_samples"] == 1 and s["kv_hit_rate"] == pytest.approx(0.5)


def test_the_pool_l2_samples_one_host_reading_iteration_in_sixteen():
    sampler = _pool_sampler(1 << 20, ways=8)
    for _ in range(40):
        sampler.iteration([])  # reads nothing through the host port: not counted
        sampler.iteration([np.arange(4, dtype=np.uint64)])
    assert sampler.summary()["sampled_iterations"] == 3  # the 1st, 17th and 33rd reading iterations


def test_a_serving_run_reports_the_pool_l2_on_streamed_branches(tmp_path):
    """g25-nopnm streaming its KV (kv.decode: stream) with a 64 MiB L2 per pool device: tree search's siblings
    re-read their parent's blocks, so the host-path L2 hits; one path per request (reasoning) never does."""
    rates = {}
    for scenario in ("tree-search", "reasoning"):
        out = tmp_path / f"{scenario}.json"
        result = CliRunner().invoke(main, ["serve", "g25-nopnm", "--scenario", scenario, "--requests", "20",
                                           "--quiet", "--set", POOL_L2, "--set", "system.kv.decode=stream",
                                           "--json", str(out)])
        assert result.exit_code == 0, result.output
        reuse = json.loads(out.read_text())["results"][0]["cache_reuse"]
        assert reuse["pnm_sram_kv_hit_rate"] is None  # no PNM: the pool's KV goes to the GPUs
        pool = reuse["pool_l2"]
        assert pool["capacity_bytes"] == 8 * 64 * 2**20 and pool["slice_bytes"] == 2**20
        assert pool["sampled_iterations"] >= 1
        rates[scenario] = pool["kv_hit_rate"]
    assert rates["reasoning"] == 0.0 and rates["tree-search"] > 0.3
