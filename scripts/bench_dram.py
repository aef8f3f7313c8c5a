"""Simulator speed on saturating HBM2 streams: requests per second, JIT time reported apart.

    python scripts/bench_dram.py [--requests 1000000] [--preset HBM2 | --memory MEMORY.yaml] [--repeat 3]

Replays `--requests` 64 B reads, all stamped cycle 0 (the front end injects as fast as the queues accept):
uniform-random addresses (nearly every access a row conflict, bound by tFAW) and a sequential stream
(row hits, bound by the data buses). Prints the best of `--repeat` loop timings per stream, the simulated
bandwidth, and the ratio to 0.77 M requests/s, the fastest of DRAMSim3 and Ramulator 2.0 on such traces
on this machine class (issue 2). `--memory` times a memory config file instead of a preset, e.g. the one
`archsim config import-dramsim3` makes of DRAMSim3's HBM2 `.ini` (bank queues, one injection per cycle).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from archsim.config.memory import load_memory_config, memory_config_from_preset
from archsim.dram.spec import peak_bandwidth_GBps
from archsim.memory import Requests, replay

REFERENCE_M_REQ_PER_S = 0.77


def streams(cfg, n: int, seed: int) -> dict[str, np.ndarray]:
    org = cfg.organization
    access = org.access_bytes
    rng = np.random.default_rng(seed)
    return {
        "random": (rng.integers(0, org.capacity_bytes // access, n) * access).astype(np.uint64),
        "sequential": np.arange(n, dtype=np.uint64) * access,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--preset", default="HBM2")
    parser.add_argument("--memory", help="a memory config YAML to time instead of --preset")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    cfg = load_memory_config(args.memory) if args.memory else memory_config_from_preset(args.preset)
    label = args.memory or f"preset {args.preset}"
    start = time.perf_counter()
    tiny = Requests.build(np.zeros(2, dtype=np.int64), np.array([0, 64], dtype=np.uint64), np.zeros(2))
    replay(cfg, tiny)
    jit_s = time.perf_counter() - start
    print(f"{label}, {args.requests:,} reads of {cfg.organization.access_bytes} B, "
          f"JIT compile/cache load {jit_s:.2f} s (not counted below)")
    print(f"{'stream':<12} {'M req/s':>8} {'loop s':>8} {'GB/s':>9} {'of peak':>8} {'vs 0.77 M/s':>12}")
    for name, address in streams(cfg, args.requests, args.seed).items():
        requests = Requests.build(np.zeros(args.requests, dtype=np.int64), address, np.zeros(args.requests))
        best = None
        for _ in range(args.repeat):
            result = replay(cfg, requests)
            if best is None or result.wall_s < best.wall_s:
                best = result
        rate = args.requests / best.wall_s / 1e6
        bandwidth = args.requests * cfg.organization.access_bytes / (best.total_cycles * cfg.timing.tCK_ns)
        peak = peak_bandwidth_GBps(cfg.organization, cfg.timing)
        print(f"{name:<12} {rate:>8.2f} {best.wall_s:>8.3f} {bandwidth:>9.1f} {bandwidth / peak:>7.1%} "
              f"{rate / REFERENCE_M_REQ_PER_S:>11.1f}x")


if __name__ == "__main__":
    main()
