"""Processor-sharing links: concurrent transfers share bandwidth exactly, staggered arrivals follow the
hand-computed schedule, bytes are conserved per link, and the event model agrees with the offline one."""

from __future__ import annotations

import numpy as np
import pytest

from archsim.serving.transfers import Link, LinkSharing, concurrent_transfer_ns, links_of_tiers, ps_finish_times

pytestmark = pytest.mark.unit

PCIE = Link("pcie", bandwidth_GBps=64.0, latency_ns=1000.0)
KV_BYTES = 64 * 2**20  # a 64 MiB prefix load


def _alone_ns(size_bytes: float, link: Link = PCIE) -> float:
    links = LinkSharing([link])
    links.start(link.name, size_bytes, 0.0)
    return links.complete_next()[0]


def test_two_loads_started_together_each_take_twice_as_long_as_one_alone():
    alone = _alone_ns(KV_BYTES)
    assert alone == PCIE.latency_ns + KV_BYTES / PCIE.bandwidth_GBps
    links = LinkSharing([PCIE])
    a = links.start("pcie", KV_BYTES, 0.0)
    b = links.start("pcie", KV_BYTES, 0.0)
    both = PCIE.latency_ns + 2 * KV_BYTES / PCIE.bandwidth_GBps
    assert links.next_completion() == (both, a)
    assert links.advance(both) == [(both, a), (both, b)]  # a tie, reported in id order
    assert both == concurrent_transfer_ns(KV_BYTES, 2, PCIE.bandwidth_GBps, PCIE.latency_ns)
    assert both / alone == pytest.approx(2.0, rel=1e-3)  # the 1 us latency is 0.1 % of a 1 ms load
    assert links.next_completion() is None and links.in_flight() == 0


def test_staggered_arrivals_follow_the_hand_computed_schedule():
    # 1 byte/ns, 100 ns latency. A: 1000 B at 0; B: 600 B at 400; C: 100 B at 900. Data phases start at
    # 100, 500, 1000. A alone to 500 (400 B through), A and B at 1/2 to 1000 (250 B each), A, B, C at 1/3:
    # C's 100 B take 300 ns (done 1300, A and B 250 B left each), then A and B at 1/2: both done at 1800.
    links = LinkSharing([Link("cxl", bandwidth_GBps=1.0, latency_ns=100.0)])
    a = links.start("cxl", 1000, 0.0)
    assert links.next_completion() == (1100.0, a)  # alone
    assert links.advance(400.0) == []
    b = links.start("cxl", 600, 400.0)
    # B is still in its latency phase, yet the prediction accounts for it halving A's share at 500
    assert links.next_completion() == (1700.0, a)
    assert links.advance(900.0) == []
    c = links.start("cxl", 100, 900.0)
    assert links.next_completion() == (1300.0, c)
    assert links.complete_next() == (1300.0, c)
    assert links.complete_next() == (1800.0, a)
    assert links.complete_next() == (1800.0, b)
    assert links.complete_next() is None
    counters = links.counters("cxl")
    assert counters.busy_ns == 1700.0  # 100..1800, the link never idle once A's data phase began
    assert counters.bytes_completed == counters.bytes_started == 1700
    assert links.bytes_by_link() == {"cxl": 1700}
    np.testing.assert_array_equal(ps_finish_times([0, 400, 900], [1000, 600, 100], 1.0, 100.0), [1800, 1800, 1300])


def test_links_do_not_share_with_each_other():
    links = LinkSharing([PCIE, Link("nvme", bandwidth_GBps=7.0, latency_ns=20_000.0)])
    p = links.start("pcie", KV_BYTES, 0.0)
    n = links.start("nvme", KV_BYTES, 0.0)
    assert links.in_flight("pcie") == 1 and links.in_flight("nvme") == 1
    done = links.advance(1e12)
    assert done == [(_alone_ns(KV_BYTES), p), (20_000.0 + KV_BYTES / 7.0, n)]


def test_random_arrivals_match_the_offline_schedule_and_conserve_bytes_per_link():
    rng = np.random.default_rng(7)
    specs = [Link("a", 25.0, 500.0), Link("b", 3.5, 0.0)]
    n = 400
    start = np.sort(rng.exponential(2000.0, n).cumsum())
    link_of = rng.integers(0, 2, n)
    size = rng.integers(0, 200_000, n)
    links = LinkSharing(specs)
    finish = {}
    k = 0
    while k < n or links.in_flight():  # the engine's loop: the earlier of the next start and the next completion
        nxt = links.next_completion()
        if k < n and (nxt is None or start[k] < nxt[0]):
            tid = links.start(specs[link_of[k]].name, int(size[k]), float(start[k]))
            assert tid == k
            k += 1
        else:
            t_ns, tid = links.complete_next()
            assert t_ns == nxt[0] and tid == nxt[1] and tid not in finish
            finish[tid] = t_ns
    got = np.array([finish[i] for i in range(n)])
    for index, spec in enumerate(specs):
        mine = link_of == index
        expected = ps_finish_times(start[mine], size[mine], spec.bandwidth_GBps, spec.latency_ns)
        np.testing.assert_allclose(got[mine], expected, rtol=1e-9, atol=1e-6)
        assert (got[mine] >= start[mine] + spec.latency_ns + size[mine] / spec.bandwidth_GBps - 1e-6).all()
        counters = links.counters(spec.name)
        assert counters.transfers_completed == counters.transfers_started == mine.sum()
        assert counters.bytes_completed == counters.bytes_started == size[mine].sum()
        # the link moves bandwidth bytes per busy ns: every byte is carried once, none invented
        assert counters.busy_ns * spec.bandwidth_GBps == pytest.approx(size[mine].sum(), rel=1e-9)


def test_a_completion_passed_by_a_later_start_is_still_reported_at_its_time():
    links = LinkSharing([Link("cxl", bandwidth_GBps=1.0, latency_ns=0.0)])
    a = links.start("cxl", 100, 0.0)
    b = links.start("cxl", 100, 500.0)  # the caller never advanced to 100 ns, when a finished
    assert links.next_completion() == (100.0, a)
    assert links.complete_next() == (100.0, a)
    assert links.complete_next() == (600.0, b)


def test_same_inputs_give_the_same_schedule():
    def run():
        links = LinkSharing([PCIE])
        for i in range(6):
            links.start("pcie", 1000 * (i % 3), 10.0 * (i // 2))
        return links.advance(1e9)
    first = run()
    assert first == run()
    # by hand (64 B/ns, 1 us latency): the empty transfers 0 and 3 end with their latency (1000, 1010 ns);
    # 1 has 40 B left at 1020 when 4 and 5 join (1022.5 ns), then 4 (960 B), 2 (1640 B) and 5 (1960 B)
    assert [tid for _, tid in first] == [0, 3, 1, 4, 2, 5]
    assert first[0][0] == 1000.0 and first[1][0] == 1010.0 and first[2][0] == 1022.5


def test_bad_use_is_refused():
    links = LinkSharing([PCIE])
    links.advance(50.0)
    with pytest.raises(ValueError, match="backwards"):
        links.start("pcie", 10, 40.0)
    with pytest.raises(ValueError, match="unknown link 'nvlink'"):
        links.start("nvlink", 10, 60.0)
    with pytest.raises(ValueError, match="size"):
        links.start("pcie", -1, 60.0)
    with pytest.raises(ValueError, match="bandwidth"):
        Link("x", 0.0)
    with pytest.raises(ValueError, match="twice"):
        LinkSharing([PCIE, PCIE])


def test_links_of_tiers_takes_each_named_link_once():
    from types import SimpleNamespace as Tier
    tiers = [Tier(name="hbm", link=None, link_GBps=0.0, link_latency_ns=0.0),
             Tier(name="host", link="pcie", link_GBps=64.0, link_latency_ns=1000.0),
             Tier(name="nvme", link="pcie", link_GBps=64.0, link_latency_ns=1000.0)]
    assert links_of_tiers(tiers) == [PCIE]
    tiers[2] = Tier(name="nvme", link="pcie", link_GBps=7.0, link_latency_ns=1000.0)
    with pytest.raises(ValueError, match="tier nvme: link pcie is 7.0 GB/s"):
        links_of_tiers(tiers)
