"""Progress bars: every long command asks `archsim.progress.progress_bar` for one, counts up to its total, and
asks for none with --quiet (the bar itself shows only on a terminal, after 2 s: `progress.py`)."""

import pytest
from click.testing import CliRunner

from archsim import progress
from archsim.cli import main
from tests.conftest import REPO

pytestmark = pytest.mark.component


class _Recorder:
    def __init__(self, calls: list, total, unit: str, desc: str, quiet: bool) -> None:
        self.calls = calls
        self.entry = {"total": total, "unit": unit, "desc": desc, "quiet": quiet, "counted": 0, "closed": False}
        calls.append(self.entry)

    def update(self, n: int = 1) -> None:
        self.entry["counted"] += n

    def close(self) -> None:
        self.entry["closed"] = True

    def set_postfix_str(self, text: str = "", refresh: bool = True) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture
def bars(monkeypatch):
    calls: list = []
    monkeypatch.setattr(progress, "progress_bar",
                        lambda total, unit, desc, quiet=False: _Recorder(calls, total, unit, desc, quiet))
    return calls


def test_pnm_run_counts_every_instruction_of_the_timed_units(bars, tmp_path):
    args = ["pnm", "run", "--kernel", str(REPO / "isa/kernels/gqa_decode.s"), "--memory",
            str(REPO / "configs/memory/hbm3.yaml"), "--shape", "heads=8,kv_heads=2,head_dim=64,context=512,batch=1",
            "--units", "2", "--json", str(tmp_path / "p.json")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    (bar,) = [b for b in bars if b["desc"] == "pnm run"]
    assert bar["unit"] == "instr" and not bar["quiet"] and bar["closed"]
    assert bar["total"] > 0 and bar["counted"] == bar["total"]
    bars.clear()
    assert CliRunner().invoke(main, [*args, "--quiet"]).exit_code == 0
    assert all(b["quiet"] for b in bars if b["desc"] == "pnm run")


def test_trace_convert_counts_every_record(bars, tmp_path):
    trace = REPO / "traces" / "tiny-llama_chat.npz"
    result = CliRunner().invoke(main, ["trace", "convert", str(trace), "--to", "native", "-o",
                                       str(tmp_path / "out.npz")])
    assert result.exit_code == 0, result.output
    (bar,) = [b for b in bars if b["desc"] == "convert"]
    assert bar["unit"] == "record" and bar["total"] > 0 and bar["counted"] == bar["total"] and bar["closed"]


@pytest.mark.parametrize("trace", ["traces/stream_hbm2.trace", "traces/kv_decode_hbm3.npz"])
def test_a_streaming_replay_counts_every_request(bars, tmp_path, trace):
    args = ["replay", str(REPO / trace), "--memory", str(REPO / "configs/memory/hbm3.yaml"), "--json",
            str(tmp_path / "s.json")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    (bar,) = [b for b in bars if b["desc"] == "replay"]
    requests = {"traces/stream_hbm2.trace": 20_000, "traces/kv_decode_hbm3.npz": 131_200}[trace]
    assert bar["unit"] == "req" and bar["counted"] == requests and bar["closed"] and not bar["quiet"]
    assert bar["total"] == (None if trace.endswith(".trace") else requests)  # a text trace's length is unknown
    bars.clear()
    assert CliRunner().invoke(main, [*args, "--quiet"]).exit_code == 0
    assert all(b["quiet"] for b in bars)
