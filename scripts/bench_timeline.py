"""The cost of `archsim replay --timeline`: file size and whole-process time against a replay without it.

    python scripts/bench_timeline.py [--requests 1000000] [--window-requests 100000] [--repeat 2]

Writes a native trace of `--requests` 64 B reads at uniform-random addresses, all stamped cycle 0 (saturating:
the front end injects as fast as the queues accept), replays it on configs/memory/hbm2.yaml as a whole
`archsim replay` process without and with `--timeline --timeline-requests N`, best of `--repeat` each (the
numba cache is warmed first), and prints the timeline's size and the time ratio against the bars of issue 27
(at most 100 MB, at most 2x the whole process without the timeline).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from archsim.resources import SOURCE_ROOT

ROOT = SOURCE_ROOT  # the repository (archsim.resources: the one place that knows)
MEMORY = ROOT / "configs" / "memory" / "hbm2.yaml"
MAX_BYTES = 100 * 10**6
MAX_RATIO = 2.0


def _write_trace(path: Path, n: int, seed: int) -> None:
    from archsim.config.memory import load_memory_config
    from archsim.trace.native import save_physical_trace

    org = load_memory_config(str(MEMORY), ()).organization
    rng = np.random.default_rng(seed)
    address = (rng.integers(0, org.capacity_bytes // org.access_bytes, n) * org.access_bytes).astype(np.uint64)
    save_physical_trace(path, np.zeros(n, dtype=np.int64), address, np.zeros(n, dtype=np.uint8))


def _process_s(args: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "archsim", *args], check=True, env=env, cwd=ROOT)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--window-requests", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="archsim-bench-timeline.") as tmp:
        trace, out = Path(tmp) / "random.npz", Path(tmp) / "timeline.json"
        _write_trace(trace, args.requests, args.seed)
        base = ["replay", str(trace), "--memory", str(MEMORY), "--quiet"]
        _process_s(base)  # numba cache warm-up, not counted
        without = min(_process_s(base) for _ in range(args.repeat))
        with_tl = min(_process_s([*base, "--timeline", str(out), "--timeline-requests", str(args.window_requests)])
                      for _ in range(args.repeat))
        size = out.stat().st_size
    ratio = with_tl / without
    print(f"{args.requests:,} random reads on HBM2, timeline of the first {args.window_requests:,} requests")
    print(f"  whole process without --timeline {without:.2f} s, with {with_tl:.2f} s: {ratio:.2f}x "
          f"(bar {MAX_RATIO:.0f}x) {'ok' if ratio <= MAX_RATIO else 'OVER'}")
    print(f"  timeline {size / 1e6:.1f} MB (bar {MAX_BYTES / 1e6:.0f} MB) {'ok' if size <= MAX_BYTES else 'OVER'}")
    sys.exit(0 if ratio <= MAX_RATIO and size <= MAX_BYTES else 1)


if __name__ == "__main__":
    main()
