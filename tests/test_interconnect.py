"""Topology parsing and routing, max-min fair sharing and the fluid flow schedule, against hand-computed numbers."""

from __future__ import annotations

import random

import pytest

from archsim.errors import ConfigError
from archsim.interconnect import Flow, Topology, allocate, max_min_rates, simulate_flows

pytestmark = pytest.mark.unit

PRESETS = ("cxl2_switch", "cxl3_switch", "scaleup_g15", "pcie5_host", "rdma_pool", "nvme")


def link(a, b, bandwidth="100GB/s", efficiency=1.0, latency="10ns", **extra):
    return {"from": a, "to": b, "protocol": "cxl", "bandwidth": bandwidth, "efficiency": efficiency,
            "latency": latency, "energy_pJ_per_bit": 5.5, **extra}


def star(n_gpus=4, gpu_GBps="100GB/s", pool_GBps="40GB/s", switch_latency="100ns", **gpu_extra):
    return Topology.from_mapping({
        "endpoints": {"gpu": {"count": n_gpus}, "pool": None},
        "switches": {"sw": {"ports": 64, "latency": switch_latency}},
        "links": {"up": link("gpu", "sw", gpu_GBps, latency="50ns", **gpu_extra),
                  "pool_link": link("sw", "pool", pool_GBps, latency="25ns")},
    })


def test_one_flow_on_one_link_gets_bandwidth_times_efficiency():
    topo = Topology.from_mapping({"endpoints": {"a": None, "b": None},
                                  "links": {"l": link("a", "b", "64GB/s", efficiency=0.9265, latency="50ns")}})
    [rate] = allocate(topo, [Flow("a", "b", 1)])
    assert rate == pytest.approx(64 * 0.9265, rel=1e-15)
    sched = simulate_flows(topo, [Flow("a", "b", 1_000_000)])
    assert sched.flows[0].completion_ns == pytest.approx(1_000_000 / (64 * 0.9265) + 50, rel=1e-12)
    assert sched.link("l").utilization == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("n", [1, 2, 8])
def test_gpus_sharing_a_pool_uplink_each_get_one_nth(n):
    topo = star(n, pool_GBps="80GB/s")
    rates = allocate(topo, [Flow("pool", f"gpu{i}", 1e6) for i in range(n)])
    assert rates == pytest.approx([min(80 / n, 100)] * n, rel=1e-12)


def test_a_flow_limited_elsewhere_leaves_its_share_to_the_others():
    # gpu2's own link is 10 GB/s: it cannot use its 1/3 of the 60 GB/s uplink; gpu0 and gpu1 split the rest
    topo = Topology.from_mapping({
        "endpoints": {"gpu": {"count": 3}, "pool": None},
        "switches": {"sw": {"ports": 8, "latency": "0ns"}},
        "links": {"g0": link("gpu0", "sw"), "g1": link("gpu1", "sw"), "g2": link("gpu2", "sw", "10GB/s"),
                  "up": link("sw", "pool", "60GB/s")},
    })
    rates = allocate(topo, [Flow(f"gpu{i}", "pool", 1e6) for i in range(3)])
    assert rates == pytest.approx([25.0, 25.0, 10.0], rel=1e-12)


def test_a_group_k_times_another_links_k_consecutive_members_to_each():
    # 16 GPUs in 2 servers: gpu0-7 reach server0's switch, gpu8-15 server1's; each server has one uplink
    topo = Topology.from_mapping({
        "endpoints": {"gpu": {"count": 16}, "pool": None},
        "switches": {"server": {"count": 2, "ports": 9, "latency": "0ns"}, "core": {"ports": 4, "latency": "0ns"}},
        "links": {"pcie": link("gpu", "server"), "uplink": link("server", "core", "80GB/s"),
                  "pool_link": link("core", "pool", "1000GB/s")},
    })
    assert [topo.route(f"gpu{i}", "pool").nodes[1] for i in range(16)] == ["server0"] * 8 + ["server1"] * 8
    # server0's eight GPUs split its uplink; server1's one loading GPU has the other alone
    rates = allocate(topo, [Flow("pool", f"gpu{i}", 1e6) for i in (*range(8), 8)])
    assert rates == pytest.approx([10.0] * 8 + [80.0], rel=1e-12)
    bad = {"endpoints": {"gpu": {"count": 16}, "pool": None},
           "switches": {"server": {"count": 3, "ports": 9, "latency": "0ns"}},
           "links": {"pcie": link("gpu", "server"), "pool_link": link("server", "pool")}}
    with pytest.raises(ConfigError, match="multiple") as err:
        Topology.from_mapping(bad)
    assert err.value.where == "interconnect.links.pcie.to"


def test_classic_max_min_example_on_resources():
    # resource 0 (cap 10) carries A and B; resource 1 (cap 4) carries B, C, D: r1 fills first at 4/3 each,
    # then A takes everything B leaves on r0
    rates = max_min_rates([10.0, 4.0], [[0], [0, 1], [1], [1]])
    assert rates == pytest.approx([10 - 4 / 3, 4 / 3, 4 / 3, 4 / 3], rel=1e-12)
    # a flow's own ceiling is a bottleneck too
    assert max_min_rates([100.0], [[0], [0]], [5.0, None]) == pytest.approx([5.0, 95.0], rel=1e-12)


def test_route_latency_is_links_plus_switch_transits():
    topo = Topology.from_mapping({
        "endpoints": {"gpu": None, "pool": None},
        "switches": {"leaf": {"ports": 4, "latency": "120ns"}, "spine": {"ports": 4, "latency": "80ns"}},
        "links": {"a": link("gpu", "leaf", latency="30ns"), "b": link("leaf", "spine", latency="20ns"),
                  "c": link("spine", "pool", latency="40ns")},
    })
    route = topo.route("gpu", "pool")
    assert route.nodes == ("gpu", "leaf", "spine", "pool")
    assert route.latency_ns == pytest.approx(30 + 120 + 20 + 80 + 40, abs=1e-12)
    assert [h.link.name for h in route.hops] == ["a", "b", "c"]
    assert topo.route("pool", "gpu").latency_ns == route.latency_ns


def test_routing_prefers_latency_then_fewer_hops_then_names():
    topo = Topology.from_mapping({
        "endpoints": {"src": None, "dst": None},
        "switches": {"s1": {"ports": 4, "latency": "100ns"}, "s2": {"ports": 4, "latency": "10ns"},
                     "s3": {"ports": 4, "latency": "10ns"}, "s4": {"ports": 4, "latency": "100ns"}},
        "links": {"a": link("src", "s1"), "b": link("s1", "dst"),            # 10 + 100 + 10 = 120 ns, 2 hops
                  "c": link("src", "s2"), "d": link("s2", "s3"), "e": link("s3", "dst"),  # 10+10+10+10+10 = 50
                  "f": link("src", "s4"), "g": link("s4", "dst")},           # 120 ns, ties with s1
    })
    assert topo.route("src", "dst").nodes == ("src", "s2", "s3", "dst")
    slow = Topology.from_mapping({
        "endpoints": {"src": None, "dst": None},
        "switches": {"s4": {"ports": 4, "latency": "100ns"}, "s1": {"ports": 4, "latency": "100ns"}},
        "links": {"f": link("src", "s4"), "g": link("s4", "dst"), "a": link("src", "s1"), "b": link("s1", "dst")},
    })
    assert slow.route("src", "dst").nodes == ("src", "s1", "dst")  # equal latency and hops: smaller name


def test_fluid_schedule_gives_freed_bandwidth_to_the_remaining_flow():
    topo = star(2, pool_GBps="30GB/s")  # uplink 30 GB/s, path latency 50 + 100 + 25 = 175 ns
    sched = simulate_flows(topo, [Flow("gpu0", "pool", 3000), Flow("gpu1", "pool", 6000)])
    a, b = sched.flows
    assert (a.initial_rate_GBps, b.initial_rate_GBps) == (15.0, 15.0)
    assert a.last_byte_sent_ns == pytest.approx(200.0)  # 3000 B at 15 GB/s
    assert b.last_byte_sent_ns == pytest.approx(300.0)  # 3000 B at 15, then 3000 B at 30
    assert (a.completion_ns, b.completion_ns) == (pytest.approx(375.0), pytest.approx(475.0))
    assert sched.link("pool_link").payload_bytes == 9000
    assert sched.link("pool_link").utilization == pytest.approx(1.0)


def test_late_flow_and_source_access_latency():
    topo = Topology.from_mapping({
        "endpoints": {"ssd": {"access_latency": "1us"}, "gpu": {"count": 2}},
        "switches": {"rc": {"ports": 4, "latency": "0ns"}},
        "links": {"s": link("ssd", "rc", "10GB/s", reverse_bandwidth="5GB/s", latency="0ns"),
                  "g": link("gpu", "rc", latency="0ns")},
    })
    # reads leave the SSD at 10 GB/s, writes enter it at 5 GB/s
    sched = simulate_flows(topo, [Flow("ssd", "gpu0", 10_000), Flow("gpu1", "ssd", 10_000, start_ns=500)])
    read, write = sched.flows
    assert read.first_byte_ns == 1000 and read.last_byte_sent_ns == pytest.approx(2000)
    assert write.first_byte_ns == 500 and write.last_byte_sent_ns == pytest.approx(2500)
    # staggered flows in the same direction share only while both are active
    shared = simulate_flows(topo, [Flow("ssd", "gpu0", 10_000), Flow("ssd", "gpu1", 10_000, start_ns=500)])
    first, second = shared.flows
    assert first.first_byte_ns == 1000 and second.first_byte_ns == 1500  # start + 1 us access latency
    # 1000..1500: the first alone sends 5000 B at 10; 1500..2500: 5000 B each at 5; the second ends alone at 10
    assert first.last_byte_sent_ns == pytest.approx(2500)
    assert second.last_byte_sent_ns == pytest.approx(3000)


@pytest.mark.parametrize("preset", PRESETS)
def test_no_link_carries_more_than_its_peak(preset):
    topo = Topology.load(preset)
    far = next(e for e in topo.endpoints if not e.startswith("gpu"))
    rng = random.Random(11)
    flows = []
    for i in range(40):
        gpu = f"gpu{rng.randrange(8)}"
        src, dst = (far, gpu) if rng.random() < 0.7 else (gpu, far)
        flows.append(Flow(src, dst, rng.randrange(1, 10) * 4096, start_ns=rng.randrange(0, 20_000), name=str(i)))
    sched = simulate_flows(topo, flows)
    caps = {}
    for lk in topo.links:
        i = topo.link_index[lk.name]
        caps[2 * i], caps[2 * i + 1] = lk.effective_GBps(True), lk.effective_GBps(False)
    for epoch in sched.epochs:
        load = dict.fromkeys(caps, 0.0)
        for f, rate in epoch.rates_GBps.items():
            for hop in sched.flows[f].route.hops:
                load[topo.resource(hop)] += rate
        assert all(load[r] <= caps[r] * (1 + 1e-9) for r in caps)
    for usage in sched.links:
        assert usage.peak_rate_GBps <= usage.capacity_GBps * (1 + 1e-9)
        assert 0 < usage.utilization <= 1 + 1e-9
        carried = sum(f.flow.size_bytes for f in sched.flows if usage.hop in f.route.hops)
        assert usage.payload_bytes == carried
    assert all(f.last_byte_sent_ns >= f.first_byte_ns + f.flow.size_bytes / f.route.bottleneck_GBps * (1 - 1e-9)
               for f in sched.flows)


# per-GPU payload bandwidth with every GPU reading from the far end at once, and one-way route latency
PRESET_FIGURES = {
    "cxl2_switch": (4 * 64 * 0.9265 / 8, 280.0),
    "cxl3_switch": (4 * 128 * 0.921875 / 8, 280.0),
    "scaleup_g15": (4 * 900 * 0.93 / 8, 230.0),
    "pcie5_host": (8 * 38.4 / 8, 250.0),
    "rdma_pool": (50 * 0.9804 / 8, 1400.0),
    "nvme": (13 / 8, 350.0),
}


@pytest.mark.parametrize("preset", PRESETS)
def test_presets_load_and_give_the_documented_figures(preset):
    topo = Topology.load(preset)
    far = next(e for e in topo.endpoints if not e.startswith("gpu"))
    per_gpu, latency = PRESET_FIGURES[preset]
    rates = allocate(topo, [Flow(far, f"gpu{i}", 1) for i in range(8)])
    assert rates == pytest.approx([per_gpu] * 8, rel=1e-12)
    for i in range(8):
        assert topo.route(far, f"gpu{i}").latency_ns == pytest.approx(latency)
    if preset.startswith("cxl"):
        assert 200 <= 2 * latency <= 600  # a load's round trip adds 200-600 ns (G2.5 range)
    if preset == "scaleup_g15":  # its own latency: a 25T-class switch hop, shorter than the CXL switch's
        assert max(s.latency_ns for s in topo.switches.values()) <= 150
        assert latency < PRESET_FIGURES["cxl2_switch"][1]


def test_wire_bits_count_every_hop_and_the_framing():
    topo = star(2, efficiency=0.5)  # gpu links carry half payload; pool link is 100 % efficient
    sched = simulate_flows(topo, [Flow("gpu0", "pool", 1000)])
    assert sched.wire_bits_by_protocol() == {"link.cxl.bit": pytest.approx(8 * (1000 / 0.5 + 1000))}
    assert sched.link("up0").energy_pJ == pytest.approx(8 * 2000 * 5.5)


def test_endpoints_do_not_forward_and_unreachable_endpoints_are_named():
    topo = Topology.from_mapping({
        "endpoints": {"gpu": {"count": 2}, "pool": None},
        "switches": {"s1": {"ports": 4, "latency": "0ns"}, "s2": {"ports": 4, "latency": "0ns"}},
        "links": {"a": link("gpu0", "s1"), "b": link("gpu0", "s2"), "c": link("gpu1", "s1"),
                  "d": link("s2", "pool")},
    })
    assert topo.route("gpu0", "pool").nodes == ("gpu0", "s2", "pool")
    with pytest.raises(ConfigError) as err:
        topo.route("gpu1", "pool")  # only through gpu0, which does not forward
    assert err.value.where == "interconnect.endpoints.pool" and "gpu1" in str(err.value)
    with pytest.raises(ConfigError) as err:
        Topology.from_mapping({"endpoints": {"gpu": None, "island": None, "pool": None},
                               "links": {"a": link("gpu", "pool")}})
    assert err.value.where == "interconnect.endpoints.island"


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (lambda d: d["links"]["up"].update(efficiency=1.5), "interconnect.links.up.efficiency"),
        (lambda d: d["links"]["up"].update(bandwidth="64GHz"), "interconnect.links.up.bandwidth"),
        (lambda d: d["links"]["up"].update(colour="red"), "interconnect.links.up.colour"),
        (lambda d: d["links"]["up"].pop("latency"), "interconnect.links.up.latency"),
        (lambda d: d["links"]["up"].update(to="nowhere"), "interconnect.links.up.to"),
        (lambda d: d["switches"]["sw"].update(ports=3), "interconnect.switches.sw.ports"),
        (lambda d: d["endpoints"].update(sw=None), "interconnect.switches.sw"),  # name taken by the endpoint
        (lambda d: d["links"].update(again=link("gpu", "sw")), "interconnect.links.again.to"),
        (lambda d: (d["switches"]["nic"].update(count=3), d["links"].update(pair=link("gpu", "nic"))),
         "interconnect.links.pair.to"),                                  # 4 GPUs do not split over 3
    ],
)
def test_config_errors_name_the_dotted_path(mutate, where):
    data = {
        "endpoints": {"gpu": {"count": 4}, "pool": None},
        "switches": {"sw": {"ports": 5, "latency": "100ns"}, "nic": {"count": 2, "ports": 2, "latency": "0ns"}},
        "links": {"up": link("gpu", "sw"), "pool_link": link("sw", "pool"), "n": link("nic", "pool")},
    }
    mutate(data)
    with pytest.raises(ConfigError) as err:
        Topology.from_mapping(data)
    assert err.value.where == where


def test_preset_file_errors_carry_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("interconnect:\n  endpoints: {a: {}}\n  links: {}\n  extra: 1\n")
    with pytest.raises(ConfigError) as err:
        Topology.load(bad)
    assert err.value.file == str(bad) and err.value.where == "interconnect.extra"
