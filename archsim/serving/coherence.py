"""Consistency of KV blocks shared by several servers through one pool (issue 25), and what it costs.

A block lives in a pool slot. Its metadata carries a version and whether it is sealed; its data is what the
slot holds. A writer fills a slot (the data is torn until the write ends), then seals it: the metadata
version becomes the data's. Sealed blocks are immutable: new content is a new version, written over the slot
only after everyone reading the old one let go. Readers pin a sealed block for the time they read it; an
evictor reclaims an unpinned slot (its metadata drops, the slot may be written again). The ordering rule:

* a read starts only on a sealed block, and pins it;
* a rewrite or an eviction of a pinned block waits until its last reader unpins it (the wait is a stall);
* a server's cached lines of a block are valid only for the version they were read at.

so no read ever sees a torn block (data changing under it) or a stale one (a cached copy of an older version).
Two schemes keep the servers' caches coherent:

* `software`: the writer flushes the block's lines to the pool before sealing, and a reader whose cached
  copy is older than the sealed version invalidates it before reading (a metadata read on every read);
* `back_invalidate` (CXL 3.0 back-invalidation snoops, BISnp): the pool device snoops every server holding
  lines of the block when a new version is written; caches never hold a stale copy, no flush or check.

`SharedBlocks` runs these operations, checks every read against the version it should see (`violations`), and
counts the scheme's messages, bytes and stall time; `ordered=False` drops the waiting rule, which a property
test (tests/test_coherence.py) must catch. Costs per block are `CoherenceCosts` (sources in docs/serving.md);
`BlockCosts` scales them to a block of any size (the serving engine's KV blocks are megabytes).

`Holders` is the same bookkeeping for the serving engine, vectorized over its blocks (numpy arrays by block,
a bit per server): which servers hold lines of each block, and of which version. It has no pins: the engine's
LRU never evicts a block a running sequence pins and a content key is never rewritten in place, so no rewrite
or eviction ever waits there (the rule above holds by construction); a key evicted and written again later is
a new version. A test holds its counts equal to `SharedBlocks`' on random sequences of writes, reads and
evictions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from archsim.system.serving_config import COHERENCE_SCHEMES as SCHEMES

TORN = -1


@dataclass(frozen=True)
class CoherenceCosts:
    """What keeping one block coherent costs, per scheme. Defaults from 16 KiB transfers in Beluga's Table 4
    (SIGMOD 2026): a write with CLFLUSH after it 8.50 us against a non-temporal store's 2.41 us (the flush is
    the difference); a read with CLFLUSH before it 5.98 us, charged whole to a read that must invalidate (the
    table gives no plain cached read to subtract). Back-invalidation: one BISnp and one BIRsp per 64 B line a
    server holds, each one 16 B slot of a CXL flit, and one round trip of the pool's path as the stall."""

    block_bytes: int = 16384
    flush_ns: float = 8500.0 - 2410.0          # software: the writer's flush of one block
    invalidate_ns: float = 5980.0              # software: a stale copy invalidated and read again
    line_bytes: int = 64
    message_bytes: int = 16                    # one CXL flit slot
    round_trip_ns: float = 560.0               # back-invalidation: the snoop's round trip over the pool's path

    def for_block(self, block_bytes: int) -> BlockCosts:
        """The costs of a block of `block_bytes`: the measured times per `self.block_bytes` scale with its
        bytes (a flush or an invalidation is per line), messages and bytes follow its lines, and a snoop of its
        lines costs one round trip (the device sends them all at once)."""
        units = block_bytes / self.block_bytes
        lines = -(-block_bytes // self.line_bytes)
        return BlockCosts(block_bytes, lines, self.flush_ns * units, math.ceil(units), self.invalidate_ns * units,
                          2 * lines, 2 * lines * self.message_bytes, self.round_trip_ns)


@dataclass(frozen=True)
class BlockCosts:
    """What one operation on one block costs (CoherenceCosts.for_block)."""

    block_bytes: int
    flush_messages: int        # software: the writer's flush, one per line (its bytes: the block's)
    flush_ns: float
    invalidate_messages: int   # software: a reader's stale copy invalidated, one per measured unit
    invalidate_ns: float
    snoop_messages: int        # back-invalidation: a snoop and a response per line, per server holding the block
    snoop_bytes: int
    snoop_ns: float            # ... and one round trip per block snooped

    def stall_ns(self, flushes: int, invalidations: int, snooped: int) -> float:
        """The time `flushes` flushes, `invalidations` invalidations and `snooped` snooped blocks take."""
        return flushes * self.flush_ns + invalidations * self.invalidate_ns + snooped * self.snoop_ns


@dataclass
class CoherenceCounters:
    messages: int = 0        # coherence messages: flushes and invalidations (software), snoops and responses (BI)
    bytes: int = 0           # their bytes on the links (a software flush moves the block's lines)
    stall_ns: float = 0.0    # time writers and readers spent on coherence: flushes, invalidations, snoops
    waits: int = 0           # rewrites and evictions held back by a reader's pin (their wait is the caller's)
    reads: int = 0
    stale_avoided: int = 0   # reads that found their cached copy older than the sealed version


@dataclass
class _Block:
    version: int = 0         # the metadata's sealed version (0: never sealed)
    sealed: bool = False
    data: int = 0            # the version the slot's data is (TORN while a write is under way)
    pins: int = 0
    writing: bool = False


@dataclass
class SharedBlocks:
    """Blocks of a pool shared by `servers` servers under `scheme`; see the module docstring."""

    servers: int
    scheme: str = "software"
    ordered: bool = True
    costs: CoherenceCosts = field(default_factory=CoherenceCosts)
    counters: CoherenceCounters = field(default_factory=CoherenceCounters)
    violations: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise ValueError(f"unknown coherence scheme {self.scheme!r} (schemes: {', '.join(SCHEMES)})")
        self._blocks: dict[int, _Block] = {}
        self._cached: list[dict[int, int]] = [{} for _ in range(self.servers)]   # server -> block -> version
        self._reading: dict[tuple[int, int], list[int]] = {}    # (server, block) -> versions its readers pinned
        self._per_block = self.costs.for_block(self.costs.block_bytes)

    # -- writers -------------------------------------------------------------------------------------------

    def begin_write(self, block: int) -> bool:
        """Start writing a new version into the block's slot; False (a stall) while a reader pins it."""
        b = self._blocks.setdefault(block, _Block())
        if b.writing:
            return False
        if b.pins and self.ordered:
            self.counters.waits += 1
            return False
        b.writing, b.sealed, b.data = True, False, TORN
        if self.scheme == "back_invalidate":
            self._snoop(block)
        return True

    def end_write(self, block: int, writer: int) -> None:
        """The write is done: the writer flushes (software) and seals the next version."""
        b = self._blocks[block]
        assert b.writing, f"block {block} is not being written"
        if self.scheme == "software":
            self.counters.messages += self._per_block.flush_messages
            self.counters.bytes += self._per_block.block_bytes
            self.counters.stall_ns += self._per_block.flush_ns
        b.version += 1
        b.data, b.sealed, b.writing = b.version, True, False
        self._cached[writer][block] = b.version

    # -- readers -------------------------------------------------------------------------------------------

    def begin_read(self, server: int, block: int) -> bool:
        """Pin a sealed block for reading; False when there is nothing sealed to read (a miss)."""
        b = self._blocks.get(block)
        if b is None or not b.sealed:
            return False
        cached = self._cached[server].get(block)
        if self.scheme == "software" and cached is not None and cached != b.version:
            self.counters.messages += self._per_block.invalidate_messages
            self.counters.stall_ns += self._per_block.invalidate_ns
            self.counters.stale_avoided += 1
            del self._cached[server][block]
        b.pins += 1
        self._reading.setdefault((server, block), []).append(b.version)
        self.counters.reads += 1
        return True

    def end_read(self, server: int, block: int) -> None:
        """The read is done: check what it saw against the version it pinned, then unpin."""
        b = self._blocks[block]
        pinned = self._reading[(server, block)]
        expected = pinned.pop(0)           # the server's readers of one block finish in the order they began
        if not pinned:
            del self._reading[(server, block)]
        cached = self._cached[server].get(block)
        seen = cached if cached is not None else b.data
        if seen != expected:
            what = "torn" if seen == TORN else f"version {seen}"
            self.violations.append(f"server {server} read block {block} as {what}, pinned version {expected}")
        if seen == TORN:
            self._cached[server].pop(block, None)
        else:
            self._cached[server][block] = seen   # its lines stay in the server's cache
        b.pins -= 1

    # -- the evictor ---------------------------------------------------------------------------------------

    def evict(self, block: int) -> bool:
        """Reclaim the block's slot for other data; False (a stall) while a reader pins it or a write runs."""
        b = self._blocks.get(block)
        if b is None or b.writing:
            return False
        if b.pins and self.ordered:
            self.counters.waits += 1
            return False
        b.sealed, b.data = False, TORN        # the slot is someone else's now
        if self.scheme == "back_invalidate":
            self._snoop(block)
        return True

    def _snoop(self, block: int) -> None:
        """Back-invalidation: the device snoops every server holding lines of the block."""
        holders = [s for s in range(self.servers) if block in self._cached[s]]
        for s in holders:
            del self._cached[s][block]
            self.counters.messages += self._per_block.snoop_messages
            self.counters.bytes += self._per_block.snoop_bytes
        if holders:
            self.counters.stall_ns += self._per_block.snoop_ns


class Holders:
    """SharedBlocks' bookkeeping for the serving engine (see the module docstring): for each block of `keys`
    (distinct content keys, sorted) a bit per server holding lines of it, and (software) of its current version.
    Each operation takes the keys of distinct blocks and the server acting, and returns what that server waits
    for as counts, which `costs.stall_ns` turns into time."""

    def __init__(self, keys: np.ndarray, servers: int, scheme: str, costs: BlockCosts) -> None:
        if scheme not in SCHEMES:
            raise ValueError(f"unknown coherence scheme {scheme!r} (schemes: {', '.join(SCHEMES)})")
        if not 1 <= servers <= 64:
            raise ValueError(f"coherence is tracked for 1 to 64 servers, got {servers}")
        self.keys = np.asarray(keys, dtype=np.uint64)
        # keys 0 .. n - 1 (the serving engine's block ranks) are their own indices
        self._dense = not len(self.keys) or (int(self.keys[0]) == 0 and int(self.keys[-1]) == len(self.keys) - 1)
        self.servers, self.scheme, self.costs = servers, scheme, costs
        dtype = next(d for d in (np.uint8, np.uint16, np.uint32, np.uint64) if np.iinfo(d).bits >= servers)
        self.held = np.zeros(len(self.keys), dtype=dtype)      # servers holding lines of the block (any version)
        self.current = np.zeros(len(self.keys), dtype=dtype)   # ... of its current version (software)
        self.flushes = np.zeros(servers, dtype=np.int64)        # per server: blocks it flushed (software writes)
        self.invalidations = np.zeros(servers, dtype=np.int64)  # stale copies it invalidated before a read
        self.waited = np.zeros(servers, dtype=np.int64)         # blocks whose snoop it waited for (writes, evictions)
        self.snooped = np.zeros(servers, dtype=np.int64)        # copies of blocks its cache gave up to a snoop
        self._bits = [dtype(1 << s) for s in range(servers)]

    def _index(self, keys: np.ndarray | list[int]) -> np.ndarray:
        """The distinct blocks of `keys`, as ascending indices into `keys` (np.unique's result, by sorting: its
        hashing is far slower on a request's thousand blocks)."""
        asked = np.sort(np.asarray(keys, dtype=np.uint64))
        idx = asked.astype(np.intp) if self._dense else np.searchsorted(self.keys, asked)
        return idx[np.concatenate(([True], idx[1:] != idx[:-1]))] if len(idx) > 1 else idx

    def write(self, keys: np.ndarray | list[int], server: int) -> tuple[int, int]:
        """`server` wrote these blocks into the pool (a new version of each): (flushes, snooped blocks) it waits
        for. Software: it flushes them and holds their current version; back-invalidation: every server
        holding lines of an older version is snooped first."""
        idx = self._index(keys)
        bit = self._bits[server]
        if self.scheme == "software":
            self.held[idx] |= bit
            self.current[idx] = bit
            self.flushes[server] += len(idx)
            return len(idx), 0
        snooped = self._snoop(idx, server)
        self.held[idx] = bit
        return 0, snooped

    def evict(self, keys: np.ndarray | list[int], server: int) -> int:
        """The pool reclaimed these blocks' slots while `server` made room: the snooped blocks it waits for
        (back-invalidation; software leaves the copies, now older than any later version, in the caches)."""
        idx = self._index(keys)
        if self.scheme == "software":
            self.current[idx] = 0
            return 0
        snooped = self._snoop(idx, server)
        self.held[idx] = 0
        return snooped

    def read(self, keys: np.ndarray | list[int], server: int) -> int:
        """`server` reads these resident blocks: the stale copies it invalidates first (software)."""
        idx = self._index(keys)
        bit = self._bits[server]
        stale = 0
        if self.scheme == "software":
            stale = int(np.count_nonzero((self.held[idx] & bit) & ~(self.current[idx] & bit)))
            self.invalidations[server] += stale
            self.current[idx] |= bit
        self.held[idx] |= bit
        return stale

    def _snoop(self, idx: np.ndarray, server: int) -> int:
        held = self.held[idx]
        held = held[held != 0]
        for s, bit in enumerate(self._bits):
            self.snooped[s] += int(np.count_nonzero(held & bit))
        self.waited[server] += len(held)
        return len(held)

    def per_server(self) -> list[dict[str, float]]:
        """Each server's messages and bytes (its flushes and invalidations, the snoops its cache answered) and
        the time it waited."""
        c = self.costs
        return [{"messages": int(self.flushes[s] * c.flush_messages + self.invalidations[s] * c.invalidate_messages
                                 + self.snooped[s] * c.snoop_messages),
                 "bytes": int(self.flushes[s] * c.block_bytes + self.snooped[s] * c.snoop_bytes),
                 "stall_ms": c.stall_ns(int(self.flushes[s]), int(self.invalidations[s]), int(self.waited[s])) / 1e6}
                for s in range(self.servers)]

    def summary(self) -> dict[str, object]:
        """The run's totals: the scheme, messages, bytes, stall time and the operations behind them."""
        servers = self.per_server()
        return {"scheme": self.scheme, "messages": sum(s["messages"] for s in servers),
                "bytes": sum(s["bytes"] for s in servers), "stall_ms": sum(s["stall_ms"] for s in servers),
                "flushes": int(self.flushes.sum()), "invalidations": int(self.invalidations.sum()),
                "snooped_blocks": int(self.waited.sum()), "snooped_copies": int(self.snooped.sum()),
                "block_bytes": self.costs.block_bytes}


__all__ = ["SCHEMES", "BlockCosts", "CoherenceCosts", "CoherenceCounters", "Holders", "SharedBlocks"]
