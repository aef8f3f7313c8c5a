"""The event-driven kernel jumps over idle cycles; evaluating every channel every cycle must give the same run.

This is the proof that the wake-up bounds never skip a cycle at which a command could have issued.
"""

import numpy as np
import pytest

from archsim.controller.kernel import KernelVariant
from archsim.memory import MemorySession, Requests, kernel_params, kernel_variant, mask_words, replay
from tests.conftest import PRESETS, config, tiered

pytestmark = pytest.mark.component

VARIANTS = (
    (),
    ("memory.controller.scheduler=fcfs",),
    ("memory.controller.row_policy=closed",),
    ("memory.controller.row_policy={impl: open_cap, cap: 2}",),
    ("memory.controller.row_policy={impl: timeout, timeout_cycles: 30}",),
    ("memory.controller.refresh=per_bank",),
    ("memory.controller.bank_queue_depth=4",),
    ("memory.frontend.max_injections_per_cycle=1", "memory.frontend.posted_writes=false"),
    ("memory.controller.arbiter={impl: priority, favor: pnm}",),
    ("memory.controller.arbiter={impl: wrr, weights: {host: 1, pnm: 3}}", "memory.controller.age_cap_cycles=400"),
    ("memory.controller.arbiter={impl: reservation, source: host, share: 0.3}",),
    ("memory.controller.write_drain={high_watermark: 24, low_watermark: 0, idle_threshold: 8}",),
    ("memory.controller.bank_queue_depth=8",
     "memory.controller.write_drain={high_watermark: 32, low_watermark: 0, idle_threshold: 8}"),
    ("memory.controller.scheduler=round_robin", "memory.controller.row_policy={impl: open_cap, cap: 4}",
     "memory.controller.refresh={impl: per_bank, hold_columns: true}"),
    ("memory.controller.scheduler=fcfs", "memory.controller.refresh={impl: all_bank, hold_columns: true}"),
    ("memory.controller.scheduler=round_robin", "memory.controller.bank_queue_depth=8",
     "memory.controller.write_drain={high_watermark: 32, low_watermark: 0, idle_threshold: 8}",
     "memory.controller.refresh={impl: all_bank, hold_columns: true}"),
)


def _mixed_stream(cfg, n=2500, seed=11):
    org = cfg.organization
    rng = np.random.default_rng(seed)
    ab = org.access_bytes
    hot_rows = rng.integers(0, org.capacity_bytes // (ab * 64), 40) * ab * 64
    address = np.where(rng.random(n) < 0.5, rng.choice(hot_rows, n) + rng.integers(0, 8, n) * ab,
                       rng.integers(0, org.capacity_bytes // ab, n) * ab).astype(np.uint64)
    # bursts and lulls, so both saturated queues and idle gaps (refresh, timeouts) occur
    gaps = np.where(rng.random(n) < 0.9, 0, rng.integers(1, 400, n))
    source = (rng.random(n) < 0.5).astype(np.uint8)  # host and PNM ports interleaved
    return Requests.build(np.cumsum(gaps), address, (rng.random(n) < 0.3).astype(np.uint8), source)


@pytest.mark.parametrize("preset", tiered(PRESETS, 1))
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: ",".join(s.split(".")[-1] for s in v) or "default")
def test_event_driven_equals_every_cycle(preset, variant):
    cfg = config(preset, *variant)
    requests = _mixed_stream(cfg)
    fast = replay(cfg, requests, command_log=True)
    slow = replay(cfg, requests, command_log=True, tick_every_cycle=True)
    assert np.array_equal(fast.accept_cycle, slow.accept_cycle)
    assert np.array_equal(fast.done_cycle, slow.done_cycle)
    for field in ("cycle", "command", "pseudo_channel", "bank", "row"):
        assert np.array_equal(getattr(fast.command_log, field), getattr(slow.command_log, field)), field
    assert fast.total_cycles == slow.total_cycles


def test_full_bank_queues_do_not_wake_the_channel_every_cycle():
    """Requests waiting for room in a full bank queue cannot move until a column command frees a slot: the
    controller looks at the channel when that happens, not at every cycle in between."""
    cfg = config("HBM2", "memory.controller.bank_queue_depth=2")
    n = 2000
    # one bank, a new row for every request: ACTs at least tRC apart, and the bank queue stays full behind them
    row_stride = cfg.organization.capacity_bytes // cfg.organization.rows
    address = np.random.default_rng(3).permutation(n).astype(np.uint64) * np.uint64(row_stride)
    session = MemorySession(cfg, address, np.zeros(n, np.uint8), np.zeros(n, np.uint8))
    session.release(0, n, np.zeros(n, np.int64))
    session.run_until(2**62)
    assert session.finished
    assert session.now >= (n - 1) * cfg.timing.tRC
    # a look at every cycle would take at least tRC visits per request; this run takes 5.2
    assert session.channel_visits < 8 * n
    slow = replay(cfg, Requests.build(np.zeros(n, np.int64), address, np.zeros(n)), tick_every_cycle=True)
    assert np.array_equal(session.done_cycle, slow.done_cycle)


@pytest.mark.slow  # the only test of the plain kernel that reads its shape: a compile of its own (323 s cold here)
def test_more_than_64_banks_per_pseudo_channel():
    """Active-bank masks span several 64-bit words: banks past the first word are scheduled too."""
    from archsim.dram.checker import check_command_log

    cfg = config("HBM3", "memory.organization.ranks=4", "memory.organization.bankgroups=8",
                 "memory.organization.capacity=64GiB")
    assert cfg.organization.banks_per_pseudo_channel == 128
    requests = _mixed_stream(cfg, n=3000)
    fast = replay(cfg, requests, command_log=True)
    slow = replay(cfg, requests, command_log=True, tick_every_cycle=True)
    assert np.array_equal(fast.done_cycle, slow.done_cycle)
    assert np.array_equal(fast.command_log.cycle, slow.command_log.cycle)
    assert (fast.done_cycle >= 0).all()
    assert fast.command_log.bank.max() >= 64  # banks in the second mask word did issue
    checked = check_command_log(fast.command_log, cfg.organization, cfg.timing, refresh_mode="all_bank")
    assert checked.violations == []


def test_every_shipped_standard_has_a_plain_kernel_for_its_shape():
    from archsim.config.memory import available_standards, memory_config_from_preset

    for name in available_standards():
        assert kernel_variant(kernel_params(memory_config_from_preset(name), 0)).pseudo_channels > 0, name


def test_an_unlisted_shape_runs_the_general_kernel():
    cfg = config("HBM3", "memory.organization.ranks=4", "memory.organization.bankgroups=8",
                 "memory.organization.capacity=64GiB")
    assert kernel_variant(kernel_params(cfg, 0)) == KernelVariant()


@pytest.mark.parametrize("variant", VARIANTS[1:], ids=lambda v: ",".join(s.split(".")[-1] for s in v))
def test_a_feature_beyond_the_defaults_selects_the_general_kernel_of_the_shape_when_it_needs_it(variant):
    """Only row policy, refresh mode and front-end options may run on the plain kernel: it freezes the rest. The
    others run the general kernel with the shipped shape frozen (and so does the every-cycle reference mode)."""
    cfg = config("HBM2", *variant)
    plain_ok = all(".row_policy=" in s or "refresh=per_bank" in s or ".frontend." in s for s in variant)
    expected = "plain" if plain_ok else "general"
    assert kernel_variant(kernel_params(cfg, 0)) == KernelVariant(-1, 1, 1, 1, controller=expected)
    assert kernel_variant(kernel_params(cfg, 0, tick_every_cycle=True)) == KernelVariant(-1, 1, 1, 1,
                                                                                         controller="general")


# DRAMSim3's controller as `config import-dramsim3` sets it (its own kernel: `kernel.DRAMSIM3`), and one with bank
# queues the frozen kernels do not take (the general kernel of the shape)
DRAMSIM3_LIKE = ("memory.controller.scheduler=round_robin", "memory.controller.bank_queue_depth=8",
                 "memory.controller.row_policy={impl: open_cap, cap: 4}",
                 "memory.controller.write_drain={high_watermark: 32, low_watermark: 0, idle_threshold: 8}",
                 "memory.controller.refresh={impl: all_bank, hold_columns: true}")
OTHER_CONTROLLER = ("memory.controller.scheduler=fcfs", "memory.controller.bank_queue_depth=4",
                    "memory.controller.row_policy={impl: open_cap, cap: 2}")


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize(("controller", "overrides"), [("plain", ()), ("dramsim3", DRAMSIM3_LIKE),
                                                       ("general", OTHER_CONTROLLER)])
def test_a_frozen_controller_of_a_shape_equals_the_general_kernel(preset, controller, overrides, monkeypatch):
    """On a shipped standard's shape the defaults run the plain kernel, DRAMSim3's controller its own and any other
    the general kernel with the shape frozen; the general kernel, which reads what they freeze, must issue the same
    commands at the same cycles."""
    from archsim import memory

    cfg = config(preset, *overrides)
    requests = _mixed_stream(cfg)
    org = cfg.organization
    shape = (org.pseudo_channels, org.ranks, mask_words(org.banks_per_pseudo_channel))
    assert kernel_variant(kernel_params(cfg, 0)) == KernelVariant(-1, *shape, controller=controller)
    frozen = replay(cfg, requests, command_log=True)
    monkeypatch.setattr(memory, "kernel_variant", lambda prm: KernelVariant())
    general = replay(cfg, requests, command_log=True)
    assert np.array_equal(frozen.done_cycle, general.done_cycle)
    for field in ("cycle", "command", "bank", "row"):
        assert np.array_equal(getattr(frozen.command_log, field), getattr(general.command_log, field)), field
