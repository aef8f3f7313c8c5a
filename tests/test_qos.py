"""Host/PNM arbitration at the controller: each policy does what it promises under contention."""

import numpy as np
import pytest

from archsim.config.memory import memory_config_from_preset
from archsim.errors import ConfigError
from archsim.memory import Requests, replay
from archsim.report.memory_stats import memory_stats
from tests.conftest import config

pytestmark = pytest.mark.component


def _contention(cfg, n=20_000, seed=4):
    """Host and PNM each stream random reads at full rate into the same channels."""
    rng = np.random.default_rng(seed)
    ab = cfg.organization.access_bytes
    address = (rng.integers(0, cfg.organization.capacity_bytes // ab, n) * ab).astype(np.uint64)
    return Requests.build(np.zeros(n, dtype=np.int64), address, np.zeros(n), (np.arange(n) % 2).astype(np.uint8))


def _served_by_port(result):
    order = np.argsort(result.done_cycle, kind="stable")
    half = order[: len(order) // 2]  # the first half of completions: both ports still have work queued
    return np.bincount(result.requests.source[half], minlength=2)


def _latency(result, port):
    sel = result.requests.source == port
    return float((result.done_cycle - result.accept_cycle)[sel].mean())


def test_strict_priority_favours_one_port():
    base = ["memory.controller.refresh=none", "memory.controller.read_queue_depth=64"]
    shared = replay(config("HBM3", *base), _contention(config("HBM3")))
    pnm_first = replay(config("HBM3", *base, "memory.controller.arbiter={impl: priority, favor: pnm}"),
                       _contention(config("HBM3")))
    host_first = replay(config("HBM3", *base, "memory.controller.arbiter={impl: priority, favor: host}"),
                        _contention(config("HBM3")))
    assert _latency(pnm_first, 1) < 0.8 * _latency(shared, 1)
    assert _latency(host_first, 0) < 0.8 * _latency(shared, 0)
    assert _latency(pnm_first, 0) > _latency(pnm_first, 1)


def test_weighted_round_robin_shares_column_commands_by_weight():
    cfg = config("HBM3", "memory.controller.refresh=none", "memory.controller.read_queue_depth=64",
                 "memory.controller.arbiter={impl: wrr, weights: {host: 1, pnm: 3}}")
    host, pnm = _served_by_port(replay(cfg, _contention(cfg)))
    assert 2.0 < pnm / host < 4.0


def test_reservation_guarantees_a_share():
    cfg = config("HBM3", "memory.controller.refresh=none", "memory.controller.read_queue_depth=64",
                 "memory.controller.arbiter={impl: priority, favor: host}")
    starved = _served_by_port(replay(cfg, _contention(cfg)))
    reserved_cfg = config("HBM3", "memory.controller.refresh=none", "memory.controller.read_queue_depth=64",
                          "memory.controller.arbiter={impl: reservation, source: pnm, share: 0.6}")
    host, pnm = _served_by_port(replay(reserved_cfg, _contention(reserved_cfg)))
    assert pnm / (host + pnm) >= 0.5
    assert pnm / (host + pnm) > starved[1] / starved.sum()


def test_age_cap_bounds_the_wait_of_the_unfavoured_port():
    base = ["memory.controller.refresh=none", "memory.controller.arbiter={impl: priority, favor: pnm}"]
    uncapped = replay(config("HBM3", *base), _contention(config("HBM3")))
    capped = replay(config("HBM3", *base, "memory.controller.age_cap_cycles=300"), _contention(config("HBM3")))
    worst = lambda r: int((r.done_cycle - r.accept_cycle)[r.requests.source == 0].max())  # noqa: E731
    assert worst(capped) < worst(uncapped)


def test_interference_is_counted_by_port_pair():
    cfg = config("HBM3")
    stats = memory_stats(replay(cfg, _contention(cfg, n=5000)))["memory"]["qos"]
    closures = stats["row_closures"]
    assert closures["host_by_pnm"] > 0 and closures["pnm_by_host"] > 0
    assert sum(closures.values()) == memory_stats(replay(cfg, _contention(cfg, n=5000)))["memory"]["commands"]["PRE"]


def test_reservation_above_100_percent_is_an_error():
    with pytest.raises(ConfigError, match="memory.controller.arbiter.share"):
        memory_config_from_preset("HBM3", ["memory.controller.arbiter={impl: reservation, source: pnm, share: 1.5}"])
