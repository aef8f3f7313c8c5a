"""A mixed-batch iteration: prefill chunks and decode tokens of one model instance in one forward pass.

The batch is given as per-sequence pairs (cached tokens, new tokens): a decode sequence computes one new token
over its cached ones, a prefill chunk computes `new` tokens over its cached prefix plus themselves (causal).
Per layer:

* GPU kernels and all-reduces at the batch's total new tokens T (archsim.system.gpu, calibrated);
* decode attention of the d decode sequences where the system places it, timed by the decode-step model
  (archsim.system.decode) at d sequences of their mean context: PNM queries + PNM + outputs (DRAM replayed),
  or the KV fetch (links and pool DRAM) overlapped as `schedule.gpu_fetch` says, or the GPUs' HBM roofline.
  The pool lays a layer's head contexts end to end and cuts them evenly over its channels, so the busiest
  channel's work depends on the total cached tokens, which the mean context keeps;
* prefill attention: over its new tokens on the GPU (roofline, causal); over a cached prefix in a PNM pool on
  the PNM units (chunks of up to 16 tokens timed with the multi-token kernel, archsim.system.multi_token; longer
  ones the roofline of their MACs and the pool's peak bandwidth; queries and outputs over the links) or
  on the GPUs after bringing the prefix over the links, whichever is faster; elsewhere on the GPU from HBM (the
  serving engine loads remote prefixes into HBM first);
* the prefill's new KV written to the KV's home over the links (G1: none), overlapped with the layer's work:
  only the part longer than the layer is exposed.

With every sequence decoding at one context, the iteration is exactly `simulate_step` at that batch (a test).
The decode part is the expensive one (DRAM replay); archsim.serving.costs tabulates it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np

from archsim.errors import ConfigError
from archsim.kvlayout import kv_geometry
from archsim.models import ModelShape, dtype_bytes
from archsim.system.config import GpuConfig, SystemConfig
from archsim.system.decode import StepResult, simulate_step
from archsim.system.gpu import GpuLayerTime, gpu_layer_time, gpu_work, layer_allreduce_ns, roofline_ns
from archsim.system.links import analytic_share_GBps
from archsim.system.multi_token import QUERIES_MAX, pool_layer_ns
from archsim.system.placements import PLACEMENTS, placement_of
from archsim.system.workload import Workload


@dataclass(frozen=True)
class DecodeTerms:
    """What the decode-step model gives for d sequences at one context, per layer (all ns)."""

    sequences: int
    context: int
    kind: str  # gpu | pnm | fetch
    pool_ns: float  # pnm: queries + PNM + outputs; fetch: the fetch (max of link and DRAM); gpu: 0
    route_latency_ns: float  # fetch: the one exposed per step under prefetch
    allreduce_stretch: float  # the all-reduces' slowdown on a shared fabric
    step: StepResult | None = None  # the underlying step (None when interpolated)


@dataclass
class MixedStep:
    time_ns: float
    parts_ns: dict[str, float] = field(default_factory=dict)  # per step, critical path terms summing to time_ns
    decode: StepResult | None = None


def decode_terms(system: SystemConfig, workload: Workload, sequences: int, context: int) -> DecodeTerms:
    """Run the decode-step model (DRAM and PNM timed) for `sequences` per instance at `context`."""
    placement = placement_of(system)
    if placement.kind == "gpu":  # attention is the GPUs' HBM roofline: nothing to replay
        return DecodeTerms(sequences, context, "gpu", 0.0, 0.0, 1.0)
    step = simulate_step(system, replace(workload, batch=sequences, max_context=None), context)
    if not step.ok:
        raise ConfigError(f"{system.name}: {sequences} sequences at {context} tokens: {step.status}",
                          file=system.file, where="system")
    L = workload.shape.num_layers
    stretch = step.allreduce_stretch
    if placement.kind == "pnm":
        return DecodeTerms(sequences, context, "pnm", step.attention_ns / L, 0.0, stretch, step)
    latency = step.term_ns("exposed_latency")
    return DecodeTerms(sequences, context, placement.kind, step.pool_side_ns / L, latency, stretch, step)


def ring_stretch(stretch: float, decode_tokens: int, ring_tokens: int) -> float:
    """The all-reduce slowdown of an iteration whose ring carries `ring_tokens` tokens, from the decode table's
    `stretch` measured on a ring of `decode_tokens` (one per decoding sequence) against those sequences' pool
    traffic. The pool traffic is the same bytes whatever else the iteration computes, so the time it adds to the
    ring is the same: with a max-min fair share that finishes before the ring, stretch - 1 is the background's
    bytes over the ring's (archsim.plan.model.allreduce_stretch), and a prefill chunk's larger ring is slowed
    by (stretch - 1) x decode_tokens / ring_tokens. Decode-only iterations (ring_tokens == decode_tokens) keep
    the table's value exactly; tests/test_system_mixed.py holds this against the flow model."""
    if stretch == 1.0 or ring_tokens <= decode_tokens:
        return stretch
    return 1.0 + (stretch - 1.0) * decode_tokens / ring_tokens


def mixed_step(system: SystemConfig, workload: Workload, cached_tokens: np.ndarray, new_tokens: np.ndarray,
               terms: DecodeTerms | None = None) -> MixedStep:
    """One iteration of one instance on the mix; `terms`: the decode part's DecodeTerms at d decode
    sequences of their mean context, rounded down (None: run the decode-step model now)."""
    cached = np.asarray(cached_tokens, dtype=np.int64)
    new = np.asarray(new_tokens, dtype=np.int64)
    if cached.shape != new.shape or cached.size == 0 or np.any(new <= 0) or np.any(cached < 0):
        raise ValueError("a mix needs as many cached as new token counts, new >= 1, cached >= 0")
    decoding = new == 1
    d = int(decoding.sum())
    cached_d = int(cached[decoding].sum())
    if d and terms is None:
        terms = decode_terms(system, workload, d, cached_d // d)
    prefill = prefill_layer_ns(system, workload, cached[~decoding], new[~decoding])
    return compose(system, workload, int(new.sum()), int(new.size), d, cached_d, prefill, terms)


NO_PREFILL = {"gpu": 0.0, "pnm": 0.0, "kv_write": 0.0}


def compose(system: SystemConfig, workload: Workload, tokens: int, sequences: int, decode_sequences: int,
            decode_cached_tokens: int, prefill: dict[str, float], terms: DecodeTerms | None,
            gpu: GpuLayerTime | None = None, hbm_decode: tuple[int, int] = (0, 0)) -> MixedStep:
    """The iteration from the mix's aggregates: `tokens` new tokens of `sequences` sequences, of which
    `decode_sequences` decode over `decode_cached_tokens` cached tokens in all; `prefill` the prefill chunks'
    per-layer terms (NO_PREFILL without any); `gpu` the GPUs' time at (tokens, sequences) when the caller
    memoized it. `hbm_decode`: (sequences, cached tokens) of further decode sequences whose KV is in HBM while
    the others' is in a PNM pool (`kv.placement: auto`): the GPUs attend to theirs while the PNM units attend
    to the others', so the layer waits for the slower of the two. Scalar arithmetic only: the serving engine's
    hot path."""
    shape, gpus, tp = workload.shape, system.gpus, workload.tensor_parallel
    L = shape.num_layers
    if gpu is None:
        stretch = ring_stretch(terms.allreduce_stretch, decode_sequences, tokens) if terms is not None else 1.0
        gpu = gpu_time(shape, workload.dtype, tokens, sequences, tp, gpus, stretch)
    # the GPUs' own work of the layer: kernels, all-reduces, prefill attention
    own = {"gpu_weights": gpu.kernels_ns, "allreduce": gpu.allreduce_ns,
           "prefill_attention": prefill["gpu"] + prefill["pnm"]}
    kv_d, flops_d = _decode_hbm_work(workload, decode_sequences, decode_cached_tokens)
    if terms is None:
        critical, exposed = PLACEMENTS["gpu"].decode_layer(own, kv_d, flops_d, 0.0, 0.0, system, gpus)
    else:
        critical, exposed = PLACEMENTS[terms.kind].decode_layer(own, kv_d, flops_d, terms.pool_ns,
                                                                terms.route_latency_ns, system, gpus)
    if hbm_decode[0]:
        pool_attention = critical.pop("pnm_attention", 0.0)
        gpu_attention = roofline_ns(*_decode_hbm_work(workload, *hbm_decode), gpus)
        critical["gpu_attention" if gpu_attention >= pool_attention else "pnm_attention"] = \
            max(gpu_attention, pool_attention)
    layer = sum(critical.values())
    critical["prefill_kv_write"] = max(0.0, prefill["kv_write"] - layer)  # leaves while the layer computes
    parts = {k: L * v for k, v in critical.items()}
    parts.update({"epilogue": gpu.epilogue_ns, "exposed_latency": exposed})
    total = sum(parts.values())
    return MixedStep(total, {k: v for k, v in parts.items() if v}, terms.step if terms else None)


@lru_cache(maxsize=1 << 16)
def gpu_time(shape: ModelShape, dtype: str, tokens: int, sequences: int, tp: int, gpus: GpuConfig,
              stretch: float) -> GpuLayerTime:
    """gpu_layer_time, memoized: a serving run asks for the same batch sizes over and over. A stretch (an
    all-reduce sharing its fabric; interpolated, so nearly every step has its own) changes only the all-reduces,
    so the kernels and epilogue come from the memoized unstretched time: the same values, without re-timing
    every kernel per step."""
    if stretch != 1.0 and gpus.preset is not None:
        base = gpu_time(shape, dtype, tokens, sequences, tp, gpus, 1.0)
        return replace(base, allreduce_ns=layer_allreduce_ns(shape, dtype, tokens, tp, gpus.preset, stretch))
    # the roofline inputs are only needed without a calibrated preset (building them walks every operator)
    work = gpu_work(shape, dtype, tokens, dtype_bytes(dtype)) if gpus.preset is None else None
    return gpu_layer_time(shape, dtype, tokens, sequences, tp, gpus, work, allreduce_stretch=stretch)


def _decode_hbm_work(workload: Workload, sequences: int, cached_tokens: int) -> tuple[float, float]:
    """One GPU's HBM bytes and FLOPs of the decode sequences' attention per layer (their KV after the append,
    plus the append itself), as the decode-step model counts them."""
    kv_heads, group, row_bytes, macs = attention_constants(workload.shape, workload.dtype)
    tp = workload.tensor_parallel
    rows = float(cached_tokens + 2 * sequences)
    flops = 2.0 * float(cached_tokens + sequences) * kv_heads * group * macs
    return rows * kv_heads * row_bytes / tp, flops / tp


@lru_cache(maxsize=64)
def attention_constants(shape: ModelShape, dtype: str) -> tuple[int, int, int, int]:
    """Cached heads, query heads per cached head, bytes of one cached head's K and V row, MACs per score."""
    geo = kv_geometry(shape, dtype, 1, 0)
    return geo.kv_heads, geo.query_group, geo.row_bytes, geo.qk_dim + geo.out_dim


def prefill_layer_ns(system: SystemConfig, workload: Workload, cached: np.ndarray, new: np.ndarray) -> dict:
    """Per layer: the prefill chunks' attention on the GPU and in the PNM, and their KV write to its home."""
    if new.size == 0:
        return NO_PREFILL
    out = dict(NO_PREFILL)
    shape, gpus, tp = workload.shape, system.gpus, workload.tensor_parallel
    geo = kv_geometry(shape, workload.dtype, 1, 0)
    heads, per_token_macs = geo.kv_heads * geo.query_group, geo.qk_dim + geo.out_dim
    n, c = new.astype(float), cached.astype(float)
    causal_pairs = float((n * (n + 1) / 2).sum())  # each new token over the new tokens before it
    prefix_pairs = float((n * c).sum())  # each new token over the cached prefix
    row = geo.kv_heads * geo.row_bytes  # one token's K and V of every cached head
    names = system.gpu_endpoints(tp) if system.topology is not None else []
    flops_per_pair = 2.0 * heads * per_token_macs / tp
    out["gpu"] = roofline_ns(float(n.sum()) * row / tp, causal_pairs * flops_per_pair, gpus)
    prefix_bytes = float(c.sum()) * row
    if prefix_pairs > 0:
        # over its cached prefix, on the GPU from HBM (where the engine loaded it, or where it stayed)
        on_gpu = roofline_ns(prefix_bytes / tp, prefix_pairs * flops_per_pair, gpus)
        out["gpu"] += on_gpu
        if system.attention == "pnm" and system.pool is not None and system.pool.pnm is not None:
            # with the KV in a PNM pool the prefix is not in HBM: attend in place in the PNM units, or bring
            # the prefix to the GPUs over the links, whichever is faster (many queries make the PNM's MACs,
            # not its DRAM, the bound); short chunks run the multi-token kernel on the timed unit
            with_prefix = float(n[c > 0].sum())  # only chunks over a cached prefix send queries to the pool
            short = (c > 0) & (n <= QUERIES_MAX)
            timed = pool_layer_ns(system, shape, geo.element_bytes, c[short], n[short]) if short.any() else None
            rest = (c > 0) & ~short if timed is not None else c > 0
            in_pool = (timed or 0.0) + _pnm_prefix_ns(system, float((n * c)[rest].sum()) * heads * per_token_macs,
                                                      float(c[rest].sum()) * row,
                                                      with_prefix * heads * per_token_macs * 4, names)
            share = analytic_share_GBps(system.topology, names, system.kv_endpoint, None)
            brought = prefix_bytes / (share * len(names))
            out["gpu"] -= on_gpu
            out["pnm"] = min(in_pool, brought + on_gpu)
    if system.kv_location != "gpu" and system.topology is not None and system.kv_endpoint is not None:
        share = analytic_share_GBps(system.topology, names, None, system.kv_endpoint)
        out["kv_write"] = float(n.sum()) * row / (share * len(names))
    return out


def _pnm_prefix_ns(system: SystemConfig, macs: float, kv_bytes: float, io_bytes: float, names: list[str]) -> float:
    """A prefill's attention over its cached prefix in the PNM units: their MAC and DRAM roofline, plus the
    queries in and the outputs back at the GPUs' share of the links."""
    pool = system.pool
    assert pool is not None and pool.pnm is not None and system.topology is not None
    memory, pnm = pool.memory, pool.pnm
    clock = pnm.clock_GHz if pnm.clock_GHz is not None else 1.0 / memory.timing.tCK_ns
    org, timing = memory.organization, memory.timing
    peak_GBps = pool.devices * org.n_pseudo_channels * org.bus_width_bits * timing.data_rate_gbps / 8
    compute = macs / (pnm.macs_per_cycle * pool.channels * clock)
    share = analytic_share_GBps(system.topology, names, None, system.kv_endpoint)
    return max(compute, kv_bytes / peak_GBps) + io_bytes / (share * len(names))
