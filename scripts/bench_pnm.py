"""Simulator speed of a timed PNM run: a 32K-token GQA decode step over every unit of one HBM3 stack.

    python scripts/bench_pnm.py [--shape heads=32,kv_heads=8,head_dim=128,context=32768,batch=1]
                                [--memory configs/memory/hbm3.yaml] [--pnm configs/pnm/default.yaml]

Prints the host wall time (JIT warm-up reported apart), the simulated cycles and time, the roofline
ratio and the DRAM bandwidth. Issue 3's budget: under 30 s on the project's 2-core machine.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from archsim.config.memory import load_memory_config
from archsim.memory import warm_up
from archsim.pnm.timed.simulate import run_pnm
from archsim.pnm.timed.stats import pnm_stats
from archsim.pnm.timed.unit_config import load_pnm_config
from archsim.resources import SOURCE_ROOT

REPO = SOURCE_ROOT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel", default=str(REPO / "isa" / "kernels" / "gqa_decode.s"))
    parser.add_argument("--shape", default="heads=32,kv_heads=8,head_dim=128,context=32768,batch=1")
    parser.add_argument("--memory", default=str(REPO / "configs" / "memory" / "hbm3.yaml"))
    parser.add_argument("--pnm", default=str(REPO / "configs" / "pnm" / "default.yaml"))
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        help="pnm.* override, e.g. pnm.units.address_space=interleaved (repeatable)")
    args = parser.parse_args()

    start = time.perf_counter()
    warm_up()
    jit_s = time.perf_counter() - start
    memory = load_memory_config(args.memory)
    pnm = load_pnm_config(args.pnm, args.overrides)
    start = time.perf_counter()
    run = run_pnm(args.kernel, args.shape, memory, pnm)
    stats = pnm_stats(run)
    wall_s = time.perf_counter() - start
    p, m = stats["pnm"], stats["memory"]
    print(f"{Path(args.kernel).name} {args.shape} on {Path(args.memory).name}: {p['units']} units "
          f"({p['head_groups']} head groups x {p['splits']} splits, {p['address_space']})")
    print(f"wall time       {wall_s:.2f} s (functional {p['sim']['functional_wall_s']:.2f}, timed "
          f"{p['sim']['timing_wall_s']:.2f}, roofline {p['sim']['roofline_wall_s']:.2f}; JIT warm-up {jit_s:.2f} s "
          f"not counted)")
    print(f"simulated       {p['cycles']:,} cycles at {p['clock_GHz']:g} GHz = {p['time_ns'] / 1000:,.2f} us; "
          f"{m['reads'] + m['writes']:,} DRAM requests, {p['sim']['memory_steps']:,} memory steps")
    print(f"roofline        {p['roofline_cycles']:,} cycles ({p['roofline']['bound']}-bound), "
          f"run / roofline = {p['roofline_ratio']:.4f}")
    print(f"DRAM bandwidth  {m['bandwidth_GBps']:,.1f} GB/s = {100 * m['bandwidth_utilization']:.1f} % of "
          f"{m['peak_bandwidth_GBps']:,.1f} GB/s peak (open loop on the same requests: "
          f"{p['roofline']['sustained_bandwidth_GBps']:,.1f} GB/s)")
    print(f"budget          {'OK' if wall_s < 30 else 'OVER'}: {wall_s:.1f} s of 30 s")


if __name__ == "__main__":
    main()
