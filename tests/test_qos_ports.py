"""Arbitration among N request ports (several hosts and the PNM sharing one memory): each policy does what it
promises under contention, port by port, and the ports the arbiter names are checked against the trace's."""

import numpy as np
import pytest

from archsim.errors import ConfigError
from archsim.memory import Requests, replay
from tests.conftest import config

pytestmark = pytest.mark.component

THREE = ("host0", "host1", "pnm")
BASE = ("memory.controller.refresh=none", "memory.controller.read_queue_depth=64")


def _contention(cfg, ports, n=24_000, seed=7, idle=()):
    """Every port but the `idle` ones streams random reads at full rate into the same channels."""
    rng = np.random.default_rng(seed)
    ab = cfg.organization.access_bytes
    address = (rng.integers(0, cfg.organization.capacity_bytes // ab, n) * ab).astype(np.uint64)
    busy = [p for p in range(len(ports)) if ports[p] not in idle]
    source = np.asarray(busy, dtype=np.uint8)[np.arange(n) % len(busy)]
    return Requests.build(np.zeros(n, dtype=np.int64), address, np.zeros(n), source, ports)


def _served_while_all_busy(result, ports):
    """Reads each port had served by the time a third of all completed: every port still has work queued."""
    order = np.argsort(result.done_cycle, kind="stable")
    return np.bincount(result.requests.source[order[: len(order) // 3]], minlength=len(ports))


def test_weighted_round_robin_shares_column_commands_among_three_ports():
    cfg = config("HBM3", *BASE, "memory.controller.arbiter={impl: wrr, weights: {host0: 1, host1: 1, pnm: 2}}")
    served = _served_while_all_busy(replay(cfg, _contention(cfg, THREE)), THREE)
    share = served / served.sum()
    assert share[2] == pytest.approx(0.5, abs=0.06)
    assert share[0] == pytest.approx(0.25, abs=0.05) and share[1] == pytest.approx(0.25, abs=0.05)


def test_an_idle_port_does_not_hold_the_weighted_round_robins_favour():
    """host0 sends nothing: host1 and the PNM still share 3:1. An arbiter that let the idle port (served 0) keep
    the favour would leave the others to pure age order, about 1:1."""
    cfg = config("HBM3", *BASE, "memory.controller.arbiter={impl: wrr, weights: {host0: 1, host1: 3, pnm: 1}}")
    served = _served_while_all_busy(replay(cfg, _contention(cfg, THREE, idle=("host0",))), THREE)
    assert served[0] == 0
    assert 2.2 < served[1] / served[2] < 4.0


def test_a_host_that_joins_late_banks_no_credit_for_its_idle_time():
    """host1 and the PNM saturate from cycle 0; host0's requests come at cycle 3,000. With equal weights the three
    share the next 1,000 cycles about equally: served counts compared since cycle 0 would hand host0 nearly every
    command until it caught up (5,031 against 125 and 163 reads before `rejoin`)."""
    cfg = config("HBM3", *BASE, "memory.controller.arbiter={impl: wrr, weights: {host0: 1, host1: 1, pnm: 1}}")
    rng = np.random.default_rng(3)
    n = 30_000
    ab = cfg.organization.access_bytes
    address = (rng.integers(0, cfg.organization.capacity_bytes // ab, n) * ab).astype(np.uint64)
    source = np.array([1, 2] * (n // 3) + [0] * (n // 3), dtype=np.uint8)
    ts = np.where(source == 0, 3_000, 0).astype(np.int64)
    result = replay(cfg, Requests.build(ts, address, np.zeros(n), source, THREE))
    window = (result.done_cycle >= 3_000) & (result.done_cycle < 4_000)
    served = np.bincount(result.requests.source[window], minlength=3)
    assert served.max() < 1.3 * served.min()


def _share_of_peak(result, cfg):
    """Each port's reads served while every port is busy, as a fraction of the column-command slots (one per
    pseudo-channel every tBURST) of that time: the unit a reservation's share is given in."""
    order = np.argsort(result.done_cycle, kind="stable")
    first = order[: len(order) // 3]
    slots = cfg.organization.n_pseudo_channels / cfg.timing.tBURST * int(result.done_cycle[first].max())
    return np.bincount(result.requests.source[first], minlength=3) / slots


def test_per_host_reservations_give_each_reserved_host_about_its_share_of_the_slots():
    """Random reads reach about a third of the peak column rate here; reservations of 20 % and 10 % of the slots
    fit inside it. Each reserved host gets about its share (the arbiter orders ready requests; bank timing
    decides what is ready, so a share is met within a few percent), and the unreserved PNM yields."""
    shared_cfg = config("HBM3", *BASE)
    shared = _share_of_peak(replay(shared_cfg, _contention(shared_cfg, THREE)), shared_cfg)
    cfg = config("HBM3", *BASE, "memory.controller.arbiter={impl: reservation, shares: {host0: 0.2, host1: 0.1}}")
    share = _share_of_peak(replay(cfg, _contention(cfg, THREE)), cfg)
    assert share[0] >= 0.85 * 0.2 and share[1] >= 0.85 * 0.1
    assert share[0] > shared[0] + 0.05
    assert share[2] < 0.5 * shared[2]


def test_an_idle_reserved_host_does_not_void_the_other_reservations():
    """host0 is reserved 20 % but sends nothing: host1's 25 % must still hold (the shared arbiter gives it about
    16 %). Favouring a port with nothing queued ranks no one first, so an idle reserved port that kept the favour
    would leave the others to pure age order."""
    cfg = config("HBM3", *BASE, "memory.controller.arbiter={impl: reservation, shares: {host0: 0.2, host1: 0.25}}")
    share = _share_of_peak(replay(cfg, _contention(cfg, THREE, idle=("host0",))), cfg)
    assert share[0] == 0 and share[1] >= 0.85 * 0.25 and share[2] < share[1]


def test_strict_priority_favours_the_named_host():
    cfg = config("HBM3", *BASE, "memory.controller.arbiter={impl: priority, favor: host1}")
    result = replay(cfg, _contention(cfg, THREE))
    latency = result.done_cycle - result.accept_cycle
    mean = [float(latency[result.requests.source == p].mean()) for p in range(3)]
    assert mean[1] < 0.8 * min(mean[0], mean[2])


def test_interference_is_counted_for_every_port_pair():
    from archsim.report.memory_stats import memory_stats

    cfg = config("HBM3")
    qos = memory_stats(replay(cfg, _contention(cfg, THREE, n=6000)))["memory"]["qos"]
    assert set(qos["row_closures"]) == {f"{a}_by_{b}" for a in THREE for b in THREE}
    assert all(qos["row_closures"][f"{a}_by_{b}"] > 0 for a in THREE for b in THREE if a != b)


@pytest.mark.parametrize(("arbiter", "where"), [
    ("{impl: priority, favor: host2}", "memory.controller.arbiter.favor"),
    ("{impl: wrr, weights: {host0: 1, host3: 2}}", "memory.controller.arbiter.weights.host3"),
    ("{impl: reservation, shares: {host: 0.3}}", "memory.controller.arbiter.shares.host"),
])
def test_a_port_the_trace_lacks_is_one_error_naming_the_key(arbiter, where):
    cfg = config("HBM3", f"memory.controller.arbiter={arbiter}")
    with pytest.raises(ConfigError) as info:
        replay(cfg, _contention(cfg, THREE, n=100))
    assert info.value.where == where and "host0, host1, pnm" in str(info.value)


@pytest.mark.parametrize(("arbiter", "where", "says"), [
    ("{impl: reservation, shares: {host0: 0.6, host1: 0.5}}", "memory.controller.arbiter.shares", "above 1"),
    ("{impl: reservation, shares: {host0: 0}}", "memory.controller.arbiter.shares.host0", "(0, 1]"),
    ("{impl: wrr, weights: {gpu: 1}}", "memory.controller.arbiter.weights.gpu", "unknown port"),
    ("{impl: wrr, weights: {}}", "memory.controller.arbiter.weights", "at least one"),
])
def test_bad_shares_and_port_names_are_refused_with_their_key(arbiter, where, says):
    with pytest.raises(ConfigError) as info:
        config("HBM3", f"memory.controller.arbiter={arbiter}")
    assert info.value.where == where and says in str(info.value)


def _hosts_trace(tmp_path, hosts=3, n=6000, seed=11):
    """`hosts` hosts' random-read traces (paced to about a third of an HBM3 channel's rate each), merged."""
    from archsim.trace.text_formats import write_dramsim3

    rng = np.random.default_rng(seed)
    paths = []
    for k in range(hosts):
        ts = np.sort(rng.integers(0, n * 2, n)).astype(np.int64)
        address = (rng.integers(0, 1 << 24, n) * 64).astype(np.uint64)
        paths.append(tmp_path / f"h{k}.trace")
        write_dramsim3(paths[-1], ts, address, np.zeros(n, np.uint8))
    merged = tmp_path / "hosts.npz"
    from click.testing import CliRunner

    from archsim.cli import main

    result = CliRunner().invoke(main, ["trace", "merge", *map(str, paths), "-o", str(merged)])
    assert result.exit_code == 0, result.output
    return merged, paths


def _replay_json(tmp_path, trace, *options):
    import json

    from click.testing import CliRunner

    from archsim.cli import main
    from archsim.resources import SOURCE_ROOT

    out = tmp_path / f"r{len(list(tmp_path.iterdir()))}.json"
    args = ["replay", str(trace), "--memory", str(SOURCE_ROOT / "configs/memory/hbm3.yaml"), "--json", str(out),
            "--quiet", "--set", "memory.controller.refresh=none", *options]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())["memory"]


def test_replay_alone_gives_each_hosts_slowdown_and_jains_fairness(tmp_path):
    merged, paths = _hosts_trace(tmp_path)
    shared = _replay_json(tmp_path, merged, "--alone")
    qos = shared["qos"]
    ports = qos["ports"]
    assert list(ports) == ["host0", "host1", "host2"]
    for k, name in enumerate(ports):
        # alone is the host's own trace replayed by itself, exactly
        alone = _replay_json(tmp_path, paths[k], "--alone")["qos"]["ports"]["host"]
        assert ports[name]["alone_read_total_latency_cycles_mean"] == alone["read_total_latency_cycles"]["mean"]
        assert alone["slowdown"] == 1.0
        assert ports[name]["slowdown"] > 1.05  # the other two hosts' rows and queues stretch it
        assert ports[name]["share_of_served"] == pytest.approx(1 / 3, abs=1e-6)
    slowdowns = np.array([p["slowdown"] for p in ports.values()])
    assert qos["fairness_jain"] == pytest.approx((1 / slowdowns).sum() ** 2 / (3 * ((1 / slowdowns) ** 2).sum()),
                                                 abs=1e-6)
    assert qos["fairness_jain"] > 0.98  # symmetric hosts under one age order
    favored = _replay_json(tmp_path, merged, "--alone", "--set",
                           "memory.controller.arbiter={impl: priority, favor: host0}")["qos"]
    assert favored["ports"]["host0"]["slowdown"] < min(favored["ports"][h]["slowdown"] for h in ("host1", "host2"))
    assert favored["fairness_jain"] < qos["fairness_jain"]


def test_qos_targets_are_checked_per_port(tmp_path):
    merged, _ = _hosts_trace(tmp_path, hosts=2, n=2000)
    base = _replay_json(tmp_path, merged)
    assert "ports" not in base["qos"]  # two ports, no targets, no --alone: the plain tree
    p99_ns = _replay_json(tmp_path, merged, "--set", "memory.controller.qos_targets={host0: 1s}")["qos"]
    p99 = p99_ns["ports"]["host0"]["read_total_latency_ns"]["p99"]
    qos = _replay_json(tmp_path, merged, "--set",
                       f"memory.controller.qos_targets={{host0: {p99 + 1}ns, host1: {p99 / 4}ns}}")["qos"]
    assert qos["ports"]["host0"]["target_met"] is True and qos["ports"]["host1"]["target_met"] is False
    assert qos["violations"] == ["host1"] and qos["fairness_jain"] is None  # no alone runs: no slowdowns


def test_a_target_for_a_port_that_sent_nothing_is_refused(tmp_path):
    from click.testing import CliRunner

    from archsim.cli import main
    from archsim.resources import SOURCE_ROOT

    merged, _ = _hosts_trace(tmp_path, hosts=2, n=500)
    result = CliRunner().invoke(main, ["replay", str(merged), "--memory", str(SOURCE_ROOT / "configs/memory/hbm3.yaml"),
                                       "--set", "memory.controller.qos_targets={host5: 1us}", "--json",
                                       str(tmp_path / "x.json")])
    assert result.exit_code == 2 and "memory.controller.qos_targets.host5" in result.output
    assert not (tmp_path / "x.json").exists()
