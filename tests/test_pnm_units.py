"""The pool's shared PNM units (archsim/serving/pnm_units.py): jobs from several servers queue under FIFO or fair
share with the delays a hand calculation gives, a job alone waits nothing, and the work is conserved."""

from __future__ import annotations

import random

import pytest

from archsim.serving.pnm_units import PnmUnits

pytestmark = pytest.mark.unit


def _run(units: PnmUnits, jobs: list[tuple[float, float, int]]) -> dict[int, float]:
    """Start (arrival ns, work ns, server) jobs in arrival order, run to the end; finish time per job id."""
    done: dict[int, float] = {}
    for arrival, work, server in jobs:
        nxt = units.next_completion()
        while nxt is not None and nxt[0] <= arrival:
            done.update((jid, t) for t, jid in units.advance(nxt[0]))
            nxt = units.next_completion()
        units.start(work, server, arrival)
    while (nxt := units.next_completion()) is not None:
        done.update((jid, t) for t, jid in units.advance(nxt[0]))
    return done


def test_two_servers_jobs_arriving_together_queue_as_each_discipline_says():
    w = 1e6
    fifo = PnmUnits(2, "fifo")
    assert _run(fifo, [(0.0, w, 0), (0.0, w, 1)]) == {0: w, 1: 2 * w}
    assert fifo.queueing_ns == [0.0, w]                      # the second waits the first's work
    fair = PnmUnits(2, "fair_share")
    assert _run(fair, [(0.0, w, 0), (0.0, w, 1)]) == {0: 2 * w, 1: 2 * w}
    assert fair.queueing_ns == [w, w]                        # each at half rate: both end after 2w
    assert fifo.busy_ns == fair.busy_ns == 2 * w             # the same work either way


def test_fair_share_keeps_a_short_job_from_waiting_behind_a_long_one():
    long, short = 10e6, 1e6
    fifo = PnmUnits(2, "fifo")
    assert _run(fifo, [(0.0, long, 0), (0.0, short, 1)]) == {0: long, 1: long + short}
    assert fifo.queueing_ns == [0.0, long]
    fair = PnmUnits(2, "fair_share")
    # both at half rate until the short one leaves at 2 x short; the long one then runs alone
    assert _run(fair, [(0.0, long, 0), (0.0, short, 1)]) == {1: 2 * short, 0: long + short}
    assert fair.queueing_ns == [short, short]
    # with the short job first, FIFO's total wait is the smaller
    first = PnmUnits(2, "fifo")
    _run(first, [(0.0, short, 0), (0.0, long, 1)])
    assert sum(first.queueing_ns) == short < sum(fair.queueing_ns)


def test_fair_share_splits_by_server_then_among_a_servers_jobs():
    units = PnmUnits(2, "fair_share")
    # server 0 has two jobs, server 1 one: server 1's runs at 1/2, server 0's at 1/4 each
    done = _run(units, [(0.0, 1e6, 0), (0.0, 1e6, 0), (0.0, 1e6, 1)])
    assert done[2] == pytest.approx(2e6)                      # 1e6 of work at rate 1/2
    # then server 0's two share the units: 0.5e6 left each at rate 1/2
    assert done[0] == done[1] == pytest.approx(3e6)


def test_a_job_alone_waits_nothing_and_staggered_jobs_match_a_hand_schedule():
    units = PnmUnits(3, "fair_share")
    assert _run(units, [(5.0, 7.0, 2)]) == {0: 12.0} and units.queueing_ns == [0.0, 0.0, 0.0]
    units = PnmUnits(2, "fifo")
    # arrivals at 0 and 2 with work 4 each: the second starts at 4, ends at 8, after waiting 2
    assert _run(units, [(0.0, 4.0, 0), (2.0, 4.0, 1)]) == {0: 4.0, 1: 8.0}
    assert units.queueing_ns == [0.0, 2.0] and units.max_queueing_ns == [0.0, 2.0]


@pytest.mark.parametrize("scheduling", ["fifo", "fair_share"])
def test_work_is_conserved_and_the_units_never_idle_with_a_job_waiting(scheduling):
    rng = random.Random(3)
    jobs, t = [], 0.0
    for _ in range(200):
        t += rng.expovariate(1 / 3.0)
        jobs.append((t, rng.uniform(0.5, 5.0), rng.randrange(4)))
    units = PnmUnits(4, scheduling)
    done = _run(units, jobs)
    assert len(done) == 200 and units.jobs == [sum(1 for j in jobs if j[2] == s) for s in range(4)]
    # a work-conserving server: its busy time is the work, and each job's delay its time beyond its work
    assert units.busy_ns == pytest.approx(sum(w for _, w, _ in jobs), rel=1e-9)
    waits = sum(done[k] - a - w for k, (a, w, _) in enumerate(jobs))
    assert sum(units.queueing_ns) == pytest.approx(waits, rel=1e-9, abs=1e-6)
    assert max(done.values()) >= max(a for a, _, _ in jobs)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="scheduling"):
        PnmUnits(2, "round_robin")
    with pytest.raises(ValueError, match="positive"):
        PnmUnits(2, "fifo").start(0.0, 0, 0.0)


def test_a_job_finishing_as_another_starts_is_never_finished_unseen():
    """The engine hands over the jobs done by now before it starts one (an iteration's end and a transfer's can
    fall on the same instant): starting without that is an error, not a job lost (its iteration would never end)."""
    units = PnmUnits(2, "fair_share")
    units.start(10.0, 0, 0.0)
    with pytest.raises(RuntimeError, match="not advanced"):
        units.start(5.0, 1, 10.0)
    units = PnmUnits(2, "fair_share")
    first = units.start(10.0, 0, 0.0)
    assert units.advance(10.0) == [(10.0, first)]
    second = units.start(5.0, 1, 10.0)
    assert units.advance(15.0) == [(15.0, second)]


def _owned_run(scheduling: str) -> tuple[PnmUnits, list[tuple[float, int, float]]]:
    """20 jobs arriving at once, job k of server k % 3 with work 1 + k ns, owner 100 + k and rest k / 2 ns, run
    out through advance_owned."""
    units = PnmUnits(3, scheduling)
    for k in range(20):
        units.start(1.0 + k, k % 3, 0.0, owner=100 + k, rest_ns=k / 2)
    seen = []
    while (nxt := units.next_completion()) is not None:
        seen.extend(units.advance_owned(nxt[0]))
    return units, seen


@pytest.mark.parametrize("scheduling", ["fifo", "fair_share"])
def test_finished_jobs_come_back_with_their_owner_and_the_time_after_them(scheduling):
    """advance_owned hands the serving engine each finished job's instance and the rest of its iteration, in
    time order, with more jobs at once than the units first had room for."""
    units, seen = _owned_run(scheduling)
    assert sorted((owner, rest) for _, owner, rest in seen) == [(100 + k, k / 2) for k in range(20)]
    assert [t for t, _, _ in seen] == sorted(t for t, _, _ in seen)
    assert units.jobs == [7, 7, 6] and len(units) == 0 and units.advance_owned(units.now_ns) == []
    if scheduling == "fifo":      # one at a time in arrival order: job k ends after the work of jobs 0..k
        assert [(t, owner) for t, owner, _ in seen] == [(sum(1.0 + j for j in range(k + 1)), 100 + k)
                                                        for k in range(20)]


@pytest.mark.parametrize("scheduling", ["fifo", "fair_share"])
def test_start_owned_is_advance_owned_then_start(scheduling):
    """The engine's one call per iteration (start_owned) leaves the units as advancing and then starting does,
    bit for bit, and hands over the same finished jobs."""
    rng = random.Random(7)
    jobs = sorted((rng.uniform(0, 50), rng.uniform(0.5, 5.0), rng.randrange(3)) for _ in range(60))
    one, two = PnmUnits(3, scheduling), PnmUnits(3, scheduling)
    for k, (arrival, work, server) in enumerate(jobs):
        handed = one.start_owned(work, server, arrival, k, work / 3)
        assert handed == two.advance_owned(arrival)
        two.start(work, server, arrival, k, work / 3)
        assert one.next_completion() == two.next_completion() and one.busy_ns == two.busy_ns
    assert one.queueing_ns == two.queueing_ns and one.jobs == two.jobs
    with pytest.raises(ValueError, match="backwards"):
        one.start_owned(1.0, 0, 0.0, 0, 0.0)
