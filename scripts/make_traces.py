"""Regenerate the small captured traces shipped in traces/ (each must stay under 2 MiB).

Usage: python scripts/make_traces.py [--out traces]
Needs the capture extra (torch, transformers). Real published shapes, cut to one or two decoder layers
(decoder layers are identical, so per-layer traffic is that of the full model): the meta device runs
the real modules on shape-only tensors, which gives exact byte counts without allocating 8B weights.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from archsim.capture import CaptureOptions, capture_trace
from archsim.resources import SOURCE_ROOT
from archsim.trace.info import summarize

MAX_BYTES = 2 * 2**20

TRACES = {
    # Llama-3.1-8B shapes (GQA 32:8, head_dim 128), 2 layers, 2 chat turns on a kept cache.
    "llama-3.1-8b_2l_chat.npz": CaptureOptions(
        model="llama-3.1-8b", layers=2, device="meta", batch=2, prompt_tokens=128, decode_steps=32, turns=2,
        turn_tokens=32, seed=1),
    # Qwen2.5-0.5B shapes (GQA 14:2, q/k/v bias, tied embeddings), 2 layers, real CPU compute in bf16
    # with greedy decoding; 4 requests share a 32-token system prompt.
    "qwen2.5-0.5b_2l_decode.npz": CaptureOptions(
        model="qwen2.5-0.5b", layers=2, device="cpu", dtype="bfloat16", batch=4, prompt_tokens=64,
        decode_steps=32, shared_prefix_tokens=32, seed=2),
    # DeepSeek-V2-Lite shapes: MLA (512-wide latent + 64 RoPE dims cached), layer 0 only (dense MLP;
    # later layers are MoE, whose routing needs real numerics), 2 requests.
    "deepseek-v2-lite_1l_mla.npz": CaptureOptions(
        model="deepseek-v2-lite", layers=1, device="meta", batch=2, prompt_tokens=96, decode_steps=32, seed=3),
    # The 2-layer test model on CPU in float32: the smallest complete example.
    "tiny-llama_chat.npz": CaptureOptions(
        model="tiny-llama", device="cpu", batch=2, prompt_tokens=16, decode_steps=8, turns=3, turn_tokens=8,
        seed=4),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=SOURCE_ROOT / "traces")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, options in TRACES.items():
        path = args.out / name
        capture_trace(options, path)
        summary = summarize(path)
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise SystemExit(f"{name} is {size} bytes, over the 2 MiB limit for shipped traces")
        kv = summary["bytes"]["k"]["read"] + summary["bytes"]["v"]["read"]
        print(f"{name}: {summary['steps']} steps, {summary['records']:,} records, {size / 2**10:.1f} KiB, "
              f"KV read {kv / 2**20:.2f} MiB, weights read {summary['bytes']['weight']['read'] / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
