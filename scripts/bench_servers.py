"""Whole-process time of issue 25's scaling runs against its bar (under 2 minutes warm): `shared-prefix` with
500 requests per server at 1, 2, 4, 8 and 16 servers, G2.5 and G1.5 (`g25-16s`, `g15-16s` cut to N servers),
at the scenario's recorded rate spread over 16 servers (3.91 / 16 requests/s per server).

Usage: python scripts/bench_servers.py [--requests-per-server 500] [--servers 1,2,4,8,16] [--bar-s 120]
Runs one `archsim serve g25-16s g15-16s ...` process per server count (both systems on the machine's cores),
and prints each one's wall seconds and events, the total, the bar and the ratio. Warm means numba's cache and
the step store (archsim.step_store) filled by an earlier run of the same source; the first run after an edit
times the decode-step runs too (2-3 s per system and process).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from archsim.resources import SOURCE_ROOT

RATE_PER_SERVER = 3.91 / 16


def run_once(servers: int, requests_per_server: int, out: Path) -> float:
    cmd = [sys.executable, "-m", "archsim", "serve", "g25-16s", "g15-16s", "--scenario", "shared-prefix",
           "--requests", str(requests_per_server * servers), "--quiet", "--json", str(out),
           "--set", f"scenario.arrivals.rate_per_s={RATE_PER_SERVER * servers!r}",
           "--set", f"system.servers={servers}", "--set", f"system.gpus.count={8 * servers}"]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=SOURCE_ROOT, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests-per-server", type=int, default=500)
    parser.add_argument("--servers", default="1,2,4,8,16")
    parser.add_argument("--bar-s", type=float, default=120.0)
    args = parser.parse_args(argv)
    total = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.servers.split(",")):
            out = Path(tmp) / f"servers{n}.json"
            wall = run_once(n, args.requests_per_server, out)
            events = sum(r.get("events") or 0 for r in json.loads(out.read_text())["results"])
            total += wall
            print(f"servers {n:2d}: {args.requests_per_server * n:6d} requests, {wall:6.1f} s, {events:,} events")
    print(f"total {total:.1f} s; bar {args.bar_s:.0f} s; ratio {total / args.bar_s:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
