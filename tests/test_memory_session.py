"""Closed-loop use of the memory: requests released as the data they depend on arrives."""

import numpy as np
import pytest

from archsim import analytic
from archsim.controller import codes as K  # noqa: N812 - the kernel's codes read as K.INF
from archsim.memory import MemorySession, Requests, replay
from tests.conftest import config

pytestmark = pytest.mark.component


def test_dependent_chain_costs_one_unloaded_latency_per_link():
    cfg = config("HBM3", "memory.controller.refresh=none")
    n = 20
    # each read hits a different row of one bank: a row conflict after the first (a miss)
    row_stride = cfg.organization.capacity_bytes // cfg.organization.rows
    address = (np.arange(n, dtype=np.uint64) * row_stride).astype(np.uint64)
    session = MemorySession(cfg, address, np.zeros(n, dtype=np.uint8))
    release = 0
    for i in range(n):
        session.release(i, i + 1, release)
        while session.done_cycle[i] < 0:
            session.run_until(session.now + 1000)
        release = int(session.done_cycle[i]) + 100  # far enough apart that tRAS/tRTP no longer bind
    latency = session.done_cycle - session.accept_cycle
    assert latency[0] == analytic.unloaded_read_latency_cycles(cfg, "miss")
    assert (latency[1:] == analytic.unloaded_read_latency_cycles(cfg, "conflict")).all()


def test_open_loop_session_equals_replay():
    cfg = config("HBM2")
    rng = np.random.default_rng(2)
    n = 3000
    requests = Requests.build(np.sort(rng.integers(0, 6000, n)), rng.integers(0, 2**24, n) * 64,
                              rng.random(n) < 0.3)
    reference = replay(cfg, requests)
    session = MemorySession(cfg, requests.address, requests.is_write)
    # release in slices, simulating up to each slice's first timestamp before releasing it
    for first in range(0, n, 500):
        session.run_until(int(requests.timestamp_cycles[first]))
        session.release(first, min(n, first + 500), requests.timestamp_cycles[first:first + 500])
    session.run_until(2**62)
    assert np.array_equal(session.done_cycle, reference.done_cycle)
    assert np.array_equal(session.accept_cycle, reference.accept_cycle)


def test_run_until_stops_at_the_horizon():
    cfg = config("HBM3")
    session = MemorySession(cfg, np.array([0, 4096], dtype=np.uint64), np.zeros(2, dtype=np.uint8))
    session.release(0, 2, 0)
    assert session.run_until(5) == 5
    assert (session.done_cycle < 0).all()
    session.run_until(10_000)
    assert (session.done_cycle > 0).all()


def test_a_livelocked_controller_stops_with_a_clear_error():
    """With requests queued and no column command for STALL_CYCLES, the kernel stops instead of spinning."""
    cfg = config("HBM2")
    n = 8
    session = MemorySession(cfg, np.arange(n, dtype=np.uint64) * 64, np.zeros(n, dtype=np.uint8),
                            np.zeros(n, dtype=np.uint8))
    session.release(0, n, 0)
    nxt_bank = session._state[0]  # per-bank earliest issue cycles: push every bank's past any horizon
    nxt_bank[:] = 10**15
    with pytest.raises(RuntimeError, match="stalled: 8 requests queued"):
        session.run_until(int(K.INF))


@pytest.mark.parametrize("overrides", [(), ("memory.frontend.max_injections_per_cycle=1",)])
def test_a_replay_in_chunks_equals_one_in_one_go(overrides):
    """The kernel stops between cycles only: a call that stopped mid-cycle used to resume with a second visit
    of the same cycle (two row commands on one channel's row bus, found by the protocol checker)."""
    cfg = config("HBM3", *overrides)
    rng = np.random.default_rng(3)
    n = 4000
    address = np.where(rng.random(n) < 0.5, np.arange(n) * 64,
                       rng.integers(0, cfg.organization.capacity_bytes // 64, n) * 64).astype(np.uint64)
    requests = Requests.build(np.cumsum(rng.integers(0, 3, n)), address, (rng.random(n) < 0.3).astype(np.uint8))
    whole = replay(cfg, requests, command_log=True)
    chunked = replay(cfg, requests, command_log=True, chunk_requests=7)
    assert np.array_equal(whole.accept_cycle, chunked.accept_cycle)
    assert np.array_equal(whole.done_cycle, chunked.done_cycle)
    for field in ("cycle", "command", "pseudo_channel", "bank"):
        assert np.array_equal(getattr(whole.command_log, field), getattr(chunked.command_log, field)), field
