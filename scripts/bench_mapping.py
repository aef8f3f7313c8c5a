"""Benchmark the logical -> physical mapping on one core: logical records/s and physical accesses/s.

Usage: python scripts/bench_mapping.py [--repeat 3]
The traces come from the analytic generators (same schema as captures). Mapping streams accesses in
batches (TraceMapper.iter_chunk), as `trace convert` and a simulator front end consume them; the batches
are only counted here. Best of --repeat runs is reported, since the machine is shared.
"""

from __future__ import annotations

import argparse
import time

from archsim.models import load_preset
from archsim.trace.mapping import PoolPlacement, RangeRows, TraceMapper, kv_heads_from_header
from archsim.workloads import decode_trace

SCENARIOS = [
    # (label, preset, layers, batch, context, steps, placement fields)
    ("record-bound: tiny-llama decode B=32 ctx=16, 400 steps", "tiny-llama", None, 32, 16, 400, {}),
    ("record-bound, token_major", "tiny-llama", None, 32, 16, 400, {"layout": "token_major"}),
    ("record-bound, range (the step model's layout)", "tiny-llama", None, 32, 16, 400, {"layout": "range"}),
    ("llama-3.1-8b decode B=16 ctx=64, 8 steps", "llama-3.1-8b", None, 16, 64, 8, {}),
    ("llama-3.1-8b decode B=16 ctx=64, 2 layers, weights in pool", "llama-3.1-8b", 2, 16, 64, 1,
     {"weights_in": "pool"}),
    ("access-bound: llama-3.1-70b decode B=4 ctx=8K, 8 layers, TP2", "llama-3.1-70b", 8, 4, 8192, 1,
     {"tensor_parallel": 2, "devices": 2}),
    ("access-bound, range", "llama-3.1-70b", 8, 4, 8192, 1, {"tensor_parallel": 2, "devices": 2, "layout": "range"}),
]


def run(cols: dict, header: dict, placement: PoolPlacement) -> int:
    rows = RangeRows.scan([cols]) if placement.layout == "range" else None  # its first pass, timed with it
    mapper = TraceMapper(placement, kv_heads=kv_heads_from_header(header), range_rows=rows)
    return sum(len(batch["address"]) for batch in mapper.iter_chunk(cols))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'scenario':<58}{'records':>10}{'accesses':>13}{'M records/min':>15}{'M accesses/s':>14}")
    for label, preset, layers, batch, context, steps, fields in SCENARIOS:
        shape = load_preset(preset).shape()
        if layers:
            shape = shape.with_layers(layers)
        generated = decode_trace(shape, batch=batch, context_tokens=context, steps=steps)
        cols, header = generated.columns(), generated.header()
        placement = PoolPlacement(**{"devices": 4, "channels_per_device": 32, **fields})
        best = float("inf")
        accesses = 0
        for _ in range(args.repeat):
            started = time.perf_counter()
            accesses = run(cols, header, placement)
            best = min(best, time.perf_counter() - started)
        records = len(cols["step"])
        print(f"{label:<58}{records:>10,}{accesses:>13,}{records / best * 60 / 1e6:>15.1f}"
              f"{accesses / best / 1e6:>14.1f}")


if __name__ == "__main__":
    main()
