"""Consistency of shared KV blocks (archsim/serving/coherence.py): random interleavings of writers, readers and
an evictor never let a read see a torn or stale block under either scheme, and do once the ordering rule is
dropped; the schemes' messages, bytes and stalls on a hand-written sequence."""

from __future__ import annotations

import random

import numpy as np
import pytest

from archsim.serving.coherence import SCHEMES, CoherenceCosts, Holders, SharedBlocks

pytestmark = pytest.mark.unit


def _interleaving(seed: int, scheme: str, ordered: bool, servers: int = 3, blocks: int = 3, steps: int = 80):
    """A random run: at each step one legal action (start or finish a write, a read, or an eviction)."""
    rng = random.Random(seed)
    pool = SharedBlocks(servers, scheme, ordered)
    writing: set[int] = set()
    reading: set[tuple[int, int]] = set()
    for _ in range(steps):
        kind = rng.choice(("write", "write_end", "read", "read_end", "read_end", "evict"))
        block, server = rng.randrange(blocks), rng.randrange(servers)
        if kind == "write" and block not in writing and pool.begin_write(block):
            writing.add(block)
        elif kind == "write_end" and writing:
            done = rng.choice(sorted(writing))
            writing.discard(done)
            pool.end_write(done, server)
        elif kind == "read" and (server, block) not in reading and pool.begin_read(server, block):
            reading.add((server, block))
        elif kind == "read_end" and reading:
            done = rng.choice(sorted(reading))
            reading.discard(done)
            pool.end_read(*done)
        elif kind == "evict" and block not in writing:
            pool.evict(block)
    for server, block in sorted(reading):
        pool.end_read(server, block)
    return pool


@pytest.mark.parametrize("scheme", SCHEMES)
def test_no_read_sees_a_torn_or_stale_block_in_500_interleavings(scheme):
    pools = [_interleaving(seed, scheme, ordered=True) for seed in range(500)]
    assert [v for p in pools for v in p.violations] == []
    assert sum(p.counters.reads for p in pools) > 1500 and sum(p.counters.waits for p in pools) > 300
    if scheme == "software":        # stale cached copies were met and invalidated, not read
        assert sum(p.counters.stale_avoided for p in pools) > 200


@pytest.mark.parametrize("scheme", SCHEMES)
def test_dropping_the_ordering_rule_is_caught(scheme):
    broken = [p for p in (_interleaving(seed, scheme, ordered=False) for seed in range(500)) if p.violations]
    assert len(broken) > 100
    assert any("torn" in v for p in broken for v in p.violations)


def test_each_schemes_messages_bytes_and_stalls_on_a_hand_written_sequence():
    costs = CoherenceCosts()
    lines = costs.block_bytes // costs.line_bytes            # 256 lines of a 16 KiB block
    runs = {}
    for scheme in SCHEMES:
        pool = SharedBlocks(2, scheme)
        assert not pool.begin_read(1, 7)                     # nothing sealed yet: a miss
        assert pool.begin_write(7)
        pool.end_write(7, writer=0)                          # version 1, in server 0's cache
        assert pool.begin_read(1, 7)                         # server 1 reads version 1 and caches it
        assert not pool.begin_write(7)                       # pinned: the rewrite waits
        pool.end_read(1, 7)
        assert pool.begin_write(7)                           # version 2 over the slot
        pool.end_write(7, writer=0)
        assert pool.begin_read(1, 7)                         # server 1's copy is version 1: stale
        pool.end_read(1, 7)
        assert pool.violations == []
        runs[scheme] = pool.counters
    sw, bi = runs["software"], runs["back_invalidate"]
    # software: two flushes of the block, one invalidation of server 1's stale copy before its second read
    assert (sw.messages, sw.bytes, sw.waits, sw.stale_avoided) == (2 * lines + 1, 2 * costs.block_bytes, 1, 1)
    assert sw.stall_ns == pytest.approx(2 * costs.flush_ns + costs.invalidate_ns)
    # back-invalidation: the second write snoops both servers' copies (a snoop and a response per line)
    assert (bi.messages, bi.bytes, bi.waits, bi.stale_avoided) == (2 * 2 * lines, 2 * 2 * lines * 16, 1, 0)
    assert bi.stall_ns == pytest.approx(costs.round_trip_ns)


def test_two_readers_on_one_server_pin_the_block_until_both_are_done():
    pool = SharedBlocks(2, "software")
    assert pool.begin_write(3)
    pool.end_write(3, writer=1)
    assert pool.begin_read(0, 3) and pool.begin_read(0, 3)
    pool.end_read(0, 3)
    assert not pool.begin_write(3)                   # the second reader still pins it
    pool.end_read(0, 3)
    assert pool.begin_write(3) and pool.violations == []


def test_an_unknown_scheme_is_refused():
    with pytest.raises(ValueError, match="unknown coherence scheme"):
        SharedBlocks(2, "directory")


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_engines_vectorized_holders_count_what_shared_blocks_counts(scheme):
    # the serving engine's bookkeeping (no pins: its reads never overlap a rewrite or an eviction) on 300 random
    # runs of writes of absent blocks, reads and evictions of resident ones, against SharedBlocks op by op
    costs = CoherenceCosts()
    per_block = costs.for_block(costs.block_bytes)
    met = 0
    for seed in range(300):
        rng = random.Random(seed)
        pool = SharedBlocks(3, scheme)
        holders = Holders(np.arange(5, dtype=np.uint64) * 7, 3, scheme, per_block)
        resident: set[int] = set()
        stall = 0.0
        for _ in range(40):
            kind, server = rng.choice(("write", "read", "evict")), rng.randrange(3)
            chosen = rng.sample(range(5), rng.randint(1, 5))
            todo = sorted(b for b in chosen if (b in resident) != (kind == "write"))
            keys = [7 * b for b in todo]
            for b in todo:
                if kind == "write":
                    assert pool.begin_write(b)
                    pool.end_write(b, server)
                elif kind == "read":
                    assert pool.begin_read(server, b)
                    pool.end_read(server, b)
                else:
                    assert pool.evict(b)
            if kind == "write":
                flushes, snooped = holders.write(keys, server)
                stall += per_block.stall_ns(flushes, 0, snooped)
                resident |= set(todo)
            elif kind == "read":
                stall += per_block.stall_ns(0, holders.read(keys, server), 0)
            else:
                stall += per_block.stall_ns(0, 0, holders.evict(keys, server))
                resident -= set(todo)
        got, want = holders.summary(), pool.counters
        assert pool.violations == []
        assert (got["messages"], got["bytes"], got["invalidations"]) == (want.messages, want.bytes,
                                                                         want.stale_avoided)
        assert got["stall_ms"] * 1e6 == pytest.approx(want.stall_ns, rel=1e-12, abs=1e-9)
        assert stall == pytest.approx(want.stall_ns, rel=1e-12, abs=1e-9)     # what the acting servers waited
        met += got["invalidations"] if scheme == "software" else got["snooped_copies"] - got["snooped_blocks"]
    assert met > 300                       # stale copies met, blocks snooped in several servers' caches


def test_a_block_of_any_size_costs_its_16_kib_units_and_its_lines():
    costs = CoherenceCosts()
    block = costs.for_block(16 * 20 * 16384)          # 320 units: a 16-token block of Llama-3.1-70B
    assert block.flush_ns == pytest.approx(320 * (8500.0 - 2410.0))
    assert block.invalidate_ns == pytest.approx(320 * 5980.0)
    assert (block.flush_messages, block.invalidate_messages, block.snoop_messages) == (81920, 320, 2 * 81920)
    assert block.snoop_bytes == 2 * 81920 * 16 and block.snoop_ns == costs.round_trip_ns
