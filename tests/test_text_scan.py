"""The compiled text-trace scanner reads exactly what the line-by-line reading of the formats reads."""

import numpy as np
import pytest

from archsim.errors import TraceError
from archsim.trace import text_scan
from archsim.trace.text_formats import _DRAMSIM3_OPS, _RAMULATOR_OPS, read_dramsim3, read_ramulator

pytestmark = pytest.mark.unit


def _reference_dramsim3(text: str):
    """The formats' definition, a line at a time (the reader before the scanner)."""
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        assert len(parts) == 3 and parts[1] in _DRAMSIM3_OPS and parts[2].isdigit()
        rows.append((int(parts[0], 16), _DRAMSIM3_OPS[parts[1]], int(parts[2])))
    return rows


def _reference_ramulator(text: str):
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        assert len(parts) == 2 and parts[0] in _RAMULATOR_OPS
        rows.append((int(parts[1], 16), _RAMULATOR_OPS[parts[0]], 0))
    return rows


DRAMSIM3_TEXT = ("# a comment\n\n0x40 READ 0\n  0X80\tWRITE   3  \r\n0x0 read 3\nff P_MEM_WR 9\n"
                 "# 0xzz BAD 1\n0xFFFFFFFFFFFFFFFF BOFF 10\n0x00000000000000000001 P_FETCH 11\n"
                 "0xabc P_MEM_RD 4611686018427387903\n\t\n0x1 write 12")
RAMULATOR_TEXT = "LD 0x40\n# c\nST 0X80  \r\n\nLD ff\nST 0x00000000000000000000001\nLD 0xABCDEF"


@pytest.mark.parametrize("chunk", [1 << 26, 7, 64])
def test_the_scanner_equals_the_line_by_line_reading(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(text_scan, "CHUNK_BYTES", chunk)  # lines cut across chunks are read whole
    for text, reader, reference in ((DRAMSIM3_TEXT, read_dramsim3, _reference_dramsim3),
                                    (RAMULATOR_TEXT, read_ramulator, _reference_ramulator)):
        path = tmp_path / "t.trace"
        path.write_text(text)
        trace = reader(path)
        got = list(zip(trace.address.tolist(), trace.is_write.tolist(), trace.timestamp_cycles.tolist(), strict=True))
        assert got == reference(text)


def test_random_traces_round_trip_through_the_scanner(tmp_path):
    rng = np.random.default_rng(3)
    n = 20_000
    address = rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64) * np.uint64(2)
    cycle = np.cumsum(rng.integers(0, 5, n))
    ops = rng.integers(0, 2, n)
    text = "".join(f"{int(a):#x} {'WRITE' if o else 'READ'} {int(c)}\n" for a, o, c in zip(address, ops, cycle,
                                                                                              strict=True))
    path = tmp_path / "r.trace"
    path.write_text(text)
    trace = read_dramsim3(path)
    assert np.array_equal(trace.address, address)
    assert np.array_equal(trace.timestamp_cycles, cycle)
    assert np.array_equal(trace.is_write, ops.astype(np.uint8))


@pytest.mark.parametrize("text,line,words", [
    ("0x40 READ 0\n0x40 REED 1\n", 2, "expected"),
    ("0x40 READ 0\n0xgg READ 1\n", 2, "bad hex address"),
    ("0x40 READ\n", 1, "expected"),
    ("0x40 READ 1 2\n", 1, "expected"),
    ("0x40 READ -1\n", 1, "non-negative integer"),
    ("0x40 READ 1e23\n", 1, "non-negative integer"),
    ("0x40 READ 100000000000000000000000\n", 1, "beyond the largest"),
    ("0x40 READ 0\n0x10000000000000000 READ 1\n", 2, "does not fit 64 bits"),
    ("0x40 READ 0\n\x00\x01\x02 READ 0\n", 2, "binary"),
    ("0x40 READ 0\n\xff\xfe READ 0\n", 2, "binary"),
    ("0x40READ 0\n", 1, "expected"),
])
def test_a_bad_line_is_named_with_what_is_wrong(tmp_path, text, line, words):
    path = tmp_path / "bad.trace"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(TraceError) as info:
        read_dramsim3(path)
    assert info.value.where == f"line {line}" and words in str(info.value)
    assert str(path) in str(info.value)


def test_the_scanner_reports_the_first_decreasing_cycle():
    table, lengths, codes = text_scan.op_table(_DRAMSIM3_OPS)
    data = b"0x0 READ 5\n# c\n0x40 READ 7\n0x80 READ 6\n0xc0 READ 2\n"
    buf = np.frombuffer(data, dtype=np.uint8)
    state = np.zeros(6, dtype=np.int64)
    out = (np.empty(8, np.uint64), np.empty(8, np.uint8), np.empty(8, np.int64))
    assert text_scan.scan(buf, len(data), True, table, lengths, codes, state, *out) == 4
    assert state[text_scan.ST_DECREASE] == 4 and state[text_scan.ST_LINE] == 5
