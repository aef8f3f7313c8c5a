"""The serving engine against closed forms: Little's law, token and byte conservation, TTFT at a low rate,
throughput at saturation, KV room, link speed, rejection, a blocked run, preemption, streaming, routers."""

from dataclasses import replace

import numpy as np
import pytest

from archsim.errors import ArchsimError, ConfigError
from archsim.serving import engine
from archsim.serving.engine import REJECT_CAPACITY, REJECT_CONTEXT, REJECT_PREVIOUS, simulate
from tests.serving_tables import (
    KV_BYTES_PER_TOKEN,
    LinearCost,
    PnmLinearCost,
    VectorLinearCost,
    poisson,
    sessions,
    spec,
    table,
)

pytestmark = pytest.mark.component

COST = LinearCost()


def _e2e(res):
    return res.last_token_ns - res.arrival_ns


def _ttft(res):
    return res.first_token_ns - res.arrival_ns


@pytest.mark.slow
def test_littles_law_holds_on_the_engines_own_in_flight_counter():
    reqs = sessions(150, 3, 2.0, 500, 100, 120, 2e9, seed=3)
    res = simulate(reqs, spec(instances=2, router="least_loaded", lower="host_dram", hbm_tokens=30_000), COST)
    assert res.completed.all()
    span = res.span_end_ns - res.span_start_ns
    in_flight = res.inflight_area_ns / span          # L
    throughput = res.completed.sum() / span          # lambda
    latency = _e2e(res).mean()                       # W
    assert in_flight > 2                             # queueing really happened
    assert in_flight == pytest.approx(throughput * latency, rel=0.02)


def test_tokens_out_equal_the_output_lengths_and_prefill_computes_each_prompt_once():
    reqs = poisson(300, 6.0, 700, 90, seed=5)
    res = simulate(reqs, spec(hbm_tokens=20_000), COST)
    assert res.completed.all()
    assert res.tokens_emitted == int(reqs.output_tokens.sum())
    # without preemption or prefix hits, KV computed = every prompt + every decode token but the last
    assert res.preemptions.sum() == 0 and res.hit_blocks.sum() == 0
    assert res.tokens_computed == int(reqs.input_tokens.sum() + (reqs.output_tokens - 1).sum())


def test_bytes_are_conserved_per_tier_and_link():
    reqs = sessions(80, 3, 4.0, 1500, 200, 60, 3e9, seed=7)
    sp = spec(lower="host_dram", hbm_tokens=12_000, link_GBps=16.0)
    res = simulate(reqs, sp, LinearCost(new_ns=200e3))
    assert res.completed.all()
    block = sp.block_bytes
    loaded = res.loaded_blocks.sum(axis=0)
    assert loaded[1] > 0                              # some history came back from host DRAM
    # every byte read out of host DRAM is a load a request recorded; HBM receives computed + loaded KV
    assert res.tier_read_bytes[1] == loaded[1] * block
    assert res.tier_write_bytes[0] == res.tokens_computed * KV_BYTES_PER_TOKEN + loaded[1] * block
    # everything into or out of host DRAM crossed its link, and nothing else did
    assert res.link_bytes["pcie"] == pytest.approx(res.tier_read_bytes[1] + res.tier_write_bytes[1], rel=1e-12)


def test_ttft_at_a_low_rate_is_prefill_plus_kv_load_plus_first_step():
    # alone, a request's TTFT is its prefill iteration (which samples the first token)
    lengths = np.array([300, 1000, 4000, 2500])
    alone = np.array([COST.iteration_ns(np.array([0]), np.array([n])) for n in lengths])
    arrivals = np.cumsum(np.full(len(lengths), 100 * (alone.max() + 100 * COST.a_ns)))   # 0.01x saturation
    res = simulate(table(arrivals, lengths, [50] * len(lengths)), spec(), COST)
    assert _ttft(res) == pytest.approx(alone, rel=1e-9)
    assert np.all(res.queueing_ns == 0) and np.all(res.kv_load_ns == 0)


def test_ttft_of_a_turn_whose_history_is_loaded_from_host_dram():
    # session 0's two turns sandwich session 1, whose KV pushes session 0's history out of the small HBM;
    # turn 2 then loads that history over PCIe (recompute costs more) and prefills the rest
    bt, link_GBps = 16, 8.0
    first, out, new = 2000, 40, 300
    second = first + out + new
    think = 5e9
    reqs = table([0.0, 1e9, np.nan], [first, 3000, second], [out, out, out], session=[0, 1, 0],
                 prev=[-1, -1, 0], think_ns=[0, 0, think])
    cost = LinearCost(new_ns=100e3)
    sp = spec(lower="host_dram", hbm_tokens=3200, link_GBps=link_GBps)
    res = simulate(reqs, sp, cost)
    assert res.completed.all()
    # the head of the history is still in HBM (LRU evicts a sequence's tail first), the rest is loaded
    loaded_blocks = int(res.loaded_blocks[2, 1])
    assert loaded_blocks > 100 and res.hit_blocks[2, 0] + loaded_blocks == (first + out - 1) // bt
    assert res.hit_blocks[2, 1] == loaded_blocks
    load_ns = 2000.0 + loaded_blocks * sp.block_bytes / link_GBps
    cached = (first + out - 1) // bt * bt
    prefill_ns = cost.iteration_ns(np.array([cached]), np.array([second - cached]))
    assert res.kv_load_ns[2] == pytest.approx(load_ns, rel=1e-9)
    assert _ttft(res)[2] == pytest.approx(load_ns + prefill_ns, rel=1e-9)
    assert res.queueing_ns[2] == pytest.approx(0.0, abs=1e-3)


@pytest.mark.parametrize("instances", [1, 2])
def test_throughput_at_saturation_is_instances_times_bmax_over_the_step(instances):
    # fixed lengths whose KV never needs a new block while decoding: B_max = capacity // blocks per request
    bt, prompt, out = 16, 1000, 8
    blocks = -(-(prompt + out - 1) // bt)
    assert blocks == -(-prompt // bt)
    b_max = 20
    cost = LinearCost(a_ns=5e6, new_ns=10.0, cached_ns=50.0)
    sp = spec(instances=instances, hbm_tokens=(b_max * blocks + blocks - 1) * bt)
    n = 1000 * instances
    reqs = table(np.zeros(n), [prompt] * n, [out] * n)
    res = simulate(reqs, sp, cost)
    assert res.completed.all()
    assert res.peak_pinned_blocks[0] == b_max * blocks
    mean_ctx = prompt + (out - 1) / 2
    t_step = cost.iteration_ns(np.full(b_max, mean_ctx), np.ones(b_max))
    throughput = res.tokens_emitted / (res.span_end_ns - res.span_start_ns) * 1e9
    assert throughput == pytest.approx(instances * b_max / t_step * 1e9, rel=0.05)


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_the_running_batch_never_holds_more_kv_than_its_tier(preemption):
    # long outputs grow past the room admission saw: sequences get preempted and still all finish
    reqs = poisson(120, 50.0, 200, 400, seed=11)
    sp = spec(hbm_tokens=6000, lower="host_dram", preemption=preemption)
    res = simulate(reqs, sp, COST)
    assert res.completed.all()
    assert res.preemptions.sum() > 0
    assert res.peak_pinned_blocks[0] <= res.capacity_blocks[0]
    assert res.peak_pinned_blocks[0] >= 0.9 * res.capacity_blocks[0]
    assert res.tokens_emitted == int(reqs.output_tokens.sum())
    if preemption == "swap":                    # what was swapped out came back
        assert res.swap_in_bytes == res.swap_out_bytes > 0 and res.swap_recomputes == 0
    else:
        assert res.swap_in_bytes == res.swap_out_bytes == 0
    # with nothing below HBM there is nowhere to swap to: refused, not recomputed in silence
    if preemption == "swap":
        with pytest.raises(ConfigError, match="swap") as err:
            simulate(reqs, spec(hbm_tokens=6000, preemption="swap"), COST)
        assert err.value.where == "system.serving.preemption"


def _groups(arrival_ns, seed=3, groups=12, prompt=2000):
    """Requests on `groups` distinct 2000-token prompts (a request repeats its group's prompt)."""
    group = np.random.default_rng(seed).integers(0, groups, len(arrival_ns))
    return table(arrival_ns, [prompt] * len(arrival_ns), [30] * len(arrival_ns), session=group)


LINKS_GBPS = (1.0, 2.0, 4.0, 8.0, 16.0, 64.0)


@pytest.mark.slow
def test_a_faster_link_never_raises_any_requests_ttft():
    # one request at a time (0.01x saturation): TTFT = load or recompute, whichever the engine found faster;
    # across the link speeds the choice flips from recompute to load, and no request gets slower
    cost = LinearCost(new_ns=100e3)
    reqs = _groups(np.arange(200) * 100 * cost.iteration_ns(np.array([0]), np.array([2000])))
    ttft, loaded = [], []
    for gbps in LINKS_GBPS:
        res = simulate(reqs, spec(lower="host_dram", hbm_tokens=10_000, link_GBps=gbps), cost)
        assert res.completed.all() and np.all(res.queueing_ns == 0)
        ttft.append(_ttft(res))
        loaded.append(res.loaded_blocks.sum())
    assert loaded[0] == 0 and loaded[-1] > 0.5 * res.hit_blocks.sum()
    for slow, fast in zip(ttft, ttft[1:], strict=False):
        assert np.all(fast <= slow * (1 + 1e-12))
    assert ttft[-1].mean() < 0.5 * ttft[0].mean()


@pytest.mark.slow
def test_a_faster_link_lowers_ttft_under_load():
    # with overlapping requests a load that lands sooner can put a prefill into the iteration another request
    # waits on, so single requests may wait longer (continuous batching does that); the distribution improves
    cost = LinearCost(new_ns=100e3)
    reqs = _groups(np.cumsum(np.random.default_rng(5).exponential(0.5e9, 300)))
    stats = []
    for gbps in LINKS_GBPS[2:]:
        ttft = _ttft(simulate(reqs, spec(lower="host_dram", hbm_tokens=10_000, link_GBps=gbps), cost))
        stats.append((ttft.mean(), np.percentile(ttft, 50), np.percentile(ttft, 90)))
    for slow, fast in zip(stats, stats[1:], strict=False):
        assert all(f < s for f, s in zip(fast, slow, strict=True))


def test_requests_that_can_never_fit_are_rejected_and_counted():
    sp = spec(hbm_tokens=4000, max_context_tokens=8000)
    reqs = table([0, 1e6, 2e6, np.nan, 3e6], [500, 7990, 5000, 600, 800], [20, 20, 20, 20, 20],
                 session=[0, 1, 2, 2, 3], prev=[-1, -1, -1, 2, -1], think_ns=[0, 0, 0, 1e9, 0])
    res = simulate(reqs, sp, COST)
    assert list(res.rejected) == [0, REJECT_CONTEXT, REJECT_CAPACITY, REJECT_PREVIOUS, 0]
    assert list(res.completed) == [True, False, False, False, True]
    # with a tier below HBM the long one streams instead
    res = simulate(reqs, spec(hbm_tokens=4000, max_context_tokens=8000, lower="host_dram"), COST)
    assert list(res.completed) == [True, False, True, True, True]
    assert list(res.streamed) == [False, False, True, False, False]
    # its KV is re-read over the link on every decode step
    assert res.tier_read_bytes[1] >= 19 * 5000 * KV_BYTES_PER_TOKEN


def test_a_run_that_cannot_progress_names_the_blocking_request():
    sp = spec(chunked_prefill=False, max_batch_tokens=2048)
    reqs = table([0, 1e6, 2e6, 3e6], [500, 600, 3000, 400], [10, 10, 10, 10])
    with pytest.raises(ArchsimError, match=r"request 2 .*max_batch_tokens 2048"):
        simulate(reqs, sp, COST)
    # chunked prefill serves it
    res = simulate(reqs, replace(sp, chunked_prefill=True), COST)
    assert res.completed.all()


def test_chunked_prefill_fills_a_long_prompt_in_budget_sized_chunks_beside_decoding():
    budget, long_prompt = 2048, 20000
    reqs = table([0.0, 1e6], [100, long_prompt], [400, 5])
    res = simulate(reqs, spec(max_batch_tokens=budget), COST)
    # request 1 arrives during request 0's prefill; then every iteration decodes request 0 and spends the
    # rest of the budget on request 1's prompt
    chunk, expected, filled, k = budget - 1, 0.0, 0, 0
    while filled < long_prompt:
        new = min(chunk, long_prompt - filled)
        expected += COST.iteration_ns(np.array([100 + k, filled]), np.array([1, new]))
        filled += new
        k += 1
    assert k == 10
    assert res.prefill_ns[1] == pytest.approx(expected, rel=1e-12)
    assert res.first_token_ns[1] == pytest.approx(COST.iteration_ns(np.array([0]), np.array([100])) + expected)


def test_a_pnm_pool_serves_cached_prefixes_in_place():
    reqs = sessions(40, 3, 2.0, 3000, 200, 30, 1e9, seed=17)
    sp = spec(lower="pool", kv_home=1, hbm_tokens=1000, lower_tokens=400_000)
    res = simulate(reqs, sp, COST)
    assert res.completed.all()
    assert res.loaded_blocks.sum() == 0                # attention runs in the pool: nothing loads
    later = reqs.prev >= 0
    assert np.all(res.hit_blocks[later, 1] > 0) and res.hit_blocks[:, 0].sum() == 0
    # prefill and decode KV is written into the pool over its link, and that is all it carries
    assert res.link_bytes["cxl"] == pytest.approx(res.tokens_computed * KV_BYTES_PER_TOKEN, rel=1e-12)


def test_a_prefill_into_the_pool_lasts_until_its_kv_is_written():
    # one request alone: its prefill iteration ends when both the GPU work and the write into the pool are done
    prompt = 4000
    compute_ns = COST.iteration_ns(np.array([0]), np.array([prompt]))
    write_ns = 1000.0 + prompt * KV_BYTES_PER_TOKEN / 4.0      # cxl latency + bytes at 4 GB/s
    assert write_ns > compute_ns
    for link_GBps, ttft_ns in ((4.0, write_ns), (400.0, compute_ns)):
        res = simulate(table([0.0], [prompt], [5]), spec(lower="pool", kv_home=1, link_GBps=link_GBps), COST)
        assert _ttft(res)[0] == pytest.approx(ttft_ns, rel=1e-12)
        busy_ns = res.link_write_busy_ns["cxl (write)"]
        assert busy_ns == pytest.approx(prompt * KV_BYTES_PER_TOKEN / link_GBps, rel=1e-12)


def test_prefill_writes_of_two_instances_share_the_pool_links_write_direction():
    prompt, link_GBps = 4000, 4.0
    one = 1000.0 + prompt * KV_BYTES_PER_TOKEN / link_GBps
    res = simulate(table([0.0, 0.0], [prompt, prompt], [5, 5]),
                   spec(lower="pool", kv_home=1, link_GBps=link_GBps, instances=2), COST)
    assert list(res.instance) == [0, 1]
    assert _ttft(res) == pytest.approx([1000.0 + 2 * (one - 1000.0)] * 2, rel=1e-12)   # processor sharing


def test_a_prefill_writes_its_kv_through_once_within_its_iteration():
    # HBM home, host DRAM below: the prompt's KV goes down as the prefill computes it, and the iteration ends
    # when the write has landed too (vLLM's wait_for_save), at its compute or its write, whichever is later;
    # the write direction is busy once, within the prefill, and nothing is written again after the first token
    prompt = 4000
    size = prompt * KV_BYTES_PER_TOKEN
    compute_ns = COST.iteration_ns(np.array([0]), np.array([prompt]))
    for link_GBps in (1.0, 400.0):
        res = simulate(table([0.0], [prompt], [50]), spec(lower="host_dram", link_GBps=link_GBps), COST, record=True)
        write_ns = 2000.0 + size / link_GBps
        assert _ttft(res)[0] == pytest.approx(max(compute_ns, write_ns), rel=1e-12)
        assert res.link_write_busy_ns["pcie (write)"] == pytest.approx(size / link_GBps, rel=1e-12)
        assert res.link_bytes["pcie"] == res.tier_write_bytes[1] == size
        assert res.activity["transfer_end_ns"].max() <= res.first_token_ns[0]
        assert res.link_busy_ns["pcie"] == 0


def test_a_prefill_does_not_write_through_again_the_blocks_the_tier_below_holds():
    """r0 and r2 share their first 200 blocks; r1 pushes r0's out of a small HBM, so r2 finds 31 of them in HBM
    and 169 in host DRAM, and recomputes those (its link is too slow to load them). Its prefill writes down only
    its own 800 tokens: each distinct prompt token reaches the tier once, 4,000 + 4,000 + 800 (a connector checks
    before it saves; writing the 169 again made 11,504)."""
    from dataclasses import replace

    reqs = table([0.0, 1e9, 2e9], [4000, 4000, 4000], [1, 1, 1], session=np.array([1, 2, 3]))
    keys = reqs.block_keys.copy()
    first = reqs.block_offsets
    keys[first[2]:first[2] + 200] = keys[first[0]:first[0] + 200]
    res = simulate(replace(reqs, block_keys=keys), spec(lower="host_dram", hbm_tokens=4500, link_GBps=0.001), COST)
    assert res.hit_blocks.tolist() == [[0, 0], [0, 0], [31, 169]]
    assert res.tier_write_bytes[1] == (4000 + 4000 + 800) * KV_BYTES_PER_TOKEN


class PnmVectorCost(PnmLinearCost):
    """PnmLinearCost without its vectorized stretch: the engine prices each step with iteration_pnm_ns."""

    decode_steps_pnm_ns = None


def _on_ports(sp, port_GBps: float = 16.0):
    """The spec's lower tier reached by each server over a port of its own."""
    return replace(sp, tiers=(sp.tiers[0], replace(sp.tiers[1], server_link_GBps=port_GBps)))


def _servers_spec(pool_side_GBps: float, port_GBps: float = 4.0, servers: int = 2):
    # back-invalidation: nothing here is rewritten or evicted, so coherence costs nothing and the links decide
    sp = spec(lower="pool", kv_home=1, link_GBps=pool_side_GBps, instances=2, servers=servers,
              coherence="back_invalidate")
    return replace(sp, tiers=(sp.tiers[0], replace(sp.tiers[1], server_link_GBps=port_GBps)))


def test_two_servers_on_one_pool_port_wait_longer_than_on_two():
    # one prefill on each server at once, each writing its KV into the pool over its server's 4 GB/s port and
    # the pool's side: with 8 GB/s there each moves at 4, with 4 GB/s (one port for both) at 2
    prompt = 4000
    size = prompt * KV_BYTES_PER_TOKEN
    reqs = table([0.0, 0.0], [prompt, prompt], [5, 5])
    two = simulate(reqs, _servers_spec(8.0), COST)
    one = simulate(reqs, _servers_spec(4.0), COST)
    assert list(two.instance) == [0, 1] and two.spec.server_of(1) == 1
    assert _ttft(two) == pytest.approx([1000.0 + size / 4.0] * 2, rel=1e-9)
    assert _ttft(one) == pytest.approx([1000.0 + size / 2.0] * 2, rel=1e-9)
    # each prefill and its four decode appends crossed its own port and the shared side, which carried both
    each = size + 4 * KV_BYTES_PER_TOKEN
    assert two.link_bytes["cxl (server0)"] == two.link_bytes["cxl (server1)"] == pytest.approx(each, rel=1e-12)
    assert two.link_bytes["cxl"] == pytest.approx(2 * each, rel=1e-12)
    # a port of its own: two instances on one server share it, on two servers they do not
    same = simulate(reqs, _servers_spec(8.0, servers=1), COST)
    assert _ttft(same) == pytest.approx([1000.0 + size / 4.0] * 2, rel=1e-9)   # one 8 GB/s link for both


def test_several_servers_load_history_from_a_tier_below_over_their_own_ports():
    # HBM homes, host DRAM below: later turns load their history back over their server's port and the shared
    # side when that beats recomputing it, priced at the slower of the two
    reqs = sessions(10, 3, 4.0, 600, 100, 150, 1e9, seed=31)
    runs = {}
    for port_GBps in (12.5, 25.0):
        sp = spec(instances=2, lower="host_dram", hbm_tokens=6000, servers=2)
        sp = replace(sp, tiers=(sp.tiers[0], replace(sp.tiers[1], server_link_GBps=port_GBps)))
        runs[port_GBps] = simulate(reqs, sp, COST)
        assert runs[port_GBps].completed.all()
    assert runs[12.5].loaded_blocks[:, 1].sum() == 0       # half the shared side's rate: recomputing is faster
    res = runs[25.0]
    assert res.loaded_blocks[:, 1].sum() > 0
    ports = res.link_bytes["pcie (server0)"] + res.link_bytes["pcie (server1)"]
    # everything crossed a port and the shared side
    assert ports == pytest.approx(res.link_bytes["pcie"], rel=1e-12) and res.link_bytes["pcie (server1)"] > 0


def test_several_servers_need_a_port_and_whole_instances():
    reqs = table([0.0], [100], [5])
    with pytest.raises(ConfigError, match="port") as err:
        simulate(reqs, _servers_spec(8.0, port_GBps=0.0), COST)
    assert err.value.where == "system.kv.tiers[1].endpoint"
    with pytest.raises(ConfigError, match="split evenly") as err:
        simulate(reqs, _servers_spec(8.0, servers=3), COST)
    assert err.value.where == "system.servers"


def test_a_swapped_sequence_comes_back_only_after_its_swap_out_lands(monkeypatch):
    swaps: dict[int, list[tuple[str, float, float]]] = {}
    real = engine._Engine._transfer

    def spy(self, tier, size_bytes, what, who, t):
        if what in (engine.X_SWAP_OUT, engine.X_SWAP_IN):
            swaps.setdefault(who, []).append(("out" if what == engine.X_SWAP_OUT else "in", t, size_bytes))
        return real(self, tier, size_bytes, what, who, t)

    monkeypatch.setattr(engine._Engine, "_transfer", spy)
    link_GBps = 0.5
    res = simulate(poisson(120, 50.0, 200, 400, seed=11),
                   spec(hbm_tokens=6000, lower="host_dram", preemption="swap", link_GBps=link_GBps), COST)
    assert res.completed.all() and res.swap_out_bytes > 0
    for events in swaps.values():      # out, in, out, in, ...: the swap-in starts once the swap-out landed
        assert [kind for kind, _, _ in events] == ["out", "in"] * (len(events) // 2)
        for (_, t_out, size), (_, t_in, _) in zip(events[::2], events[1::2], strict=True):
            assert t_in >= t_out + 2000.0 + size / link_GBps


def test_decode_stream_rereads_the_kv_every_step():
    reqs = poisson(20, 0.5, 1000, 30, seed=19)
    load = simulate(reqs, spec(lower="host_dram"), COST)
    stream = simulate(reqs, spec(lower="host_dram", decode="stream", link_GBps=25.0), COST)
    assert stream.streamed.all() and not load.streamed.any()
    assert stream.tier_read_bytes[1] >= 29 * 1000 * 20 * KV_BYTES_PER_TOKEN
    e2e_load, e2e_stream = _e2e(load), _e2e(stream)
    assert np.all(e2e_stream > e2e_load)


def test_prefix_router_keeps_a_session_on_the_instance_holding_its_history():
    reqs = sessions(40, 4, 4.0, 1000, 100, 40, 1e9, seed=23)
    by_router = {}
    for router in ("round_robin", "least_loaded", "prefix"):
        res = simulate(reqs, spec(instances=4, router=router, hbm_tokens=200_000), COST)
        assert res.completed.all()
        by_router[router] = res
    rr = by_router["round_robin"]
    rank = np.empty(len(reqs), dtype=np.int64)
    rank[np.lexsort((np.arange(len(reqs)), rr.arrival_ns))] = np.arange(len(reqs))
    assert np.array_equal(rr.instance, rank % 4)            # turns in arrival order, one instance after another
    prefix = by_router["prefix"]
    later = reqs.prev >= 0
    assert np.all(prefix.instance[later] == prefix.instance[reqs.prev[later]])
    hbm_hits = {name: r.hit_blocks[:, 0].sum() for name, r in by_router.items()}
    assert hbm_hits["prefix"] > hbm_hits["round_robin"]


def test_same_inputs_give_identical_runs():
    reqs = sessions(50, 3, 5.0, 800, 100, 60, 1e9, seed=29)
    sp = spec(instances=2, router="prefix", lower="host_dram", hbm_tokens=10_000)
    a, b = simulate(reqs, sp, COST), simulate(reqs, sp, COST)
    for field in ("first_token_ns", "last_token_ns", "hit_blocks", "loaded_blocks", "instance"):
        assert np.array_equal(getattr(a, field), getattr(b, field), equal_nan=True)
    assert a.link_bytes == b.link_bytes and a.iterations == b.iterations


def test_bad_specs_name_their_key():
    with pytest.raises(ConfigError, match="system.serving.router"):
        simulate(poisson(2, 1.0, 10, 2), spec(router="random"), COST)
    with pytest.raises(ConfigError, match="system.serving.block_tokens"):
        simulate(poisson(2, 1.0, 10, 2, block_tokens=32), spec(), COST)


def test_two_loads_that_start_together_share_the_link():
    # groups 0 and 1 fill a two-request HBM, groups 2 and 3 push them down to host DRAM, then 0 and 1 come
    # back at the same instant and load their prompts together; alone, one of them loads at full speed
    link_GBps, latency_ns = 16.0, 2000.0
    arrivals = [0.0, 1e6, 2e9, 2.001e9, 5e9, 5e9]
    cost = LinearCost(new_ns=100e3)
    sp = spec(lower="host_dram", hbm_tokens=4100, link_GBps=link_GBps)
    together = simulate(table(arrivals, [2000] * 6, [10] * 6, session=[0, 1, 2, 3, 0, 1]), sp, cost)
    alone = simulate(table(arrivals[:5], [2000] * 5, [10] * 5, session=[0, 1, 2, 3, 0]), sp, cost)
    a, b = (together.loaded_blocks[r, 1] * sp.block_bytes for r in (4, 5))
    assert min(a, b) > 100 * sp.block_bytes
    one = alone.loaded_blocks[4, 1] * sp.block_bytes
    assert one == a
    assert alone.kv_load_ns[4] == pytest.approx(latency_ns + one / link_GBps, rel=1e-9)
    # processor sharing: the smaller finishes after 2 x its bytes, the larger after both
    small, large = sorted((a, b))
    loads = sorted(together.kv_load_ns[4:6])
    assert loads[0] == pytest.approx(latency_ns + 2 * small / link_GBps, rel=1e-9)
    assert loads[1] == pytest.approx(latency_ns + (small + large) / link_GBps, rel=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("home", ["hbm", "pool"])
def test_disaggregation_prefills_on_one_side_and_decodes_on_the_other(home):
    reqs = poisson(200, 8.0, 1200, 60, seed=37)
    kw = {"lower": "host_dram", "hbm_tokens": 40_000} if home == "hbm" else {"lower": "pool", "kv_home": 1}
    sp = spec(instances=3, router="least_loaded", disaggregated=True, prefill_instances=1, **kw)
    res = simulate(reqs, sp, COST)
    assert res.completed.all() and res.tokens_emitted == int(reqs.output_tokens.sum())
    assert set(res.instance.tolist()) == {1, 2}              # every request finished on a decode instance
    span = res.span_end_ns - res.span_start_ns
    assert res.mean_inflight == pytest.approx(res.completed.sum() / span * _e2e(res).mean(), rel=0.02)
    if home == "hbm":   # each prompt's KV crossed into a decode instance's HBM, from where prefill wrote it
        assert res.handover_bytes == pytest.approx(float(reqs.input_tokens.sum()) * KV_BYTES_PER_TOKEN)
        assert res.tier_read_bytes[1] == res.handover_bytes
    else:               # the decode side attends in the same pool: nothing moves
        assert res.handover_bytes == 0 and res.tier_read_bytes.sum() == 0
    # a lone request: TTFT is its prefill; its decode waits for the handover first
    alone = simulate(poisson(1, 1.0, 1200, 60), sp, COST)
    assert _ttft(alone)[0] == pytest.approx(COST.iteration_ns(np.array([0]), np.array([1200])))
    with pytest.raises(ConfigError, match="system.serving.prefill_instances"):
        simulate(reqs, spec(instances=2, disaggregated=True, prefill_instances=1), COST)


@pytest.mark.slow
@pytest.mark.parametrize("system", ["hbm", "pool", "roomy-pool", "roomy-pool-one-turn", "pool-then-arrival",
                                    "stream-head", "swap", "disaggregated", "servers-software", "servers-bi",
                                    "servers-hbm", "servers-pnm-fifo", "servers-pnm-fair"])
def test_the_decode_fast_path_runs_the_same_iterations_at_the_same_times(system, monkeypatch):
    reqs = sessions(40, 3, 4.0, 600, 100, 150, 1e9, seed=31)
    if system == "roomy-pool-one-turn":
        reqs = poisson(120, 12.0, 600, 150, seed=31)
    elif system == "pool-then-arrival":
        reqs = table([0.0, 1e9], [160, 16 * 700], [16 * 400, 10])
    elif system == "stream-head":
        reqs = table([0.0, 1e6, 2e6, 3e6], [8000, 100, 100, 8000], [50, 3000, 1, 10])
    elif system.startswith("servers"):   # a prefix every session shares, read and rewritten on both servers
        reqs = sessions(40, 3, 4.0, 600, 100, 150, 1e9, seed=31, prefix_tokens=256)
    sp = {"hbm": spec(instances=2, router="prefix", lower="host_dram", hbm_tokens=6000),
          "pool": spec(instances=2, lower="pool", kv_home=1, lower_tokens=8000),
          # a pool that never fills: the instances' decode stretches no longer wait for each other
          "roomy-pool": spec(instances=3, lower="pool", kv_home=1, lower_tokens=2_000_000),
          # ... with requests of one turn each, and an arrival at an idle instance while another decodes
          "roomy-pool-one-turn": spec(instances=3, lower="pool", kv_home=1, lower_tokens=2_000_000),
          "pool-then-arrival": spec(instances=2, lower="pool", kv_home=1, lower_tokens=16_000),
          # a waiting head that streams from host DRAM, whose room another instance's stream frees
          "stream-head": spec(instances=2, lower="host_dram", hbm_tokens=4000, lower_tokens=14000),
          "swap": spec(lower="host_dram", hbm_tokens=5000, preemption="swap"),
          "disaggregated": spec(instances=3, disaggregated=True, prefill_instances=1, lower="host_dram",
                                hbm_tokens=6000),
          # two servers on a small pool: coherence owed by the blocks decode starts, evictions, rewrites, stale
          # copies invalidated
          "servers-software": _on_ports(spec(instances=2, servers=2, lower="pool", kv_home=1, lower_tokens=20000)),
          "servers-bi": _on_ports(spec(instances=2, servers=2, lower="pool", kv_home=1, lower_tokens=20000,
                                       coherence="back_invalidate")),
          # ... HBM homes whose evictions demote into the pool
          "servers-hbm": _on_ports(spec(instances=2, servers=2, lower="pool", hbm_tokens=6000, lower_tokens=9000)),
          # ... decode attention as jobs at the pool's shared PNM units
          "servers-pnm-fifo": _on_ports(spec(instances=2, servers=2, lower="pool", kv_home=1, lower_tokens=20000,
                                             pnm_scheduling="fifo")),
          "servers-pnm-fair": _on_ports(spec(instances=3, servers=3, lower="pool", kv_home=1, lower_tokens=20000,
                                             coherence="back_invalidate"))
          }[system]
    cost, vectorized = (PnmLinearCost(), PnmVectorCost()) if "pnm" in system else (COST, VectorLinearCost())
    fast = simulate(reqs, sp, cost, record=True)
    vector = simulate(reqs, sp, vectorized)                  # the cost's own vectorized decode stretch
    monkeypatch.setattr(engine._Engine, "fast_decode", False)
    slow = simulate(reqs, sp, cost, record=True)
    # the recorded iterations and transfers (serve --timeline) are the event path's, one by one
    assert fast.activity["links"] == slow.activity["links"]
    for key, column in fast.activity.items():
        if key != "links":
            assert np.array_equal(column, slow.activity[key]), key
    assert len(fast.activity["iteration_start_ns"]) == fast.iterations
    if system == "hbm":     # HBM evicts answers no later turn continues: demoted to host DRAM, timed at their step
        assert (fast.activity["transfer_kind"] == engine.X_DEMOTE).sum() > 100
    assert np.array_equal(vector.last_token_ns, slow.last_token_ns)
    for field in ("first_token_ns", "last_token_ns", "queueing_ns", "kv_load_ns", "hit_blocks", "loaded_blocks",
                  "instance", "preemptions", "tier_read_bytes", "tier_write_bytes", "peak_pinned_blocks"):
        assert np.array_equal(getattr(fast, field), getattr(slow, field), equal_nan=True), field
    assert (fast.iterations, fast.tokens_emitted, fast.link_bytes) == (slow.iterations, slow.tokens_emitted,
                                                                       slow.link_bytes)
    assert fast.utilization == slow.utilization               # the pool DRAM's bytes over time too, step by step
    assert fast.coherence == slow.coherence                   # several servers: what they owed, block by block
    assert fast.pnm_units == slow.pnm_units
    if "pnm" in system:
        assert fast.pnm_units["queueing_ms_total"] > 0
    if system.startswith("servers"):
        assert fast.coherence["stall_ms"] > 0 and (system != "servers-software" or fast.coherence["invalidations"])
