"""Speculative decoding in the serving engine: a draft model proposes k tokens, the target model verifies them
in one pass, and the longest accepted run plus the target's own next token is emitted.

* Acceptance: each draft token is accepted with probability a, independently, until the first rejection (the
  i.i.d. acceptance model of Leviathan et al., "Fast Inference from Transformers via Speculative Decoding",
  ICML 2023, section 3.1). A verification step emits 1 + min(G, k) tokens, G geometric with P(G >= j) = a^j,
  so E[emitted] = (1 - a^(k+1)) / (1 - a) (k + 1 at a = 1).
* Draws: a counter-based hash of (seed, request, step), so a request's draws are the same whatever batch it
  shares and the run is deterministic.
* Cost of an iteration: the target's mixed-batch step in which every verifying sequence's entry is
  (its context, k + 1 new tokens) -- the KV of all k + 1 positions is computed and written, the rejected
  ones' is discarded -- plus, before it, the draft's decode steps of those sequences (k, fewer when every
  verification of the iteration is shorter near an answer's end; its first step also
  prefills the iteration's prefill chunks) on the same GPUs, the draft's weights and KV in HBM.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from archsim.serving.requests import mix, splitmix64
from archsim.serving.spec import IterationCost
from archsim.system.workload import Workload

_STEP_TAG = np.uint64(0x5BEC0DE5A11CE5ED)  # keeps these draws apart from every other hash of the package


@dataclass(frozen=True)
class Speculation:
    """What the engine needs: draft length k, acceptance rate, the draws' seed and the draft's cost."""

    k: int
    acceptance: float
    seed: int
    draft: IterationCost
    draft_model: Workload | None = None  # the draft's shape and dtype (its energy)

    def expected_tokens(self) -> float:
        return expected_tokens(self.k, self.acceptance)


def expected_tokens(k: int, acceptance: float) -> float:
    """E[tokens a verification step emits] = (1 - a^(k+1)) / (1 - a); k + 1 at a = 1."""
    if acceptance >= 1.0:
        return float(k + 1)
    return (1.0 - acceptance ** (k + 1)) / (1.0 - acceptance)


def emitted_tokens(k: int, acceptance: float, seed: int, requests: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """int64: tokens each (request, step) verification emits, 1 + min(G, k) with G geometric (see above)."""
    h = mix(mix(_STEP_TAG, np.uint64(seed)), np.asarray(requests, dtype=np.uint64))
    h = splitmix64(mix(h, np.asarray(steps, dtype=np.uint64)))
    u = ((h >> np.uint64(11)).astype(np.float64) + 1.0) * 2.0**-53  # uniform on (0, 1]
    if acceptance <= 0.0:
        return np.ones(len(u), dtype=np.int64)
    if acceptance >= 1.0:
        return np.full(len(u), k + 1, dtype=np.int64)
    geometric = np.floor(np.log(u) / np.log(acceptance))  # P(G >= j) = P(u <= a^j) = a^j
    return 1 + np.minimum(geometric, k).astype(np.int64)


def draft_ns(speculation: Speculation, cached: np.ndarray, new: np.ndarray, verifying: np.ndarray) -> float:
    """The draft's part of an iteration: up to k decode steps of the verifying sequences (as many as the longest
    verification needs), the first with the iteration's prefill chunks (the draft keeps its own KV of every
    prompt)."""
    draft = speculation.draft
    ctx = cached[verifying]
    # drafts the longest verification needs (a sequence near its answer's end verifies fewer)
    steps = int(new[verifying].max()) - 1 if len(ctx) else 0
    if steps <= 0:
        chunks = ~verifying
        return float(draft.iteration_ns(cached[chunks], new[chunks])) if chunks.any() else 0.0
    ones = np.ones(len(ctx), dtype=np.int64)
    first = draft.iteration_ns(np.concatenate([ctx, cached[~verifying]]), np.concatenate([ones, new[~verifying]]))
    return float(first) + sum(float(draft.iteration_ns(ctx + j, ones)) for j in range(1, steps))


def draft_work(speculation: Speculation, cached: np.ndarray, new: np.ndarray,
               verifying: np.ndarray) -> tuple[int, int, int, int]:
    """What the draft's part of an iteration computes (as `draft_ns` runs it), for its energy: (passes over its
    weights, tokens it computes, their attention (query, key) pairs, KV tokens it reads: a decode step its
    context, a prefill chunk its context once, as flash attention does)."""
    ctx = cached[verifying]
    steps = int(new[verifying].max()) - 1 if len(ctx) else 0
    chunks = ~verifying
    c, m = cached[chunks], new[chunks]
    chunk_tokens, chunk_pairs, chunk_kv = int(m.sum()), int((m * c + m * (m + 1) // 2).sum()), int((c + m).sum())
    if steps <= 0:
        return (1 if chunks.any() else 0), chunk_tokens, chunk_pairs, chunk_kv
    n = len(ctx)
    # step j (0 .. steps - 1) runs each verifying sequence's token j over its context and the j drafted before
    pairs = steps * int(ctx.sum()) + n * steps * (steps + 1) // 2
    kv = steps * int(ctx.sum()) + n * steps * (steps - 1) // 2
    return steps, steps * n + chunk_tokens, pairs + chunk_pairs, kv + chunk_kv
