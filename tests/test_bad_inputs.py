"""A table of bad inputs per command: each is exit code 2 and one line on stderr naming the file (or option)
and the key or line, with no output file created. An unexpected exception exits 3 ("internal error"), which
fails these tests like any other wrong exit code."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from archsim.cli import main
from archsim.trace.native import save_physical_trace
from tests.conftest import DRAMSIM3_INI, REPO

pytestmark = pytest.mark.system

HBM2 = str(REPO / "configs" / "memory" / "hbm2.yaml")
HBM3 = str(REPO / "configs" / "memory" / "hbm3.yaml")
SMALL = ["--workload", "llama3-8b-b1", "--contexts", "4K", "--quiet"]
SHAPE = "heads=8,kv_heads=2,head_dim=128,context=256,batch=1"


def _files(tmp: Path) -> None:
    """The bad inputs, written into tmp (names are what the messages must contain)."""
    (tmp / "ok.trace").write_text("".join(f"{64 * i:#x} READ {i}\n" for i in range(8)))
    (tmp / "dec.trace").write_text("# a comment\n0x0 READ 5\n\n0x40 READ 2\n")
    (tmp / "big.trace").write_text("0x0 READ 0\n0x40 READ 100000000000000000000000\n")
    (tmp / "bin.dat").write_bytes(b"0x0 READ 0\n" + bytes(range(256)) * 8)
    (tmp / "dup.yaml").write_text("memory:\n  preset: HBM2\n  controller:\n    read_queue_depth: 8\n"
                                  "    read_queue_depth: 9\n")
    (tmp / "deep.yaml").write_text("memory:\n  preset: HBM2\n  controller:\n    read_queue_depth: 100000000000\n")
    (tmp / "empty.yaml").write_text("# nothing\n")
    (tmp / "empty.s").write_text("; only a comment\n\n")
    (tmp / "bin.s").write_bytes(b"    HALT\n\x00\x01\x02binary\n")
    shutil.copy(REPO / "isa" / "kernels" / "gqa_decode.s", tmp / "k.s")
    shutil.copy(REPO / "isa" / "kernels" / "common.inc", tmp / "common.inc")
    shutil.copy(REPO / "isa" / "kernels" / "contiguous.inc", tmp / "contiguous.inc")
    workload = (REPO / "configs" / "workloads" / "llama3-8b-b1.yaml").read_text()
    (tmp / "dupwork.yaml").write_text(workload + "\nworkload:\n  batch: 2\n")
    pnm = (REPO / "configs" / "pnm" / "default.yaml").read_text()
    (tmp / "duppnm.yaml").write_text(pnm + "\npnm:\n  memory: x.yaml\n")
    (tmp / "bad.ini").write_bytes(DRAMSIM3_INI.read_bytes()[:200] + b"\x00\xff\xfe")
    save_physical_trace(tmp / "dec.npz", np.array([0, 9, 3], dtype=np.int64), np.array([0, 64, 128], dtype=np.uint64),
                        np.zeros(3, dtype=np.uint8))
    os.symlink(tmp / "loop.b", tmp / "loop.a")
    os.symlink(tmp / "loop.a", tmp / "loop.b")
    (tmp / "adir").mkdir()


# (id, argument list with {t} for the temp dir, texts the one error line must contain)
CASES = [
    # replay
    ("replay dup key", ["replay", "{t}/ok.trace", "--memory", "{t}/dup.yaml", "--json", "{t}/out.json"],
     ["dup.yaml", "memory.controller.read_queue_depth (line 5)", "first on line 4"]),
    ("replay decreasing", ["replay", "{t}/dec.trace", "--memory", HBM2, "--json", "{t}/out.json"],
     ["dec.trace", "line 4", "--sort"]),
    ("replay decreasing npz", ["replay", "{t}/dec.npz", "--memory", HBM2, "--json", "{t}/out.json"],
     ["dec.npz", "request 2"]),
    ("replay cycle 1e23", ["replay", "{t}/big.trace", "--memory", HBM2, "--json", "{t}/out.json"],
     ["big.trace", "line 2", "4,611,686,018,427,387,903"]),
    ("replay queue 1e11", ["replay", "{t}/ok.trace", "--memory", "{t}/deep.yaml", "--json", "{t}/out.json"],
     ["deep.yaml", "memory.controller.read_queue_depth", "65,536"]),
    ("replay empty --set", ["replay", "{t}/ok.trace", "--memory", HBM2, "--set", "", "--json", "{t}/out.json"],
     ["--set", "empty"]),
    ("replay trace loop", ["replay", "{t}/loop.a", "--memory", HBM2, "--json", "{t}/out.json"],
     ["loop.a", "symbolic link loop"]),
    ("replay trace dir", ["replay", "{t}/adir", "--memory", HBM2, "--json", "{t}/out.json"], ["adir", "directory"]),
    ("replay trace binary", ["replay", "{t}/bin.dat", "--memory", HBM2, "--json", "{t}/out.json"],
     ["bin.dat", "binary"]),
    ("replay memory binary", ["replay", "{t}/ok.trace", "--memory", "{t}/bin.dat", "--json", "{t}/out.json"],
     ["bin.dat", "line 2", "binary"]),
    ("replay memory loop", ["replay", "{t}/ok.trace", "--memory", "{t}/loop.a", "--json", "{t}/out.json"],
     ["loop.a", "symbolic link loop"]),
    ("replay memory dir", ["replay", "{t}/ok.trace", "--memory", "{t}/adir", "--json", "{t}/out.json"],
     ["adir", "directory"]),
    ("replay memory empty", ["replay", "{t}/ok.trace", "--memory", "{t}/empty.yaml", "--json", "{t}/out.json"],
     ["empty.yaml", "memory"]),
    # config
    ("config show dup key", ["config", "show", "{t}/dup.yaml"], ["dup.yaml", "line 5"]),
    ("import binary ini", ["config", "import-dramsim3", "{t}/bad.ini", "-o", "{t}/out.yaml"], ["bad.ini", "binary"]),
    ("import loop", ["config", "import-dramsim3", "{t}/loop.a", "-o", "{t}/out.yaml"], ["loop.a", "loop"]),
    # compare / simulate
    ("compare empty contexts", ["compare", "gpu-hbm", "--workload", "llama3-8b-b1", "--contexts", "", "--json",
                                "{t}/out.json"], ["--contexts", "empty"]),
    ("compare empty context part", ["compare", "gpu-hbm", "--workload", "llama3-8b-b1", "--contexts", "4K,,32K",
                                    "--json", "{t}/out.json"], ["--contexts", "4K,,32K"]),
    ("compare workload dup key", ["compare", "gpu-hbm", "--workload", "{t}/dupwork.yaml", "--json", "{t}/out.json"],
     ["dupwork.yaml", "workload", "given twice"]),
    ("compare workload binary", ["compare", "gpu-hbm", "--workload", "{t}/bin.dat", "--json", "{t}/out.json"],
     ["bin.dat", "binary"]),
    ("simulate empty --set", ["simulate", "gpu-hbm", *SMALL, "--set", "", "--json", "{t}/out.json"], ["--set"]),
    ("simulate --set without =", ["simulate", "gpu-hbm", *SMALL, "--set", "system.gpus.count", "--json",
                                  "{t}/out.json"], ["--set", "'system.gpus.count' is not of the form"]),
    ("simulate workload --set without =", ["simulate", "gpu-hbm", *SMALL, "--set", "workload.batch", "--json",
                                           "{t}/out.json"], ["--set", "'workload.batch' is not of the form"]),
    ("compare --set without =", ["compare", "gpu-hbm", "--workload", "llama3-8b-b1", "--set", "system.serving.router",
                                 "--json", "{t}/out.json"], ["--set", "'system.serving.router' is not of the form"]),
    ("simulate window bare number", ["simulate", "gpu-hbm", *SMALL, "--timeline", "{t}/out.tl.json",
                                     "--timeline-window", "0:2", "--json", "{t}/out.json"],
     ["--timeline-window", "give the unit"]),
    ("simulate system loop", ["simulate", "{t}/loop.a", *SMALL, "--json", "{t}/out.json"], ["loop.a", "loop"]),
    ("simulate trace binary", ["simulate", "gpu-hbm", "--trace", "{t}/bin.dat", "--json", "{t}/out.json"],
     ["bin.dat"]),
    # isa
    ("asm empty program", ["isa", "asm", "{t}/empty.s", "-o", "{t}/out.bin"], ["empty.s", "no instructions"]),
    ("asm binary source", ["isa", "asm", "{t}/bin.s", "-o", "{t}/out.bin"], ["bin.s", "line 2", "binary"]),
    ("asm loop", ["isa", "asm", "{t}/loop.a", "-o", "{t}/out.bin"], ["loop.a", "loop"]),
    ("asm empty define", ["isa", "asm", "{t}/k.s", "-D", "", "-o", "{t}/out.bin"], ["--define", "empty"]),
    ("disasm text as binary", ["isa", "disasm", "{t}/k.s", "-o", "{t}/out.s"], ["k.s"]),
    ("disasm loop", ["isa", "disasm", "{t}/loop.a", "-o", "{t}/out.s"], ["loop.a", "loop"]),
    # pnm
    ("pnm context 2^40", ["pnm", "run", "--kernel", "{t}/k.s", "--memory", HBM3, "--shape",
                          "heads=8,kv_heads=2,head_dim=128,context=1099511627776", "--json", "{t}/out.json"],
     ["--shape context", "2,147,483,647"]),
    ("pnm empty shape", ["pnm", "run", "--kernel", "{t}/k.s", "--memory", HBM3, "--shape", "", "--json",
                         "{t}/out.json"], ["--shape", "empty"]),
    ("pnm empty kernel", ["pnm", "run", "--kernel", "{t}/empty.s", "--memory", HBM3, "--shape", SHAPE, "--json",
                          "{t}/out.json"], ["empty.s", "no instructions"]),
    ("pnm config dup key", ["pnm", "run", "--kernel", "{t}/k.s", "--pnm", "{t}/duppnm.yaml", "--shape", SHAPE,
                            "--json", "{t}/out.json"], ["duppnm.yaml", "pnm", "given twice"]),
    ("pnm memory dup key", ["pnm", "run", "--kernel", "{t}/k.s", "--memory", "{t}/dup.yaml", "--shape", SHAPE,
                            "--json", "{t}/out.json"], ["dup.yaml", "line 5"]),
    # trace
    ("info loop", ["trace", "info", "{t}/loop.a"], ["loop.a", "symbolic link loop"]),
    ("info binary", ["trace", "info", "{t}/bin.dat"], ["bin.dat", "binary"]),
    ("info decreasing", ["trace", "info", "{t}/dec.trace"], ["dec.trace", "line 4"]),
    ("convert decreasing", ["trace", "convert", "{t}/dec.trace", "--to", "native", "-o", "{t}/out.npz"],
     ["dec.trace", "line 4", "--sort"]),
    ("convert loop", ["trace", "convert", "{t}/loop.a", "--to", "native", "-o", "{t}/out.npz"], ["loop.a", "loop"]),
    ("convert interval overflow", ["trace", "convert", str(REPO / "traces" / "tiny-llama_chat.npz"), "--to", "native",
                                   "--issue-interval", str(2**62), "-o", "{t}/out.npz"],
     ["--issue-interval", "4,611,686,018,427,387,903"]),
    ("generate batch 1e11", ["trace", "generate", "--model", "tiny-llama", "--workload", "decode", "--batch",
                             "100000000000", "-o", "{t}/out.npz"], ["batch", "2,147,483,647"]),
    ("generate empty model", ["trace", "generate", "--model", "", "--workload", "decode", "-o", "{t}/out.npz"],
     ["--model", "empty"]),
]


@pytest.mark.parametrize(("args", "needles"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_naming_it(tmp_path: Path, args: list[str], needles: list[str]) -> None:
    _files(tmp_path)
    before = sorted(os.listdir(tmp_path))
    result = CliRunner().invoke(main, [a.replace("{t}", str(tmp_path)) for a in args])
    assert result.exit_code == 2, (result.exit_code, result.output)  # 3 would be an internal error
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("archsim: error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert sorted(os.listdir(tmp_path)) == before  # no output, no temp file


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_an_unreadable_input_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "secret.trace"
    path.write_text("0x0 READ 0\n")
    path.chmod(0)
    result = CliRunner().invoke(main, ["replay", str(path), "--memory", HBM2])
    assert result.exit_code == 2 and "secret.trace" in result.stderr and "permission" in result.stderr


def test_an_unexpected_exception_is_an_internal_error_exit_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import archsim.trace.info as info

    def broken(_path: object) -> None:
        raise RuntimeError("something\nbroke")

    monkeypatch.setattr(info, "summarize", broken)
    trace = tmp_path / "t.trace"
    trace.write_text("0x0 READ 0\n")
    result = CliRunner().invoke(main, ["trace", "info", str(trace)])
    assert result.exit_code == 3
    assert result.stderr.strip() == ("archsim: internal error: RuntimeError: something broke "
                                     "(a bug; ARCHSIM_DEBUG=1 shows the traceback)")
    monkeypatch.setenv("ARCHSIM_DEBUG", "1")
    assert isinstance(CliRunner().invoke(main, ["trace", "info", str(trace)]).exception, RuntimeError)


def test_sort_orders_stably_and_says_so(tmp_path: Path) -> None:
    _files(tmp_path)
    out = tmp_path / "sorted.trace"
    result = CliRunner().invoke(main, ["trace", "convert", str(tmp_path / "dec.trace"), "--to", "dramsim3", "--sort",
                                       "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text() == "0x40 READ 2\n0x0 READ 5\n" and "2 requests moved" in result.output
    result = CliRunner().invoke(main, ["replay", str(tmp_path / "dec.trace"), "--memory", HBM2, "--sort", "--quiet",
                                       "--json", str(tmp_path / "r.json")])
    assert result.exit_code == 0 and "2 of 2 requests moved" in result.stderr
    assert json.loads((tmp_path / "r.json").read_text())["sim"]["requests"] == 2


@pytest.mark.parametrize(("name", "kind"), [
    ("stream_hbm2.trace", "physical trace (dramsim3), 20,000 requests"),
    ("kv_decode_hbm3.npz", "physical trace (npz), 131,200 requests"),
    ("tiny-llama_chat.npz", "logical trace v1"),
    ("qwen2.5-0.5b_2l_decode.npz", "logical trace v1"),
])
def test_trace_info_recognizes_every_shipped_trace(name: str, kind: str) -> None:
    result = CliRunner().invoke(main, ["trace", "info", str(REPO / "traces" / name)])
    assert result.exit_code == 0, result.output
    assert kind in result.output


def test_trace_info_and_auto_format_read_ramulator_text(tmp_path: Path) -> None:
    from archsim.trace.text_formats import detect_format

    path = tmp_path / "r.trace"
    path.write_text("LD 0x40\nST 0x80\n")
    assert detect_format(path) == "ramulator"
    info = json.loads(CliRunner().invoke(main, ["trace", "info", str(path), "--json"]).output)
    assert info["file_format"] == "ramulator" and info["reads"] == 1 and info["writes"] == 1
