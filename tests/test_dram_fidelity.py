"""Simulated results against the analytic model: unloaded latencies, streaming and random bandwidth."""

import numpy as np
import pytest

from archsim import analytic
from archsim.dram.address_map import Decoded
from archsim.dram.spec import peak_bandwidth_GBps
from tests.conftest import PRESETS, config, run

pytestmark = pytest.mark.component


def _address(cfg, *, channel=0, bank=0, row=0, column=0):
    d = Decoded(*(np.array([v], dtype=np.int64) for v in (channel, 0, 0, 0, bank, row, column)))
    return int(cfg.mapping.encode(d)[0])


@pytest.mark.parametrize("preset", PRESETS)
def test_unloaded_read_latencies_equal_the_timing_sums(preset):
    cfg = config(preset, "memory.controller.refresh=none")
    a = _address(cfg, row=1)
    b = _address(cfg, row=1, column=1)
    c = _address(cfg, row=2)
    gap = 10_000  # far apart: tRAS, tRTP and tRC no longer bind
    result = run(cfg, [0, gap, 2 * gap], [a, b, c])
    latency = result.done_cycle - result.accept_cycle
    expected = [analytic.unloaded_read_latency_cycles(cfg, case) for case in ("miss", "hit", "conflict")]
    assert latency.tolist() == expected
    assert result.request_class.tolist() == [1, 0, 2]


@pytest.mark.parametrize("preset", PRESETS)
def test_trcd_gate_blocks_at_t_minus_1_and_opens_at_t(preset):
    cfg = config(preset, "memory.controller.refresh=none")
    result = run(cfg, [0], [_address(cfg, row=3)], command_log=True)
    log = result.command_log
    assert log.command.tolist() == [0, 3]  # ACT then RD
    assert int(log.cycle[1] - log.cycle[0]) == cfg.timing.tRCDRD


@pytest.mark.parametrize("preset", PRESETS)
def test_sequential_reads_reach_90_percent_of_peak_without_refresh(preset):
    cfg = config(preset, "memory.controller.refresh=none")
    n = 200_000
    result = run(cfg, np.zeros(n, dtype=np.int64), np.arange(n, dtype=np.uint64) * cfg.organization.access_bytes)
    bandwidth = n * cfg.organization.access_bytes / (result.total_cycles * cfg.timing.tCK_ns)
    assert bandwidth >= 0.90 * peak_bandwidth_GBps(cfg.organization, cfg.timing)


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_refresh_costs_about_trfc_over_trefi(preset):
    n = 400_000
    results = {}
    for mode in ("none", "all_bank"):
        cfg = config(preset, f"memory.controller.refresh={mode}")
        addr = np.arange(n, dtype=np.uint64) * cfg.organization.access_bytes
        results[mode] = run(cfg, np.zeros(n, dtype=np.int64), addr).total_cycles
    loss = 1 - results["none"] / results["all_bank"]
    expected = analytic.refresh_loss_fraction(config(preset))
    assert loss <= expected + 0.02
    assert loss >= 0.5 * expected  # refresh is really there


@pytest.mark.parametrize("preset", PRESETS)
def test_saturating_random_reads_reach_the_activation_limit(preset):
    # a 64-deep queue per pseudo-channel gives the scheduler enough distinct banks to hide tRC
    cfg = config(preset, "memory.controller.refresh=none", "memory.controller.read_queue_depth=64")
    n = 100_000
    rng = np.random.default_rng(3)
    ab = cfg.organization.access_bytes
    addr = rng.integers(0, cfg.organization.capacity_bytes // ab, n) * ab
    result = run(cfg, np.zeros(n, dtype=np.int64), addr)
    rate = n / result.total_cycles
    limit = analytic.activation_limit_per_cycle(cfg)
    assert 0.90 * limit <= rate <= limit * 1.001


def test_posted_and_non_posted_writes():
    addr = [_address(config("HBM3"), row=5)]
    posted = run(config("HBM3"), [0], addr, [1])
    assert posted.done_cycle[0] == posted.accept_cycle[0]
    cfg = config("HBM3", "memory.frontend.posted_writes=false", "memory.controller.refresh=none")
    late = run(cfg, [0], addr, [1])
    t = cfg.timing
    assert late.done_cycle[0] - late.accept_cycle[0] == 1 + t.tRCDWR + t.CWL + t.tBURST


def test_head_of_line_blocking_and_injection_cap():
    cfg = config("HBM2", "memory.controller.read_queue_depth=2", "memory.controller.refresh=none")
    same_channel = [_address(cfg, row=r, bank=r % 4) for r in range(6)]
    other = _address(cfg, channel=1, row=9)
    result = run(cfg, [0] * 7, same_channel + [other])
    # the 7th request targets an idle channel but waits behind the full queue of channel 0
    assert result.accept_cycle[6] > 0 and result.accept_cycle[6] == result.accept_cycle[2:6].max()
    capped = run(config("HBM2", "memory.frontend.max_injections_per_cycle=1"), [0] * 4,
                 [_address(cfg, channel=c) for c in range(4)])
    assert capped.accept_cycle.tolist() == [0, 1, 2, 3]
    late = run(cfg, [100, 100], [other, same_channel[0]])
    assert late.accept_cycle.tolist() == [100, 100]
