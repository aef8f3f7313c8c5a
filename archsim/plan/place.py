"""`system.kv.placement: auto`: the serving engine asks this placer where a sequence's KV should live, HBM
(attention on the GPUs) or the PNM tier (attention in its units), from the planner's closed forms
(archsim.plan.model) only.

One iteration's layer waits for the slower of the two attentions (the GPUs' over the HBM side, the PNM units'
over the pool side; archsim.system.mixed.compose), so a sequence goes where the resulting slower side is the
faster: a balance of the two memories' attention time, each side at its sequences' mean context and every
instance alike (as the step model times them). A running sequence is moved at a replan only when what the
move saves over the next `replan_tokens` steps exceeds the move itself (its KV over the tier's link).
"""

from __future__ import annotations

from archsim.plan.inputs import plan_inputs
from archsim.plan.model import Candidate, PlanInputs, hbm_attention_layer_ns, pnm_attention_layer_ns
from archsim.system.config import SystemConfig
from archsim.system.workload import Workload


class Placer:
    """Per-layer attention time of each side in closed form, and the choice between them."""

    def __init__(self, inputs: PlanInputs, pool: Candidate) -> None:
        assert pool.path is not None and pool.pool is not None
        self.m, self.gpu, self.path, self.pool = inputs.model, inputs.gpu, pool.path, pool.pool

    def side_ns(self, pooled: bool, sequences: int, tokens: int) -> float:
        """One layer's attention of `sequences` sequences per instance holding `tokens` tokens in all."""
        if sequences <= 0:
            return 0.0
        m = self.m
        contexts = sequences * m.instances * m.kv_heads
        mean = tokens / sequences + 1  # with the appended token
        if not pooled:
            return hbm_attention_layer_ns(m, self.gpu, contexts, mean)
        t_q, t_pnm, t_o, _, _ = pnm_attention_layer_ns(m, self.path, self.pool, contexts, max(1, round(mean)))
        return t_q + t_pnm + t_o

    def layer_ns(self, hbm: tuple[int, int], pool: tuple[int, int]) -> float:
        """The layer's attention: the slower side. hbm, pool: (sequences, tokens) on each side."""
        return max(self.side_ns(False, *hbm), self.side_ns(True, *pool))

    def prefill_penalty_ns(self, prompt: int, chunk_tokens: int) -> float:
        """What prefilling a `prompt` in chunks of `chunk_tokens` costs more with its KV in the pool: each chunk
        attends to the prefix before it in the PNM units or brings it to the GPUs over the links (whichever
        is faster), instead of reading it from HBM (all layers, the instance's tensor-parallel GPUs)."""
        m, pool = self.m, self.pool
        row = m.kv_heads * m.row_bytes
        flops_per_pair = 2.0 * m.kv_heads * m.query_group * (m.qk_dim + m.out_dim)
        pnm_macs_per_ns = pool.macs_per_cycle * pool.channels * pool.pnm_clock_GHz
        pool_GBps = pool.channels * pool.channel_peak_GBps
        extra = 0.0
        for start in range(chunk_tokens, prompt, chunk_tokens):
            new = min(chunk_tokens, prompt - start)
            pairs, prefix_bytes = new * start, start * row
            in_hbm = max(prefix_bytes / m.tp / self.gpu.hbm_GBps,
                         pairs * flops_per_pair / m.tp / (self.gpu.peak_TFLOPS * 1e3))
            io = new * m.kv_heads * m.query_group * m.qk_dim * 4 / (self.path.query_share_GBps * m.tp)
            in_pnm = max(pairs * flops_per_pair / 2 / pnm_macs_per_ns, prefix_bytes / pool_GBps) + io
            brought = prefix_bytes / (self.path.fetch_share_GBps * m.tp) + in_hbm
            extra += min(in_pnm, brought) - in_hbm
        return m.layers * extra

    def prefers_pool(self, hbm: tuple[int, int], pool: tuple[int, int], prompt: int, chunk_tokens: int,
                     horizon_steps: int) -> bool:
        """Where a sequence of `prompt` tokens joining the instance costs less (ties: HBM): its prefill's extra
        prefix attention in the pool against what its KV there saves (or costs) the instance's layers over
        `horizon_steps` decode steps (the steps until it is planned again)."""
        at_hbm = self.layer_ns((hbm[0] + 1, hbm[1] + prompt), pool)
        at_pool = self.layer_ns(hbm, (pool[0] + 1, pool[1] + prompt))
        decode_saving = self.m.layers * (at_hbm - at_pool) * horizon_steps
        return decode_saving > self.prefill_penalty_ns(prompt, chunk_tokens)

    def step_gain_ns(self, hbm: tuple[int, int], pool: tuple[int, int], context: int, pooled: bool) -> float:
        """What one step saves if a sequence of `context` tokens now on the pool side (`pooled`) or the HBM
        side (the others' sides without it: hbm, pool) moves to the other side (negative: it costs)."""
        here = (pool[0] + 1, pool[1] + context) if pooled else (hbm[0] + 1, hbm[1] + context)
        there = (hbm[0] + 1, hbm[1] + context) if pooled else (pool[0] + 1, pool[1] + context)
        now = self.layer_ns(hbm, here) if pooled else self.layer_ns(here, pool)
        moved = self.layer_ns(there, pool) if pooled else self.layer_ns(hbm, there)
        return self.m.layers * (now - moved)


def placer_for(system: SystemConfig, workload: Workload, tier_name: str) -> Placer:
    """The placer of `system` serving `workload` (its instances), choosing between HBM and tier `tier_name`."""
    inputs = plan_inputs(system, workload)
    pool = next(c for c in inputs.candidates if c.tier_name == tier_name and c.attention == "pnm")
    return Placer(inputs, pool)
