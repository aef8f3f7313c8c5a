"""The logical trace file: round trip, chunking, atomic writes, integrity and version checks, `trace info`."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from archsim.cli import main
from archsim.errors import TraceError
from archsim.models import load_preset
from archsim.trace import logical
from archsim.trace.logical import COLUMN_NAMES, KINDS, LogicalTrace, LogicalTraceWriter, write_logical_trace
from archsim.workloads import chat_trace

pytestmark = pytest.mark.unit

HEADER = {"source": "test", "model": {"name": "unit"}, "dtype": "bfloat16"}


def _records(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "step": np.arange(n) // 10, "phase": rng.integers(0, 2, n), "op": rng.integers(0, 2, n),
        "kind": rng.integers(0, 5, n), "layer": rng.integers(-1, 4, n), "head_start": rng.integers(-1, 8, n),
        "head_count": rng.integers(0, 8, n), "token_start": rng.integers(-1, 1000, n),
        "token_count": rng.integers(0, 100, n), "bytes": rng.integers(0, 1 << 40, n),
        "operator": rng.integers(0, 3, n), "request": rng.integers(-1, 4, n),
    }


def test_round_trip_over_many_chunks(tmp_path: Path) -> None:
    records = _records(1000)
    path = write_logical_trace(tmp_path / "t.npz", HEADER, records, ["a", "b", "c"], chunk_records=128)
    with LogicalTrace(path) as trace:
        assert len(trace.manifest["chunks"]) == 8  # 7 full chunks of 128 + one of 104
        assert trace.records == 1000 and trace.steps == 100
        assert trace.operators == ["a", "b", "c"]
        back = trace.read()
        for name in COLUMN_NAMES:
            np.testing.assert_array_equal(back[name], records[name].astype(back[name].dtype))
        totals = trace.manifest["totals"]["bytes"]
        for k, kind in enumerate(KINDS):
            mask = records["kind"] == k
            assert totals[kind]["read"] == int(records["bytes"][mask & (records["op"] == 0)].sum())
            assert totals[kind]["written"] == int(records["bytes"][mask & (records["op"] == 1)].sum())
        assert trace.header["created_by"]["archsim"]
        assert trace.header["source"] == "test"


def test_file_is_a_plain_npz(tmp_path: Path) -> None:
    path = write_logical_trace(tmp_path / "t.npz", HEADER, _records(50), ["a", "b", "c"])
    with np.load(path) as data:
        np.testing.assert_array_equal(data["chunks/000000/bytes"], _records(50)["bytes"])


def test_memory_stays_bounded_by_chunk(tmp_path: Path) -> None:
    with LogicalTraceWriter(tmp_path / "t.npz", HEADER, operators=["a", "b", "c"], chunk_records=100) as writer:
        for i in range(20):
            writer.append(_records(60, seed=i))
            assert writer._pending_records < 100  # flushed as soon as a chunk is full
    with LogicalTrace(tmp_path / "t.npz") as trace:
        assert trace.records == 1200


def test_failed_write_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "t.npz"
    with pytest.raises(RuntimeError), LogicalTraceWriter(target, HEADER, operators=["a", "b", "c"]) as writer:
        writer.append(_records(10))
        raise RuntimeError("capture died")
    assert list(tmp_path.iterdir()) == []


def test_failed_write_keeps_the_previous_file(tmp_path: Path) -> None:
    target = write_logical_trace(tmp_path / "t.npz", HEADER, _records(10), ["a", "b", "c"])
    before = target.read_bytes()
    with pytest.raises(ValueError), LogicalTraceWriter(target, HEADER, operators=["a"]) as writer:
        writer.append(_records(10))  # operator index 2 is outside a one-entry table
    assert target.read_bytes() == before
    assert list(tmp_path.iterdir()) == [target]


@pytest.mark.parametrize("cut", [0.3, 0.9, 0.999])
def test_truncated_file_is_refused(tmp_path: Path, cut: float) -> None:
    path = write_logical_trace(tmp_path / "t.npz", HEADER, _records(500), ["a", "b", "c"])
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(TraceError, match="truncated|not a readable"):
        LogicalTrace(path)


def _rewrite_member(path: Path, member: str, transform) -> None:  # noqa: ANN001 - test helper
    with zipfile.ZipFile(path) as source:
        items = [(info, source.read(info.filename)) for info in source.infolist()]
    with zipfile.ZipFile(path, "w") as target:
        for info, payload in items:
            target.writestr(info.filename, transform(payload) if info.filename == member else payload)


def test_corrupted_chunk_fails_the_sha256(tmp_path: Path) -> None:
    path = write_logical_trace(tmp_path / "t.npz", HEADER, _records(200), ["a", "b", "c"], chunk_records=64)

    def flip(payload: bytes) -> bytes:  # a valid .npy with one value changed: only the sha256 can tell
        return payload[:-1] + bytes([payload[-1] ^ 0x01])

    _rewrite_member(path, "chunks/000002/bytes.npy", flip)
    with LogicalTrace(path) as trace, pytest.raises(TraceError, match="sha256") as info:
        trace.read()
    assert info.value.where == "chunk 2"


def test_flipped_byte_in_compressed_stream_is_caught(tmp_path: Path) -> None:
    path = write_logical_trace(tmp_path / "t.npz", HEADER, _records(2000), ["a", "b", "c"])
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside some compressed chunk member
    path.write_bytes(bytes(data))
    with pytest.raises(TraceError), LogicalTrace(path) as trace:
        trace.read()


def test_newer_version_is_refused(tmp_path: Path) -> None:
    path = write_logical_trace(tmp_path / "t.npz", HEADER, _records(10), ["a", "b", "c"])

    def bump(payload: bytes) -> bytes:
        manifest = json.loads(payload)
        manifest["version"] = logical.VERSION + 1
        return json.dumps(manifest).encode()

    _rewrite_member(path, "manifest.json", bump)
    with pytest.raises(TraceError, match="newer than this archsim") as info:
        LogicalTrace(path)
    assert info.value.where == "version"


def test_other_files_are_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "plain.npz", a=np.arange(3))
    with pytest.raises(TraceError, match="no manifest"):
        LogicalTrace(tmp_path / "plain.npz")
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(TraceError, match="not a readable"):
        LogicalTrace(tmp_path / "text.npz")
    with pytest.raises(TraceError, match="no such"):
        LogicalTrace(tmp_path / "missing.npz")


def test_writer_rejects_bad_records(tmp_path: Path) -> None:
    with LogicalTraceWriter(tmp_path / "t.npz", HEADER, operators=["a", "b", "c"]) as writer:
        bad = _records(5)
        bad["kind"] = np.full(5, 9)
        with pytest.raises(ValueError, match="kind"):
            writer.append(bad)
        short = _records(5)
        short["bytes"] = short["bytes"][:3]
        with pytest.raises(ValueError, match="bytes"):
            writer.append(short)
    with pytest.raises(ValueError, match="written by the trace writer"):
        LogicalTraceWriter(tmp_path / "u.npz", {**HEADER, "version": 7})


# -- trace info ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chat_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    shape = load_preset("tiny-llama").shape()
    path = tmp_path_factory.mktemp("info") / "chat.npz"
    chat_trace(shape, batch=2, prompt_tokens=8, reply_tokens=3, turns=2, turn_tokens=4, dtype="float32").write(path)
    return path


def test_info_json_has_the_stable_keys(chat_file: Path) -> None:
    result = CliRunner().invoke(main, ["trace", "info", str(chat_file), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["steps"] == 8  # (prefill + 3 decode) x 2 turns
    with LogicalTrace(chat_file) as trace:
        records = trace.read()
    assert summary["records"] == len(records["step"])
    for k, kind in enumerate(("weight", "k", "v", "activation")):
        mask = records["kind"] == k
        assert summary["bytes"][kind]["read"] == int(records["bytes"][mask & (records["op"] == 0)].sum())
        assert summary["bytes"][kind]["written"] == int(records["bytes"][mask & (records["op"] == 1)].sum())
    # the K cache of tiny-llama: 2 layers x 2 heads x 16 dims x 4 B per token; reads grow with the context
    per_token = 2 * 2 * 16 * 4
    assert summary["bytes"]["k"]["written"] == 2 * (8 + 3 + 4 + 3) * per_token
    assert summary["phases"] == {"prefill": 2, "decode": 6}


def test_info_text_and_errors(chat_file: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["trace", "info", str(chat_file)])
    assert result.exit_code == 0 and "logical trace v1" in result.output
    broken = tmp_path / "broken.npz"
    broken.write_bytes(chat_file.read_bytes()[:500])
    result = CliRunner().invoke(main, ["trace", "info", str(broken)])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "broken.npz" in result.output
