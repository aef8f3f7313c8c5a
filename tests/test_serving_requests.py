"""RequestTable: content-chained block keys (shared content gives equal keys, anything else differs), the
fixed 64-bit mix, the multi-turn history keys, and the table's invariants."""

from __future__ import annotations

import numpy as np
import pytest

from archsim.serving.requests import RequestTable, content_id, keys_from_segments, mix, splitmix64

pytestmark = pytest.mark.unit

B = 16


def _ids(*parts: int) -> np.ndarray:
    return np.array([content_id(9, p) for p in parts], dtype=np.uint64)


def _table(segments: list[list[tuple[int, int]]], *, output=None, block_tokens: int = B, **columns) -> RequestTable:
    """A table from prompts given as [(content part, tokens), ...]."""
    n = len(segments)
    offsets = np.cumsum([0] + [len(s) for s in segments])
    ids = _ids(*[p for s in segments for p, _ in s])
    lens = [t for s in segments for _, t in s]
    cols = {"arrival_ns": np.arange(n, dtype=float), "prev": np.full(n, -1), "think_ns": np.zeros(n),
            "session": np.arange(n), "turn": np.zeros(n)}
    cols.update(columns)
    return RequestTable.from_segments(**cols, output_tokens=output if output is not None else np.ones(n, int),
                                      seg_offsets=offsets, seg_ids=ids, seg_tokens=lens, block_tokens=block_tokens)


def test_splitmix64_is_the_published_generator():
    # splitmix64 seeded with 0 first returns 0xE220A8397B1DCDAF (Steele et al.'s reference, as in xoshiro's seeding)
    assert int(splitmix64(np.uint64(0))) == 0xE220A8397B1DCDAF
    assert int(splitmix64(np.uint64(0x9E3779B97F4A7C15))) == 0x6E789E6AA1B965F4  # its second output
    assert mix(1, 2) != mix(2, 1)


def test_a_shared_prefix_gives_equal_keys_then_they_differ():
    t = _table([[(0, 40), (1, 10)], [(0, 40), (2, 30)]])  # 40 shared tokens: blocks 0 and 1 are full and equal
    a, b = t.keys(0), t.keys(1)
    assert len(a) == 4 and len(b) == 5  # ceil(50 / 16), ceil(70 / 16)
    assert np.array_equal(a[:2], b[:2])
    assert a[2] != b[2]  # block 2 holds 8 prefix tokens and 8 different ones
    assert len(set(a.tolist()) & set(b.tolist())) == 2


def test_keys_depend_on_all_earlier_content():
    # block 1 holds the same 16 tokens of part 3 in both prompts, after different blocks 0
    t = _table([[(1, 16), (3, 32)], [(2, 16), (3, 32)]])
    assert t.keys(0)[1] != t.keys(1)[1]
    assert t.keys(0)[0] != t.keys(1)[0]


def test_identical_prompts_share_full_blocks_but_not_their_partial_last_block():
    t = _table([[(5, 50)], [(5, 50)]])  # 3 full blocks + 2 tokens
    a, b = t.keys(0), t.keys(1)
    assert np.array_equal(a[:3], b[:3])
    assert a[3] != b[3]
    full = _table([[(5, 48)], [(5, 48)]])  # a prompt of whole blocks shares every block
    assert np.array_equal(full.keys(0), full.keys(1))


def test_segment_boundaries_do_not_matter_only_content():
    # the same content (part 7, 64 tokens) seen as one segment in both: keys of a block ending inside or at the
    # end of the segment are the same for equal prefixes of different lengths
    t = _table([[(7, 64)], [(7, 64), (8, 16)]])
    assert np.array_equal(t.keys(0), t.keys(1)[:4])


def test_a_later_turn_carries_the_history_keys():
    # turn 0: prompt = user0 (40); answer 30. Turn 1: user0 + answer0 + user1 (20) = 90 tokens
    prompts = [[(10, 40)], [(10, 40), (11, 30), (12, 20)]]
    t = _table(prompts, output=np.array([30, 5]), arrival_ns=np.array([0.0, np.nan]), prev=np.array([-1, 0]),
               think_ns=np.array([0.0, 1e9]), session=np.array([0, 0]), turn=np.array([0, 1]))
    assert t.input_tokens.tolist() == [40, 90]
    assert np.array_equal(t.keys(0)[:2], t.keys(1)[:2])  # turn 0's full prompt blocks
    assert t.keys(0)[2] not in t.keys(1)  # its partial block (8 tokens) was unique to it
    after = t.kv_keys_after(0)
    assert len(after) == (40 + 30 - 1) // B == 4  # the answer's last token has no KV yet
    assert np.array_equal(after, t.keys(1)[:4])
    assert t.next_turn().tolist() == [1, -1]
    assert len(t.kv_keys_after(1)) == 90 // B  # no next turn: the prompt's full blocks
    edge = _table(prompts[:1] + [[(10, 40), (11, 24), (12, 20)]], output=np.array([24, 5]),
                  arrival_ns=np.array([0.0, np.nan]), prev=np.array([-1, 0]), think_ns=np.array([0.0, 1e9]),
                  session=np.array([0, 0]), turn=np.array([0, 1]))
    assert len(edge.kv_keys_after(0)) == 3  # 40 + 24 = 64 tokens, the last without KV: 3 full blocks, not 4


@pytest.mark.parametrize(("column", "value", "message"), [
    ("prev", np.array([-1, 1]), "prev must be -1 or an earlier request"),
    ("arrival_ns", np.array([0.0, 5.0]), "arrival NaN"),
    ("arrival_ns", np.array([np.nan, np.nan]), "finite arrival"),
    ("think_ns", np.array([1.0, 1.0]), "think_ns"),
    ("turn", np.array([0, 0]), "turn must be"),
])
def test_invariants_are_checked(column, value, message):
    columns = {"arrival_ns": np.array([0.0, np.nan]), "prev": np.array([-1, 0]), "think_ns": np.array([0.0, 1.0]),
               "session": np.array([0, 0]), "turn": np.array([0, 1])}
    columns[column] = value
    with pytest.raises(ValueError, match=message):
        _table([[(1, 20)], [(1, 20), (2, 1), (3, 5)]], output=np.array([1, 1]), **columns)


def test_first_arrivals_must_not_decrease_and_lengths_must_match():
    with pytest.raises(ValueError, match="first arrivals must not decrease"):
        _table([[(1, 5)], [(2, 5)]], arrival_ns=np.array([5.0, 1.0]))
    t = _table([[(1, 5)], [(2, 5)]])
    with pytest.raises(ValueError, match="block_offsets"):
        RequestTable(t.arrival_ns, t.prev, t.think_ns, t.session, t.turn, t.input_tokens + 16, t.output_tokens,
                     t.block_offsets, t.block_keys, t.block_tokens)
    with pytest.raises(ValueError, match="int64"):
        RequestTable(t.arrival_ns, t.prev.astype(np.int32), t.think_ns, t.session, t.turn, t.input_tokens,
                     t.output_tokens, t.block_offsets, t.block_keys, t.block_tokens)


def test_keys_from_segments_counts_blocks_per_request():
    offsets, keys = keys_from_segments(np.array([0, 1, 3]), _ids(1, 2, 3), np.array([16, 17, 15]), B)
    assert offsets.tolist() == [0, 1, 3]
    assert keys.dtype == np.uint64 and len(keys) == 3
    with pytest.raises(ValueError, match="at least one token"):
        keys_from_segments(np.array([0, 1]), _ids(1), np.array([0]), B)


def test_keys_do_not_depend_on_the_chunking(monkeypatch):
    import archsim.serving.requests as requests_module

    segments = [[(0, 40), (1, 10)], [(0, 40), (2, 30)], [(3, 5)], [(0, 100)], [(4, 16), (5, 64)]]
    whole = _table(segments)
    monkeypatch.setattr(requests_module, "KEY_CHUNK_BLOCKS", 3)  # smaller than one request's 7 blocks
    chunked = _table(segments)
    assert np.array_equal(whole.block_offsets, chunked.block_offsets)
    assert np.array_equal(whole.block_keys, chunked.block_keys)
