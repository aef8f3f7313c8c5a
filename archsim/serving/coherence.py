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
test (tests/test_coherence.py) must catch. Costs per block are `CoherenceCosts` (sources in docs/serving.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

SCHEMES = ("software", "back_invalidate")
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
            lines = self.costs.block_bytes // self.costs.line_bytes
            self.counters.messages += lines
            self.counters.bytes += self.costs.block_bytes
            self.counters.stall_ns += self.costs.flush_ns
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
            self.counters.messages += 1
            self.counters.stall_ns += self.costs.invalidate_ns
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
        lines = self.costs.block_bytes // self.costs.line_bytes
        for s in holders:
            del self._cached[s][block]
            self.counters.messages += 2 * lines
            self.counters.bytes += 2 * lines * self.costs.message_bytes
        if holders:
            self.counters.stall_ns += self.costs.round_trip_ns


__all__ = ["SCHEMES", "CoherenceCosts", "CoherenceCounters", "SharedBlocks"]
