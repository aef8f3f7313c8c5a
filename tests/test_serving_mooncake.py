"""Mooncake JSONL traces: the shipped sample reads into requests whose block keys follow the trace's hash ids
(B = 512 and B = 128), bad lines are named by number, and the writer's output reads back with the same sharing."""

from __future__ import annotations

import json

import numpy as np
import pytest

from archsim.errors import ConfigError, TraceError
from archsim.resources import data_path
from archsim.serving.mooncake import mooncake_jsonl, read_mooncake, write_mooncake
from archsim.serving.scenario import load_scenario

pytestmark = pytest.mark.unit

SAMPLE = data_path("traces", "mooncake_sample.jsonl")


def _rows():
    return [json.loads(line) for line in SAMPLE.read_text().splitlines()]


def _write(tmp_path, rows, name="t.jsonl"):
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_the_sample_is_the_first_300_requests_with_its_licence():
    rows = _rows()
    assert len(rows) == 300
    assert rows[0] == {"timestamp": 0, "input_length": 40160, "output_length": 6, "hash_ids": list(range(79))}
    assert rows[-1]["timestamp"] == 86790
    notice = data_path("traces", "NOTICE-mooncake").read_text()
    assert "Apache License, Version 2.0" in notice and "3b5a594" in notice
    assert "Apache License" in data_path("traces", "LICENSE-mooncake-APACHE").read_text()


def test_blocks_of_512_take_the_trace_hash_ids():
    rows = _rows()
    t = read_mooncake(SAMPLE, block_tokens=512)
    assert len(t) == 300 and t.block_tokens == 512
    assert t.input_tokens.tolist() == [r["input_length"] for r in rows]
    assert t.output_tokens.tolist() == [r["output_length"] for r in rows]
    assert np.array_equal(t.arrival_ns, np.array([r["timestamp"] for r in rows]) * 1e6)
    assert (t.prev == -1).all() and (t.turn == 0).all()
    # every full block's key stands for its hash id: equal ids <-> equal keys, over the whole sample
    ids, keys = [], []
    for i, r in enumerate(rows):
        full = r["input_length"] // 512
        ids += r["hash_ids"][:full]
        keys += t.keys(i)[:full].tolist()
    pairs = set(zip(ids, keys, strict=True))
    assert len(pairs) == len(set(ids)) == len(set(keys))
    partial = [int(t.keys(i)[-1]) for i, r in enumerate(rows) if r["input_length"] % 512]
    assert len(set(partial)) == len(partial) and not set(partial) & set(keys)
    # the infinite-cache bound: 4.9 % of the sample's full 512-token blocks repeat an earlier one
    assert round(1 - len(set(ids)) / len(ids), 3) == 0.049


def test_blocks_of_128_take_hash_id_and_offset(tmp_path):
    path = _write(tmp_path, [{"timestamp": 0, "input_length": 1024, "output_length": 3, "hash_ids": [1, 2]},
                             {"timestamp": 5, "input_length": 700, "output_length": 4, "hash_ids": [1, 3]},
                             {"timestamp": 5, "input_length": 800, "output_length": 1, "hash_ids": [1, 3]}])
    t = read_mooncake(path, block_tokens=128)
    a, b, c = (t.keys(i) for i in range(3))
    assert (len(a), len(b), len(c)) == (8, 6, 7)  # ceil(tokens / 128)
    assert np.array_equal(a[:4], b[:4]) and np.array_equal(b[:4], c[:4])  # (1, 0..3): the first 512 tokens
    assert len(set(a[:4].tolist())) == 4  # four offsets inside one trace block: four keys
    assert a[4] != b[4]  # (2, 0) against (3, 0)
    assert b[4] == c[4]  # (3, 0): tokens 512-639, full in both
    assert b[5] != c[5]  # b's tokens 640-699 are a partial block, its own; c's 640-767 are (3, 1)
    assert c[6] not in a and c[6] not in b  # c's partial tail (768-799)
    assert len(set(t.block_keys.tolist())) == 8 + 2 + 2  # a: 8 keys; b adds (3, 0) and its tail; c (3, 1), tail
    t512 = read_mooncake(path, block_tokens=512)
    assert t512.keys(0)[0] == t512.keys(1)[0] == t512.keys(2)[0]
    assert t512.keys(1)[1] != t512.keys(2)[1]  # both partial: unique to each request


def test_time_scale_and_block_size_checks(tmp_path):
    t = read_mooncake(SAMPLE, block_tokens=512, time_scale=0.5)
    assert t.arrival_ns[-1] == 86790 * 0.5e6
    with pytest.raises(ConfigError, match="divide"):
        read_mooncake(SAMPLE, block_tokens=96)
    scn = load_scenario("mooncake-sample")
    with pytest.raises(ConfigError) as err:
        scn.requests(n_requests=10, block_tokens=100)
    assert err.value.where == "scenario.requests.hash_block_tokens" and err.value.file.endswith("mooncake-sample.yaml")
    assert len(scn.requests(n_requests=10, block_tokens=128)) == 10
    assert scn.requests(duration_ns=28011e6 + 1, block_tokens=512).arrival_ns.max() <= 28011e6
    with pytest.raises(ConfigError, match="holds 300 requests"):
        scn.requests(n_requests=301, block_tokens=512)


GOOD = {"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [7]}


@pytest.mark.parametrize(("bad", "words"), [
    ('{"timestamp": 1, "input_length": 10,', "not JSON"),
    ("[1, 2, 3]", "JSON object"),
    ({"timestamp": 1, "input_length": 10, "output_length": 2}, "missing key 'hash_ids'"),
    ({"timestamp": -1, "input_length": 10, "output_length": 2, "hash_ids": [7]}, "timestamp"),
    ({"timestamp": 1, "input_length": 0, "output_length": 2, "hash_ids": []}, "input_length"),
    ({"timestamp": 1, "input_length": 10, "output_length": 0, "hash_ids": [7]}, "output_length"),
    ({"timestamp": 1, "input_length": 600, "output_length": 2, "hash_ids": [7]}, "expected 2"),
    ({"timestamp": 1, "input_length": 10, "output_length": 2, "hash_ids": ["a"]}, "hash_ids"),
    ('{"timestamp": 1, "timestamp": 2, "input_length": 10, "output_length": 2, "hash_ids": [7]}',
     "'timestamp' given twice"),
    ('{"timestamp": NaN, "input_length": 10, "output_length": 2, "hash_ids": [7]}', "NaN is not JSON"),
    ({"timestamp": 1e300, "input_length": 10, "output_length": 2, "hash_ids": [7]}, "beyond the latest arrival"),
    ({"timestamp": 1, "input_length": 10, "output_length": 2**31, "hash_ids": [7]}, "2,147,483,647"),
    ({"timestamp": 1, "input_length": 10, "output_length": 2, "hash_ids": [2**64]}, "[0, 2^64)"),
])
def test_a_bad_line_is_named_by_number(tmp_path, bad, words):
    path = _write(tmp_path, [GOOD, dict(GOOD, timestamp=1), bad])
    with pytest.raises(TraceError) as err:
        read_mooncake(path, block_tokens=16)
    assert err.value.where == "line 3" and err.value.file == str(path)
    assert words in err.value.detail and "\n" not in str(err.value)


def test_a_blank_line_is_named_but_blank_lines_at_the_end_are_an_editors(tmp_path):
    for blank in ("", "  "):
        with pytest.raises(TraceError, match="a blank line") as err:
            read_mooncake(_write(tmp_path, [GOOD, blank, dict(GOOD, timestamp=1)]), block_tokens=16)
        assert err.value.where == "line 2"
    path = _write(tmp_path, [GOOD, dict(GOOD, timestamp=1), "", "  "])
    assert len(read_mooncake(path, block_tokens=16)) == 2
    (tmp_path / "crlf.jsonl").write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    assert len(read_mooncake(tmp_path / "crlf.jsonl", block_tokens=16)) == 2


def test_decreasing_timestamps_and_empty_traces(tmp_path):
    path = _write(tmp_path, [dict(GOOD, timestamp=5), dict(GOOD, timestamp=4)])
    with pytest.raises(TraceError, match="before the previous line") as err:
        read_mooncake(path, block_tokens=16)
    assert err.value.where == "line 2"
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(TraceError, match="no requests"):
        read_mooncake(tmp_path / "e.jsonl", block_tokens=16)


def _same_sharing(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal keys in `a` exactly where equal keys in `b` (one is a relabelling of the other)."""
    pairs = set(zip(a.tolist(), b.tolist(), strict=True))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


def test_the_writer_reads_back_with_the_same_sharing(tmp_path):
    scn = load_scenario("shared-prefix", ["scenario.shared_prefix.groups=4"])
    table = scn.requests(n_requests=200, seed=3, block_tokens=512)
    path = write_mooncake(table, tmp_path / "gen.jsonl")
    back = read_mooncake(path, block_tokens=512)
    assert np.array_equal(back.input_tokens, table.input_tokens)
    assert np.array_equal(back.output_tokens, table.output_tokens)
    assert np.array_equal(back.arrival_ns, np.rint(table.arrival_ns / 1e6) * 1e6)
    full = np.concatenate([np.arange(table.block_offsets[i], table.block_offsets[i] + table.input_tokens[i] // 512)
                           for i in range(len(table))])
    assert len(np.unique(table.block_keys[full])) < 0.5 * len(full)  # the prefixes are shared
    assert _same_sharing(back.block_keys[full], table.block_keys[full])
    assert mooncake_jsonl(table) == path.read_bytes()  # deterministic
    again = read_mooncake(path, block_tokens=128)  # finer blocks: the 512-token sharing, four keys per block
    assert len(np.unique(again.block_keys)) >= len(np.unique(back.block_keys))


def test_the_writer_places_later_turns_after_their_think_time():
    table = load_scenario("multiturn").requests(n_requests=50, seed=1, block_tokens=16)
    rows = [json.loads(line) for line in mooncake_jsonl(table).decode().splitlines()]
    assert len(rows) == 50
    ms = table.arrival_ns / 1e6
    for i in range(len(table)):  # rows come after their prev
        if table.prev[i] >= 0:
            ms[i] = ms[table.prev[i]] + table.think_ns[i] / 1e6
    assert (table.prev >= 0).sum() > 10
    order = np.argsort(np.rint(ms), kind="stable")
    assert [r["timestamp"] for r in rows] == np.rint(ms[order]).astype(int).tolist()
    assert [r["input_length"] for r in rows] == table.input_tokens[order].tolist()
    assert [len(r["hash_ids"]) for r in rows] == [-(-int(n) // 16) for n in table.input_tokens[order]]


def test_trace_from_scenario_writes_a_trace_that_reads_back(tmp_path):
    from click.testing import CliRunner

    from archsim.cli import main

    out = tmp_path / "gen.jsonl"
    result = CliRunner().invoke(main, ["trace", "from-scenario", "shared-prefix", "--requests", "40", "--seed", "5",
                                       "--set", "scenario.shared_prefix.groups=2", "-o", str(out)])
    assert result.exit_code == 0, result.output
    back = read_mooncake(out, block_tokens=128)
    table = load_scenario("shared-prefix", ["scenario.shared_prefix.groups=2"]).requests(n_requests=40, seed=5,
                                                                                        block_tokens=512)
    assert np.array_equal(back.input_tokens, table.input_tokens)
    assert out.read_bytes() == mooncake_jsonl(table)
    bad = CliRunner().invoke(main, ["trace", "from-scenario", "multiturn", "--requests", "5", "--set",
                                    "scenario.input.value=0", "-o", str(tmp_path / "x.jsonl")])
    assert bad.exit_code == 2 and "scenario.input.value" in bad.output
    assert not (tmp_path / "x.jsonl").exists()
