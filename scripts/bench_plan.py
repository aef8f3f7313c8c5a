"""Speed of the offload planner (archsim.plan): one request planned, a 400-point decision map, and the
validation grid against simulate_step.

    python scripts/bench_plan.py [--systems g25,g15] [--workload llama3-70b-b16] [--validate]

Prints the mean time to plan one request (every candidate of a system predicted and ranked; the issue's
budget: under 1 ms), the time of a 20 x 20 context x batch decision map (under 30 s), and with --validate the
wall time of the default validation grid (under 10 minutes warm) with its agreement and regret.
"""

from __future__ import annotations

import argparse
import time

from archsim.plan.inputs import plan_inputs
from archsim.plan.model import plan
from archsim.system.config import load_system_config
from archsim.system.workload import load_workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--systems", default="g25,g15")
    parser.add_argument("--workload", default="llama3-70b-b16")
    parser.add_argument("--validate", action="store_true", help="also time the default validation grid")
    args = parser.parse_args()
    workload = load_workload(args.workload)
    systems = [load_system_config(s) for s in args.systems.split(",")]
    for system in systems:
        inputs = plan_inputs(system, workload)
        plan(inputs, 4096, workload.batch)  # the GPU kernel table: built once per system and workload
        n, start = 2000, time.perf_counter()
        for i in range(n):
            plan(inputs, 1024 + 61 * i, 1 + i % 256)
        per_ms = (time.perf_counter() - start) / n * 1e3
        contexts = [1024 * 2 ** (k * 7 / 19) for k in range(20)]
        batches = [max(1, round(2 ** (k * 8 / 19))) for k in range(20)]
        start = time.perf_counter()
        for c in contexts:
            for b in batches:
                plan(inputs, int(c), b)
        map_s = time.perf_counter() - start
        print(f"{system.name}: plan one request {per_ms:.3f} ms (budget 1 ms); 400-point map {map_s:.2f} s "
              f"(budget 30 s)")
    if args.validate:
        from archsim.plan.validate import Evaluator, default_grid, validate

        start = time.perf_counter()
        out = validate(Evaluator(systems, workload), default_grid(workload))
        print(f"validation: {out['feasible_points']} feasible points ({out['contested_points']} contested) in "
              f"{time.perf_counter() - start:.1f} s; agreement {out['agreement']:.4f}, contested "
              f"{out['contested_agreement']:.4f}, mean regret {out['mean_regret']:.5f}, max {out['max_regret']:.5f}")


if __name__ == "__main__":
    main()
