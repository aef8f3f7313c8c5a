"""Side-by-side with DRAMSim3 on a suite of traces: bandwidth and mean read latency, ratio and verdict.

    python scripts/compare_dramsim3.py [--ini HBM2_8Gb_x128.ini] [--dramsim3 PATH/dramsim3main] [--requests N]
                                       [--keep DIR] [--only NAME ...]

Writes each trace of the suite in DRAMSim3's text format, replays it with archsim on the config that
`archsim config import-dramsim3` makes of `--ini`, and, given `--dramsim3` (a DRAMSim3 build's trace-driven
main), runs DRAMSim3 on the same file and config. A row passes when archsim's bandwidth is within 15 % of
DRAMSim3's and its mean read latency within 25 % (issue 2). Without `--dramsim3` it prints archsim's side only.

Both sides count bandwidth as bytes served (64 B per request) over the cycles until the last request is done,
so an idle tail does not dilute it. DRAMSim3's main runs a fixed `-c` cycle count, so the script bisects the
smallest count at which DRAMSim3 reports every request done, starting from archsim's count. Mean read latency
is DRAMSim3's `average_read_latency`, weighted over channels by reads done; both sides count from the
controller's acceptance of a request to its data's return. The suite holds ~20 K requests per trace by default;
a DRAMSim3 build takes a minute (github.com/umd-memsys/DRAMsim3, `cmake` + `make`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from archsim.config.memory import MemoryConfig, load_memory_config
from archsim.report.output import write_json
from archsim.resources import SOURCE_ROOT
from archsim.trace.text_formats import write_dramsim3

ROOT = SOURCE_ROOT
DEFAULT_INI = ROOT / "tests" / "data" / "dramsim3" / "HBM2_8Gb_x128.ini"  # DRAMSim3's own, shipped with its licence
BANDWIDTH_TOLERANCE = 0.15
LATENCY_TOLERANCE = 0.25


def _kv_pages(rng: np.random.Generator, n: int, page_bytes: int, write_share: float, capacity_bytes: int,
              access_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """Paged KV reads: whole pages at random places, in order inside a page; appends write single lines."""
    lines_per_page = page_bytes // access_bytes
    pages = rng.integers(0, capacity_bytes // page_bytes, n // lines_per_page + 1)
    address = (pages[:, None] * page_bytes + np.arange(lines_per_page) * access_bytes).reshape(-1)[:n]
    is_write = rng.random(n) < write_share
    return address.astype(np.uint64), is_write


def suite(n: int, capacity_bytes: int, access_bytes: int,
          seed: int = 11) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """name -> (cycle, address, is_write): streaming, random, read/write mixes, paged-KV-like and strided,
    each saturating (all stamped 0, the trace CPU injects one per cycle) or low-rate."""
    rng = np.random.default_rng(seed)
    lines = capacity_bytes // access_bytes
    sequential = np.arange(n, dtype=np.uint64) * access_bytes
    random = (rng.integers(0, lines, n) * access_bytes).astype(np.uint64)
    reads = np.zeros(n, dtype=bool)
    zero = np.zeros(n, dtype=np.int64)
    every = np.arange(n, dtype=np.int64)
    mix30 = rng.random(n) < 0.3
    kv_address, kv_write = _kv_pages(rng, n, 4096, 0.05, capacity_bytes, access_bytes)
    hot = (rng.integers(0, 256 * 1024 // access_bytes, n) * access_bytes).astype(np.uint64)
    return {
        "stream_sat": (zero, sequential, reads),
        "stream_low": (every * 8, sequential, reads),
        "random_sat": (zero, random, reads),
        "random_low": (every * 20, random, reads),
        "mix30_random_sat": (zero, random, mix30),
        "mix30_stream_sat": (zero, sequential, mix30),
        "mix30_random_low": (every * 10, random, mix30),
        "mix50_random_sat": (zero, random, rng.random(n) < 0.5),
        "mix30_stream_low": (every * 4, sequential, mix30),
        "write_stream_sat": (zero, sequential, ~reads),
        "kv_pages_sat": (zero, kv_address, kv_write),
        "kv_pages_low": (every * 4, kv_address, kv_write),
        "stride_2KiB_sat": (zero, (every * 2048 % capacity_bytes).astype(np.uint64), reads),
        "stride_16KiB_sat": (zero, (every * 16384 % capacity_bytes).astype(np.uint64), reads),
        "stride_256KiB_sat": (zero, (every * 262144 % capacity_bytes).astype(np.uint64), reads),
        "hot256KiB_mix_sat": (zero, hot, mix30),
    }


def _archsim_run(trace: Path, memory_yaml: Path, out_json: Path) -> dict[str, float]:
    subprocess.run([sys.executable, "-m", "archsim", "replay", str(trace), "--memory", str(memory_yaml),
                    "--format", "dramsim3", "--json", str(out_json)], check=True, stdout=subprocess.DEVNULL)
    stats = json.loads(out_json.read_text())
    return {"cycles": stats["sim"]["cycles"], "bandwidth_GBps": stats["memory"]["bandwidth_GBps"],
            "read_latency": stats["memory"]["read_latency_cycles"]["mean"]}


def _dramsim3_totals(binary: Path, ini: Path, trace: Path, cycles: int, out_dir: Path) -> dict[str, float]:
    out_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(binary), str(ini), "-c", str(cycles), "-t", str(trace), "-o", str(out_dir)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    channels = json.loads((out_dir / "dramsim3.json").read_text())
    reads = sum(c["num_reads_done"] for c in channels.values())
    writes = sum(c["num_writes_done"] for c in channels.values())
    latency = sum(c["average_read_latency"] * c["num_reads_done"] for c in channels.values())
    return {"reads": reads, "writes": writes, "read_latency": latency / reads if reads else 0.0}


def _dramsim3_run(binary: Path, ini: Path, trace: Path, n: int, guess_cycles: int, work: Path,
                  cfg: MemoryConfig) -> dict[str, float]:
    """DRAMSim3 runs a fixed cycle count: bisect the smallest count at which every request is done (to 0.05 %)."""
    def finished(cycles: int) -> bool:
        totals = _dramsim3_totals(binary, ini, trace, cycles, work)
        # at the end of the file DRAMSim3's trace reader may send one more read of the last address (when the
        # memory accepts it at once); without the final newline it drops the last line instead
        return totals["reads"] + totals["writes"] >= n

    # bracket around archsim's own count first: the two should agree within a few per cent
    hi = max(int(guess_cycles * 1.1), 1000)
    while not finished(hi):
        hi *= 2
    lo = int(guess_cycles * 0.9)
    while lo > 0 and finished(lo):
        lo //= 2
    while hi - lo > max(1, hi // 2000):  # to 0.05 %: a run costs as much as a replay of the whole trace
        mid = (lo + hi) // 2
        if finished(mid):
            hi = mid
        else:
            lo = mid
    totals = _dramsim3_totals(binary, ini, trace, hi, work)
    bandwidth = n * cfg.organization.access_bytes / (hi * cfg.timing.tCK_ns)
    return {"cycles": hi, "bandwidth_GBps": bandwidth, "read_latency": totals["read_latency"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ini", type=Path, default=DEFAULT_INI)
    parser.add_argument("--dramsim3", type=Path, help="DRAMSim3's trace-driven main (dramsim3main)")
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--keep", type=Path, help="keep traces and outputs in this folder")
    parser.add_argument("--only", nargs="*", help="run only these suite entries")
    parser.add_argument("--json", type=Path, help="write both sides' figures here (tests/data keeps DRAMSim3's)")
    args = parser.parse_args()

    work = args.keep or Path(tempfile.mkdtemp(prefix="archsim_vs_dramsim3_"))
    work.mkdir(parents=True, exist_ok=True)
    memory_yaml = work / "memory.yaml"
    subprocess.run([sys.executable, "-m", "archsim", "config", "import-dramsim3", str(args.ini), "-o",
                    str(memory_yaml)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(f"{'trace':<20} {'archsim GB/s':>12} {'DRAMSim3':>9} {'ratio':>6} {'archsim lat':>11} {'DRAMSim3':>9} "
          f"{'ratio':>6}  verdict", flush=True)
    failures = 0
    figures: dict[str, dict[str, dict[str, float]]] = {}
    cfg = load_memory_config(memory_yaml)
    org = cfg.organization
    for name, (cycle, address, is_write) in suite(args.requests, org.capacity_bytes, org.access_bytes).items():
        if args.only and name not in args.only:
            continue
        trace = work / f"{name}.trace"
        write_dramsim3(trace, cycle, address, is_write.astype(np.uint8))
        ours = _archsim_run(trace, memory_yaml, work / f"{name}.archsim.json")
        line = f"{name:<20} {ours['bandwidth_GBps']:>12.1f}"
        figures[name] = {"archsim": ours}
        if args.dramsim3 is None:
            print(f"{line} {'-':>9} {'-':>6} {ours['read_latency']:>11.1f}", flush=True)
            continue
        theirs = _dramsim3_run(args.dramsim3, args.ini, trace, len(address), int(ours["cycles"]),
                               work / f"{name}.dramsim3", cfg)
        figures[name]["dramsim3"] = theirs
        bw_ratio = ours["bandwidth_GBps"] / theirs["bandwidth_GBps"]
        lat_ratio = ours["read_latency"] / theirs["read_latency"] if theirs["read_latency"] else float("nan")
        if is_write.all():
            lat_ratio = float("nan")  # DRAMSim3's only read is its end-of-file repeat, served from the write buffer
        ok = abs(bw_ratio - 1) <= BANDWIDTH_TOLERANCE and (is_write.all() or abs(lat_ratio - 1) <= LATENCY_TOLERANCE)
        failures += not ok
        print(f"{line} {theirs['bandwidth_GBps']:>9.1f} {bw_ratio:>6.2f} {ours['read_latency']:>11.1f} "
              f"{theirs['read_latency']:>9.1f} {lat_ratio:>6.2f}  {'ok' if ok else 'OUT'}", flush=True)
    if args.json:
        write_json(args.json, {"ini": args.ini.name, "requests_per_trace": args.requests, "traces": figures})
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
