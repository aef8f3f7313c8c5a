import numpy as np
import pytest

from archsim.errors import TraceError
from archsim.trace.native import load_physical_trace, save_physical_trace
from archsim.trace.text_formats import detect_format, read_trace, write_dramsim3, write_ramulator

pytestmark = pytest.mark.component


def _stream(n=100):
    rng = np.random.default_rng(0)
    return (np.sort(rng.integers(0, 1000, n)), rng.integers(0, 2**20, n).astype(np.uint64) * 64,
            (rng.random(n) < 0.3).astype(np.uint8), (rng.random(n) < 0.5).astype(np.uint8))


def test_native_round_trip(tmp_path):
    ts, addr, w, src = _stream()
    path = tmp_path / "t.npz"
    save_physical_trace(path, ts, addr, w, src, {"made_by": "test"})
    trace = load_physical_trace(path)
    assert np.array_equal(trace.timestamp_cycles, ts) and np.array_equal(trace.address, addr)
    assert np.array_equal(trace.is_write, w) and np.array_equal(trace.source, src)
    assert trace.header == {"made_by": "test"}
    assert detect_format(path) == "npz"
    assert not [p for p in tmp_path.iterdir() if p.name != "t.npz"]  # no temp file left


def test_native_truncated_and_corrupted_files_are_refused(tmp_path):
    ts, addr, w, src = _stream(1000)
    path = tmp_path / "t.npz"
    save_physical_trace(path, ts, addr, w, src)
    data = path.read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match="truncated or corrupted"):
        load_physical_trace(tmp_path / "cut.npz")
    flipped = bytearray(data)
    flipped[len(data) // 3] ^= 0xFF
    (tmp_path / "flip.npz").write_bytes(bytes(flipped))
    with pytest.raises(TraceError):
        load_physical_trace(tmp_path / "flip.npz")


def test_dramsim3_and_ramulator_round_trip(tmp_path):
    ts, addr, w, _ = _stream()
    write_dramsim3(tmp_path / "d.trace", ts, addr, w)
    write_ramulator(tmp_path / "r.trace", addr, w)
    assert detect_format(tmp_path / "d.trace") == "dramsim3"
    assert detect_format(tmp_path / "r.trace") == "ramulator"
    d = read_trace(tmp_path / "d.trace")
    assert np.array_equal(d.address, addr) and np.array_equal(d.is_write, w) and np.array_equal(d.timestamp_cycles, ts)
    r = read_trace(tmp_path / "r.trace")
    assert np.array_equal(r.address, addr) and np.array_equal(r.is_write, w) and not r.timestamp_cycles.any()
    assert (tmp_path / "d.trace").read_text().splitlines()[0].split()[1] in ("READ", "WRITE")


@pytest.mark.parametrize("text,where", [
    ("0x40 READ 0\n0x80 LOAD 3\n", "line 2"),
    ("0x40 READ 0\n\n0xZZ READ 1\n", "line 3"),
    ("0x40 READ x\n", "line 1"),
])
def test_bad_dramsim3_lines_name_the_line(tmp_path, text, where):
    path = tmp_path / "bad.trace"
    path.write_text(text)
    with pytest.raises(TraceError) as info:
        read_trace(path, "dramsim3")
    assert where in str(info.value) and str(path) in str(info.value)


@pytest.mark.parametrize("fmt", ["auto", "dramsim3", "ramulator"])
@pytest.mark.parametrize("text", ["", "# nothing\n\n"])
def test_empty_trace_is_an_error(tmp_path, fmt, text):
    path = tmp_path / "empty.trace"
    path.write_text(text)
    with pytest.raises(TraceError, match="the trace holds no requests") as info:
        read_trace(path, fmt)
    assert str(info.value).startswith(str(path))


def test_auto_detection_does_not_call_a_long_comment_head_empty(tmp_path):
    """Past the bytes detection reads, a file of comments may still hold requests: it asks for --format instead."""
    path = tmp_path / "long.trace"
    path.write_text("#" * 5000 + "\n0x40 READ 0\n")
    with pytest.raises(TraceError, match="pass --format"):
        read_trace(path)
    assert read_trace(path, "dramsim3").address.tolist() == [0x40]


def test_dramsim3_spellings_and_backwards_timestamps(tmp_path):
    """DRAMSim3's other operation names parse; a decreasing timestamp is refused naming its line (blank and
    comment lines counted), unless sorted (stably); requests built directly still go in array order."""
    from archsim.memory import Requests, replay
    from tests.conftest import config

    path = tmp_path / "d.trace"
    path.write_text("# head\n0x0 P_MEM_RD 100\n\n0x40 P_MEM_WR 5\n0x80 read 5\n0xc0 BOFF 200\n")
    with pytest.raises(TraceError) as info:
        read_trace(path)
    assert info.value.where == "line 4" and "5 is below the previous request's 100" in info.value.detail
    trace = read_trace(path, sort=True)
    assert trace.timestamp_cycles.tolist() == [5, 5, 100, 200] and trace.address.tolist() == [0x40, 0x80, 0, 0xc0]
    assert trace.is_write.tolist() == [1, 0, 0, 1] and trace.header["sorted_requests"] == 3
    backwards = Requests.build(np.array([100, 5, 0, 200], dtype=np.int64), trace.address, trace.is_write)
    result = replay(config("HBM2"), backwards)
    assert result.accept_cycle.tolist()[:3] == [100, 100, 100]  # in array order, none before its own time
    assert result.accept_cycle[3] == 200
