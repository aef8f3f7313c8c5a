"""The multi-token kernel (isa/kernels/tree_decode.s) on one HBM3 stack: cycles, roofline and DRAM bytes
as the query tokens per sequence grow, with and without split-K (the table in docs/pnm.md, section 7).

    python scripts/tree_kernel_table.py [--shape heads=32,kv_heads=8,head_dim=128,context=8192,batch=1]
"""

from __future__ import annotations

import argparse

from archsim.config.memory import load_memory_config
from archsim.pnm.timed.simulate import run_pnm
from archsim.pnm.timed.unit_config import load_pnm_config
from archsim.resources import SOURCE_ROOT

KERNEL = SOURCE_ROOT / "isa" / "kernels" / "tree_decode.s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="heads=32,kv_heads=8,head_dim=128,context=8192,batch=1")
    parser.add_argument("--queries", default="1,2,4,8,16")
    args = parser.parse_args()
    memory = load_memory_config(SOURCE_ROOT / "configs" / "memory" / "hbm3.yaml")
    pnm = load_pnm_config()
    columns = ("units", "queries", "cycles", "memory term", "compute term", "bound", "cycles / roofline",
               "DRAM bytes / 1 query's")
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for units in (16, 8):
        base_bytes = None
        for queries in (int(q) for q in args.queries.split(",")):
            run = run_pnm(KERNEL, f"{args.shape},queries={queries}", memory, pnm, units=units)
            bound = run.roofline
            base_bytes = base_bytes or bound.dram_bytes
            print(f"| {units} | {queries} | {run.timing.cycles:,} | {bound.memory_cycles:,} | {bound.compute_cycles:,} "
                  f"| {bound.bound} | {run.timing.cycles / bound.cycles:.3f} | {bound.dram_bytes / base_bytes:.4f} |")


if __name__ == "__main__":
    main()
