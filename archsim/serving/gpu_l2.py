"""The GPU's L2 as the attention that stays on the GPU (KV in HBM) reuses it: hit rates from LRU stack distances.

What is streamed, per sampled iteration: one layer (every layer's attention reads the same blocks of its own
KV) on one GPU (tensor parallelism gives each GPU heads / tp query heads and their KV heads). The paged-attention
kernel's thread blocks in launch order: for each sequence of the batch in order, for each of the GPU's query
heads, the blocks of its KV head (vLLM's paged attention reads a KV head's blocks once per query head: its grid
is (heads, sequences)), a prefill chunk's cached prefix the same way. A line is one KV block of one KV head (K
and V of `block_tokens` tokens), labelled by the block's content key, so blocks that sequences share (a
program's branches, a common prompt) are the same lines.

Why one layer is the reuse window: between two layers' attention a GPU streams its share of the next layer's
weights and the previous layer's KV is not read again until the next iteration, after every other layer's;
the weights alone (a 70B model at tp 8: 200+ MB per layer per GPU) exceed an H100's 50 MB, so nothing of an
iteration's KV survives to the next (stated, not simulated). Weights are never reused within an iteration for
the same reason.

Hits: a fully associative LRU of the capacity in lines (archsim.cache.reuse): the datasheet L2 and the size
sweep `SWEEP_FACTORS` x it (reported, never picked). Sampling: the first iteration and then one in every
`stride` (16) iterations, at most `max_samples` (512) simulated per run, so the cost stays bounded on any run;
a stretch of pure decode (the same batch a token longer each iteration) is simulated once, weighted by the
sample points it holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from archsim.cache.reuse import hits_at, stack_distances

SWEEP_FACTORS = (0.5, 1.0, 2.0, 4.0)


@dataclass
class GpuL2Sampler:
    capacity_bytes: int
    line_bytes: int  # one KV block of one KV head in one layer
    query_heads_per_gpu: int
    kv_heads_per_gpu: int
    stride: int = 16
    max_samples: int = 512
    samples: int = 0
    reads: int = 0
    hits: dict[float, int] = field(default_factory=dict)
    distances: list[np.ndarray] = field(default_factory=list)  # re-references' distances in lines, a bounded sample
    _next: int = 0

    def points(self, first: int, count: int = 1) -> int:
        """Sample points among iterations [first, first + count): the first due one, then one every `stride`."""
        if self.samples >= self.max_samples or first + count <= self._next:
            return 0
        return (first + count - 1 - max(first, self._next)) // self.stride + 1

    def due(self, iteration: int) -> bool:
        return self.points(iteration) > 0

    def sample(self, iteration: int, blocks: list[np.ndarray], count: int = 1) -> None:
        """The GPU attention of iterations [iteration, iteration + count) that read the same blocks (a stretch of
        pure decode, a token apart): `blocks` the block keys each sequence reads, in batch order, weighted by
        the sample points among them."""
        weight = self.points(iteration, count)
        self._next = max(iteration, self._next) + weight * self.stride
        if not blocks or not weight:
            return
        group = self.query_heads_per_gpu // self.kv_heads_per_gpu
        stream = []
        with np.errstate(over="ignore"):
            for keys in blocks:
                for head in range(self.kv_heads_per_gpu):
                    lines = keys.astype(np.uint64) * np.uint64(self.kv_heads_per_gpu) + np.uint64(head)  # (block, head)
                    stream.append(np.tile(lines, group))  # each of its query heads reads them in turn
        distances = stack_distances(np.concatenate(stream))
        self.samples += 1
        self.reads += weight * int(distances.size)
        again = distances[distances >= 0]
        if again.size:  # a thousand per sample bounds the memory
            self.distances.append(np.sort(again)[np.linspace(0, again.size - 1, min(1000, again.size)).astype(int)])
        for factor in SWEEP_FACTORS:
            lines = int(self.capacity_bytes * factor // self.line_bytes)
            self.hits[factor] = self.hits.get(factor, 0) + weight * hits_at(distances, lines)

    def summary(self) -> dict[str, object]:
        rate = {f"{int(self.capacity_bytes * f / 1e6)}MB": (self.hits.get(f, 0) / self.reads if self.reads else None)
                for f in SWEEP_FACTORS}
        seen = np.concatenate(self.distances) * self.line_bytes if self.distances else np.zeros(1)
        distance = {"p50": float(np.percentile(seen, 50)), "p90": float(np.percentile(seen, 90)),
                    "max": float(seen.max())}
        return {"capacity_bytes": self.capacity_bytes, "policy": "lru", "line_bytes": self.line_bytes,
                "reuse_distance_bytes": distance,
                "kernel": "paged attention: each query head reads its KV head's blocks",
                "sampled_iterations": self.samples, "kv_reads": self.reads,
                "kv_hit_rate": self.hits.get(1.0, 0) / self.reads if self.reads else None,
                "kv_hit_rate_by_capacity": rate}
