"""The L2 kernel against analytic expectations and a plain-Python reference model of the replacement policies."""

from __future__ import annotations

import numpy as np
import pytest

from archsim.cache import HIT, MERGE, MISS, l2_config_from_mapping, simulate_l2
from archsim.errors import ConfigError

pytestmark = pytest.mark.component

LINE = 64
SPACED = 1000  # arrival spacing far above hit + memory latency: every fill returns before the next access


def cfg(capacity="4KiB", ways=4, replacement="lru", hit=10, mshrs=8, **extra):
    data = {"capacity": capacity, "line_size": f"{LINE}B", "ways": ways, "replacement": replacement,
            "hit_latency_cycles": hit, "mshrs": mshrs, **extra}
    return l2_config_from_mapping(data)


def spaced(n):
    return np.arange(n, dtype=np.int64) * SPACED


def reference(lines, writes, sets, ways, policy, rrpv_bits=2, bimodal=32):
    """Functional model (every fill completes before the next access): outcomes, write-backs, evictions."""
    rmax = (1 << rrpv_bits) - 1
    content = [[None] * ways for _ in range(sets)]  # each slot: [line, dirty, state]
    stamp = fills = evictions = 0
    hits, writebacks = [], []
    for line, write in zip(lines, writes, strict=True):
        stamp += 1
        ways_of = content[line % sets]
        slot = next((x for x in ways_of if x is not None and x[0] == line), None)
        if slot is not None:
            slot[2] = stamp if policy == "lru" else 0
            slot[1] |= write
            hits.append(True)
            continue
        hits.append(False)
        if None in ways_of:
            w = ways_of.index(None)
        elif policy == "lru":
            w = min(range(ways), key=lambda x: ways_of[x][2])
        else:
            while all(x[2] < rmax for x in ways_of):
                for x in ways_of:
                    x[2] += 1
            w = next(i for i, x in enumerate(ways_of) if x[2] == rmax)
        if ways_of[w] is not None:
            evictions += 1
            if ways_of[w][1]:
                writebacks.append(ways_of[w][0])
        if policy == "lru":
            state = stamp
        elif policy == "srrip" or fills % bimodal == 0:
            state = rmax - 1
        else:
            state = rmax
        fills += 1
        ways_of[w] = [line, write, state]
    return np.array(hits), writebacks, evictions


def test_working_set_smaller_than_cache_hits_all_but_the_first_pass():
    c = cfg()
    n_lines, passes = 48, 8  # 48 of 64 lines
    addr = np.tile(np.arange(n_lines) * LINE, passes)
    r = simulate_l2(c, addr, arrival_cycle=spaced(len(addr)))
    assert r.count("misses") == n_lines
    assert r.count("evictions") == 0
    assert r.hit_rate() == pytest.approx((passes - 1) / passes, abs=1e-15)
    assert (r.outcome[n_lines:] == HIT).all()


@pytest.mark.parametrize("sets", [1, 4])
def test_cyclic_scan_one_line_per_set_too_many(sets):
    ways, rounds = 8, 20
    capacity = sets * ways * LINE
    lines = np.tile(np.arange(sets * (ways + 1)), rounds)  # every set sees ways + 1 lines in a cycle
    addr = lines * LINE
    results = {p: simulate_l2(cfg(f"{capacity}B", ways, p), addr, arrival_cycle=spaced(len(addr)))
               for p in ("lru", "srrip", "brrip")}
    # LRU always evicts the line needed next; so does SRRIP (it is scan- not thrash-resistant, Jaleel ISCA'10)
    assert results["lru"].count("hits") == 0
    assert results["srrip"].count("hits") == 0
    # BRRIP inserts most lines "distant", so they are the next victims and the rest of the set survives
    brrip = results["brrip"]
    hits, _, _ = reference(lines, np.zeros_like(lines), sets, ways, "brrip")
    assert brrip.count("hits") == hits.sum()
    assert brrip.hit_rate() > 0.7


def test_srrip_keeps_a_reused_working_set_through_a_scan():
    # one set of 8 ways: a 4-line working set touched twice, then a 6-line burst of never-reused lines, repeated
    ways, rounds = 8, 30
    hot = [0, 1, 2, 3]
    lines = []
    for r in range(rounds):
        lines += hot + hot + [100 + 6 * r + i for i in range(6)]
    lines = np.array(lines)
    addr = lines * LINE
    lru = simulate_l2(cfg(f"{ways * LINE}B", ways, "lru"), addr, arrival_cycle=spaced(len(addr)))
    srrip = simulate_l2(cfg(f"{ways * LINE}B", ways, "srrip"), addr, arrival_cycle=spaced(len(addr)))
    # LRU: the scan pushes the hot lines out every round; only the second touch of each round hits
    assert lru.count("hits") == 4 * rounds
    # SRRIP: hot lines sit at RRPV 0, scan lines are inserted at 2 and evicted first; after round 1 all 8 hot
    # touches of every round hit
    assert srrip.count("hits") == 4 + 8 * (rounds - 1)


@pytest.mark.parametrize("policy", ["lru", "srrip", "brrip"])
def test_kernel_matches_reference_on_a_random_stream(policy):
    rng = np.random.default_rng(7)
    n, sets, ways = 4000, 8, 4
    lines = rng.zipf(1.3, n) % 200
    writes = (rng.random(n) < 0.3).astype(np.uint8)
    r = simulate_l2(cfg(f"{sets * ways * LINE}B", ways, policy), lines * LINE, is_write=writes,
                    arrival_cycle=spaced(n))
    hits, writebacks, evictions = reference(lines, writes, sets, ways, policy)
    assert np.array_equal(r.outcome == HIT, hits)
    assert r.count("evictions") == evictions
    assert r.count("writebacks") == len(writebacks)
    wb = r.misses.is_write == 1
    assert list(r.misses.address[wb] // LINE) == writebacks


def test_writebacks_are_counted_exactly():
    ways = 4
    c = cfg(f"{ways * LINE}B", ways)  # one set
    dirty = np.arange(ways) * LINE
    clean = (np.arange(ways) + 10) * LINE
    addr = np.concatenate([dirty, clean])
    writes = np.array([1] * ways + [0] * ways, dtype=np.uint8)
    r = simulate_l2(c, addr, is_write=writes, arrival_cycle=spaced(2 * ways))
    assert r.count("writebacks") == ways and r.count("evictions") == ways
    wb = r.misses.is_write == 1
    assert np.array_equal(np.sort(r.misses.address[wb]), dirty)
    # each write-back leaves at the fill cycle of the read that evicted it: arrival + hit 10 + memory 100
    assert np.array_equal(r.misses.cycle[wb], spaced(2 * ways)[ways:] + 110)
    # a write-allocate write miss reads the line first: every access here made one memory read
    assert int((r.misses.is_write == 0).sum()) == 2 * ways


def test_flush_writes_back_each_dirty_line_once():
    c = cfg()
    addr = np.array([0, 64, 128, 0, 64, 192]) * 1
    writes = np.array([1, 1, 0, 1, 0, 0], dtype=np.uint8)
    r = simulate_l2(c, addr, is_write=writes, arrival_cycle=spaced(6), flush=True)
    assert r.flush_writebacks == 2 and r.count("writebacks") == 2
    assert simulate_l2(c, addr, is_write=writes, arrival_cycle=spaced(6)).count("writebacks") == 0


def test_mshr_merges_accesses_to_one_missing_line():
    n = 16
    r = simulate_l2(cfg(), np.full(n, 4096 + 8), arrival_cycle=np.arange(n))
    assert int((r.misses.is_write == 0).sum()) == 1
    assert r.outcome[0] == MISS and (r.outcome[1:] == MERGE).all()
    assert (r.done_cycle == 110).all()  # read leaves at 0 + 10, fill returns 100 later; merged ones get it too
    assert r.count("merged") == n - 1


def test_full_mshrs_stall_the_access_and_everything_behind_it():
    r = simulate_l2(cfg(mshrs=2), np.array([0, 64, 128, 0]), arrival_cycle=np.zeros(4, dtype=np.int64))
    assert list(r.outcome) == [MISS, MISS, MISS, HIT]
    assert list(r.issue_cycle) == [0, 0, 110, 110]  # third waits for the first fill; the fourth is behind it
    assert list(r.done_cycle) == [110, 110, 220, 120]
    assert list(r.misses.cycle) == [10, 10, 120]
    assert r.issue_delay_cycles == 220


def test_mshr_target_limit_turns_the_extra_access_into_a_later_hit():
    r = simulate_l2(cfg(mshr_targets=2), np.zeros(3, dtype=np.int64), arrival_cycle=np.zeros(3, dtype=np.int64))
    assert list(r.outcome) == [MISS, MERGE, HIT]
    assert list(r.done_cycle) == [110, 110, 120]


def test_per_read_memory_latency_array():
    addr = np.array([0, 64, 128])
    r = simulate_l2(cfg(), addr, arrival_cycle=np.zeros(3, dtype=np.int64), memory_latency_cycles=[5, 50, 500])
    assert list(r.done_cycle) == [15, 60, 510]
    with pytest.raises(ValueError, match="issued 3 memory reads"):
        simulate_l2(cfg(), addr, arrival_cycle=np.zeros(3, dtype=np.int64), memory_latency_cycles=[5, 50])


def test_counters_split_by_source_and_kind_and_who_evicts_whom():
    ways = 2
    c = cfg(f"{ways * LINE}B", ways)
    addr = np.array([0, 64, 0, 128, 192]) * 1
    source = np.array([0, 0, 0, 1, 1])  # host fills two KV lines, re-reads one; PNM streams two weights
    kind = np.array([1, 1, 1, 0, 0])
    r = simulate_l2(c, addr, source=source, kind=kind, arrival_cycle=spaced(5))
    assert r.count("misses", source="host", kind="kv") == 2
    assert r.count("hits", source="host") == 1
    assert r.count("misses", source="pnm", kind="weight") == 2
    assert r.count("evictions", source="host", kind="kv") == 2  # victims are counted against their owner
    assert r.cross_evictions.tolist() == [[0, 0], [2, 0]]
    s = r.stats()
    assert s["l2.evictions_by.pnm.of.host"] == 2 and s["l2.kinds.kv.hits"] == 1


def test_deterministic():
    rng = np.random.default_rng(3)
    n = 3000
    args = dict(is_write=rng.random(n) < 0.4, source=rng.integers(0, 2, n), kind=rng.integers(0, 3, n),
                arrival_cycle=np.cumsum(rng.integers(0, 3, n)))
    addr = rng.integers(0, 1 << 16, n) * 8
    a = simulate_l2(cfg(replacement="srrip", mshrs=4), addr, **args)
    b = simulate_l2(cfg(replacement="srrip", mshrs=4), addr, **args)
    for field in ("outcome", "issue_cycle", "done_cycle", "counters", "cross_evictions"):
        assert np.array_equal(getattr(a, field), getattr(b, field))
    assert np.array_equal(a.misses.address, b.misses.address) and np.array_equal(a.misses.cycle, b.misses.cycle)


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"capacity": "1000B"}, "l2.capacity"),
        ({"line_size": "48B"}, "l2.line_size"),
        ({"replacement": "plru"}, "l2.replacement.impl"),
        ({"replacement": {"impl": "lru", "rrpv_bits": 2}}, "l2.replacement.rrpv_bits"),
        ({"mshrs": 0}, "l2.mshrs"),
        ({"colour": "red"}, "l2.colour"),
    ],
)
def test_config_errors_name_the_dotted_path(change, where):
    data = {"capacity": "4KiB", "line_size": "64B", "ways": 4, "replacement": "lru", "hit_latency_cycles": 10,
            "mshrs": 8, **change}
    with pytest.raises(ConfigError) as err:
        l2_config_from_mapping(data)
    assert err.value.where == where


def test_arrivals_must_not_go_back_in_time():
    with pytest.raises(ValueError, match="non-decreasing"):
        simulate_l2(cfg(), np.array([0, 64]), arrival_cycle=np.array([5, 4]))
