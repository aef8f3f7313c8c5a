"""Transfers over paths of links (archsim.serving.paths): processor sharing on one link, max-min fair rates
over a server's port and a shared uplink, against hand-computed times and LinkSharing."""

from __future__ import annotations

import numpy as np
import pytest

from archsim.serving.paths import PathSharing
from archsim.serving.transfers import Link, LinkSharing

pytestmark = pytest.mark.unit


def _drain(links) -> dict[int, float]:
    done = {}
    while (nxt := links.next_completion()) is not None:
        done.update({tid: t for t, tid in links.advance(nxt[0])})
    return done


def test_one_link_paths_are_processor_sharing_as_link_sharing_computes_it():
    rng = np.random.default_rng(5)
    starts = np.sort(rng.uniform(0, 1e6, 200))
    sizes = rng.uniform(1e3, 5e6, 200)
    link = Link("l", 16.0, 700.0)
    paths, single = PathSharing([link]), LinkSharing([link])
    ends_p, ends_s = {}, {}
    for t, size in zip(starts.tolist(), sizes.tolist(), strict=True):
        ends_p.update({tid: x for x, tid in paths.advance(t)})
        ends_s.update({tid: x for x, tid in single.advance(t)})
        assert paths.start(("l",), size, t) == single.start("l", size, t)
    ends_p.update(_drain(paths))
    ends_s.update(_drain(single))
    assert ends_p.keys() == ends_s.keys() == set(range(200))
    assert [ends_p[k] for k in range(200)] == pytest.approx([ends_s[k] for k in range(200)], rel=1e-9)
    assert paths.counters("l").busy_ns == pytest.approx(single.counters("l").busy_ns, rel=1e-9)


def test_two_servers_ports_and_a_shared_uplink_are_max_min_fair():
    # server 0's port carries two transfers (5 GB/s each); server 1's one would take its whole 10 GB/s port,
    # but the 15 GB/s uplink has only 5 left: all three move at 5 GB/s
    links = PathSharing([Link("s0", 10.0), Link("s1", 10.0), Link("up", 15.0, 100.0)])
    for server in ("s0", "s0", "s1"):
        links.start((server, "up"), 1000.0, 0.0)
    assert _drain(links) == pytest.approx({0: 300.0, 1: 300.0, 2: 300.0}, rel=1e-12)
    # alone, a transfer is capped by its own port; while both move, the two servers split the uplink
    links = PathSharing([Link("s0", 10.0), Link("s1", 10.0), Link("up", 15.0, 100.0)])
    links.start(("s0", "up"), 1000.0, 0.0)      # from 100 ns at 10 GB/s: 500 B left at 150 ns
    links.start(("s1", "up"), 1000.0, 50.0)     # from 150 ns both at 7.5 GB/s: transfer 0 ends 66.7 ns later
    end0 = 150.0 + 500.0 / 7.5                  # transfer 1 has moved 500 B then, the rest alone at 10 GB/s
    assert _drain(links) == pytest.approx({0: end0, 1: end0 + 500.0 / 10.0}, rel=1e-12)
    assert links.counters("up").bytes_completed == 2000.0 and links.counters("s1").bytes_completed == 1000.0


def test_a_shared_uplink_slows_each_server_only_when_it_fills():
    # eight servers of one 10 GB/s port each on a 40 GB/s uplink: each gets 5 GB/s when all load; one alone 10
    links = PathSharing([*(Link(f"s{k}", 10.0) for k in range(8)), Link("up", 40.0)])
    for k in range(8):
        links.start((f"s{k}", "up"), 5000.0, 0.0)
    assert list(_drain(links).values()) == pytest.approx([1000.0] * 8, rel=1e-12)
    start, end = links.busy_periods("up")
    assert start.tolist() == [0.0] and end.tolist() == pytest.approx([1000.0])


def test_zero_bytes_finish_after_the_latency_and_bad_paths_are_refused():
    links = PathSharing([Link("a", 1.0, 50.0), Link("b", 1.0, 25.0)])
    links.start(("a", "b"), 0.0, 10.0)
    assert links.advance(100.0) == [(85.0, 0)]
    with pytest.raises(ValueError, match="unknown link"):
        links.start(("a", "c"), 1.0, 100.0)
    with pytest.raises(ValueError, match="backwards"):
        links.advance(50.0)
