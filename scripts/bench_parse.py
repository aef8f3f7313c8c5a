"""Text-trace parse speed, measured from the file: DRAMSim3 and Ramulator traces of N lines, best of a few reads.

    python scripts/bench_parse.py [--lines 10000000]

Prints lines per second for each format (the first read compiles or loads the scanner and is not counted).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from archsim.trace.text_formats import read_dramsim3, read_ramulator


def _write(directory: Path, lines: int) -> tuple[Path, Path]:
    rng = np.random.default_rng(1)
    address = rng.integers(0, 2**33, lines, dtype=np.int64).astype(np.uint64) * np.uint64(64)
    is_write = (rng.random(lines) < 0.2).astype(np.uint8)
    cycle = np.arange(lines, dtype=np.int64) * 2
    ds3, ram = directory / "bench.trace", directory / "bench.ram"
    # written in slices to keep the writer's own memory small
    with open(ds3, "wb") as handle:
        for k in range(0, lines, 1_000_000):
            ops = np.where(is_write[k:k + 1_000_000] != 0, "WRITE", "READ")
            handle.write("".join(f"{int(a):#x} {o} {int(c)}\n" for a, o, c in
                                 zip(address[k:k + 1_000_000], ops, cycle[k:k + 1_000_000], strict=True)).encode())
    with open(ram, "wb") as handle:
        for k in range(0, lines, 1_000_000):
            ops = np.where(is_write[k:k + 1_000_000] != 0, "ST", "LD")
            handle.write("".join(f"{o} {int(a):#x}\n" for a, o in
                                 zip(address[k:k + 1_000_000], ops, strict=True)).encode())
    return ds3, ram


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ds3, ram = _write(Path(tmp), args.lines)
        for name, path, reader in (("dramsim3", ds3, read_dramsim3), ("ramulator", ram, read_ramulator)):
            reader(path)  # compile or load the scanner
            best = min(_timed(reader, path) for _ in range(args.repeat))
            mb = path.stat().st_size / 1e6
            rate = args.lines / best / 1e6
            print(f"{name:10s} {args.lines:,} lines ({mb:,.0f} MB): {best:.3f} s, {rate:.1f} M lines/s")


def _timed(reader, path: Path) -> float:
    start = time.perf_counter()
    trace = reader(path)
    elapsed = time.perf_counter() - start
    assert len(trace.address) > 0
    return elapsed


if __name__ == "__main__":
    main()
