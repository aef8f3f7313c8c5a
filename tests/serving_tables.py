"""Small request tables and an analytic iteration cost for the serving tests (not a test module)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from archsim.serving.requests import RequestTable
from archsim.serving.spec import ServingSpec, TierSpec


def _mix(a: np.ndarray, b: np.ndarray, salt: int) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = a.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + b.astype(np.uint64) + np.uint64(salt)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def table(arrival_ns, input_tokens, output_tokens, block_tokens: int = 16, *, session=None, prev=None,
          think_ns=None, prefix_tokens=0) -> RequestTable:
    """Keys are positions in a session's content stream (so a later turn that keeps the history shares its
    earlier turn's blocks); the first `prefix_tokens` of every prompt are one shared prefix."""
    n = len(input_tokens)
    input_tokens = np.asarray(input_tokens, dtype=np.int64)
    session = np.arange(n) if session is None else np.asarray(session, dtype=np.int64)
    prev = np.full(n, -1) if prev is None else np.asarray(prev, dtype=np.int64)
    turn = np.zeros(n, dtype=np.int32)
    for r in range(n):
        if prev[r] >= 0:
            turn[r] = turn[prev[r]] + 1
    nblocks = -(-input_tokens // block_tokens)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(nblocks, out=offsets[1:])
    rid = np.repeat(np.arange(n), nblocks)
    j = np.arange(offsets[-1]) - offsets[:-1].repeat(nblocks)
    keys = _mix(session[rid], j, 1)
    shared = j < prefix_tokens // block_tokens
    keys[shared] = _mix(np.zeros(shared.sum(), dtype=np.int64), j[shared], 2)
    partial = (j == nblocks[rid] - 1) & (input_tokens[rid] % block_tokens != 0)
    keys[partial] = _mix(rid[partial], j[partial], 3)
    return RequestTable(
        arrival_ns=np.asarray(arrival_ns, dtype=np.float64), prev=prev,
        think_ns=np.zeros(n) if think_ns is None else np.asarray(think_ns, dtype=np.float64),
        session=session, turn=turn, input_tokens=input_tokens,
        output_tokens=np.asarray(output_tokens, dtype=np.int64), block_offsets=offsets, block_keys=keys,
        block_tokens=block_tokens)


def poisson(n: int, rate_per_s: float, input_tokens: int, output_tokens: int, seed: int = 1, **kw) -> RequestTable:
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1e9 / rate_per_s, n))
    return table(arrival, [input_tokens] * n, [output_tokens] * n, **kw)


def sessions(n_sessions: int, turns: int, rate_per_s: float, first_tokens: int, new_tokens: int,
             output_tokens: int, think_ns: float, seed: int = 1, **kw) -> RequestTable:
    """Chat sessions: turn k+1's prompt = turn k's prompt + its output + `new_tokens`."""
    rng = np.random.default_rng(seed)
    starts = np.cumsum(rng.exponential(1e9 / rate_per_s, n_sessions))
    arrival, inp, out, sess, prev, think = [], [], [], [], [], []
    for s in range(n_sessions):
        length = first_tokens
        for k in range(turns):
            arrival.append(starts[s] if k == 0 else np.nan)
            inp.append(length)
            out.append(output_tokens)
            sess.append(s)
            prev.append(-1 if k == 0 else len(arrival) - 2)
            think.append(0.0 if k == 0 else think_ns)
            length += output_tokens + new_tokens
    return table(arrival, inp, out, session=sess, prev=prev, think_ns=think, **kw)


@dataclass(frozen=True)
class LinearCost:
    """a + b x new tokens + c x cached tokens, in ns (an analytic stand-in for the step model)."""

    a_ns: float = 5e6
    new_ns: float = 20e3
    cached_ns: float = 50.0

    def iteration_ns(self, cached_tokens: np.ndarray, new_tokens: np.ndarray) -> float:
        return self.a_ns + self.new_ns * float(np.sum(new_tokens)) + self.cached_ns * float(np.sum(cached_tokens))


@dataclass(frozen=True)
class VectorLinearCost(LinearCost):
    """LinearCost with the optional vectorized decode stretch (bit-identical to calling iteration_ns per step)."""

    def decode_steps_ns(self, cached_tokens: np.ndarray, steps: int) -> np.ndarray:
        n = len(cached_tokens)
        cached = (float(np.sum(cached_tokens)) + n * np.arange(steps)).astype(np.float64)
        return self.a_ns + self.new_ns * float(n) + self.cached_ns * cached


@dataclass(frozen=True)
class PnmLinearCost(LinearCost):
    """LinearCost plus decode attention in a PNM pool's units: `pnm_ns` per cached token of the decode
    sequences, with every instance attending at once (as the step model's table has it)."""

    pnm_ns: float = 2000.0

    def iteration_ns(self, cached_tokens: np.ndarray, new_tokens: np.ndarray, pool_scale: float = 1.0) -> float:
        return self.iteration_pnm_ns(cached_tokens, new_tokens, pool_scale)[0]

    def iteration_pnm_ns(self, cached_tokens: np.ndarray, new_tokens: np.ndarray,
                         pool_scale: float = 1.0) -> tuple[float, float]:
        decoding = np.asarray(new_tokens) == 1
        pnm = self.pnm_ns * float(np.sum(np.asarray(cached_tokens)[decoding]))
        return LinearCost.iteration_ns(self, cached_tokens, new_tokens) + pnm, pnm

    def decode_steps_pnm_ns(self, cached_tokens: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
        """iteration_pnm_ns of `steps` decode steps at once (bit-identical to one call per step)."""
        n = len(cached_tokens)
        cached = (float(np.sum(cached_tokens)) + n * np.arange(steps)).astype(np.float64)
        pnm = self.pnm_ns * cached
        return self.a_ns + self.new_ns * float(n) + self.cached_ns * cached + pnm, pnm


KV_BYTES_PER_TOKEN = 320 * 1024      # Llama-3.1-70B, bf16: 80 layers x 8 KV heads x 128 x 2 (K, V) x 2 B


def spec(*, hbm_tokens: int = 200_000, lower: str | None = None, lower_tokens: int = 2_000_000,
         link_GBps: float = 25.0, **kw) -> ServingSpec:
    """A one-instance system with HBM room for `hbm_tokens` tokens of KV and optionally one lower tier."""
    tiers = [TierSpec("hbm", "hbm", hbm_tokens * KV_BYTES_PER_TOKEN, None, 0.0, 0.0, "none")]
    if lower == "pool":
        tiers.append(TierSpec("pool", "pool", lower_tokens * KV_BYTES_PER_TOKEN, "cxl", link_GBps, 1000.0, "pnm"))
    elif lower is not None:
        tiers.append(TierSpec(lower, lower, lower_tokens * KV_BYTES_PER_TOKEN, "pcie", link_GBps, 2000.0, "none"))
    base = ServingSpec(system="test", tier_label="T", instances=1, tensor_parallel=1, router="round_robin",
                       max_batch_tokens=8192, max_batch_seqs=256, chunked_prefill=True, block_tokens=16,
                       preemption="recompute", kv_bytes_per_token=KV_BYTES_PER_TOKEN, tiers=tuple(tiers),
                       kv_home=0, max_context_tokens=131072, decode="load")
    return replace(base, **kw)
