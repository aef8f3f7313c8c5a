"""Consistency of shared KV blocks (archsim/serving/coherence.py): random interleavings of writers, readers and
an evictor never let a read see a torn or stale block under either scheme, and do once the ordering rule is
dropped; the schemes' messages, bytes and stalls on a hand-written sequence."""

from __future__ import annotations

import random

import pytest

from archsim.serving.coherence import SCHEMES, CoherenceCosts, SharedBlocks

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
