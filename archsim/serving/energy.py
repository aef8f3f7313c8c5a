"""Energy of a serving run, priced by the system's energy table (archsim.energy; docs/energy.md).

Counted from what the run did (ServingResult), not per iteration:

* GPU: every iteration of every instance reads the weights once (`gpu.hbm_bit`); every computed token costs
  2 FLOPs per weight element (`gpu.flop`), prefill tokens (what the engine's prefill chunks computed: prompt
  tokens not found in a cache, and prompt plus answer again after a recompute preemption) and decode tokens
  alike; attention FLOPs: each decode token over its context, each prefill token over the context before it
  (causal). Attention on the GPU also reads its KV from HBM (decode: the whole context each step; a prefill:
  the context it ends at, once).
* The KV home of a PNM system: from the decode-step model at the run's largest tabulated point, the pool's
  energy per byte of KV its units read (DRAM, PNM MACs, SRAM, background power over that step) times the bytes
  the run's decode tokens read there, and the link energy per decode token (its query and output).
* Moves: the bytes the engine put on each tier's link (loads, streams, swaps, write-through, demotions) priced
  per wire bit of the route's protocols, plus the store's device energy per bit or byte (host DRAM, NVMe, the
  RDMA server's DRAM and NIC).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from archsim.energy import energy_breakdown
from archsim.kvlayout import kv_bytes_per_token
from archsim.serving.costs import StepCostTable
from archsim.serving.engine import ServingResult
from archsim.system.config import SystemConfig
from archsim.system.gpu import gpu_work
from archsim.system.mixed import attention_constants
from archsim.system.workload import Workload

DEVICE_ACTION = {"host_dram": ("host_dram.bit", 8.0), "nvme": ("nvme.byte", 1.0), "rdma": ("host_dram.bit", 8.0)}


def _token_sums(result: ServingResult, pooled: bool | None = None,
                verifier: bool = False) -> tuple[float, float, float, float]:
    """(prefill tokens, decode tokens, decode attention pairs, prefill attention pairs) over the run's target
    rows (`verifier`: over the rows a tree's own verifier model ran instead); `pooled`: only the requests whose
    KV ended in the PNM tier (True) or in HBM (False) -- placement auto. All four are the engine's record: its
    prefill chunks (a prompt's tokens not found cached, and what a recompute preemption prefilled again) and
    decode steps (a token the target model kept: with speculation its accepted drafts and its own)."""
    done = _rows(result, verifier)
    if pooled is not None and result.home_tier is not None:
        done = done & ((result.home_tier > 0) == pooled)
    assert result.prefill_tokens is not None and result.prefill_pairs is not None
    assert result.decode_tokens is not None and result.decode_pairs is not None
    return (float(result.prefill_tokens[done].sum()), float(result.decode_tokens[done].sum()),
            float(result.decode_pairs[done].sum()), float(result.prefill_pairs[done].sum()))


def run_counts(system: SystemConfig, workload: Workload, result: ServingResult,
               table: StepCostTable) -> dict[str, float]:
    """Action counts of the whole run (every instance)."""
    shape, dtype = workload.shape, workload.dtype
    el = workload.element_bytes
    work = gpu_work(shape, dtype, 1, el)  # one token: weights, and FLOPs per token
    prefill_tokens, decode_tokens, decode_pairs, prefill_pairs = _token_sums(result)
    kv_token = result.spec.kv_bytes_per_token
    spec = result.spec
    pnm_home = spec.tiers[spec.kv_home].compute == "pnm"
    if result.home_tier is not None:  # placement auto: the decode attention of HBM-homed requests ran on GPUs
        pnm_home = False
        decode_pairs = _token_sums(result, pooled=False)[2]
    layers = shape.num_layers
    heads = shape.num_attention_heads
    macs_per_pair = attention_constants(shape, dtype)[3]  # qk + out dims per query head
    per_pair_flops = 2.0 * heads * macs_per_pair  # scores + weighted sum, per layer
    flops = (work.layer_flops * layers + work.epilogue_flops) * (prefill_tokens + decode_tokens)
    flops += per_pair_flops * layers * (prefill_pairs + (0.0 if pnm_home else decode_pairs))
    hbm_bytes = float(work.weight_bytes) * (result.iterations - result.verifier_only_passes)
    sp = result.speculation
    if sp is not None:  # the rejected positions were computed too: their weights' FLOPs, and the attention
        # pairs of those whose KV is not in a PNM pool (the pool's are its units')
        flops += (work.layer_flops * layers + work.epilogue_flops) * sp["rejected_tokens"]
        flops += per_pair_flops * layers * (sp["rejected_attention_pairs"] - sp["rejected_attention_pairs_pnm"])
    if not pnm_home:  # attention reads the KV from HBM: each decode token its whole context, a prefill
        # (flash attention, one pass over the KV per query tile) its prompt's KV about once; a verification
        # step reads its context once for all the positions it verifies
        assert result.prefill_context is not None
        prefill_kv_tokens = float(result.prefill_context[_rows(result, False)].sum())
        decode_kv = sp["kv_read_bytes"] - sp["kv_read_bytes_pnm"] if sp is not None else kv_token * decode_pairs
        hbm_bytes += decode_kv + kv_token * prefill_kv_tokens
    counts = {"gpu.hbm_bit": 8.0 * hbm_bytes, "gpu.flop": float(flops)}
    for tier_index, tier in enumerate(spec.tiers[1:], start=1):
        moved = float(result.tier_read_bytes[tier_index] + result.tier_write_bytes[tier_index])
        if moved <= 0:
            continue
        cfg = system.kv_tiers[tier_index]
        for action, bits in _route_bits(system, cfg.endpoint, moved).items():
            counts[action] = counts.get(action, 0.0) + bits
        if tier.kind in DEVICE_ACTION:
            action, per_byte = DEVICE_ACTION[tier.kind]
            counts[action] = counts.get(action, 0.0) + per_byte * moved
        elif tier.kind == "pool":
            read, written = result.tier_read_bytes[tier_index], result.tier_write_bytes[tier_index]
            counts["dram.read_bit.host"] = counts.get("dram.read_bit.host", 0.0) + 8.0 * read
            counts["dram.write_bit.host"] = counts.get("dram.write_bit.host", 0.0) + 8.0 * written
    return counts


def _route_bits(system: SystemConfig, endpoint: str | None, payload_bytes: float) -> dict[str, float]:
    """Wire bits per protocol for `payload_bytes` between `endpoint` and the GPUs (every hop, its efficiency),
    plus the RDMA NICs' payload bits on Ethernet hops."""
    topology = system.topology
    if topology is None or endpoint is None:
        return {}
    gpu = system.gpu_endpoints(1)[0]
    out: dict[str, float] = {}
    for hop in topology.route(endpoint, gpu).hops:
        link = hop.link
        key = f"link.{link.protocol}.bit"
        out[key] = out.get(key, 0.0) + 8.0 * payload_bytes / link.efficiency
        if link.protocol == "ethernet":
            out["nic.bit"] = out.get("nic.bit", 0.0) + 8.0 * payload_bytes
    return out


def _rows(result: ServingResult, verifier: bool) -> np.ndarray:
    """Completed rows of the target model (or of a tree's own verifier model)."""
    if result.verifier_rows is None:
        return result.completed if not verifier else np.zeros_like(result.completed)
    return result.completed & (result.verifier_rows == verifier)


def model_counts(model: Workload, passes: float, tokens: float, pairs: float, kv_tokens: float) -> dict[str, float]:
    """A side model's actions on the GPUs (a speculative draft, a tree's verifier): each of its `passes` reads
    its weights from HBM, its `tokens` cost 2 FLOPs per weight element plus their attention `pairs`', and it
    reads `kv_tokens` of its own KV from HBM."""
    work = gpu_work(model.shape, model.dtype, 1, model.element_bytes)
    shape = model.shape
    flops = (work.layer_flops * shape.num_layers + work.epilogue_flops) * tokens
    flops += 2.0 * shape.num_attention_heads * attention_constants(shape, model.dtype)[3] * shape.num_layers * pairs
    hbm_bytes = float(work.weight_bytes) * passes + kv_bytes_per_token(shape, model.dtype) * kv_tokens
    return {"gpu.hbm_bit": 8.0 * hbm_bytes, "gpu.flop": float(flops)}


def run_energy(system: SystemConfig, workload: Workload, result: ServingResult,
               table: StepCostTable, draft: Workload | None = None,
               verifier: Workload | None = None) -> dict[str, Any]:
    """Joules per output token and per request, and the breakdown in mJ per output token; `draft`: the
    speculative draft model, `verifier`: a tree's own verifier model, each priced as its own `draft.*` /
    `verifier.*` terms."""
    parts = energy_breakdown(run_counts(system, workload, result, table), system.energy)
    sides: list[tuple[str, dict[str, float]]] = []
    sp = result.speculation
    if draft is not None and sp is not None:
        sides.append(("draft", model_counts(draft, sp["draft_passes"], sp["draft_tokens"],
                                            sp["draft_attention_pairs"], sp["draft_kv_tokens_read"])))
    if verifier is not None:
        tokens, _, _, pairs = _token_sums(result, verifier=True)
        assert result.prefill_context is not None
        prompts = float(result.prefill_context[_rows(result, True)].sum())  # a prefill reads its KV about once
        sides.append(("verifier", model_counts(verifier, result.verifier_passes, tokens, pairs, prompts)))
    for side, counts in sides:
        for name, pj in energy_breakdown(counts, system.energy).items():
            parts[f"{side}.{name}"] = pj
    if result.spec.tiers[result.spec.kv_home].compute == "pnm":
        _, decode_tokens, decode_pairs, _ = _token_sums(result, pooled=True if result.home_tier is not None else None)
        per_byte, per_token = table.pool_energy_coefficients()
        # the pool's units read each decode token's context, a verification step's once for all its positions
        sp = result.speculation
        pool_kv = sp["kv_read_bytes_pnm"] if sp is not None else result.spec.kv_bytes_per_token * decode_pairs
        for name, pj in per_byte.items():
            parts[name] = parts.get(name, 0.0) + pj * pool_kv
        for name, pj in per_token.items():
            parts[name] = parts.get(name, 0.0) + pj * decode_tokens
    tokens = float(result.output_tokens[result.completed].sum())
    requests = int(result.completed.sum())
    total = sum(parts.values())
    return {"energy_J_per_token": total / tokens * 1e-12 if tokens else None,
            "energy_J_per_request": total / requests * 1e-12 if requests else None,
            "energy_breakdown_mJ_per_token": {k: round(v / tokens * 1e-9, 6) for k, v in parts.items()}
            if tokens else {}}
