"""The figures configs/scenarios/*.yaml derive from a Mooncake JSONL trace, recomputed from the trace itself.

Usage: python scripts/mooncake_stats.py TRACE.jsonl [--block-tokens 512] [--out-lengths LENGTHS.csv]
Run on Mooncake's FAST'25 synthetic_trace.jsonl it gives the numbers cited in fixed-input.yaml, multiturn.yaml
and shared-prefix.yaml (mean lengths, request rate, shared-prefix groups and lengths); `--out-lengths` writes
the `tokens,weight` table of its output lengths (configs/scenarios/mooncake_output_lengths.csv).
A request's shared prefix is its longest run of leading hash ids that an earlier request also began with
(ids are prefix-chained, so equal leading ids mean equal leading content).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import numpy as np


def stats(path: Path, block_tokens: int) -> dict[str, float]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    inputs = np.array([r["input_length"] for r in rows])
    outputs = np.array([r["output_length"] for r in rows])
    span_s = (rows[-1]["timestamp"] - rows[0]["timestamp"]) / 1e3
    seen: set[tuple[int, ...]] = set()
    shared = []
    for r in rows:
        ids = tuple(r["hash_ids"])
        k = 0
        while k < len(ids) and ids[: k + 1] in seen:
            k += 1
        shared.append(k)
        seen.update(ids[: j + 1] for j in range(len(ids)))
    shared_blocks = np.array(shared)
    reusing = shared_blocks > 0
    suffix = inputs[reusing] - np.minimum(shared_blocks[reusing] * block_tokens, inputs[reusing])
    groups = Counter(r["hash_ids"][0] for r in rows if r["hash_ids"])
    multi = [c for c in groups.values() if c > 1]
    return {
        "requests": len(rows), "span_s": span_s, "rate_per_s": (len(rows) - 1) / span_s if span_s else 0.0,
        "input_mean": float(inputs.mean()), "input_median": float(np.median(inputs)),
        "output_mean": float(outputs.mean()), "output_median": float(np.median(outputs)),
        "reusing_fraction": float(reusing.mean()),
        "shared_prefix_blocks_median": float(np.median(shared_blocks[reusing])) if reusing.any() else 0.0,
        "suffix_mean": float(suffix.mean()) if len(suffix) else 0.0,
        "suffix_median": float(np.median(suffix)) if len(suffix) else 0.0,
        "prefix_groups": len(multi), "requests_in_groups": sum(multi),
        "in_groups_fraction": sum(multi) / len(rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--block-tokens", type=int, default=512)
    parser.add_argument("--out-lengths", type=Path)
    args = parser.parse_args()
    for key, value in stats(args.trace, args.block_tokens).items():
        print(f"{key}: {value:.4g}" if isinstance(value, float) else f"{key}: {value}")
    if args.out_lengths:
        outputs = [json.loads(line)["output_length"] for line in args.trace.read_text().splitlines() if line.strip()]
        values, counts = np.unique(outputs, return_counts=True)
        args.out_lengths.write_text("tokens,weight\n" + "".join(f"{v},{c}\n" for v, c in zip(values, counts,
                                                                                            strict=True)))


if __name__ == "__main__":
    main()
