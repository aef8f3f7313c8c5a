"""Host/PNM interference at the pool controller: slowdowns against the alone runs, fairness, conflicts, targets."""

from __future__ import annotations

import copy

import pytest
import yaml

from archsim.errors import ConfigError
from archsim.kvlayout import channel_share, kv_geometry
from archsim.section import Section
from archsim.system import load_system_config, load_workload, simulate_step, system_config_from_mapping
from archsim.system.kvstream import channel_stream
from archsim.system.qos import jain_index, parse_qos, qos_memory, run_study
from tests.conftest import REPO

pytestmark = pytest.mark.system

QOS = yaml.safe_load((REPO / "configs/systems/g25-qos.yaml").read_text())


@pytest.fixture(scope="module")
def channel():
    """The busiest channel's PNM stream (KV reads + host appends) of the default workload at 4K."""
    cfg = load_system_config("g25-qos")
    w = load_workload("llama3-70b-b16")
    geo = kv_geometry(w.shape, w.dtype, w.batch, 4096)
    share = channel_share(geo, cfg.pool.channels)
    stream = channel_stream(cfg.pool.memory, geo, share, "pnm", tile_tokens=64, interleave_bytes=256, window=0)
    return cfg, stream


def _spec(**changes):
    tree = copy.deepcopy(QOS["system"]["qos"])
    tree.update(changes)
    return parse_qos(Section(tree, "system.qos", None))


def test_jain_index():
    assert jain_index([1.0, 1.0]) == 1.0
    assert jain_index([1.0, 0.0]) == 0.5
    assert jain_index([1.0, 0.5]) == pytest.approx(2.25 / 2.5)


def test_host_traffic_slows_the_pnm_and_both_see_interference(channel):
    cfg, s = channel
    result = run_study(cfg.pool.memory, s.address, s.is_write, s.source, cfg.qos)
    assert result.slowdown["pnm"] > 1.2 and result.slowdown["host"] > 1.0
    assert 0.5 < result.jain_fairness < 1.0
    assert result.interference["row_closures.pnm_by_host"] > 0  # rows opened for the PNM, closed for the host
    assert result.interference["row_closures.host_by_pnm"] > 0
    assert result.interference["bank_conflicts.pnm_vs_host"] > 0
    peak = 1228.8 / 16  # one HBM3E channel
    mixed = result.sources["pnm"]["bandwidth_GBps"] + result.sources["host"]["bandwidth_GBps"]
    assert mixed <= peak and result.sources["pnm_alone"]["bandwidth_GBps"] <= peak
    assert any(v.startswith("targets.pnm_slowdown") for v in result.violations)


def test_without_other_host_traffic_the_pnm_runs_as_alone(channel):
    cfg, s = channel
    tree = copy.deepcopy(QOS["system"]["qos"])
    del tree["host_traffic"], tree["targets"]
    spec = parse_qos(Section(tree, "system.qos", None))
    result = run_study(cfg.pool.memory, s.address, s.is_write, s.source, spec)
    assert result.slowdown == {"pnm": 1.0} and result.jain_fairness == 1.0
    assert result.violations == []


def test_lenient_targets_are_met(channel):
    cfg, s = channel
    spec = _spec(targets={"pnm_slowdown": 10.0, "host_read_p99": "10us"}, reservation={"pnm": 0.1, "host": 0.05})
    result = run_study(cfg.pool.memory, s.address, s.is_write, s.source, spec)
    assert result.violations == []


def test_the_decode_step_pays_the_pnm_slowdown():
    w = load_workload("llama3-70b-b16")
    quiet = copy.deepcopy(QOS)
    del quiet["system"]["qos"]
    base = simulate_step(system_config_from_mapping(quiet), w, 4096)
    mixed = simulate_step(system_config_from_mapping(QOS), w, 4096)
    factor = mixed.qos["slowdown"]["pnm"]
    assert mixed.term_ns("pnm") == pytest.approx(base.term_ns("pnm") * factor, rel=1e-9)
    assert mixed.decode_step_ns > base.decode_step_ns


@pytest.mark.parametrize(("changes", "where"), [
    ({"host_traffic": {"bandwidth_share": 1.5}}, "system.qos.host_traffic.bandwidth_share"),
    ({"policy": "fifo"}, "system.qos.policy"),
    ({"reservation": {"pnm": 0.9, "host": 0.2}}, "system.qos.reservation"),
    ({"targets": {"pnm_slowdown": -1}}, "system.qos.targets.pnm_slowdown"),
])
def test_bad_qos_values_name_their_path(changes, where):
    with pytest.raises(ConfigError) as info:
        _spec(**changes)
    assert info.value.where == where


@pytest.mark.parametrize(("policy", "where"), [
    ({"impl": "wrr"}, "system.qos.policy.weights"),
    ({"impl": "reservation", "source": "pnm", "share": 1.5}, "system.qos.policy.share"),
    ({"impl": "priority", "favor": "gpu"}, "system.qos.policy.favor"),
])
def test_the_controller_checks_the_arbiter_under_the_qos_path(policy, where):
    tree = copy.deepcopy(QOS)
    tree["system"]["qos"]["policy"] = policy
    with pytest.raises(ConfigError) as info:
        system_config_from_mapping(tree, file="g25-qos.yaml")
    assert info.value.where == where and info.value.file == "g25-qos.yaml"


@pytest.mark.parametrize("policy", [{"impl": "priority", "favor": "pnm"},
                                    {"impl": "reservation", "source": "pnm", "share": 0.6}])
def test_favouring_the_pnm_port_cuts_its_slowdown(channel, policy):
    cfg, s = channel
    shared = run_study(qos_memory(cfg.pool.memory, cfg.qos), s.address, s.is_write, s.source, cfg.qos)
    spec = _spec(policy=policy)
    favoured = run_study(qos_memory(cfg.pool.memory, spec), s.address, s.is_write, s.source, spec)
    assert favoured.slowdown["pnm"] < 0.85 * shared.slowdown["pnm"]
    assert favoured.slowdown["host"] > shared.slowdown["host"]


def test_qos_needs_a_pnm_pool():
    tree = yaml.safe_load((REPO / "configs/systems/gpu-hbm.yaml").read_text())
    tree["system"]["qos"] = copy.deepcopy(QOS["system"]["qos"])
    with pytest.raises(ConfigError) as info:
        system_config_from_mapping(tree)
    assert info.value.where == "system.qos"
