"""`trace convert` writes batch by batch what converting the whole trace in memory wrote: the same lines, the same
columns and header."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import archsim.trace.stream
from archsim.cli import main
from archsim.trace.logical import LogicalTrace
from archsim.trace.mapping import PoolPlacement, TraceMapper, map_trace
from archsim.trace.native import load_physical_trace, save_physical_trace
from archsim.trace.text_formats import read_trace
from archsim.trace.text_write import text_lines
from tests.conftest import REPO

pytestmark = pytest.mark.system

LOGICAL = REPO / "traces" / "tiny-llama_chat.npz"


def _python_lines(fmt: str, ts, address, is_write) -> bytes:
    """The lines as Python formats them one by one (what the writers wrote before they were compiled)."""
    if fmt == "dramsim3":
        ops = np.where(np.asarray(is_write) != 0, "WRITE", "READ")
        return "".join(f"{int(a):#x} {o} {int(c)}\n" for a, o, c in zip(address, ops, ts, strict=True)).encode()
    ops = np.where(np.asarray(is_write) != 0, "ST", "LD")
    return "".join(f"{o} {int(a):#x}\n" for a, o in zip(address, ops, strict=True)).encode()


@pytest.mark.unit
def test_the_compiled_lines_are_pythons_to_the_byte():
    rng = np.random.default_rng(0)
    n = 5000
    address = rng.integers(0, 2**63, n).astype(np.uint64)
    address[:5] = [0, 1, 15, 16, 2**64 - 1]
    cycle = rng.integers(0, 10 ** rng.integers(1, 19, n), dtype=np.int64)
    cycle[:4] = [0, 9, 10, (1 << 62) - 1]
    is_write = (rng.random(n) < 0.3).astype(np.uint8)
    for fmt in ("dramsim3", "ramulator"):
        assert text_lines(fmt, cycle, address, is_write) == _python_lines(fmt, cycle, address, is_write)


def _whole(options: dict) -> dict[str, np.ndarray]:
    """The tiny chat trace mapped whole in memory (what `trace convert` did before it streamed)."""
    placement = PoolPlacement(devices=options.get("devices", 1), channels_per_device=4,
                              capacity_per_device_bytes=2**30)
    with LogicalTrace(LOGICAL) as logical:
        streams = map_trace(logical, placement, issue_interval_cycles=3)
    if options.get("device", "all") == "all":
        return {"ts": streams.timestamp_cycles, "address": streams.flat_address(), "w": streams.is_write,
                "src": streams.source}
    picked = streams.select_device(int(options["device"]))
    return {"ts": picked["timestamp_cycles"], "address": picked["address"], "w": picked["is_write"],
            "src": picked["source"]}


@pytest.mark.parametrize("options", [{}, {"devices": 2, "device": "1"}])
@pytest.mark.parametrize("target", ["native", "dramsim3", "ramulator"])
def test_a_logical_trace_converts_in_small_batches_to_what_the_whole_mapping_gave(tmp_path, monkeypatch, target,
                                                                                    options):
    monkeypatch.setattr(TraceMapper, "iter_chunk", functools.partialmethod(TraceMapper.iter_chunk,
                                                                            batch_accesses=97))
    out = tmp_path / ("out.npz" if target == "native" else f"out.{target}")  # a native trace is an .npz
    args = ["trace", "convert", str(LOGICAL), "--to", target, "-o", str(out), "--channels", "4", "--capacity",
            "1GiB", "--issue-interval", "3", "--devices", str(options.get("devices", 1)),
            "--device", options.get("device", "all")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    whole = _whole(options)
    assert f"{len(whole['address']):,} requests" in result.output
    if target == "native":
        written = load_physical_trace(out)
        for name, column in (("ts", written.timestamp_cycles), ("address", written.address),
                             ("w", written.is_write), ("src", written.source)):
            assert np.array_equal(column, whole[name]), name
        assert written.header["issue_interval_cycles"] == 3 and written.header["device"] == options.get("device",
                                                                                                          "all")
    else:
        assert out.read_bytes() == _python_lines(target, whole["ts"], whole["address"], whole["w"])


def test_a_physical_trace_converts_in_small_batches(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(archsim.trace.stream, "BATCH_REQUESTS", 1000)
    source = REPO / "traces" / "stream_hbm2.trace"
    whole = read_trace(source)
    runner = CliRunner()
    for target in ("native", "ramulator"):
        out = tmp_path / ("a.npz" if target == "native" else f"a.{target}")
        assert runner.invoke(main, ["trace", "convert", str(source), "--to", target, "-o", str(out)]).exit_code == 0
        if target == "native":
            back = load_physical_trace(out)
            assert np.array_equal(back.address, whole.address) and np.array_equal(back.timestamp_cycles,
                                                                                  whole.timestamp_cycles)
            assert back.header == {"converted_from": "traces/stream_hbm2.trace", "from_format": "dramsim3",
                                   "sorted_requests": 0}
        else:
            assert out.read_bytes() == _python_lines("ramulator", None, whole.address, whole.is_write)
    # and back from the .npz, read in slices, to DRAMSim3 text: the very file
    again = tmp_path / "b.trace"
    assert runner.invoke(main, ["trace", "convert", str(tmp_path / "a.npz"), "--to", "dramsim3", "-o",
                                str(again)]).exit_code == 0
    assert again.read_bytes() == _python_lines("dramsim3", whole.timestamp_cycles, whole.address, whole.is_write)


def test_a_decreasing_timestamp_late_in_a_text_trace_leaves_nothing(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(archsim.trace.stream, "BATCH_REQUESTS", 100)
    lines = [f"{64 * i:#x} READ {i}\n" for i in range(1000)]
    lines[900] = "0x0 READ 3\n"
    (tmp_path / "late.trace").write_text("".join(lines))
    out = tmp_path / "out.npz"
    result = CliRunner().invoke(main, ["trace", "convert", str(tmp_path / "late.trace"), "--to", "native", "-o",
                                       str(out)])
    assert result.exit_code == 2 and "line 901" in result.output and "--sort" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["late.trace"]


def test_an_npz_written_in_batches_is_the_one_written_whole(tmp_path: Path):
    from archsim.trace.native import PhysicalTraceWriter

    rng = np.random.default_rng(1)
    n = 10_000
    columns = (np.sort(rng.integers(0, 10**6, n)), rng.integers(0, 2**40, n).astype(np.uint64),
               (rng.random(n) < 0.3).astype(np.uint8), (rng.random(n) < 0.5).astype(np.uint8))
    save_physical_trace(tmp_path / "whole.npz", *columns, header={"k": 1})
    with open(tmp_path / "parts.npz", "wb") as handle, PhysicalTraceWriter(handle, {"k": 1}) as writer:
        for part in np.array_split(np.arange(n), 7):
            writer.add(*(c[part] for c in columns))
        writer.finish()
    a, b = load_physical_trace(tmp_path / "whole.npz"), load_physical_trace(tmp_path / "parts.npz")
    for name in ("timestamp_cycles", "address", "is_write", "source"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    with np.load(tmp_path / "parts.npz") as data:
        assert json.loads(bytes(data["header"]))["requests"] == n
