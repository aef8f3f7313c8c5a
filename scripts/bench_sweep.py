"""Sweep speed: the whole `archsim sweep configs/sweeps/bench-200.yaml` command on 2 local workers vs 1.

    python scripts/bench_sweep.py [--spec configs/sweeps/bench-200.yaml] [--workers 1,2]

Each run is a fresh process with a fresh --out (so every point is computed), after one warm-up run of a
single point that fills numba's cache. Prints the wall time per worker count, the speedup over the first
count, and whether every run gave the same rows (timing and host columns aside). Issue 23's bar: >= 1.8x
on 2 workers, on the project's 2-core machine.
"""

from __future__ import annotations

import argparse
import csv
import os
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


def _sweep(spec: str, workers: int, out: Path) -> float:
    env = _env()
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "archsim", "sweep", spec, "--workers", str(workers), "--out", str(out),
                    "--quiet"], env=env, check=True)
    return time.perf_counter() - start


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return [{k: v for k, v in row.items() if k not in ("wall_s", "host")} for row in csv.DictReader(handle)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", default=str(REPO / "configs" / "sweeps" / "bench-200.yaml"))
    parser.add_argument("--workers", default="1,2", help="Comma-separated worker counts.")
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench_sweep.") as tmp:
        subprocess.run([sys.executable, "-c", WARM, args.spec], check=True, env=_env())
        times, rows = {}, {}
        for n in counts:
            out = Path(tmp) / f"w{n}"
            times[n] = _sweep(args.spec, n, out)
            rows[n] = _rows(out / "points.csv")
            print(f"{n} worker(s): {len(rows[n])} points in {times[n]:.1f} s ({times[n] / len(rows[n]):.3f} s/point)")
    base = counts[0]
    for n in counts[1:]:
        print(f"speedup {n} vs {base} workers: {times[base] / times[n]:.2f}x")
    same = all(rows[n] == rows[base] for n in counts)
    print(f"same rows on every worker count: {same}")


if __name__ == "__main__":
    main()
