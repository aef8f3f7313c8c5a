"""Sweep speed: the whole `archsim sweep configs/sweeps/bench-200.yaml` command on 2 local workers vs 1.

    python scripts/bench_sweep.py [--spec configs/sweeps/bench-200.yaml] [--workers 1,2] [--repeats 3]

Each run is a fresh process with a fresh --out (so every point is computed), after one warm-up run of two points
that fills numba's cache. The worker counts are run in pairs, `--repeats` times (the order alternating, so a
change of load from other processes falls on both). Per run: the wall time, the CPU seconds of the command and
its workers (which load from other processes distorts far less than wall time) and the 1-minute load average
when it started. Then the median of the paired speedups and whether every run gave the same rows (timing and
host columns aside). Issue 23's bar: >= 1.8x on 2 workers, on the project's 2-core machine.
"""

from __future__ import annotations

import argparse
import csv
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


# the first and last grid points (one per placement) through the worker's own code: every kernel variant the
# sweep runs is then in numba's cache, so neither timed run compiles
WARM = """
import sys
from archsim.sweep.runner import run_point, warm_worker
from archsim.sweep.spec import load_spec
spec = load_spec(sys.argv[1])
warm_worker()
for index in (0, spec.grid_size - 1):
    run_point(spec.command.name, *spec.point_inputs(spec.grid_point(index)), None)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _sweep(spec: str, workers: int, out: Path) -> tuple[float, float]:
    """(wall s, CPU s) of one whole command: its process and the workers it waited for."""
    cpu = _children_cpu_s()
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "archsim", "sweep", spec, "--workers", str(workers), "--out", str(out),
                    "--quiet"], env=_env(), check=True)
    return time.perf_counter() - start, _children_cpu_s() - cpu


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return [{k: v for k, v in row.items() if k not in ("wall_s", "host")} for row in csv.DictReader(handle)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", default=str(REPO / "configs" / "sweeps" / "bench-200.yaml"))
    parser.add_argument("--workers", default="1,2", help="Comma-separated worker counts.")
    parser.add_argument("--repeats", type=int, default=3, help="Paired runs of every worker count.")
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    walls: dict[int, list[float]] = {n: [] for n in counts}
    rows = {}
    with tempfile.TemporaryDirectory(prefix="bench_sweep.") as tmp:
        subprocess.run([sys.executable, "-c", WARM, args.spec], check=True, env=_env())
        for r in range(args.repeats):
            for n in counts if r % 2 == 0 else counts[::-1]:
                out = Path(tmp) / f"r{r}w{n}"
                load = os.getloadavg()[0]
                wall, cpu = _sweep(args.spec, n, out)
                walls[n].append(wall)
                rows[(r, n)] = _rows(out / "points.csv")
                print(f"run {r + 1}, {n} worker(s): {len(rows[(r, n)])} points in {wall:.2f} s wall, {cpu:.2f} s CPU "
                      f"(load average {load:.2f} at the start)", flush=True)
    base = counts[0]
    for n in counts[1:]:
        ratios = [b / w for b, w in zip(walls[base], walls[n], strict=True)]
        print(f"speedup {n} vs {base} workers: median {statistics.median(ratios):.2f}x of "
              f"{', '.join(f'{x:.2f}' for x in ratios)}")
    first = rows[(0, base)]
    print(f"same rows on every run: {all(r == first for r in rows.values())}")


if __name__ == "__main__":
    main()
