"""Several servers on one pool (issue 25): the 16-server presets against the published figures they cite, the
serving spec they give, per-server metrics, latency rising with load on a shared pool side, and bad splits."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from archsim.errors import ConfigError
from archsim.interconnect import Flow, Topology, allocate
from archsim.resources import data_path
from archsim.serving.build import serving_spec, serving_workload
from archsim.serving.engine import simulate
from archsim.serving.metrics import summarize
from archsim.serving.run import model_limits
from archsim.serving.scenario import load_scenario
from archsim.system.config import load_system_config
from tests.serving_tables import KV_BYTES_PER_TOKEN, LinearCost, poisson, spec, table

pytestmark = pytest.mark.component

BELUGA_POOL_GBPS = 1000.0      # Beluga (SIGMOD 2026) sec. 4.1: 16 servers share the pool at "1 TB/s"


def _topology(name: str) -> Topology:
    return Topology.load(data_path("configs", "interconnect", f"{name}.yaml"))


def _spec(system: str, overrides: tuple[str, ...] = ()):
    config = load_system_config(system, list(overrides))
    shape, dtype, max_context = model_limits(load_scenario("shared-prefix"))
    return serving_spec(config, serving_workload(config, shape, dtype, max_context, "test"), max_context)


def test_the_16_server_g25_pool_lands_on_belugas_bandwidth_and_a_switched_pools_latency():
    topo = _topology("cxl2_switch_16s")
    rates = allocate(topo, [Flow("pool", f"gpu{i}", 1) for i in range(128)])
    aggregate = sum(rates)
    assert aggregate == pytest.approx(32 * 32 * 0.9265, rel=1e-9)           # 32 x8 device ports
    assert abs(aggregate / BELUGA_POOL_GBPS - 1) <= 0.15
    # one server alone gets its x16 port; all sixteen at once split the pool side evenly
    alone = allocate(topo, [Flow("pool", f"gpu{i}", 1) for i in range(8)])
    assert sum(alone) == pytest.approx(64 * 0.9265, rel=1e-9)
    assert rates == pytest.approx([aggregate / 128] * 128, rel=1e-9)
    # a load's added round trip past the GPU's own PCIe path to its server (what host DRAM costs too): the CXL
    # link, switch and device port both ways, inside a switched pool's +200-600 ns (docs/interconnect.md)
    for gpu in ("gpu0", "gpu127"):
        past_server = topo.route(gpu, "pool").latency_ns - (100 + 150)   # the GPU's PCIe link, the root complex
        assert past_server == 40 + 200 + 40 and 200 <= 2 * past_server <= 600


def test_the_16_server_g15_fabric_is_two_switch_tiers_at_gpu_bandwidth():
    topo = _topology("scaleup_g15_16s")
    route = topo.route("gpu77", "pool")
    assert route.nodes == ("gpu77", "leaf9", "spine", "pool") and route.latency_ns == 40 + 150 + 40 + 150 + 40
    rates = allocate(topo, [Flow("pool", f"gpu{i}", 1) for i in range(128)])
    assert sum(rates) == pytest.approx(32 * 900 * 0.93, rel=1e-9)
    assert sum(rates) > 25 * sum(allocate(_topology("cxl2_switch_16s"), [Flow("pool", f"gpu{i}", 1)
                                                                          for i in range(128)]))


@pytest.mark.parametrize("system", ["g25-16s", "g15-16s"])
def test_a_16_server_system_serves_16_instances_each_on_its_own_port(system):
    sp = _spec(system)
    pool = sp.tiers[sp.kv_home]
    assert (sp.servers, sp.instances) == (16, 16)
    assert [sp.server_of(i) for i in range(16)] == list(range(16))
    per_gpu = allocate(_topology("cxl2_switch_16s" if system == "g25-16s" else "scaleup_g15_16s"),
                       [Flow("pool", f"gpu{i}", 1) for i in range(128)])
    assert pool.link_GBps == pytest.approx(sum(per_gpu), rel=1e-9)          # the side every server shares
    assert pool.server_link_GBps < pool.link_GBps / 2
    # fewer servers of the same preset: their GPUs, their ports, the pool side their routes reach
    two = _spec(system, ("system.servers=2", "system.gpus.count=16"))
    assert (two.servers, two.instances) == (2, 2) and two.tiers[1].server_link_GBps == pool.server_link_GBps


@pytest.mark.parametrize(("overrides", "where", "words"), [
    (("system.servers=3",), "system.servers", "do not split evenly over 3 servers"),
    (("system.servers=32",), "system.serving.tensor_parallel", "an instance stays in one of the 32 servers"),
    (("system.serving.instances=8",), "system.serving.instances", "8 instances do not split evenly"),
    (("system.pool.coherence=directory",), "system.pool.coherence", "software, back_invalidate"),
    (("system.pool.pnm.scheduling=round_robin",), "system.pool.pnm.scheduling", "fifo, fair_share"),
])
def test_a_bad_split_over_servers_is_one_error_at_its_key(overrides, where, words):
    with pytest.raises(ConfigError) as err:
        _spec("g25-16s", overrides)
    assert err.value.where == where and words in str(err.value)
    assert err.value.file.endswith("configs/systems/g25-16s.yaml")


def test_a_server_with_no_route_to_the_pool_is_named():
    # server 15's root complex has no uplink: its GPUs cannot reach the pool
    data = {"endpoints": {"gpu": {"count": 16}, "pool": None},
            "switches": {"server": {"count": 2, "ports": 9, "latency": "0ns"}},
            "links": {"pcie": {"from": "gpu", "to": "server", "protocol": "pcie", "bandwidth": "64GB/s",
                               "efficiency": 1.0, "latency": "0ns", "energy_pJ_per_bit": 0},
                      "up": {"from": "server0", "to": "pool", "protocol": "cxl", "bandwidth": "64GB/s",
                             "efficiency": 1.0, "latency": "0ns", "energy_pJ_per_bit": 0}}}
    with pytest.raises(ConfigError) as err:
        Topology.from_mapping(data)
    assert "gpu8" in str(err.value) and err.value.where == "interconnect.endpoints.gpu"


def _two_server_loads(rate_per_s: float):
    """Prefills writing 2,000 tokens of KV each into a PNM pool, two instances on two servers with 8 GB/s ports
    and a 10 GB/s shared pool side: the writes queue on the pool side as the rate rises."""
    # back-invalidation: no block is rewritten or evicted, so coherence costs nothing and the links decide
    sp = spec(lower="pool", kv_home=1, link_GBps=10.0, instances=2, servers=2, coherence="back_invalidate")
    sp = replace(sp, tiers=(sp.tiers[0], replace(sp.tiers[1], server_link_GBps=8.0)))
    cost = LinearCost(a_ns=1e5, new_ns=1e3, cached_ns=0.0)   # compute far below the write: the links decide
    return simulate(poisson(400, rate_per_s, 2000, 2, seed=3), sp, cost)


def test_ttft_rises_steeply_as_the_shared_pool_side_fills():
    write_s = 2000 * KV_BYTES_PER_TOKEN / 10e9                   # one prefill's write alone on the pool side
    saturation = 1 / write_s
    ttft = []
    for load in (0.2, 0.5, 0.8, 0.95):
        res = _two_server_loads(load * saturation)
        assert res.completed.all()
        ttft.append(float(np.mean(res.first_token_ns - res.arrival_ns)))
        util = summarize(res)["link_write_utilization"]["cxl (write)"]
        assert util == pytest.approx(load, rel=0.15)               # the shared side is as busy as offered
    assert ttft == sorted(ttft)
    # M/G/1-like: the last step of load costs several times the first
    assert (ttft[3] - ttft[2]) / 0.15 > 3 * (ttft[1] - ttft[0]) / 0.3


@pytest.mark.slow
def test_per_server_figures_partition_the_run():
    from tests.test_serving_system import _serve

    table, sp, _, res = _serve("g25-16s", "shared-prefix", 320)
    entry = summarize(res)
    servers = entry["servers"]
    assert [s["server"] for s in servers] == list(range(16)) and res.completed.all()
    assert sum(s["requests_measured"] for s in servers) == entry["requests_measured"] == 320
    server = res.instance * sp.servers // sp.instances
    for s in (0, 7, 15):
        mine = server == s
        ttft_ms = (res.first_token_ns[mine] - res.arrival_ns[mine]) / 1e6
        assert servers[s]["ttft_ms"]["mean"] == pytest.approx(ttft_ms.mean(), rel=1e-12)
    rates = np.array([s["throughput_tokens_per_s"] for s in servers])
    assert entry["server_fairness"] == pytest.approx(rates.sum() ** 2 / (16 * (rates ** 2).sum()), rel=1e-12)
    assert 0.8 < entry["server_fairness"] <= 1.0              # round robin spreads the load evenly


def _coherence_runs(scheme: str, data_path: str = "cpu"):
    """Five one-token requests, a second apart, round robin over two instances on a PNM pool of 8 blocks of
    16 KiB (so each block costs exactly coherence.py's per-block figures with CPU-copied data, and its metadata
    line's with DMA): r0 (server 0) writes a 4-block prefix
    and a block of its own; r1 (server 1) reads the prefix in place and writes one block; r2 (server 0) fills the
    pool, evicting all six; r3 (server 1) writes the prefix again, a new version, and its block, evicting five
    of r2's; r4 (server 0) reads the prefix, whose copy it holds is the old version, and writes one block,
    evicting one more of r2's. The same requests on one server are the reference: it pays nothing."""
    prefix = 64
    reqs = table(np.arange(5) * 1e9, [prefix + 16, prefix + 16, 128, prefix + 16, prefix + 16], [1] * 5,
                 prefix_tokens=prefix, session=np.arange(1, 6))
    reqs = replace(reqs, block_keys=np.where(np.repeat(np.arange(5), np.diff(reqs.block_offsets)) == 2,
                                             reqs.block_keys ^ np.uint64(0xABCDEF), reqs.block_keys))  # r2: its own
    sp = spec(lower="pool", kv_home=1, instances=2, servers=2, coherence=scheme, kv_bytes_per_token=1024,
              kv_data_path=data_path)
    sp = replace(sp, tiers=(sp.tiers[0], replace(sp.tiers[1], capacity_bytes=8 * 16 * 1024, server_link_GBps=25.0)))
    cost = LinearCost()
    return simulate(reqs, sp, cost), simulate(reqs, replace(sp, servers=1), cost)


@pytest.mark.parametrize("data_path", ["cpu", "dma"])
@pytest.mark.parametrize("scheme", ["software", "back_invalidate"])
def test_a_prefix_shared_across_servers_costs_exactly_the_schemes_per_block_figures(scheme, data_path):
    """CPU-copied KV: every line of a block is flushed, invalidated or snooped (the measured per-16 KiB figures);
    DMA-moved KV, which no CPU cache holds: the block's metadata line alone (1/256 of them, one snoop pair)."""
    from archsim.serving.coherence import CoherenceCosts

    measured = CoherenceCosts()
    assert measured.block_bytes == 16 * 1024
    costs = measured.for_block(measured.block_bytes if data_path == "cpu" else measured.line_bytes)
    two, one = _coherence_runs(scheme, data_path)
    assert two.completed.all() and list(two.instance) == [0, 1, 0, 1, 0]
    assert list(two.hit_blocks[:, 1]) == [0, 4, 0, 0, 4]       # r1 and r4 find the prefix; r3 finds it evicted
    flush, inval, snoop = costs.flush_ns, costs.invalidate_ns, costs.snoop_ns
    if data_path == "dma":
        assert flush == pytest.approx(measured.flush_ns / 256) and snoop == measured.round_trip_ns
    if scheme == "software":   # flushes of what each writes; r4 invalidates its 4 stale prefix blocks first
        owed = [5 * flush, flush, 8 * flush, 5 * flush, flush + 4 * inval]
    else:                      # snoops of the blocks each eviction takes from their holders' caches
        owed = [0.0, 0.0, 6 * snoop, 5 * snoop, snoop]
    ttft_two = two.first_token_ns - two.arrival_ns
    ttft_one = one.first_token_ns - one.arrival_ns
    assert ttft_two - ttft_one == pytest.approx(owed, abs=1e-6)
    assert one.coherence is None and "coherence" not in summarize(one)   # one server: nothing to keep coherent
    c = summarize(two)["coherence"]
    lines = costs.block_bytes // measured.line_bytes
    if scheme == "software":
        assert (c["flushes"], c["invalidations"], c["snooped_blocks"]) == (20, 4, 0)
        assert (c["messages"], c["bytes"]) == (20 * lines + 4 * costs.invalidate_messages, 20 * costs.block_bytes)
    else:  # r2's eviction: the prefix from both servers' caches, r0's and r1's blocks from their writers'
        assert (c["flushes"], c["invalidations"], c["snooped_blocks"], c["snooped_copies"]) == (0, 0, 12, 16)
        assert (c["messages"], c["bytes"]) == (16 * 2 * lines, 16 * 2 * lines * measured.message_bytes)
        # the snoops and responses cross each holder's port and the pool's side (a software flush's bytes are
        # the written block's own, on the links already): server 1 held 5 blocks, server 0 11
        software, _ = _coherence_runs("software", data_path)
        extra = {name: two.link_bytes[name] - software.link_bytes[name] for name in two.link_bytes}
        flits = 2 * lines * measured.message_bytes
        assert extra == {"cxl": 16 * flits, "cxl (server0)": 11 * flits, "cxl (server1)": 5 * flits}
    assert c["stall_ms"] == pytest.approx(sum(owed) / 1e6, rel=1e-12)
    per_server = [s["coherence"]["stall_ms"] for s in summarize(two)["servers"]]
    assert per_server == pytest.approx([sum(owed[0::2]) / 1e6, sum(owed[1::2]) / 1e6], rel=1e-12)


def _pnm_runs(scheduling: str, prompts: tuple[int, int], servers: int = 2, gap_ns: float | None = None):
    """Two one-decode-step requests on two instances of a PNM pool home, their prompts' prefills timed to end
    together (or `gap_ns` apart), so their decode steps' attention meets at the pool's units."""
    from tests.serving_tables import PnmLinearCost

    cost = PnmLinearCost()
    prefill = [cost.a_ns + cost.new_ns * p for p in prompts]
    start = prefill[0] - prefill[1] if gap_ns is None else prefill[0] - prefill[1] + gap_ns
    reqs = table([0.0, start], list(prompts), [2, 2])
    sp = spec(lower="pool", kv_home=1, link_GBps=100.0, instances=2, servers=servers, coherence="back_invalidate",
              pnm_scheduling=scheduling)
    sp = replace(sp, tiers=(sp.tiers[0], replace(sp.tiers[1], server_link_GBps=100.0)))
    res = simulate(reqs, sp, cost)
    assert res.completed.all() and list(res.instance) == [0, 1]
    step = res.last_token_ns - res.first_token_ns                      # the one decode step
    rest = np.array([cost.a_ns + cost.new_ns + cost.cached_ns * p for p in prompts])   # everything but attention
    work = np.array([cost.pnm_ns * p for p in prompts]) / 2            # the table's attention over 2 instances
    return res, step, rest, work


@pytest.mark.parametrize("scheduling", ["fifo", "fair_share"])
def test_two_servers_decode_jobs_queue_at_the_shared_pnm_units(scheduling):
    res, step, rest, work = _pnm_runs(scheduling, (1600, 160))       # the long job is first in line
    long, short = work
    if scheduling == "fifo":       # the short one waits for the long one's whole work
        assert step == pytest.approx([rest[0] + long, rest[1] + long + short], rel=1e-12)
        waits = [0.0, long]
    else:                          # both at half rate until the short one leaves: each waits the short one's work
        assert step == pytest.approx([rest[0] + long + short, rest[1] + 2 * short], rel=1e-12)
        waits = [short, short]
    units = summarize(res)["pnm_units"]
    assert units["scheduling"] == scheduling and units["jobs"] == 2
    per_server = [s["pnm_units"] for s in summarize(res)["servers"]]
    assert [s["queueing_ms_total"] for s in per_server] == pytest.approx(np.array(waits) / 1e6, rel=1e-12)
    # equal jobs together under fair share: each step lasts the table's price (both instances attending at once)
    res, step, rest, work = _pnm_runs(scheduling, (800, 800))
    table_price = rest + 2 * work
    assert step == pytest.approx(table_price if scheduling == "fair_share" else rest + [work[0], 2 * work[1]],
                                 rel=1e-12)


def test_a_server_alone_at_the_pnm_units_waits_nothing_and_one_server_keeps_the_tables_price():
    # the second request's decode step long after the first's: each job alone, its own attention only
    res, step, rest, work = _pnm_runs("fifo", (800, 800), gap_ns=1e9)
    assert step == pytest.approx(rest + work, rel=1e-12)
    units = summarize(res)["pnm_units"]
    assert units["jobs"] == 2 and units["queueing_ms_total"] == 0.0
    # one server: no units modelled, every step at the table's price (every instance attending at once)
    res, step, rest, work = _pnm_runs("fifo", (800, 800), servers=1, gap_ns=1e9)
    assert step == pytest.approx(rest + 2 * work, rel=1e-12) and "pnm_units" not in summarize(res)


@pytest.mark.parametrize("system, scenario, n, scenario_set, system_set", [
    ("g25-16s", "shared-prefix", 320, (), ()),
    # long answers outgrow a 30 % HBM budget: a block the tier cannot give ends the lean step in a preemption
    ("gpu-hbm", "reasoning", 96, ("scenario.arrivals.users=64",
                                  "scenario.reasoning.output={dist: uniform, min: 4096, max: 12288}"),
     ("system.gpus.memory_utilization=0.3",)),
])
def test_a_decode_batch_stepping_on_lean_gives_the_generic_paths_run_bit_for_bit(monkeypatch, system, scenario, n,
                                                                                  scenario_set, system_set):
    """The lean step of an unchanged decode-only batch (_Engine._decode_on with _start_decoders, the blocks its
    rows start given in place, and the shared PNM units' one call per iteration) against every iteration built and
    started the generic way: the same run, every figure and every request's times bit for bit: 16 servers at the
    shared units, and one HBM too small for its answers (the decode stretch off, so that every step is an event)."""
    from archsim.serving import engine
    from tests.test_serving_system import _serve

    grants: list[bool] = []
    real = engine._Engine._grant_next_blocks

    def spy(self, i, ids, grow):
        grants.append(real(self, i, ids, grow))
        return grants[-1]

    replans: list[bool] = []
    plan_on = engine._Engine._lean_plan_on

    def plan_spy(self, plan, ctx_l):   # the plan carried on is the one made afresh
        carried = plan_on(self, plan, ctx_l)
        i = next(k for k, d in enumerate(self.decoders) if d is not None and d[0] is plan[0])
        replans.append(carried[1:] == self._lean_plan(i, plan[0])[1:])
        return carried

    monkeypatch.setattr(engine._Engine, "fast_decode", system != "gpu-hbm")
    monkeypatch.setattr(engine._Engine, "_grant_next_blocks", spy)
    monkeypatch.setattr(engine._Engine, "_lean_plan_on", plan_spy)
    _, _, cost, lean = _serve(system, scenario, n, scenario_set=scenario_set, system_set=system_set)
    assert len(replans) >= grants.count(True) and all(replans)
    assert grants.count(True) > n                       # blocks given on the lean path ...
    assert (False in grants) == (system == "gpu-hbm")   # ... and, where the tier is full, handed to the build
    monkeypatch.setattr(engine._Engine, "_decode_on", lambda self, i, t: False)
    _, _, _, generic = _serve(system, scenario, n, scenario_set=scenario_set, system_set=system_set, cost=cost)
    assert lean.iterations == generic.iterations > n * 8
    if system == "gpu-hbm":
        assert lean.preemptions.sum() > 100
    for field in ("first_token_ns", "last_token_ns", "instance", "decode_tokens", "decode_pairs", "preemptions"):
        assert np.array_equal(getattr(lean, field), getattr(generic, field)), field
    timed = {"events_per_s"}           # the run's own wall clock
    assert {k: v for k, v in summarize(lean).items() if k not in timed} == \
        {k: v for k, v in summarize(generic).items() if k not in timed}
