"""The tiered LRU prefix cache: exact LRU hits and evictions on hand-written sequences, pinning, the running
batch within capacity, and the hit rate on a real (Mooncake) trace against the infinite-cache bound."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from archsim.serving import kvcache
from archsim.serving.kvcache import MISS, UNBOUNDED, LRUTier, TieredPrefixCache, infinite_cache_hit_rate
from tests.conftest import REPO

pytestmark = pytest.mark.unit

MOONCAKE = REPO / "tests" / "data" / "mooncake" / "trace_head200.jsonl"  # NOTICE.md beside it


def K(*keys: int) -> np.ndarray:
    return np.array(keys, dtype=np.uint64)


def lru_order(cache: TieredPrefixCache, tier: int) -> list[int]:
    """The tier's unpinned blocks, least recent first (white-box: the order the next evictions take)."""
    return list(cache.tiers[tier]._lru)


def counters(cache: TieredPrefixCache, tier: int) -> dict:
    s = cache.stats()[tier]
    return {k: s[k] for k in ("hits", "misses", "insertions", "promotions", "evictions", "demotions_in",
                              "demotions_out", "drops", "reads")}


def test_hand_written_sequence_gives_exact_lru_hits_and_evictions():
    c = TieredPrefixCache([3], ["hbm"])
    assert c.insert(K(1, 2, 3), 0)
    assert lru_order(c, 0) == [3, 2, 1]  # a request's tail enters least recent
    assert c.lookup(K(1, 2, 4)).tolist() == [0, 0, MISS]
    assert c.insert(K(4), 0)  # evicts 3, the least recent
    assert lru_order(c, 0) == [2, 1, 4]
    # 1 is cached but follows a miss: longest-prefix semantics make it a miss, and do not refresh it
    assert c.lookup(K(3, 1)).tolist() == [MISS, MISS]
    assert c.lookup(K(2)).tolist() == [0]  # refreshes 2
    assert lru_order(c, 0) == [1, 4, 2]
    assert c.insert(K(5, 6), 0)  # evicts 1 then 4
    assert lru_order(c, 0) == [2, 6, 5]
    assert c.lookup(K(5, 6, 2)).tolist() == [0, 0, 0]
    assert counters(c, 0) == {"hits": 6, "misses": 3, "insertions": 6, "promotions": 0, "evictions": 3,
                              "demotions_in": 0, "demotions_out": 0, "drops": 3, "reads": 0}
    assert c.hit_rate() == pytest.approx(6 / 9)

    # pinned blocks are never evicted: with 2 pinned, three new blocks cannot fit and nothing changes
    c.pin(K(2), 0)
    before = (c.stats(), lru_order(c, 0))
    assert not c.insert(K(7, 8, 9), 0)
    assert (c.stats(), lru_order(c, 0)) == before
    assert not c.can_insert(K(7, 8, 9), 0) and c.can_insert(K(7, 8), 0)
    assert c.insert(K(7, 8), 0)  # evicts 6 then 5, never the pinned 2
    assert c.tiers_of(2) == [0] and c.tiers_of(5) == [] and c.tiers_of(6) == []
    assert c.pinned_blocks(0) == 1 and c.room_blocks(0) == 2
    c.unpin(K(2), 0)  # back as the most recent unpinned block
    assert lru_order(c, 0) == [8, 7, 2]
    # the longest leading run that fits is cached: all 3 slots, blocks 10, 11, 12
    assert c.insert_prefix(K(10, 11, 12, 13), 0) == 3
    assert sorted(c.tiers[0]._lru) == [10, 11, 12]
    assert counters(c, 0)["evictions"] == 8
    assert c.lookup(K(10, 11, 12, 13)).tolist() == [0, 0, 0, MISS]


def test_two_tiers_promote_evict_to_copy_below_or_demote():
    c = TieredPrefixCache([2, 3], ["hbm", "pool"], bytes_per_block=1000)
    assert c.insert(K(1, 2, 3), 1)
    assert c.lookup(K(1, 2, 3)).tolist() == [1, 1, 1]
    assert c.promote(K(1, 2), 0, pin=True)  # a load into HBM for a running sequence; the pool copy stays
    assert c.tiers_of(1) == [0, 1] and c.tiers_of(3) == [1]
    assert c.lookup(K(1, 2, 3)).tolist() == [0, 0, 1]
    assert not c.insert(K(4), 0)  # HBM is all pinned
    c.unpin(K(1, 2), 0)
    assert c.insert(K(4), 0)  # evicts 2, which lives in the pool: the HBM copy is dropped, nothing lost
    assert c.insert(K(5), 0)  # evicts 1, likewise
    assert c.tiers_of(2) == [1] and c.tiers_of(1) == [1]
    assert c.insert(K(6), 0)  # evicts 4, which lives nowhere below: demoted into the full pool, evicting 3 there
    assert c.tiers_of(4) == [1] and c.tiers_of(3) == []
    assert c.lookup(K(4, 5, 6)).tolist() == [1, 0, 0]
    assert c.lookup(K(3, 4)).tolist() == [MISS, MISS]
    assert counters(c, 0) == {"hits": 4, "misses": 7, "insertions": 3, "promotions": 2, "evictions": 3,
                              "demotions_in": 0, "demotions_out": 1, "drops": 0, "reads": 0}
    assert counters(c, 1) == {"hits": 5, "misses": 2, "insertions": 3, "promotions": 0, "evictions": 1,
                              "demotions_in": 1, "demotions_out": 0, "drops": 1, "reads": 2}
    hbm, pool = c.stats()
    assert hbm["bytes_written"] == (3 + 2) * 1000 and hbm["bytes_read"] == 1000
    assert pool["bytes_written"] == (3 + 1) * 1000 and pool["bytes_read"] == 2 * 1000
    with pytest.raises(ValueError, match="block 99"):
        c.promote(K(99), 0)


def test_first_demotion_names_the_insert_that_demotes_and_on_demote_hears_of_it():
    c = TieredPrefixCache([4, 8], ["hbm", "host"])
    told: list[int] = []
    c.on_demote = told.append
    assert c.insert(K(1, 2), 1)                          # 1 and 2 also live below; 3 only in HBM
    for key in (3, 1, 2):
        assert c.insert(K(key), 0)
    assert lru_order(c, 0) == [3, 1, 2]                  # least recent first; one slot free
    # new blocks one after the other: the first takes the free slot, the second evicts 3 (demoted: no copy
    # below), the next ones evict 1 and 2 (dropped: the host holds them)
    assert c.first_demotion(0, 1) is None and c.first_demotion(0, 4) == 1
    assert lru_order(c, 0) == [3, 1, 2]                  # asking changes nothing
    for k in range(4):
        assert c.insert(K(100 + k), 0, pin=True)
        assert told == ([1] if k >= 1 else [])
    assert c.first_demotion(1, 100) is None               # the last tier drops, never demotes


def test_infinite_cache_hit_rate_counts_repeats_of_earlier_blocks():
    assert infinite_cache_hit_rate(K(1, 2, 1, 3, 2, 1)) == 3 / 6
    assert infinite_cache_hit_rate(K(1, 2, 1), [100, 50, 10]) == 10 / 160
    assert math.isnan(infinite_cache_hit_rate(K()))


def test_without_demotion_an_evicted_block_with_no_copy_below_is_dropped():
    c = TieredPrefixCache([1, 4], ["hbm", "host"], demote=False)
    assert c.insert(K(1), 0) and c.insert(K(2), 0)
    assert c.tiers_of(1) == [] and counters(c, 0)["drops"] == 1


def test_a_capacity_zero_tier_and_an_unbounded_tier():
    c = TieredPrefixCache([0, UNBOUNDED], ["hbm", "nvme"])
    assert not c.insert(K(1), 0) and c.insert(K(1), 0 + 1)
    assert c.insert_prefix(K(1, 2), 0) == 0
    assert c.insert(K(*range(10_000)), 1) and c.resident_blocks(1) == 10_000 and c.room_blocks(1) == math.inf
    assert c.stats()[1]["capacity_blocks"] is None


def test_pinned_blocks_are_reference_counted_and_errors_change_nothing():
    c = TieredPrefixCache([4], ["hbm"])
    assert c.insert(K(1, 2), 0, pin=True) and c.insert(K(2, 3), 0, pin=True)  # block 2 shared by two sequences
    assert c.tiers[0].pin_count(2) == 2 and c.pinned_blocks(0) == 3
    c.unpin(K(1, 2), 0)
    assert c.tiers[0].pin_count(2) == 1 and lru_order(c, 0) == [1]
    with pytest.raises(ValueError, match="not pinned"):
        c.unpin(K(3, 1), 0)
    assert c.tiers[0].pin_count(3) == 1  # the failed unpin removed no pin
    with pytest.raises(ValueError, match="not resident"):
        c.pin(K(1, 7), 0)
    assert c.tiers[0].pin_count(1) == 0


def test_shared_lower_tier_between_instances():
    pool = LRUTier("pool", UNBOUNDED)
    a = TieredPrefixCache.of_tiers([LRUTier("hbm0", 2), pool])
    b = TieredPrefixCache.of_tiers([LRUTier("hbm1", 2), pool])
    assert a.insert(K(1, 2), 0) and a.insert(K(1, 2), 1)  # instance a prefills and writes through
    assert b.lookup(K(1, 2)).tolist() == [1, 1]  # instance b finds the prefix in the shared pool
    assert a.lookup(K(1, 2), record=False).tolist() == [0, 0]
    assert pool.counters.hits == 2 and b.tiers[0].counters.misses == 2


def test_running_batch_never_exceeds_capacity_and_pins_hold_under_random_operations():
    rng = np.random.default_rng(19)
    caps = [6, 12, UNBOUNDED]
    c = TieredPrefixCache(caps, ["hbm", "host", "nvme"])
    running: list[np.ndarray] = []  # keys pinned in HBM by each running sequence
    admitted = refused = 0
    for _ in range(3000):
        op = rng.random()
        if op < 0.5:  # a request arrives: its cached prefix is loaded, the rest prefilled and written through
            keys = rng.integers(0, 40, size=int(rng.integers(1, 5))).astype(np.uint64)
            tiers = c.lookup(keys)
            hit = int((tiers >= 0).sum())
            ok = c.promote(keys[:hit], 0) if hit else True
            ok = ok and c.insert(keys, 0, pin=True)
            if ok:
                running.append(keys)
                c.insert_prefix(keys, 1)
                c.insert(keys, 2)
                admitted += 1
            else:
                refused += 1
        elif running:  # a running sequence finishes
            c.unpin(running.pop(int(rng.integers(len(running)))), 0)
        pinned: dict[int, int] = {}
        for keys in running:
            for k in dict.fromkeys(keys.tolist()):
                pinned[k] = pinned.get(k, 0) + 1
        assert len(pinned) <= caps[0]  # the running batch's distinct blocks fit HBM
        assert c.pinned_blocks(0) == len(pinned)
        for k, n in pinned.items():
            assert c.holds(k, 0) and c.tiers[0].pin_count(k) == n  # never evicted
        for t, cap in enumerate(caps):
            if cap != UNBOUNDED:
                assert c.resident_blocks(t) <= cap
    assert admitted > 500 and refused > 50  # both paths were exercised


def _mooncake_keys(block_tokens: int):
    """Per request: the B-token blocks' keys and their token counts. A full block's key is (hash_id,
    offset // B) of the 512-token trace block holding it; the last partial block is unique to its request."""
    per = 512 // block_tokens
    out = []
    for i, line in enumerate(MOONCAKE.read_text().splitlines()):
        record = json.loads(line)
        tokens, hash_ids = record["input_length"], record["hash_ids"]
        n = -(-tokens // block_tokens)
        keys = np.empty(n, dtype=np.uint64)
        for j in range(n):
            full = (j + 1) * block_tokens <= tokens
            keys[j] = hash_ids[j // per] * per + j % per if full else (1 << 63) + i
        sizes = np.minimum(block_tokens, tokens - np.arange(n) * block_tokens)
        out.append((keys, sizes))
    return out


def _hit_rates(requests, capacities) -> list[float]:
    """Prompt-token-weighted hit rate served by each tier, lookups then write-through of every request."""
    c = TieredPrefixCache(capacities)
    hit_tokens = np.zeros(len(capacities))
    total = 0
    for keys, sizes in requests:
        tiers = c.lookup(keys)
        hit_tokens += np.bincount(tiers[tiers >= 0], weights=sizes[tiers >= 0], minlength=len(capacities))
        total += int(sizes.sum())
        for t in range(len(capacities)):
            c.insert_prefix(keys, t)
    return (hit_tokens / total).tolist()


def _hit_rate(requests, capacities) -> float:
    return sum(_hit_rates(requests, capacities))


def test_mooncake_hit_rate_equals_the_infinite_cache_bound_and_falls_with_capacity():
    requests = _mooncake_keys(block_tokens=128)
    seen: set[int] = set()
    bound_tokens = total = 0
    for keys, sizes in requests:
        ks = keys.tolist()
        bound_tokens += sum(int(s) for k, s in zip(ks, sizes, strict=True) if k in seen)
        total += int(sizes.sum())
        seen.update(ks)
    bound = bound_tokens / total
    keys_all = np.concatenate([keys for keys, _ in requests])
    sizes_all = np.concatenate([sizes for _, sizes in requests])
    assert infinite_cache_hit_rate(keys_all, sizes_all) == pytest.approx(bound, rel=1e-12)
    # the trace's first 200 requests reuse 6.2 % of their prompt tokens (the whole trace 65 %: it warms up)
    assert bound == pytest.approx(0.0618, abs=5e-4)
    assert _hit_rate(requests, [UNBOUNDED]) == bound
    assert _hit_rate(requests, [len(seen)]) == bound  # room for every block ever seen: nothing is evicted
    capacities = [15_000, 10_000, 5_000, 2_000, 1_000, 300, 0]
    rates = [_hit_rate(requests, [cap]) for cap in capacities]
    assert all(a >= b for a, b in zip([bound, *rates], rates, strict=False)), rates
    assert rates[1] < bound and rates[-2] < rates[1] / 2 and rates[-1] == 0.0
    # a small HBM over an unbounded written-through tier keeps the whole bound; HBM's share is that of a
    # single LRU tier of its size, the rest is served below
    for hbm_blocks, alone in zip(capacities[1:], rates[1:], strict=True):
        hbm, below = _hit_rates(requests, [hbm_blocks, UNBOUNDED])
        assert hbm == pytest.approx(alone, rel=1e-12) and hbm + below == pytest.approx(bound, rel=1e-12)


class _ReferenceCache:
    """The module docstring's semantics written as plainly as possible (lists, linear scans), to check the
    optimized cache against on random operations."""

    def __init__(self, caps: list[int], demote: bool = True) -> None:
        self.caps, self.demote = caps, demote
        self.order: list[list[int]] = [[] for _ in caps]  # unpinned, least recent first
        self.pins: list[dict[int, int]] = [{} for _ in caps]
        self.evictions = [0] * len(caps)
        self.drops = [0] * len(caps)

    def has(self, t: int, k: int) -> bool:
        return k in self.order[t] or k in self.pins[t]

    def size(self, t: int) -> int:
        return len(self.order[t]) + len(self.pins[t])

    def make_recent(self, t: int, k: int) -> None:
        if k in self.order[t]:
            self.order[t].remove(k)
            self.order[t].append(k)

    def lookup(self, keys: list[int]) -> list[int]:
        found = []
        for k in keys:
            holders = [t for t in range(len(self.caps)) if self.has(t, k)]
            if not holders:
                break
            found.append(holders[0])
        for k in reversed(keys[:len(found)]):
            for t in range(len(self.caps)):
                self.make_recent(t, k)
        return found + [MISS] * (len(keys) - len(found))

    def dispose(self, t: int, v: int) -> None:
        if any(self.has(s, v) for s in range(t + 1, len(self.caps))):
            return
        b = t + 1
        if not self.demote or b == len(self.caps):
            self.drops[t] += 1
            return
        if self.caps[b] != UNBOUNDED and self.size(b) >= self.caps[b]:
            if not self.order[b]:
                self.drops[t] += 1
                return
            w = self.order[b].pop(0)
            self.evictions[b] += 1
            self.order[b].append(v)
            self.dispose(b, w)
        else:
            self.order[b].append(v)

    def admit(self, t: int, keys: list[int], pin: bool) -> bool:
        ks = list(dict.fromkeys(keys))
        if self.caps[t] != UNBOUNDED and len(set(ks) | set(self.pins[t])) > self.caps[t]:
            return False
        victims = []
        while self.caps[t] != UNBOUNDED and self.size(t) + sum(not self.has(t, k) for k in ks) > self.caps[t]:
            v = next(x for x in self.order[t] if x not in ks)
            self.order[t].remove(v)
            victims.append(v)
            self.evictions[t] += 1
        for k in reversed(ks):
            if pin:
                if k in self.order[t]:
                    self.order[t].remove(k)
                self.pins[t][k] = self.pins[t].get(k, 0) + 1
            elif k not in self.pins[t]:
                if k in self.order[t]:
                    self.order[t].remove(k)
                self.order[t].append(k)
        for v in victims:
            self.dispose(t, v)
        return True

    def unpin(self, t: int, keys: list[int]) -> None:
        for k in reversed(list(dict.fromkeys(keys))):
            self.pins[t][k] -= 1
            if not self.pins[t][k]:
                del self.pins[t][k]
                self.order[t].append(k)


@pytest.mark.slow
@pytest.mark.parametrize("short", [kvcache._SHORT, 0], ids=["blockwise", "tierwise"])  # both lookup paths
@pytest.mark.parametrize("caps, demote", [([3, 5, 8], True), ([4, UNBOUNDED], True), ([2, 6, 6], False)])
def test_random_operations_match_the_reference_semantics(caps, demote, short, monkeypatch):
    monkeypatch.setattr(kvcache, "_SHORT", short)
    rng = np.random.default_rng(len(caps) * 10 + demote)
    c = TieredPrefixCache(caps, demote=demote)
    ref = _ReferenceCache(caps, demote)
    pinned: list[tuple[int, list[int]]] = []
    for step in range(4000):
        keys = rng.integers(0, 14, size=int(rng.integers(1, 5))).tolist()
        t = int(rng.integers(len(caps)))
        op = rng.random()
        if op < 0.3:
            assert c.lookup(K(*keys)).tolist() == ref.lookup(keys), step
        elif op < 0.55:
            pin = bool(rng.random() < 0.4)
            ok = c.insert(K(*keys), t, pin=pin)
            assert ok == ref.admit(t, keys, pin), step
            if ok and pin:
                pinned.append((t, keys))
        elif op < 0.7:
            fit = c.insert_prefix(K(*keys), t)
            for n in range(len(keys), -1, -1):  # the reference: the longest leading run an admit accepts
                trial = len(set(keys[:n]) | set(ref.pins[t]))
                if caps[t] == UNBOUNDED or trial <= caps[t]:
                    break
            assert fit == n, step
            if n:
                ref.admit(t, keys[:n], False)
        elif op < 0.85:
            below = [k for k in keys if any(ref.has(s, k) for s in range(t, len(caps)))]
            if below:
                pin = bool(rng.random() < 0.4)
                ok = c.promote(K(*below), t, pin=pin)
                assert ok == ref.admit(t, below, pin), step
                if ok and pin:
                    pinned.append((t, below))
        elif op < 0.87:
            resident = [k for k in keys if ref.has(t, k)]
            if resident:
                c.pin(K(*resident), t)
                for k in dict.fromkeys(resident):
                    if k in ref.order[t]:
                        ref.order[t].remove(k)
                    ref.pins[t][k] = ref.pins[t].get(k, 0) + 1
                pinned.append((t, resident))
        else:
            for _ in range(min(len(pinned), 2)):  # pins must not pile up until every tier is frozen
                t_pin, keys_pin = pinned.pop(int(rng.integers(len(pinned))))
                c.unpin(K(*keys_pin), t_pin)
                ref.unpin(t_pin, keys_pin)
        for s in range(len(caps)):
            assert lru_order(c, s) == ref.order[s], (step, s)
            assert c.tiers[s]._pins == ref.pins[s], (step, s)
            assert c.tiers[s].counters.evictions == ref.evictions[s] and c.tiers[s].counters.drops == ref.drops[s]


@pytest.mark.parametrize("blocks", [3, 40])  # both lookup paths (block by block, tier by tier)
def test_a_lookup_from_a_lower_tier_reads_its_copies_and_leaves_the_faster_tiers_alone(blocks):
    keys = K(*range(1, blocks + 1))
    c = TieredPrefixCache([UNBOUNDED, UNBOUNDED], ["hbm", "pool"], bytes_per_block=1000)
    assert c.insert(keys, 1) and c.promote(keys[:2], 0)  # an HBM sequence's prefix, written through to the pool
    assert c.lookup(keys, record=False).tolist() == [0, 0] + [1] * (blocks - 2)
    before = counters(c, 0)
    assert c.lookup(keys, first_tier=1).tolist() == [1] * blocks  # a pool sequence reads all of it in the pool
    assert counters(c, 0) == before and counters(c, 1)["hits"] == blocks
    assert c.lookup(K(0, *range(1, blocks + 1)), first_tier=1).tolist() == [MISS] * (blocks + 1)
