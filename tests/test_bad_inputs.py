"""A table of bad inputs per command: each is exit code 2 and one line on stderr naming the file (or option)
and the key or line, with no output file created. An unexpected exception exits 3 ("internal error"), which
fails these tests like any other wrong exit code."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from archsim.cli import main
from archsim.trace.native import save_physical_trace
from tests.conftest import DRAMSIM3_INI, REPO

pytestmark = pytest.mark.system

SCENARIOS = REPO / "configs" / "scenarios"
SWEEP = {"name": "x", "command": "simulate", "inputs": {"system": "gpu-hbm", "workload": "llama3-8b-b1",
                                                        "contexts": "4K"},
         "axes": {"system.gpus.count": [1, 2]}, "objectives": [{"key": "decode_step_ns", "goal": "minimize"}]}
HAVE_TORCH = importlib.util.find_spec("torch") is not None
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
    (tmp / "sram.s").write_text(f".sram BUF, {2**62}\n    HALT\n")
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
    _more_files(tmp)


MOONCAKE_LINE = '{"timestamp": 0, "input_length": 600, "output_length": 20, "hash_ids": [0, 1]}'


def _mooncake(tmp: Path, name: str, lines: list[str]) -> None:
    """A Mooncake trace `name`.jsonl and the scenario `name`.yaml that serves it."""
    (tmp / f"{name}.jsonl").write_text("".join(f"{line}\n" for line in lines))
    tree = yaml.safe_load((SCENARIOS / "mooncake-sample.yaml").read_text())
    tree["scenario"]["requests"]["trace"] = f"{name}.jsonl"
    (tmp / f"{name}.yaml").write_text(yaml.safe_dump(tree))


def _edited(src: Path, dst: Path, edit) -> None:  # noqa: ANN001 - edit(tree) changes a YAML or JSON tree
    tree = json.loads(src.read_text()) if src.suffix == ".json" else yaml.safe_load(src.read_text())
    edit(tree)
    dst.write_text(json.dumps(tree) if dst.suffix == ".json" else yaml.safe_dump(tree, sort_keys=False))


def _logical_with_manifest(tmp: Path, name: str, edit) -> None:  # noqa: ANN001 - edit(manifest)
    with zipfile.ZipFile(REPO / "traces" / "tiny-llama_chat.npz") as src, zipfile.ZipFile(tmp / name, "w") as out:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "manifest.json":
                manifest = json.loads(data)
                edit(manifest)
                data = json.dumps(manifest).encode()
            out.writestr(info, data)


def _more_files(tmp: Path) -> None:
    """The second wave's inputs: request traces, scenarios, report trees, damaged manifests, sweep specs."""
    good = [MOONCAKE_LINE] * 3
    _mooncake(tmp, "blank", [MOONCAKE_LINE, "", MOONCAKE_LINE, MOONCAKE_LINE])
    twice = MOONCAKE_LINE.replace('{"timestamp": 0', '{"timestamp": 0, "timestamp": 1')
    _mooncake(tmp, "dupkey", [MOONCAKE_LINE, twice, MOONCAKE_LINE])
    _mooncake(tmp, "bighash", [MOONCAKE_LINE, MOONCAKE_LINE.replace("[0, 1]", f"[{2**70}, 1]"), MOONCAKE_LINE])
    _mooncake(tmp, "late", [MOONCAKE_LINE, MOONCAKE_LINE.replace('"timestamp": 0', '"timestamp": 1e300')] * 2)
    longout = MOONCAKE_LINE.replace('"output_length": 20', f'"output_length": {2**70}')
    _mooncake(tmp, "longout", [MOONCAKE_LINE, longout])
    _mooncake(tmp, "good", good)
    (tmp / "t.jsonl").write_text(MOONCAKE_LINE + "\n")
    for csv in SCENARIOS.glob("*.csv"):
        shutil.copy(csv, tmp / csv.name)
    (tmp / "e.csv").write_text("turns,weight\n1,1\n2,1\n")
    multiturn = SCENARIOS / "multiturn.yaml"
    _edited(multiturn, tmp / "s-out.yaml", lambda t: t["scenario"]["output"].update(value=2**70))
    _edited(multiturn, tmp / "s-rate.yaml", lambda t: t["scenario"]["arrivals"].update(rate_per_s=1e-300))
    _edited(multiturn, tmp / "s-name.yaml", lambda t: t["scenario"].update(name="  "))
    _edited(multiturn, tmp / "s-csv.yaml", lambda t: t["scenario"]["sessions"].update(turns={"dist": "empirical",
                                                                                             "file": "e.csv"}))
    workload = REPO / "configs" / "workloads" / "llama3-8b-b1.yaml"
    _edited(workload, tmp / "w-ctx.yaml", lambda t: t["workload"].update(contexts=[0]))
    _edited(workload, tmp / "w-layers.yaml", lambda t: t["workload"].update(layers=1000))
    gpu = REPO / "configs" / "gpus" / "h100.yaml"

    def gpu_nan(tree: dict) -> None:
        tree["gpu"]["gemm"]["overlap_exponent"] = float("nan")
        calibration = tree["gpu"]["calibration"]
        data = REPO / "configs" / "gpus"
        calibration["layers"] = [str(data / f) for f in calibration["layers"]]
        calibration["allreduce"] = str(data / calibration["allreduce"])

    _edited(gpu, tmp / "g.yaml", gpu_nan)
    with zipfile.ZipFile(tmp / "m-list.npz", "w") as z:
        z.writestr("manifest.json", "[1, 2]")
    _logical_with_manifest(tmp, "m-chunks.npz", lambda m: m.update(chunks=5))
    _logical_with_manifest(tmp, "m-model.npz", lambda m: m.update(model=5))
    system = {"schema": "archsim.system/2", "results": [{"system": "a", "context": 4096, "status": "ok",
                                                         "decode_step_ns": 1.0}]}
    (tmp / "c.json").write_text(json.dumps(system))
    (tmp / "ctx.json").write_text(json.dumps({**system, "results": [{**system["results"][0], "context": "lots"}]}))
    (tmp / "dup.json").write_text('{"schema": "archsim.system/2", "schema": "x", "results": []}')
    (tmp / "nan.json").write_text('{"schema": "archsim.system/2", "results": [{"system": "a", "context": 1, '
                                  '"status": "ok", "decode_step_ns": NaN}]}')
    stats = REPO / "tests" / "data" / "report_stats.json"
    _edited(stats, tmp / "ragged.json", lambda t: t["memory"]["banks"].update(row_misses=[[1, 2], [3]]))
    _edited(stats, tmp / "chan.json", lambda t: t["memory"].update(channels={"x": {}}))
    (tmp / "jdir").mkdir()
    shutil.copy(tmp / "c.json", tmp / "jdir" / "c.json")
    os.mkfifo(tmp / "pipe")
    (tmp / "sw-name.yaml").write_text(yaml.safe_dump({"sweep": {**SWEEP, "name": "../../x"}}))
    (tmp / "sw-dup.yaml").write_text(yaml.safe_dump({"sweep": {**SWEEP, "axes": {"system.gpus.count": [1, 1]}}}))
    (tmp / "sw-nan.yaml").write_text(yaml.safe_dump({"sweep": {**SWEEP, "axes": {
        "system.gpus.count": {"range": [1, float("nan"), 1]}}}}))
    (tmp / "sw-bad.yaml").write_text(yaml.safe_dump({"sweep": {**SWEEP, "axes": {"system.gpus.count": [1, -2]}}}))
    (tmp / "sw-sys.yaml").write_text(yaml.safe_dump({"sweep": {**SWEEP, "inputs": {**SWEEP["inputs"],
                                                                                  "system": "nosys"}}}))
    (tmp / "sw-big.yaml").write_text(yaml.safe_dump({"sweep": {**SWEEP, "axes": {
        "system.gpus.count": {"log_range": [1, 8, 10**15]}}}}))
    (tmp / "sw-grid.yaml").write_text(yaml.safe_dump({"sweep": {**SWEEP, "axes": {
        "system.gpus.count": list(range(1, 10**4)), "workload.batch": list(range(1, 10**4)),
        "workload.decode_steps": list(range(1, 10**4))}}}))
    (tmp / "sw.yaml").write_text(yaml.safe_dump({"sweep": SWEEP}))
    (tmp / "nested.yaml").write_text("memory: " + "[" * 100_000 + "]" * 100_000 + "\n")  # libyaml's C stack
    (tmp / "nested.json").write_text('{"schema": "archsim.gpu/1", "results": ' + "[" * 100_000 + "]" * 100_000 + "}")
    _edited(SCENARIOS / "mooncake-sample.yaml", tmp / "nul.yaml",
            lambda t: t["scenario"]["requests"].update(trace="a\0b.jsonl"))
    ini = DRAMSIM3_INI.read_text()
    (tmp / "ddr9.ini").write_text(re.sub(r"protocol = \w+", "protocol = DDR9", ini))
    (tmp / "tck0.ini").write_text(re.sub(r"tCK = [\d.]+", "tCK = 0", ini))
    (tmp / "width0.ini").write_text(re.sub(r"device_width = \d+", "device_width = 0", ini))
    (tmp / "rowsinf.ini").write_text(re.sub(r"\nrows = \d+", "\nrows = inf", ini))


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
    # -- options: beyond int64 or not finite, whatever the command; seeds are non-negative
    ("serve --requests 2^70", ["serve", "gpu-hbm", "--scenario", "multiturn", "--requests", str(2**70)],
     ["--requests", "9,223,372,036,854,775,807"]),
    ("serve --seed -1", ["serve", "gpu-hbm", "--scenario", "multiturn", "--seed", "-1"], ["--seed"]),
    ("sweep --connect-timeout nan", ["sweep", "{t}/sw.yaml", "--connect-timeout", "nan"],
     ["--connect-timeout", "finite"]),
    ("replay --timeline-requests 2^70", ["replay", "{t}/ok.trace", "--memory", HBM2, "--timeline", "{t}/out.json",
                                         "--timeline-requests", str(2**70)], ["--timeline-requests"]),
    # -- outputs: an input found while running, a suffix of another format
    ("serve --requests-out = the scenario's trace", ["serve", "gpu-hbm", "--scenario", "{t}/good.yaml", "--requests",
                                                      "3", "--quiet", "--requests-out", "{t}/good.jsonl"],
     ["good.jsonl", "--requests-out", "input"]),
    ("serve --json = a length table", ["serve", "gpu-hbm", "--scenario", "{t}/s-csv.yaml", "--requests", "3",
                                       "--quiet", "--json", "{t}/e.csv"], ["e.csv", "--json", "input"]),
    ("from-scenario -o = its trace", ["trace", "from-scenario", "{t}/good.yaml", "--requests", "3", "-o",
                                      "{t}/good.jsonl"], ["good.jsonl", "--output", "input"]),
    ("asm -o = an include", ["isa", "asm", "{t}/k.s", "-o", "{t}/common.inc"], ["common.inc", "--output", "input"]),
    ("pnm --json = an include", ["pnm", "run", "--kernel", "{t}/k.s", "--memory", HBM3, "--shape", SHAPE,
                                 "--quiet", "--json", "{t}/contiguous.inc"], ["contiguous.inc", "--json", "input"]),
    ("report -o = a json of its directory", ["report", "{t}/jdir", "-o", "{t}/jdir/c.json"],
     ["c.json", "--output", "input"]),
    ("replay --json .png", ["replay", "{t}/ok.trace", "--memory", HBM2, "--json", "{t}/out.png"],
     ["out.png", "--json", ".json"]),
    ("compare --timeline .txt", ["compare", "gpu-hbm", *SMALL, "--timeline", "{t}/out.txt"], ["--timeline", ".json"]),
    ("convert native .trace", ["trace", "convert", str(REPO / "traces" / "tiny-llama_chat.npz"), "--to", "native",
                               "-o", "{t}/out.trace"], ["--output", ".npz"]),
    ("report -o .png", ["report", "{t}/c.json", "-o", "{t}/out.png"], ["--output", ".html"]),
    # -- --set keys
    ("replay --set empty key part", ["replay", "{t}/ok.trace", "--memory", HBM2, "--set", "memory..timing=1"],
     ["--set", "memory..timing=1"]),
    ("replay --set empty key", ["replay", "{t}/ok.trace", "--memory", HBM2, "--set", "=5"], ["--set", "'=5'"]),
    # -- Mooncake JSONL lines
    ("serve jsonl blank line", ["serve", "gpu-hbm", "--scenario", "{t}/blank.yaml", "--requests", "3"],
     ["blank.jsonl", "line 2", "blank line"]),
    ("serve jsonl key twice", ["serve", "gpu-hbm", "--scenario", "{t}/dupkey.yaml", "--requests", "3"],
     ["dupkey.jsonl", "line 2", "'timestamp' given twice"]),
    ("serve jsonl hash id 2^70", ["serve", "gpu-hbm", "--scenario", "{t}/bighash.yaml", "--requests", "3"],
     ["bighash.jsonl", "line 2", "hash_ids"]),
    ("serve jsonl timestamp 1e300", ["serve", "gpu-hbm", "--scenario", "{t}/late.yaml", "--requests", "3"],
     ["late.jsonl", "line 2", "9,223,372,036,854,775,807 ns"]),
    ("serve jsonl output 2^70", ["serve", "gpu-hbm", "--scenario", "{t}/longout.yaml", "--requests", "2"],
     ["longout.jsonl", "line 2", "output_length", "2,147,483,647"]),
    ("info jsonl blank line", ["trace", "info", "{t}/blank.jsonl"], ["blank.jsonl", "line 2", "blank line"]),
    ("replay a request trace", ["replay", "{t}/t.jsonl", "--memory", HBM2], ["t.jsonl", "request trace"]),
    ("convert a request trace", ["trace", "convert", "{t}/t.jsonl", "--to", "native", "-o", "{t}/out.npz"],
     ["t.jsonl", "request trace"]),
    # -- scenarios: counts and rates beyond what the tables or the machine hold
    ("serve output 2^70", ["serve", "gpu-hbm", "--scenario", "{t}/s-out.yaml", "--requests", "3"],
     ["s-out.yaml", "scenario.output.value", "2,147,483,647"]),
    ("serve rate 1e-300", ["serve", "gpu-hbm", "--scenario", "{t}/s-rate.yaml", "--requests", "3"],
     ["s-rate.yaml", "scenario.arrivals.rate_per_s"]),
    ("serve blank name", ["serve", "gpu-hbm", "--scenario", "{t}/s-name.yaml", "--requests", "3"],
     ["s-name.yaml", "scenario.name"]),
    ("serve --requests 10^15", ["serve", "gpu-hbm", "--scenario", "multiturn", "--requests", str(10**15)],
     ["--requests", "of memory"]),
    ("serve --duration 1e30s", ["serve", "gpu-hbm", "--scenario", "multiturn", "--duration", "1e30s"],
     ["--duration"]),
    ("plan --requests 10^15", ["plan", "g25", "--scenario", "multiturn", "--requests", str(10**15)],
     ["--requests", "of memory"]),
    ("from-scenario --duration 1e30s", ["trace", "from-scenario", "multiturn", "--duration", "1e30s", "-o",
                                        "{t}/out.jsonl"], ["--duration"]),
    ("serve kv.tiers named, not kv.location", ["serve", "gpu-hbm", "--scenario", "multiturn", "--set",
                                               "system.kv.location=null", "--set",
                                               "system.kv.tiers=[{kind: tape, capacity: 1TB, endpoint: gpu}]"],
     ["gpu-hbm.yaml", "system.kv.tiers[0].kind", "tape"]),
    # -- systems, workloads, contexts
    ("simulate contexts beyond int32", ["simulate", "gpu-hbm", "--workload", "llama3-8b-b1", "--contexts",
                                        "99999999999999999999999K"], ["--contexts", "2,147,483,647"]),
    ("simulate workload context 0", ["simulate", "gpu-hbm", "--workload", "{t}/w-ctx.yaml"],
     ["w-ctx.yaml", "workload.contexts[0]"]),
    ("simulate workload layers beyond", ["simulate", "gpu-hbm", "--workload", "{t}/w-layers.yaml"],
     ["w-layers.yaml", "workload.layers", "decoder layers"]),
    ("simulate pool devices 10^12", ["simulate", "g25", *SMALL, "--set", "system.pool.devices=1000000000000"],
     ["g25.yaml", "system.pool.devices", "address_map.ways"]),
    ("simulate unknown energy table", ["simulate", "g25", *SMALL, "--set", "system.energy=nope"],
     ["g25.yaml", "system.energy", "nope"]),
    ("simulate manifest not an object", ["simulate", "gpu-hbm", "--trace", "{t}/m-list.npz"],
     ["m-list.npz", "manifest.json", "JSON object"]),
    # -- nesting and paths no reader can follow
    ("replay memory nested 100,000 deep", ["replay", "{t}/ok.trace", "--memory", "{t}/nested.yaml"],
     ["nested.yaml", "line 1", "nested about 100,001 levels"]),
    ("report JSON nested 100,000 deep", ["report", "{t}/nested.json", "-o", "{t}/out.html"],
     ["nested.json", "nested"]),
    ("serve trace path with a NUL", ["serve", "gpu-hbm", "--scenario", "{t}/nul.yaml", "--requests", "2"],
     ["nul.yaml", "scenario.requests.trace", "NUL", "a\\0b.jsonl"]),
    # -- gpu predict
    ("gpu --tokens 10^30", ["gpu", "predict", "--shape", "hidden=8192,heads=64,kv_heads=8,ffn=28672", "--tokens",
                            str(10**30), "--tp", "1"], ["--tokens", "9,223,372,036,854,775,807"]),
    ("gpu --shape hidden 10^30", ["gpu", "predict", "--shape", f"hidden={10**30},heads=64,kv_heads=8,ffn=28672",
                                  "--tokens", "1", "--tp", "1"], ["--shape hidden"]),
    ("gpu preset NaN", ["gpu", "predict", "--shape", "hidden=8192,heads=64,kv_heads=8,ffn=28672", "--tokens", "1",
                        "--tp", "1", "--gpu", "{t}/g.yaml"], ["g.yaml", "gpu.gemm.overlap_exponent", "finite"]),
    # -- plan grids
    ("plan grid NaN", ["plan", "g25", "--workload", "llama3-8b-b1", "--validate", "--grid", "links=nan"],
     ["--grid", "finite"]),
    ("plan grid axis twice", ["plan", "g25", "--workload", "llama3-8b-b1", "--validate", "--grid",
                              "batches=1;batches=2"], ["--grid", "batches is given twice"]),
    # -- pnm run: shapes and scratchpads beyond the memory
    ("pnm batch 2^31-1", ["pnm", "run", "--kernel", "{t}/k.s", "--memory", HBM3, "--shape", SHAPE[:-1] + "2147483647"],
     ["--shape", "KV cache", "17,179,869,184"]),
    ("pnm heads beyond the kernel", ["pnm", "run", "--kernel", "{t}/k.s", "--memory", HBM3, "--shape",
                                     "heads=2147483647,kv_heads=1,head_dim=128,context=256"],
     ["common.inc", "line", "--shape heads=2147483647"]),
    ("pnm scratchpad 1000TiB", ["pnm", "run", "--kernel", "{t}/k.s", "--memory", HBM3, "--shape", SHAPE, "--set",
                                "pnm.sram.capacity=1000TiB"], ["default.yaml", "pnm.sram.capacity", "4,294,967,295"]),
    ("pnm scratchpad too small", ["pnm", "run", "--kernel", "{t}/k.s", "--memory", HBM3, "--shape", SHAPE, "--set",
                                  "pnm.sram.capacity=1KiB"], ["common.inc", "line", "1,024-byte scratchpad, pnm.sram"]),
    ("pnm -D value", ["pnm", "run", "--kernel", "{t}/k.s", "--memory", HBM3, "--shape", SHAPE, "-D", "TILE=abc("],
     ["-D TILE", "abc("]),
    # -- isa
    ("asm SRAM beyond the header", ["isa", "asm", "{t}/sram.s", "-o", "{t}/out.bin"],
     ["sram.s", "line 1", "4,294,967,295"]),
    ("asm -D NaN", ["isa", "asm", "{t}/k.s", "-D", "TILE=nan", "-o", "{t}/out.bin"], ["TILE", "finite"]),
    # -- trace
    ("info manifest chunks", ["trace", "info", "{t}/m-chunks.npz"], ["m-chunks.npz", "chunks"]),
    ("info manifest model", ["trace", "info", "{t}/m-model.npz"], ["m-model.npz", "model", "object"]),
    ("convert capacity 1e30", ["trace", "convert", str(REPO / "traces" / "tiny-llama_chat.npz"), "--to", "native",
                               "--capacity", "1e30B", "-o", "{t}/out.npz"], ["--capacity", "64-bit"]),
    ("convert interval -1", ["trace", "convert", str(REPO / "traces" / "tiny-llama_chat.npz"), "--to", "native",
                             "--issue-interval", "-1", "-o", "{t}/out.npz"], ["--issue-interval"]),
    ("convert --tp not dividing the heads", ["trace", "convert", str(REPO / "traces" / "tiny-llama_chat.npz"),
                                             "--to", "native", "--tp", "3", "-o", "{t}/out.npz"], ["--tp", "(3)"]),
    ("convert --device beyond", ["trace", "convert", str(REPO / "traces" / "tiny-llama_chat.npz"), "--to", "native",
                                 "--device", "7", "-o", "{t}/out.npz"], ["--device", "'7'"]),
    ("merge 70 hosts", ["trace", "merge", *["{t}/ok.trace"] * 70, "-o", "{t}/out.npz"],
     ["PATHS", "at most 64 hosts"]),
    ("convert placement of a physical trace", ["trace", "convert", "{t}/ok.trace", "--to", "native", "--devices",
                                               "4", "-o", "{t}/out.npz"], ["ok.trace", "--devices", "physical"]),
    ("generate layers beyond", ["trace", "generate", "--model", "tiny-llama", "--workload", "decode", "--layers",
                                "1000", "-o", "{t}/out.npz"], ["--layers", "decoder layers"]),
    ("generate context 2^62", ["trace", "generate", "--model", "tiny-llama", "--workload", "decode", "--context",
                               str(2**62), "-o", "{t}/out.npz"], ["--context", "int32"]),
    ("generate steps beyond memory", ["trace", "generate", "--model", "tiny-llama", "--workload", "decode",
                                      "--steps", str(2**30), "-o", "{t}/out.npz"], ["--steps", "of memory"]),
    ("generate tree beyond", ["trace", "generate", "--model", "tiny-llama", "--workload", "reasoning", "--fanout",
                              "1000", "--depth", "2147483647", "-o", "{t}/out.npz"], ["--depth", "10,000,000"]),
    # -- report trees
    ("report fifo", ["report", "{t}/pipe", "-o", "{t}/out.html"], ["pipe", "regular file"]),
    ("report key twice", ["report", "{t}/dup.json", "-o", "{t}/out.html"], ["dup.json", "'schema' given twice"]),
    ("report NaN", ["report", "{t}/nan.json", "-o", "{t}/out.html"], ["nan.json", "NaN"]),
    ("report context a string", ["report", "{t}/ctx.json", "-o", "{t}/out.html"],
     ["ctx.json", "results[0].context", "'lots'"]),
    ("report ragged bank grid", ["report", "{t}/ragged.json", "-o", "{t}/out.html"],
     ["ragged.json", "memory.banks.row_misses"]),
    ("report channel key", ["report", "{t}/chan.json", "-o", "{t}/out.html"], ["chan.json", "memory.channels", "'x'"]),
    # -- sweep specs
    ("sweep name with a path", ["sweep", "{t}/sw-name.yaml"], ["sw-name.yaml", "sweep.name", "../../x"]),
    ("sweep value twice", ["sweep", "{t}/sw-dup.yaml", "--out", "{t}/o"], ["sw-dup.yaml", "sweep.axes", "twice"]),
    ("sweep range NaN", ["sweep", "{t}/sw-nan.yaml", "--out", "{t}/o"], ["sw-nan.yaml", "sweep.axes", "finite"]),
    ("sweep a value failing everywhere", ["sweep", "{t}/sw-bad.yaml", "--out", "{t}/o"],
     ["sw-bad.yaml", "sweep.axes.system.gpus.count", "-2", "every point"]),
    ("sweep an input no point takes", ["sweep", "{t}/sw-sys.yaml", "--out", "{t}/o"],
     ["sw-sys.yaml", "sweep.inputs", "nosys"]),
    ("sweep axis beyond memory", ["sweep", "{t}/sw-big.yaml", "--out", "{t}/o"],
     ["sw-big.yaml", "log_range", "of memory"]),
    ("sweep grid beyond memory", ["sweep", "{t}/sw-grid.yaml", "--out", "{t}/o"],
     ["sw-grid.yaml", "sweep.axes", "grid points"]),
    ("sweep --out unwritable", ["sweep", "{t}/sw.yaml", "--out", "/proc/archsim-sweep"], ["/proc", "--out"]),
    ("sweep local:2^62", ["sweep", "{t}/sw.yaml", "--out", "{t}/o", "--scheduler", f"local:{2**62}"],
     ["--scheduler", "of memory"]),
    # -- DRAMSim3 imports
    ("import unknown protocol", ["config", "import-dramsim3", "{t}/ddr9.ini", "-o", "{t}/out.yaml"],
     ["ddr9.ini", "dram_structure.protocol", "DDR9"]),
    ("import tCK 0", ["config", "import-dramsim3", "{t}/tck0.ini", "-o", "{t}/out.yaml"], ["tck0.ini", "timing.tCK"]),
    ("import device_width 0", ["config", "import-dramsim3", "{t}/width0.ini", "-o", "{t}/out.yaml"],
     ["width0.ini", "dram_structure.device_width"]),
    ("import rows inf", ["config", "import-dramsim3", "{t}/rowsinf.ini", "-o", "{t}/out.yaml"],
     ["rowsinf.ini", "dram_structure.rows"]),
]
if HAVE_TORCH:
    CASES += [
        ("capture layers beyond", ["capture", "--model", "tiny-llama", "--device", "meta", "--layers", "99", "-o",
                                   "{t}/out.npz"], ["--layers", "decoder layers"]),
        ("capture beyond the context window", ["capture", "--model", "tiny-llama", "--device", "meta",
                                               "--prompt-tokens", "100000000", "-o", "{t}/out.npz"],
         ["--prompt-tokens", "context window"]),
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
    ("mooncake_sample.jsonl", "request trace (Mooncake JSONL), 300 requests over 0-86790 ms"),
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
