"""KV placements of the serving engine (`system.kv.placement` hbm, pool, auto) over every shipped scenario.

Usage: python scripts/placement_compare.py [--requests 100] [--seed 0] [--scenarios long-short-mix,multiturn]
       [--systems g25,g15] [--jobs 1]
For each scenario of configs/scenarios/*.yaml, system and placement it serves the scenario's first --requests
requests (seed --seed) in-process, through the API `archsim serve` uses (archsim.serving.parallel.run_systems:
the same figures as `archsim serve SYSTEM --scenario S --requests N --seed 0 --set system.kv.placement=P`),
and prints one markdown table per system: E2E p50/p99, TTFT p50, TPOT p50 (ms), completed requests whose KV
ended in HBM / the pool (a fixed placement: all on its side; auto: the JSON's `placement.requests_by_tier`),
auto's E2E p50 against the best fixed placement's (in %, negative: auto is faster) and auto's
`placement.moves`. The tables depend only on the inputs (progress and wall times go to stderr).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from archsim.resources import SOURCE_ROOT
from archsim.serving.parallel import run_systems
from archsim.serving.run import SystemRun, requests_source, result_entry
from archsim.serving.scenario import Scenario, load_scenario
from archsim.system.config import SystemConfig, load_system_config

SCENARIOS_DIR = SOURCE_ROOT / "configs" / "scenarios"
SYSTEMS = ("g25", "g15")
PLACEMENTS = ("hbm", "pool", "auto")
FIXED = ("hbm", "pool")
HEADER = ("scenario", "placement", "E2E p50 (ms)", "E2E p99 (ms)", "TTFT p50 (ms)", "TPOT p50 (ms)",
          "requests in HBM / pool", "auto vs best fixed E2E p50", "placement moves")


def shipped_scenarios() -> list[str]:
    return sorted(p.stem for p in SCENARIOS_DIR.glob("*.yaml"))


def serve_placements(system: str, scenario: Scenario, requests: int, seed: int, jobs: int) -> dict[str, dict]:
    """{placement: its archsim.serving/1 result entry}, every placement on the same requests."""
    configs = [load_system_config(system, (f"system.kv.placement={p}",)) for p in PLACEMENTS]
    source = requests_source(scenario, requests, None, seed)
    tasks = [(config, scenario, source) for config in configs]
    entries: dict[str, dict] = {}

    def done(k: int, run: SystemRun, seconds: float) -> None:
        entries[PLACEMENTS[k]] = result_entry(run, scenario)
        print(f"  {scenario.name} {system} {PLACEMENTS[k]}: {run.status}, {seconds:.1f} s", file=sys.stderr,
              flush=True)

    run_systems(tasks, warmup=0, jobs=jobs, on_done=done)
    return entries


def side_names(config: SystemConfig) -> tuple[str, str]:
    """The names of the HBM tier and the PNM pool tier (the sides a placement chooses between)."""
    hbm = next(t.name for t in config.kv_tiers if t.kind == "hbm")
    pool = next(t.name for t in config.kv_tiers if t.compute == "pnm")
    return hbm, pool


def requests_by_side(entry: dict, placement: str, sides: tuple[str, str]) -> tuple[int, int] | None:
    """Completed requests whose KV ended in HBM and in the pool."""
    if entry["status"] != "ok":
        return None
    if placement == "auto":
        by_tier = entry["placement"]["requests_by_tier"]
        return by_tier.get(sides[0], 0), by_tier.get(sides[1], 0)
    done = entry["requests_completed"]
    return (done, 0) if placement == "hbm" else (0, done)


def metric(entry: dict, key: str, stat: str) -> float | None:
    return (entry.get(key) or {}).get(stat)


def auto_gap_pct(entries: dict[str, dict]) -> float | None:
    """auto's E2E p50 over the best fixed placement's, minus 1, in %."""
    fixed = [metric(entries[p], "e2e_ms", "p50") for p in FIXED]
    auto = metric(entries["auto"], "e2e_ms", "p50")
    best = min((v for v in fixed if v is not None), default=None)
    return None if auto is None or not best else 100.0 * (auto / best - 1.0)


def fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table_row(scenario: str, placement: str, entries: dict[str, dict], sides: tuple[str, str]) -> list[str]:
    entry = entries[placement]
    split = requests_by_side(entry, placement, sides)
    auto = placement == "auto"
    moves = entry["placement"]["moves"] if auto and entry["status"] == "ok" else None
    gap = auto_gap_pct(entries) if auto else None
    cells = [scenario, f"`{placement}`", fmt(metric(entry, "e2e_ms", "p50"), ",.0f"),
             fmt(metric(entry, "e2e_ms", "p99"), ",.0f"), fmt(metric(entry, "ttft_ms", "p50"), ",.0f"),
             fmt(metric(entry, "tpot_ms", "p50"), ",.2f"), "-" if split is None else f"{split[0]} / {split[1]}",
             fmt(gap, "+.1f") + (" %" if gap is not None else ""), fmt(moves, ",d")]
    if entry["status"] != "ok":
        cells[2] = entry["status"]
    return cells


def markdown_table(system: str, requests: int, seed: int, rows: list[list[str]]) -> str:
    lines = [f"### {system}: {requests} requests per scenario, seed {seed}", "",
             "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def system_table(system: str, scenarios: list[str], args: argparse.Namespace) -> str:
    sides = side_names(load_system_config(system, ()))
    rows = []
    for name in scenarios:
        entries = serve_placements(system, load_scenario(name), args.requests, args.seed, args.jobs)
        rows += [table_row(name, p, entries, sides) for p in PLACEMENTS]
    return markdown_table(system, args.requests, args.seed, rows)


def names(text: str, known: tuple[str, ...] | list[str], what: str) -> list[str]:
    chosen = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in known]
    if unknown:
        sys.exit(f"unknown {what} {unknown[0]!r}: one of {', '.join(known)}")
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scenarios", default=",".join(shipped_scenarios()), help="comma-separated subset")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset")
    parser.add_argument("--jobs", type=int, default=1, help="placements served at once (same results for any)")
    args = parser.parse_args()
    scenarios = names(args.scenarios, shipped_scenarios(), "scenario")
    systems = names(args.systems, SYSTEMS, "system")
    started = time.perf_counter()
    print("\n\n".join(system_table(s, scenarios, args) for s in systems))
    print(f"  wall time {time.perf_counter() - started:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
