"""How fast Optuna's TPE finds a near-best point on the shipped PNM grid (configs/sweeps/pnm-search.yaml).

Runs the whole grid into a store once (or reads it from --grid DIR), then a 60-trial TPE search per seed on a
copy of that store (its trials are read back, not computed again) and prints, per seed, the first trial within
5 % of the grid's best, with the share of the grid that is that close (the chance a random trial is).

    python scripts/search_check.py [--grid DIR] [--seeds 5] [--trials 60] [--workers 2]
"""

from __future__ import annotations

import argparse
import csv
import shutil
import tempfile
from pathlib import Path

import yaml
from click.testing import CliRunner

from archsim.cli import main as archsim_main

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "configs" / "sweeps" / "pnm-search.yaml"


def _cycles(out: Path) -> list[int]:
    with open(out / "points.csv", newline="") as handle:
        return [int(row["pnm.pnm.cycles"]) for row in csv.DictReader(handle) if row["status"] == "ok"]


def _sweep(*args: str) -> None:
    result = CliRunner().invoke(archsim_main, ["sweep", *args, "--quiet"])
    if result.exit_code:
        raise SystemExit(result.output)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", type=Path, help="an existing store of the grid (else it is computed)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        grid = args.grid or Path(tmp) / "grid"
        if args.grid is None:
            _sweep(str(SPEC), "--workers", str(args.workers), "--out", str(grid))
        cycles = _cycles(grid)
        best = min(cycles)
        near = sum(c <= 1.05 * best for c in cycles)
        share = near / len(cycles)
        print(f"grid: {len(cycles)} points, best {best} cycles, {near} within 5 % ({100 * share:.2f} %); a random "
              f"trial finds one within {args.trials} trials with probability {1 - (1 - share) ** args.trials:.3f}")
        hits = 0
        for seed in range(1, args.seeds + 1):
            tree = yaml.safe_load(SPEC.read_text())
            tree["sweep"]["search"] = {"method": "tpe", "count": args.trials, "seed": seed}
            spec = Path(tmp) / f"tpe-{seed}.yaml"
            spec.write_text(yaml.safe_dump(tree, sort_keys=False))
            out = Path(tmp) / f"tpe-{seed}"
            shutil.copytree(grid, out)
            _sweep(str(spec), "--resume", "--workers", "1", "--out", str(out))
            trials = _cycles(out)
            first = next((i + 1 for i, c in enumerate(trials) if c <= 1.05 * best), None)
            hits += first is not None
            print(f"seed {seed}: {len(trials)} distinct trials, best {min(trials)} cycles "
                  f"({min(trials) / best:.3f}x), first within 5 % at trial {first or '-'}")
        print(f"{hits} of {args.seeds} seeds found a point within 5 % of the best in {args.trials} trials")


if __name__ == "__main__":
    main()
