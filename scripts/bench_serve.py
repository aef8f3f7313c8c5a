"""Whole-process time of the README's serving comparison against issue 19's bar (60 s with a warm numba cache).

Usage: python scripts/bench_serve.py [--repeat 3] [--requests 2000] [--scenario multiturn] [--bar-s 60]
Runs `archsim serve g25 g15 g25-nopnm g15-nopnm gpu-hbm host-dram nvme rdma-pool --scenario S --requests N
--json OUT --quiet` as its own process --repeat times (the first run also warms the numba cache when it is
cold: run once more then), and prints each run's wall seconds, their median, the bar and the ratio, and
events per second: the JSON's events (arrivals + iterations + completions, summed over systems) over the
median wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from archsim.resources import SOURCE_ROOT

REPO = SOURCE_ROOT  # the repository (archsim.resources: the one place that knows)
SYSTEMS = ("g25", "g15", "g25-nopnm", "g15-nopnm", "gpu-hbm", "host-dram", "nvme", "rdma-pool")


def run_once(scenario: str, requests: int, out: Path) -> float:
    """One whole `archsim serve` process; its wall seconds."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    command = [sys.executable, "-c", "from archsim.cli import main; main()", "serve", *SYSTEMS,
               "--scenario", scenario, "--requests", str(requests), "--json", str(out), "--quiet"]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True)
    wall_s = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"archsim serve failed (exit {done.returncode}):\n{done.stderr}")
    return wall_s


def events_of(out: Path) -> int:
    tree = json.loads(out.read_text())
    return sum(int(entry.get("events") or 0) for entry in tree["results"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--scenario", default="multiturn")
    parser.add_argument("--bar-s", type=float, default=60.0, help="issue 19's bar for the whole process")
    args = parser.parse_args()
    walls, events = [], 0
    with tempfile.TemporaryDirectory(prefix="bench_serve_") as tmp:
        for i in range(args.repeat):
            out = Path(tmp) / f"serve{i}.json"
            walls.append(run_once(args.scenario, args.requests, out))
            events = events_of(out)
            print(f"  run {i + 1}: {walls[-1]:.1f} s", flush=True)
    median_s = statistics.median(walls)
    print(f"archsim serve {' '.join(SYSTEMS)} --scenario {args.scenario} --requests {args.requests}")
    print(f"  whole process, median of {args.repeat}: {median_s:.1f} s  (bar {args.bar_s:.0f} s, "
          f"ratio {median_s / args.bar_s:.2f})")
    print(f"  events: {events:,} over {len(SYSTEMS)} systems, {events / median_s:,.0f} events/s")


if __name__ == "__main__":
    main()
