"""archsim against DRAMSim3 and Ramulator 2.0, whole process and simulation loop, on the same trace files.

    python scripts/bench_vs_refsims.py --build DIR [--requests 1000000] [--runs 5] [--kinds stream,random,...]
                                       [--front-ends stock,saturating] [--against dramsim3,ramulator2]
                                       [--keep DIR] [--json OUT]

DIR is a build of the reference simulators' drivers (`../shared/reference/refsims/build.sh DIR`); this script
builds nothing. For each trace kind of `scripts/compare_dramsim3.py`'s suite (streaming, random, a 30 % write mix,
paged-KV-like, 16 KiB strides; `--requests` saturating 64 B requests, one DRAMSim3 text file each, read by all
three) and each front end (stock: one injection per cycle, DRAMSim3's own; saturating: no cap), it runs
archsim on the config `archsim config import-dramsim3` makes of DRAMSim3's `HBM2_8Gb_x128.ini`, DRAMSim3 on that
`.ini` and Ramulator 2.0 on its HBM2 preset (`--against` one of them alone: a '-' in its columns), `--runs`
times each in alternating order after one warm-up each (numba's cache is warm). Prints, per kind and front end,
the median whole-process seconds of each, and the median over runs of each simulator's time divided by archsim's
(above 1: archsim faster), for the whole process and for the loop alone (archsim's `sim.wall_s`, the drivers'
`loop_wall_s`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout as `python scripts/...`

from archsim.config.memory import load_memory_config  # noqa: E402
from archsim.report.output import write_json  # noqa: E402
from archsim.trace.text_formats import write_dramsim3  # noqa: E402
from scripts.compare_dramsim3 import DEFAULT_INI, suite  # noqa: E402

KINDS = {"stream": "stream_sat", "random": "random_sat", "mix": "mix30_random_sat", "kv_pages": "kv_pages_sat",
         "stride": "stride_16KiB_sat"}
FRONT_ENDS = {"stock": 1, "saturating": 0}  # injections per cycle (0: no cap)
SIMULATORS = ("archsim", "dramsim3", "ramulator2")


def _commands(build: Path, memory_yaml: Path, trace: Path, cap: int, out: Path) -> dict[str, list[str]]:
    archsim = [sys.executable, "-m", "archsim", "replay", str(trace), "--memory", str(memory_yaml), "--format",
               "dramsim3", "--json", str(out / "archsim.json"), "--quiet"]
    if cap == 0:
        archsim += ["--set", "memory.frontend.max_injections_per_cycle=0"]
    return {
        "archsim": archsim,
        "dramsim3": [str(build / "bin" / "ds3_driver"), str(build / "src" / "DRAMsim3" / "configs" /
                                                             "HBM2_8Gb_x128.ini"),
                     str(trace), "-w", str(cap), "-j", str(out / "dramsim3.json")],
        "ramulator2": [str(build / "bin" / "ram2_driver"), str(build / "configs" / "ram2_hbm2.yaml"), str(trace),
                       "-w", str(cap), "-j", str(out / "ramulator2.json")],
    }


def _loop_s(name: str, out: Path) -> float:
    figures = json.loads((out / f"{name}.json").read_text())
    return figures["sim"]["wall_s"] if name == "archsim" else figures["loop_wall_s"]


def _timed(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()  # in `cwd`: the drivers leave their simulators' own stats files there
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)
    return time.perf_counter() - start


def _measure(commands: dict[str, list[str]], out: Path, runs: int) -> dict[str, dict[str, list[float]]]:
    """Whole-process and loop seconds of each simulator, `runs` rounds in alternating order after a warm-up."""
    for command in commands.values():
        _timed(command, out)
    times: dict[str, dict[str, list[float]]] = {name: {"whole_s": [], "loop_s": []} for name in commands}
    for round_ in range(runs):
        order = list(commands)[round_ % len(commands):] + list(commands)[:round_ % len(commands)]
        for name in order:
            times[name]["whole_s"].append(_timed(commands[name], out))
            times[name]["loop_s"].append(_loop_s(name, out))
    return times


def _ratio(times: dict, other: str, key: str) -> float:
    """The median over rounds of `other`'s time over archsim's in the same round."""
    return statistics.median(b / a for a, b in zip(times["archsim"][key], times[other][key], strict=True))


def _row(kind: str, front_end: str, times: dict) -> str:
    """One table line; a simulator left out by --against shows as '-'."""
    def median(name: str) -> str:
        return f"{statistics.median(times[name]['whole_s']):.2f}" if name in times else "-"

    def ratio(name: str, key: str) -> str:
        return f"{_ratio(times, name, key):.2f}" if name in times else "-"

    return (f"{kind:<10} {front_end:<11} {median('archsim'):>9} {median('dramsim3'):>9} {median('ramulator2'):>8} "
            f"{ratio('dramsim3', 'whole_s'):>11} {ratio('ramulator2', 'whole_s'):>7} "
            f"{ratio('dramsim3', 'loop_s'):>10} {ratio('ramulator2', 'loop_s'):>7}")


def _check_build(build: Path) -> None:
    for binary in ("ds3_driver", "ram2_driver"):
        if not (build / "bin" / binary).exists():
            raise SystemExit(f"bench_vs_refsims: {build / 'bin' / binary}: not built "
                             "(../shared/reference/refsims/build.sh DIR builds both drivers)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", type=Path, required=True, help="the reference simulators' build folder")
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"of {', '.join(KINDS)}")
    parser.add_argument("--front-ends", default=",".join(FRONT_ENDS), help="stock, saturating")
    parser.add_argument("--against", default="dramsim3,ramulator2",
                        help="the reference simulators to run (dramsim3, ramulator2): one alone halves a 10 M run")
    parser.add_argument("--keep", type=Path, help="keep the traces and outputs in this folder")
    parser.add_argument("--json", type=Path, help="write every run's figures here")
    args = parser.parse_args()
    _check_build(args.build)
    unknown = set(args.against.split(",")) - set(SIMULATORS[1:])
    if unknown:
        parser.error(f"--against: {', '.join(sorted(unknown))}: not one of {', '.join(SIMULATORS[1:])}")
    against = tuple(name for name in SIMULATORS[1:] if name in args.against.split(","))
    work = (args.keep or Path(tempfile.mkdtemp(prefix="archsim_vs_refsims_"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    memory_yaml = work / "memory.yaml"
    subprocess.run([sys.executable, "-m", "archsim", "config", "import-dramsim3", str(DEFAULT_INI), "-o",
                    str(memory_yaml)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    org = load_memory_config(memory_yaml).organization
    traces = suite(args.requests, org.capacity_bytes, org.access_bytes)
    print(f"{args.requests:,} requests a trace, median of {args.runs} alternating runs; ratio = theirs / archsim's")
    print(f"{'trace':<10} {'front end':<11} {'archsim s':>9} {'DRAMSim3':>9} {'Ram2':>8} {'whole x DS3':>11} "
          f"{'x Ram2':>7} {'loop x DS3':>10} {'x Ram2':>7}", flush=True)
    figures: dict[str, dict] = {}
    for kind in args.kinds.split(","):
        cycle, address, is_write = traces[KINDS[kind]]
        trace = work / f"{kind}.trace"
        write_dramsim3(trace, cycle, address, is_write.astype(np.uint8))
        for front_end in args.front_ends.split(","):
            out = work / f"{kind}_{front_end}"
            out.mkdir(exist_ok=True)
            commands = _commands(args.build, memory_yaml, trace, FRONT_ENDS[front_end], out)
            times = _measure({name: commands[name] for name in ("archsim", *against)}, out, args.runs)
            figures[f"{kind}/{front_end}"] = times
            print(_row(kind, front_end, times), flush=True)
        if args.keep is None:
            trace.unlink()  # 10 M requests are 300 MB a file
    if args.json:
        write_json(args.json, {"requests_per_trace": args.requests, "runs": args.runs, "times": figures})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
