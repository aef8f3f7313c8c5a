"""The fixed cost of a warm `archsim replay` process: whole-process time minus the simulation loop minus parsing.

    python scripts/bench_fixed_cost.py [--runs 10] [--requests 1000] [--memory configs/memory/hbm2.yaml]

Writes a DRAMSim3 text trace of `--requests` sequential reads, runs `archsim replay` on it once to warm numba's
cache, then `--runs` whole processes (each timed from outside), reading `sim.wall_s` from each one's JSON. Parsing
is timed in a process of its own after its imports (the text scanner's cache load included). Beside it, in
alternating runs, `python -c pass` and `import numba` give the floor the fixed cost stands on. Prints medians in
seconds, and issue 22's bar: at most 0.6 s, or numba's import plus 0.25 s where that import takes over 0.35 s.
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

from archsim.trace.text_formats import write_dramsim3

_PARSE = """
import sys, time
from archsim.trace.text_formats import read_trace
start = time.perf_counter()
read_trace(sys.argv[1], "dramsim3", sort=False)
print(time.perf_counter() - start)
"""


def _whole_s(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def _median_s(command: list[str], runs: int) -> float:
    return statistics.median(_whole_s(command) for _ in range(runs))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--memory", default="configs/memory/hbm2.yaml")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="archsim_fixed_cost_"))
    trace, out = work / "t.trace", work / "r.json"
    n = args.requests
    write_dramsim3(trace, np.arange(n, dtype=np.int64), np.arange(n, dtype=np.uint64) * 64, np.zeros(n, np.uint8))
    replay = [sys.executable, "-m", "archsim", "replay", str(trace), "--memory", args.memory, "--json", str(out),
              "--quiet"]
    _whole_s(replay)  # warm numba's cache
    whole, loop, python, numba_import = [], [], [], []
    for _ in range(args.runs):  # alternating, so a change of the machine's load falls on all three
        whole.append(_whole_s(replay))
        loop.append(json.loads(out.read_text())["sim"]["wall_s"])
        numba_import.append(_whole_s([sys.executable, "-c", "import numba"]))
        python.append(_whole_s([sys.executable, "-c", "pass"]))
    parse = statistics.median(
        float(subprocess.run([sys.executable, "-c", _PARSE, str(trace)], check=True, capture_output=True,
                             text=True).stdout) for _ in range(args.runs))
    fixed = statistics.median(whole) - statistics.median(loop) - parse
    numba_s = statistics.median(numba_import)
    bar = 0.6 if numba_s <= 0.35 else numba_s + 0.25  # issue 22's bar
    print(f"replay of {n:,} requests, median of {args.runs} warm whole processes: {statistics.median(whole):.3f} s "
          f"(loop {statistics.median(loop):.4f} s, parse {parse:.4f} s)")
    print(f"fixed cost {fixed:.3f} s; floor: python {statistics.median(python):.3f} s, import numba {numba_s:.3f} s; "
          f"archsim's own {fixed - numba_s:.3f} s; bar {bar:.3f} s: {'met' if fixed <= bar else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
