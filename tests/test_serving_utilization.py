"""Links and pool DRAM over time (archsim/serving/utilization.py): the bins conserve what moved, agree with the run's
averages, and the decode fast path bins the same bytes as the event-by-event run."""

from __future__ import annotations

import numpy as np
import pytest

from archsim.serving import engine
from archsim.serving.engine import simulate
from archsim.serving.metrics import summarize
from archsim.serving.utilization import BINS, binned
from tests.serving_tables import KV_BYTES_PER_TOKEN, LinearCost, sessions, spec, table

pytestmark = pytest.mark.unit

COST = LinearCost()


def test_bins_spread_each_interval_evenly_and_keep_instants() -> None:
    edges = np.linspace(0.0, 10.0, 11)
    got = binned(np.array([0.5, 3.0, 7.0, 10.0]), np.array([2.5, 3.0, 7.5, 10.0]), np.array([4.0, 1.0, 2.0, 5.0]),
                 edges)
    np.testing.assert_allclose(got, [1, 2, 1, 1, 0, 0, 0, 2, 0, 5])  # the span's last instant is in the last bin
    np.testing.assert_allclose(binned(np.array([-5.0]), np.array([15.0]), np.array([20.0]), edges), np.ones(10))
    rng = np.random.default_rng(4)
    start = rng.uniform(0, 9, 500)
    end = start + rng.uniform(0, 1, 500)
    amount = rng.uniform(0, 3, 500)
    assert binned(start, end, amount, edges).sum() == pytest.approx(amount.sum(), rel=1e-12)


def test_one_request_in_a_pnm_pool_reads_and_appends_what_it_holds() -> None:
    # a 64-token prompt, 4 tokens out: the prefill writes 64 tokens, then 3 decode steps read 64, 65, 66 and
    # append one each: 262 tokens of KV through the pool's DRAM
    sp = spec(lower="pool", kv_home=1, pool_dram_GBps=1000.0)
    res = simulate(table([0.0], [64], [4]), sp, COST)
    u = res.utilization
    assert u is not None and u["bins"] == BINS and len(u["pool_dram"]) == BINS
    moved = sum(u["pool_dram"]) * 1000.0 * u["bin_ms"] * 1e6
    assert moved == pytest.approx(262 * KV_BYTES_PER_TOKEN, rel=1e-9)


@pytest.mark.parametrize("fast_decode", [True, False], ids=["fast-path", "event-path"])
def test_link_bins_average_to_the_run_utilization(fast_decode: bool, monkeypatch) -> None:
    monkeypatch.setattr(engine._Engine, "fast_decode", fast_decode)
    reqs = sessions(30, 3, 6.0, 3000, 400, 120, 2e9, seed=5)
    res = simulate(reqs, spec(lower="host_dram", hbm_tokens=9000, link_GBps=100.0), COST)
    entry = summarize(res)
    busy = entry["utilization_over_time"]["links"]["pcie"]
    assert entry["link_utilization"]["pcie"] > 0.01  # the loads keep the link busy
    assert np.mean(busy) == pytest.approx(entry["link_utilization"]["pcie"], rel=1e-9)
    assert max(busy) <= 1.0 and entry["utilization_over_time"]["pool_dram"] is None


def test_the_fast_path_bins_the_pool_bytes_of_the_event_path(monkeypatch) -> None:
    reqs = sessions(20, 3, 4.0, 600, 100, 150, 1e9, seed=31)
    sp = spec(instances=2, lower="pool", kv_home=1, lower_tokens=8000, pool_dram_GBps=2000.0)
    fast = np.array(simulate(reqs, sp, COST).utilization["pool_dram"])
    monkeypatch.setattr(engine._Engine, "fast_decode", False)
    slow = np.array(simulate(reqs, sp, COST).utilization["pool_dram"])
    assert fast.sum() == pytest.approx(slow.sum(), rel=1e-5)
    np.testing.assert_allclose(fast, slow, rtol=0.02, atol=1e-6)
