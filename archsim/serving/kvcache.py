"""Block-granular, tiered LRU prefix cache of KV blocks keyed by 64-bit content keys.

A request's prompt KV is a sequence of blocks of `block_tokens` tokens; a block's key is a uint64 that is
equal exactly when the content (and everything before it) is equal (archsim.serving.requests). The cache
holds which blocks each tier has; it moves no data and keeps no time (the engine charges transfers on
archsim.serving.transfers). Tiers are given fastest first (tier 0 is GPU HBM when the system has a KV home
below it); each has a capacity in blocks, or UNBOUNDED.

Semantics (the engine relies on every one of them):

* lookup(keys) -> int8 per block: the index of the fastest tier holding the block, -1 for a miss, with
  longest-cached-prefix semantics: every block after the first miss is a miss (its KV cannot be used
  without the KV before it). A recorded lookup counts per tier: hits[t] = blocks whose fastest copy is in
  tier t; misses[t] = looked-up blocks found neither in t nor in a faster tier (misses of the last tier are
  the overall misses). It refreshes the recency of each hit block in every tier that holds it (the lookup
  is one query of every tier's index, so a lower tier's LRU order follows the requests, not only the
  loads). record=False is a pure peek (a prefix-aware router asks every instance without disturbing them).
  lookup(keys, first_tier=v) asks only tiers v, v+1, ...: the view of a sequence whose KV lives in tier v,
  which reads a block there even when a faster tier holds it too; the faster tiers' counters and recency
  stay as they were.
* insert(keys, tier, pin=False) -> bool writes the blocks into one tier, all or nothing: when the tier
  cannot hold the blocks together with its pinned blocks it returns False and changes nothing; pinned
  blocks are never evicted. insert_prefix(keys, tier) -> int writes the longest leading run that fits
  instead (caching what is useful of a request longer than the room) and never pins.
* promote(keys, tier, pin=False) -> bool copies blocks held by a slower tier into a faster one (a KV load
  into HBM): the slower copy stays; all or nothing like insert. Blocks already in `tier` are only touched.
* pin(keys, tier) / unpin(keys, tier): blocks of running sequences, reference counted per tier (a shared
  prefix block is pinned once by every sequence using it); a call counts each distinct key once. Pinning
  needs the block resident; unpin of a block that is not pinned is an error (an engine bug).
* Eviction is LRU per tier over the unpinned blocks. Within one request the blocks enter the recency order
  tail first, so that under pressure a request's tail leaves before its head (a prefix without its head is
  useless; vLLM frees a request's blocks in the same order).
* A block evicted from tier t that also lives in a slower tier is dropped (the slower copy serves it).
  One that lives nowhere below is demoted into tier t+1 as its most recent block, evicting there by LRU
  (which may cascade further down), and dropped when t+1 has no unpinned block to give up or there is no
  t+1 (demote=False drops always). With write-through of prefill KV to the KV home tier (the engine's
  choice for offload systems) every block already lives below HBM, so demotion is rare; it models a victim
  hierarchy (LMCache, vLLM's CPU offload) when the engine writes only to HBM.

Sharing: a tier is an LRUTier object; several TieredPrefixCache views may share their lower tiers
(`TieredPrefixCache.of_tiers([hbm_of_instance_i, pool, nvme])`), so each model instance has its own HBM
while the pool, host DRAM or NVMe are shared, and each tier's counters sum over every view.

Cost and size: one OrderedDict (unpinned blocks, least recent first) and one dict (pinned blocks ->
count) per tier, so a tier holds at most its capacity of keys (measured: about 130 bytes a block, so 1 M
blocks take about 130 MB; an UNBOUNDED tier grows with the distinct blocks inserted). Every operation on n keys
costs O(n x tiers) dict operations plus O(1) per eviction; nothing scans a tier. Keys are numpy uint64
converted to Python int, whose hash is not salted per process (unlike str), so runs are deterministic.

infinite_cache_hit_rate() gives the bound a cache that never evicts reaches on a sequence of lookups.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from itertools import compress, filterfalse, islice, repeat

import numpy as np

UNBOUNDED = -1  # capacity sentinel: a tier that never evicts
_SHORT = 32  # requests of at most this many blocks are looked up block by block (lower fixed cost)
MISS = -1  # lookup's value for a block no tier holds (or any block after the first miss)


@dataclass
class TierCounters:
    """Per-tier block counts; multiply by bytes_per_block for bytes (stats() does)."""

    hits: int = 0  # looked-up blocks whose fastest copy is here
    misses: int = 0  # looked-up blocks found neither here nor in a faster tier
    insertions: int = 0  # blocks written here by insert / insert_prefix (not already resident)
    promotions: int = 0  # blocks copied here from a slower tier by promote (loads)
    demotions_in: int = 0  # blocks received from the tier above when it evicted them
    evictions: int = 0  # blocks removed here by LRU to make room
    demotions_out: int = 0  # evicted blocks handed to the tier below
    drops: int = 0  # evicted blocks kept nowhere below (their KV is lost)
    reads: int = 0  # blocks read out of here as the source of a promote


class LRUTier:
    """One tier: its resident blocks in LRU order, its pinned blocks, its counters."""

    def __init__(self, name: str, capacity_blocks: int, bytes_per_block: int = 0) -> None:
        if isinstance(capacity_blocks, bool) or not isinstance(capacity_blocks, int | np.integer):
            raise ValueError(f"tier {name}: capacity_blocks must be an int, got {capacity_blocks!r}")
        if capacity_blocks < 0 and capacity_blocks != UNBOUNDED:
            raise ValueError(f"tier {name}: capacity_blocks must be >= 0 or UNBOUNDED, got {capacity_blocks}")
        if bytes_per_block < 0:
            raise ValueError(f"tier {name}: bytes_per_block must be >= 0, got {bytes_per_block}")
        self.name = name
        self.capacity_blocks = int(capacity_blocks)
        self.bytes_per_block = int(bytes_per_block)
        self.counters = TierCounters()
        self._lru: OrderedDict[int, None] = OrderedDict()  # unpinned resident keys, least recent first
        self._pins: dict[int, int] = {}  # pinned resident key -> number of pins
        # lists the owner sets to learn which keys became resident here and which were evicted (in that order
        # within each list), e.g. the serving engine's coherence bookkeeping; None: not kept
        self.written: list[int] | None = None
        self.evicted: list[int] | None = None

    @property
    def unbounded(self) -> bool:
        return self.capacity_blocks == UNBOUNDED

    def __contains__(self, key: int) -> bool:
        return key in self._lru or key in self._pins

    def __len__(self) -> int:
        return len(self._lru) + len(self._pins)

    @property
    def pinned_blocks(self) -> int:
        return len(self._pins)

    def room_blocks(self) -> float:
        """Blocks that could still be made resident and pinned: capacity minus pinned (math.inf if unbounded)."""
        return math.inf if self.unbounded else self.capacity_blocks - len(self._pins)

    def pin_count(self, key: int) -> int:
        return self._pins.get(key, 0)

    def holds_mask(self, keys: list[int]) -> np.ndarray:
        """bool per key: resident here (C-level iteration)."""
        n = len(keys)
        mask = np.fromiter(map(self._lru.__contains__, keys), dtype=bool, count=n)
        if self._pins:
            mask |= np.fromiter(map(self._pins.__contains__, keys), dtype=bool, count=n)
        return mask

    def add_pins(self, ks: list[int]) -> None:
        """One more pin on each of the distinct resident keys `ks`."""
        pins = self._pins
        deque(map(self._lru.pop, ks, repeat(None)), maxlen=0)
        for k in filter(pins.__contains__, ks):
            pins[k] += 1
        pins.update(zip([k for k in ks if k not in pins], repeat(1)))

    def remove_pins(self, ks: list[int]) -> None:
        """One pin less on each of the distinct pinned keys `ks`; those left without pins become the most
        recent unpinned blocks, head last (the request's tail is evicted first)."""
        pins = self._pins
        freed = [k for k in reversed(ks) if pins[k] == 1]
        for k in ks:
            pins[k] -= 1
        deque(map(pins.__delitem__, freed), maxlen=0)
        self._lru.update(zip(freed, repeat(None)))

    def touch_all(self, keys: Iterable[int]) -> None:
        """Make the unpinned ones of `keys` most recent, in order (the last ends most recent)."""
        deque(map(self._lru.move_to_end, filter(self._lru.__contains__, keys)), maxlen=0)


class TieredPrefixCache:
    """Tiers fastest first; see the module docstring for every operation's semantics."""

    def __init__(self, capacities_blocks: Sequence[int], names: Sequence[str] | None = None,
                 bytes_per_block: int = 0, *, demote: bool = True) -> None:
        names = list(names) if names is not None else [f"tier{t}" for t in range(len(capacities_blocks))]
        if len(names) != len(capacities_blocks):
            raise ValueError(f"{len(capacities_blocks)} capacities but {len(names)} names")
        self._init([LRUTier(n, c, bytes_per_block) for n, c in zip(names, capacities_blocks, strict=True)], demote)

    @classmethod
    def of_tiers(cls, tiers: Sequence[LRUTier], *, demote: bool = True) -> TieredPrefixCache:
        """A view over existing tiers (share the lower tiers between model instances)."""
        view = cls.__new__(cls)
        view._init(list(tiers), demote)
        return view

    def _init(self, tiers: list[LRUTier], demote: bool) -> None:
        if not tiers:
            raise ValueError("a prefix cache needs at least one tier")
        if len({id(t) for t in tiers}) != len(tiers):
            raise ValueError("a tier appears twice in one cache")
        self.tiers = tiers
        self.demote = demote
        self.on_demote: Callable[[int], None] | None = None  # told the tier index of each block demoted into it

    # -- queries -------------------------------------------------------------------------------------------

    @property
    def n_tiers(self) -> int:
        return len(self.tiers)

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tiers]

    def tier_index(self, name: str) -> int:
        return self.names.index(name)

    def holds(self, key: int, tier: int) -> bool:
        return int(key) in self.tiers[tier]

    def tiers_of(self, key: int) -> list[int]:
        """Every tier holding the block, fastest first."""
        key = int(key)
        return [t for t, tier in enumerate(self.tiers) if key in tier]

    def resident_blocks(self, tier: int) -> int:
        return len(self.tiers[tier])

    def pinned_blocks(self, tier: int) -> int:
        return self.tiers[tier].pinned_blocks

    def room_blocks(self, tier: int) -> float:
        """Capacity minus pinned blocks of the tier (math.inf if unbounded): the most it can pin."""
        return self.tiers[tier].room_blocks()

    def new_blocks(self, keys: np.ndarray, tier: int) -> int:
        """How many distinct blocks of `keys` the tier does not hold (an insert would have to write)."""
        t = self.tiers[tier]
        return sum(1 for k in _distinct(keys) if k not in t)

    def first_demotion(self, tier: int, new_blocks: int) -> int | None:
        """Inserting `new_blocks` blocks the tier does not hold, one after the other: the index of the first
        whose eviction demotes a block (one no slower tier holds) to the tier below; None if none would."""
        t = self.tiers[tier]
        if t.unbounded or not self.demote or tier + 1 == self.n_tiers:
            return None
        free = t.capacity_blocks - len(t)
        below = self.tiers[tier + 1:]
        for k, key in enumerate(islice(t._lru, max(0, new_blocks - free))):   # the victims, in LRU order
            if not any(key in b for b in below):
                return free + k
        return None

    def can_insert(self, keys: np.ndarray, tier: int) -> bool:
        """Whether insert(keys, tier) (or a promote of them) would succeed now."""
        return self._evictions_needed(self.tiers[tier], _distinct(keys)) is not None

    def lookup(self, keys: np.ndarray, *, record: bool = True, first_tier: int = 0) -> np.ndarray:
        """int8 per block: the fastest tier from `first_tier` on holding it, MISS (-1) for a miss and for every
        block after it. A sequence whose KV lives in tier v looks from v on: a block also held by a faster tier
        is still a hit where it reads it (an HBM sequence's prefix is written through to the pool)."""
        ks = _ints(keys)
        n = len(ks)
        tiers = self.tiers[first_tier:]
        if n <= _SHORT:
            found = [first_tier + t for t in self._scan_short(ks, tiers)]
            counts = [found.count(first_tier + t) for t in range(len(tiers))] if record else []
            out = np.array(found + [MISS] * (n - len(found)), dtype=np.int8)
        else:
            found = self._scan_long(ks, tiers) + first_tier
            counts = np.bincount(found - first_tier, minlength=len(tiers)).tolist() if record else []
            out = np.full(n, MISS, dtype=np.int8)
            out[:len(found)] = found
        if record:
            not_served = n
            for tier, hits in zip(tiers, counts, strict=True):
                tier.counters.hits += hits
                not_served -= hits
                tier.counters.misses += not_served
            if len(found):
                head_last = ks[len(found) - 1::-1]
                for tier in tiers:
                    if tier._lru:
                        tier.touch_all(head_last)
        return out

    @staticmethod
    def _scan_short(ks: list[int], tiers: list) -> list[int]:
        """The fastest of `tiers` holding each block of the cached prefix, block by block (cheapest for short
        requests)."""
        found = []
        for k in ks:
            for t, tier in enumerate(tiers):
                if k in tier._lru or k in tier._pins:
                    found.append(t)
                    break
            else:
                break
        return found

    @staticmethod
    def _scan_long(ks: list[int], tiers: list) -> np.ndarray:
        """As _scan_short, tier by tier with C-level membership tests (each tier probes only what the faster
        ones lack): about twice as fast from a few dozen blocks on."""
        n = len(ks)
        where = np.full(n, MISS, dtype=np.int8)
        undecided = np.arange(n)
        for t, tier in enumerate(tiers):
            sub = ks if len(undecided) == n else [ks[i] for i in undecided.tolist()]
            held = tier.holds_mask(sub)
            where[undecided[held]] = t
            undecided = undecided[~held]
            if not len(undecided):
                break
        return where[:int(undecided[0])] if len(undecided) else where

    # -- changes -------------------------------------------------------------------------------------------

    def insert(self, keys: np.ndarray, tier: int, *, pin: bool = False) -> bool:
        """Make every block resident in `tier` (pinned once if pin), or return False and change nothing."""
        return self._admit(tier, _distinct(keys), pin, promote=False)

    def insert_prefix(self, keys: np.ndarray, tier: int) -> int:
        """Insert the longest leading run of `keys` that fits beside the pinned blocks; returns its length."""
        ks = _ints(keys)
        t = self.tiers[tier]
        if t.unbounded:
            fit = len(ks)
        else:
            fit, new, seen = 0, 0, set()
            room = t.capacity_blocks - t.pinned_blocks
            for k in ks:
                if k not in seen:
                    seen.add(k)
                    # a resident unpinned key still takes one unpinned slot; a pinned one takes none
                    if k not in t._pins:
                        new += 1
                    if new > room:
                        break
                fit += 1
        if fit:
            self._admit(tier, _distinct(ks[:fit]), False, promote=False)
        return fit

    def promote(self, keys: np.ndarray, tier: int, *, pin: bool = False) -> bool:
        """Copy blocks into the faster `tier` from the fastest slower tier holding each (the slower copy stays).

        Every block must be in `tier` or a slower tier (ValueError otherwise). All or nothing, like insert.
        """
        ks = _distinct(keys)
        for k in ks:
            if not any(k in t for t in self.tiers[tier:]):
                raise ValueError(f"promote to {self.tiers[tier].name}: block {k} is in no tier at or below it")
        return self._admit(tier, ks, pin, promote=True)

    def pin(self, keys: np.ndarray, tier: int) -> None:
        """Pin resident blocks (one more pin each); ValueError, changing nothing, if one is not resident."""
        t = self.tiers[tier]
        ks = _distinct(keys)
        missing = next((k for k in ks if k not in t._lru and k not in t._pins), None)
        if missing is not None:
            raise ValueError(f"pin in {t.name}: block {missing} is not resident")
        t.add_pins(ks)

    def unpin(self, keys: np.ndarray, tier: int) -> None:
        """Remove one pin from each block; a block left without pins becomes the most recent unpinned one."""
        t = self.tiers[tier]
        ks = _distinct(keys)
        missing = next(filterfalse(t._pins.__contains__, ks), None)
        if missing is not None:
            raise ValueError(f"unpin in {t.name}: block {missing} is not pinned")
        t.remove_pins(ks)

    # -- counters ------------------------------------------------------------------------------------------

    def stats(self) -> list[dict]:
        """Per tier: name, capacity_blocks (None if unbounded), resident and pinned blocks, the counters, and
        bytes_written / bytes_read (blocks x bytes_per_block) for the tier."""
        out = []
        for t in self.tiers:
            c = t.counters
            entry = {"name": t.name, "capacity_blocks": None if t.unbounded else t.capacity_blocks,
                     "resident_blocks": len(t), "pinned_blocks": t.pinned_blocks, **asdict(c)}
            entry["bytes_written"] = (c.insertions + c.promotions + c.demotions_in) * t.bytes_per_block
            entry["bytes_read"] = (c.reads + c.demotions_out) * t.bytes_per_block
            out.append(entry)
        return out

    def hit_rate(self) -> float:
        """Hit blocks over looked-up blocks, all tiers (NaN before any recorded lookup)."""
        hits = sum(t.counters.hits for t in self.tiers)
        looked = hits + self.tiers[-1].counters.misses
        return hits / looked if looked else math.nan

    # -- internals -----------------------------------------------------------------------------------------

    @staticmethod
    def _evictions_needed(t: LRUTier, ks: list[int]) -> int | None:
        """LRU evictions an admit of the distinct keys `ks` needs, None if the pinned blocks leave no room."""
        if t.unbounded:
            return 0
        in_lru = sum(map(t._lru.__contains__, ks))
        new = len(ks) - in_lru - sum(map(t._pins.__contains__, ks))
        need = len(t) + new - t.capacity_blocks
        if need <= 0:
            return 0
        return need if need <= len(t._lru) - in_lru else None

    def _admit(self, tier: int, ks: list[int], pin: bool, promote: bool) -> bool:
        t = self.tiers[tier]
        need = self._evictions_needed(t, ks)
        if need is None:
            return False
        lru, pins = t._lru, t._pins
        victims = []
        if need:
            t.touch_all(ks)  # keep the admitted keys out of the eviction's way
            victims = [lru.popitem(last=False)[0] for _ in range(need)]
            t.counters.evictions += need
            if t.evicted is not None:
                t.evicted.extend(victims)
        new = [k for k in ks if k not in lru and k not in pins]
        if t.written is not None:
            t.written.extend(new)
        if promote:
            t.counters.promotions += len(new)
            left = new
            for src in self.tiers[tier + 1:]:
                held = [k in src for k in left]
                src.counters.reads += sum(held)
                left = list(compress(left, (not h for h in held)))
        else:
            t.counters.insertions += len(new)
        if pin:
            t.add_pins(ks)
        else:
            head_last = [k for k in reversed(ks) if k not in pins]
            lru.update(zip(head_last, repeat(None)))
            t.touch_all(head_last)
        # demote after the admitted blocks are in: a cascade below cannot then lose a block being promoted
        for v in victims:
            self._evicted(tier, v)
        return True

    def _evicted(self, tier: int, key: int) -> None:
        """Dispose of a block just evicted from `tier`: dropped if a slower tier holds it, else demoted."""
        t = self.tiers[tier]
        if any(key in s for s in self.tiers[tier + 1:]):
            return
        below = tier + 1
        if not self.demote or below == self.n_tiers:
            t.counters.drops += 1
            return
        b = self.tiers[below]
        victim = None
        if not b.unbounded and len(b) >= b.capacity_blocks:
            if not b._lru:
                t.counters.drops += 1
                return
            victim = b._lru.popitem(last=False)[0]
            b.counters.evictions += 1
            if b.evicted is not None:
                b.evicted.append(victim)
        b._lru[key] = None
        if b.written is not None:
            b.written.append(key)
        t.counters.demotions_out += 1
        b.counters.demotions_in += 1
        if self.on_demote is not None:
            self.on_demote(below)
        if victim is not None:
            self._evicted(below, victim)


def _ints(keys: np.ndarray | Iterable[int]) -> list[int]:
    """Keys as Python ints (from a uint64 array, or any ints in [0, 2^64))."""
    return np.asarray(keys, dtype=np.uint64).ravel().tolist()


def _distinct(keys: np.ndarray | Iterable[int] | list[int]) -> list[int]:
    """Distinct keys in first-seen order."""
    return list(dict.fromkeys(keys if isinstance(keys, list) else _ints(keys)))


def infinite_cache_hit_rate(block_keys: np.ndarray, block_weights: np.ndarray | None = None) -> float:
    """The hit rate of a cache that never evicts: the (weighted) fraction of blocks whose key occurs earlier in
    `block_keys` (every request's blocks concatenated in the order they are looked up). Weight by each
    block's prompt tokens for the prompt-token-weighted rate; NaN for no blocks. Equals the cache's rate at
    UNBOUNDED capacity when the keys are content-chained (a repeated block's whole prefix repeats too)."""
    keys = np.asarray(block_keys, dtype=np.uint64).ravel()
    weights = np.ones(len(keys)) if block_weights is None else np.asarray(block_weights, dtype=np.float64).ravel()
    if len(weights) != len(keys):
        raise ValueError(f"{len(keys)} block keys but {len(weights)} weights")
    if not len(keys) or not weights.sum():
        return math.nan
    repeat_block = np.ones(len(keys), dtype=bool)
    repeat_block[np.unique(keys, return_index=True)[1]] = False  # each key's first occurrence is a miss
    return float(weights[repeat_block].sum() / weights.sum())
