"""Bounded memory of `archsim replay` and `archsim trace convert`: peak RSS and speed on long traces.

    python scripts/bench_stream.py [--requests 100000000] [--kinds paced,saturated] [--memory M.yaml]
                                   [--dir DIR] [--skip-convert]

1. Writes a `--requests` trace per kind as an archsim .npz, batch by batch (`PhysicalTraceWriter`: the trace is
   never whole in memory, and no text lines are stored; 18 bytes a request go to temporary files, about 12 to
   the archive). Addresses: half a streaming run, half uniform-random 32 B lines; 25 % writes; 30 % on the PNM
   port. `paced`: four requests a cycle (HBM3 keeps up with most of them); `saturated`: every timestamp 0 (the
   trace outpaces the memory: backlogged calls, latencies from the timestamp spanning the whole run).
2. Replays each with `archsim replay --json` in a child process: its peak RSS (the rusage `os.wait4` returns),
   its whole time, and the simulation's `sim.wall_s` and requests/s from the JSON.
3. The capture-and-convert example of docs/capture.md: `archsim capture --model llama-3.1-8b --layers 2 --device
   meta --batch 4 --prompt-tokens 2048 --decode-steps 64`, then `archsim trace convert ... --to dramsim3
   --devices 4 --channels 32 --tp 4` (140.6 M requests): both children's peak RSS and time. Needs the
   `capture` extra (torch); `--skip-convert` leaves it out.

Every peak RSS is printed against the 1 GB bar (issue 22). Timings depend on the machine's load; the RSS and the
request counts do not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
BAR_BYTES = 1 << 30
BATCH = 1 << 22


def write_trace(path: Path, n: int, kind: str, capacity_bytes: int, seed: int = 1) -> None:
    """The `kind` trace of `n` requests, written batch by batch (module docstring)."""
    from archsim.trace.native import PhysicalTraceWriter

    line = 32
    with open(path, "wb") as handle, PhysicalTraceWriter(handle, {"bench_stream": kind}) as writer:
        for first in range(0, n, BATCH):
            count = min(BATCH, n - first)
            rng = np.random.default_rng([seed, first])
            index = np.arange(first, first + count, dtype=np.int64)
            streaming = (index * line) % capacity_bytes
            scattered = rng.integers(0, capacity_bytes // line, count) * line
            address = np.where(rng.random(count) < 0.5, streaming, scattered).astype(np.uint64)
            ts = index // 4 if kind == "paced" else np.zeros(count, dtype=np.int64)
            writer.add(ts, address, (rng.random(count) < 0.25).astype(np.uint8),
                       (rng.random(count) < 0.3).astype(np.uint8))
        writer.finish()


def run_child(args: list[str]) -> tuple[float, int, str]:
    """Run `python -m archsim ARGS` from the repository: whole seconds, peak RSS in bytes, its output."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        child = subprocess.Popen([sys.executable, "-m", "archsim", *args], cwd=ROOT, env=env, stdout=out,
                                 stderr=subprocess.STDOUT)
        _pid, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode(errors="replace")
    if child.returncode:
        raise SystemExit(f"archsim {' '.join(args)} failed ({child.returncode}):\n{text}")
    return time.perf_counter() - start, usage.ru_maxrss * 1024, text


def verdict(rss: int) -> str:
    return f"{rss / 2**20:7.0f} MB ({'within' if rss <= BAR_BYTES else 'OVER'} the 1 GB bar)"


def bench_replay(directory: Path, n: int, kinds: list[str], memory: str) -> None:
    from archsim.config.memory import load_memory_config

    capacity = load_memory_config(memory).organization.capacity_bytes
    for kind in kinds:
        trace = directory / f"{kind}_{n}.npz"
        if not trace.exists():
            start = time.perf_counter()
            write_trace(trace, n, kind, capacity)
            print(f"wrote {trace} ({trace.stat().st_size / 2**30:.2f} GiB) in {time.perf_counter() - start:.0f} s",
                  flush=True)
        stats_path = directory / f"{kind}_{n}.json"
        seconds, rss, _ = run_child(["replay", str(trace), "--memory", memory, "--json", str(stats_path), "--quiet"])
        sim = json.loads(stats_path.read_text())["sim"]
        print(f"replay {kind:9s} {n:>13,} requests: peak RSS {verdict(rss)}, {seconds:6.1f} s whole, "
              f"sim.wall_s {sim['wall_s']:.1f} s, {sim['requests_per_s'] / 1e6:.2f} M requests/s", flush=True)


def bench_convert(directory: Path) -> None:
    logical = directory / "llama8b.npz"
    seconds, rss, _ = run_child(["capture", "--model", "llama-3.1-8b", "--layers", "2", "--device", "meta", "--batch",
                                 "4", "--prompt-tokens", "2048", "--decode-steps", "64", "-o", str(logical)])
    print(f"capture (docs/capture.md):            peak RSS {verdict(rss)}, {seconds:6.1f} s", flush=True)
    out = directory / "llama8b.trace"
    seconds, rss, text = run_child(["trace", "convert", str(logical), "--to", "dramsim3", "-o", str(out),
                                    "--devices", "4", "--channels", "32", "--tp", "4"])
    print(f"convert to dramsim3 (docs/capture.md): peak RSS {verdict(rss)}, {seconds:6.1f} s: {text.strip()} "
          f"({out.stat().st_size / 2**30:.2f} GiB)", flush=True)
    out.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=100_000_000)
    parser.add_argument("--kinds", default="paced,saturated")
    parser.add_argument("--memory", default=str(ROOT / "configs" / "memory" / "hbm3.yaml"))
    parser.add_argument("--dir", help="where the traces go (kept; default: a temporary directory, removed)")
    parser.add_argument("--skip-convert", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(args.dir or scratch)
        directory.mkdir(parents=True, exist_ok=True)
        bench_replay(directory, args.requests, args.kinds.split(","), args.memory)
        if not args.skip_convert:
            bench_convert(directory)


if __name__ == "__main__":
    main()
