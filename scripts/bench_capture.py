"""Capture overhead: the same scenario run with and without the recording hooks and tracing cache.

Usage: python scripts/bench_capture.py [--model qwen2.5-0.5b] [--layers 4] [--repeat 3]
Reports wall time inside the model's forward calls (best of --repeat) and the whole capture including
writing the trace. Random weights, real CPU compute.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from archsim.capture import CaptureOptions, capture_trace, run_uncaptured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-0.5b")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--decode-steps", type=int, default=32)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: stable on a shared box)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    options = CaptureOptions(model=args.model, layers=args.layers, batch=args.batch, prompt_tokens=args.prompt_tokens,
                             decode_steps=args.decode_steps, dtype=args.dtype)
    run_uncaptured(options)  # warm-up: imports, allocator, kernels
    plain, traced, total = [], [], []
    records = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            plain.append(run_uncaptured(options).forward_seconds)
            started = time.perf_counter()
            result = capture_trace(options, Path(tmp) / f"t{i}.npz")
            total.append(time.perf_counter() - started)
            traced.append(result.forward_seconds)
            records = result.records
    base, hooked = min(plain), min(traced)
    steps = 1 + args.decode_steps
    print(f"model {args.model} x {args.layers} layers, batch {args.batch}, prompt {args.prompt_tokens}, "
          f"{args.decode_steps} decode steps, {args.dtype}: {records:,} records")
    print(f"  forward, uncaptured   {base * 1e3:9.1f} ms  ({base / steps * 1e3:.2f} ms/step)")
    print(f"  forward, captured     {hooked * 1e3:9.1f} ms  ({hooked / steps * 1e3:.2f} ms/step)")
    print(f"  capture overhead      {(hooked / base - 1) * 100:9.1f} %  "
          f"({(hooked - base) / records * 1e6:.1f} us per record)")
    print(f"  whole capture (load model, run, write trace)  {min(total):.2f} s")


if __name__ == "__main__":
    main()
