"""The offload cost model: closed forms for where attention runs and where the KV lives (docs/planner.md).

For one system, one model and one request state (context, batch) every candidate - KV in GPU HBM, the pool,
host DRAM, NVMe or an RDMA memory server; attention on the GPUs or in the pool's PNM units - gets a predicted
decode-step time, bytes moved and energy per token, from peak rates and even link shares only:

* GPU layer work: the calibrated kernel and all-reduce model (archsim.gpu, closed-form numpy), the all-reduces
  stretched by the pool traffic they share a scale-up fabric with (max-min sharing of one GPU link, in closed
  form).
* KV in HBM: roofline(KV read + append, attention FLOPs) per layer.
* GPU attention on remote KV: fetch = route latency + KV per GPU / even share of the route, against the pool
  DRAM's streaming time; prefetched under the layer's HBM work (schedule.gpu_fetch), one latency exposed.
* PNM attention: queries in + the busiest unit's time + outputs back, each link phase a route latency plus
  bytes over the even share; the unit's time per chunk is a tile-pipelined max(DRAM stream, MACs, exps)
  plus one tile's fill and the kernel's per-chunk setup.
* Sub-batch overlap (`sub_batches` N > 1, AttAcc/NeuPIMs style): the GPUs' work of one sub-batch runs while
  the PNM units run another's attention, with one sub-batch's fill and drain.

This module imports nothing from the memory core, the timed PNM unit, the pool DRAM replay or the step model,
and needs no numba: its inputs are plain numbers that archsim.plan.inputs reads from a system and workload.
About 530 lines, one module: every term above reads the same inputs and the prediction adds them up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from archsim.energy import EnergyTable, energy_breakdown
from archsim.gpu.model import allreduce_ns, elementwise_ns, gemm_ns, layer_time_ns
from archsim.gpu.preset import GpuPreset
from archsim.gpu.shape import LayerShape


@dataclass(frozen=True)
class ModelGeometry:
    """What one decode step of the workload reads and computes (one model instance unless noted)."""

    name: str
    layers: int
    kv_heads: int  # cached heads per layer
    query_group: int  # query heads per cached head
    k_row_bytes: int
    v_row_bytes: int
    qk_dim: int
    out_dim: int
    element_bytes: int
    hidden: int
    vocab: int
    tp: int
    instances: int
    max_context: int | None
    weight_bytes: int  # the whole model read once per step, one instance
    layer_weight_bytes: int  # one layer, one instance
    epilogue_weight_bytes: int
    layer_shape: LayerShape | None  # dense GQA layer for the calibrated kernel model (None: roofline)
    params_per_token_flops: int  # 2 x the matrix weights a token multiplies (prefill)

    @property
    def row_bytes(self) -> int:
        return self.k_row_bytes + self.v_row_bytes

    @property
    def gpus_used(self) -> int:
        return self.tp * self.instances


@dataclass(frozen=True)
class GpuSpec:
    count: int
    peak_TFLOPS: float
    hbm_GBps: float
    hbm_room_bytes: int  # one GPU's HBM left for KV after its weights (serving budget)
    preset: GpuPreset | None


@dataclass(frozen=True)
class PathSpec:
    """The route between the GPUs and a KV home, reduced to closed-form numbers."""

    latency_ns: float  # one way: link + switch latencies + the home's access latency
    fetch_share_GBps: float  # one GPU's even share, home -> GPU, all GPUs fetching at once
    query_share_GBps: float  # GPU -> home
    wire_bits_per_payload_bit: dict[str, float]  # per protocol: sum over the route's hops of 1 / efficiency
    ethernet: bool  # the route has Ethernet hops (RDMA NICs: nic.bit)
    fabric_GBps: float = 0.0  # > 0: the all-reduces share the GPUs' scale-up links (capacity of one direction)


@dataclass(frozen=True)
class PoolSpecP:
    channels: int
    channel_peak_GBps: float
    capacity_bytes: int
    channel_capacity_bytes: int
    row_bytes: int  # DRAM page: one activation per this many bytes a PNM unit streams
    access_bytes: int  # one column access: a GPU fetch's interleaved streams open a row per access
    refresh_efficiency: float  # 1 - tRFC / tREFI: the share of time a rank is not refreshing
    stripe_bytes: int  # a stream's bytes before it moves to the next bank (address-mapping bits below `ba`)
    row_open_ns: float  # tRCD: the activation a stream waits for when it moves to the next banks
    refresh_GiB_per_ns: float  # the pool's GiB refreshed per ns (dram.ref count rate)
    pnm_clock_GHz: float = 0.0  # 0: no PNM units
    macs_per_cycle: int = 0
    exp_per_cycle: int = 0
    sram_bytes: int = 0
    tile_tokens: int = 64


@dataclass(frozen=True)
class Candidate:
    name: str  # "<tier>/<attention>", e.g. pool/pnm
    attention: str  # gpu | pnm
    kv_tier: str  # hbm | pool | host_dram | nvme | rdma
    tier_name: str
    path: PathSpec | None
    pool: PoolSpecP | None
    capacity_bytes: int | None  # stores: the declared capacity
    device: str | None  # stores: ddr5 | nvme (device energy), None
    gpu_fetch: str = "prefetch"
    sub_batches: int = 1


@dataclass(frozen=True)
class PlanInputs:
    system: str
    file: str | None
    model: ModelGeometry
    gpu: GpuSpec
    candidates: tuple[Candidate, ...]
    energy: EnergyTable
    # GPU kernel and epilogue times per batch size, filled on first use (one vectorized call of archsim.gpu)
    gpu_table: dict[str, object] = field(default_factory=dict, compare=False, repr=False)


@dataclass
class Prediction:
    candidate: str
    attention: str
    kv_tier: str
    context: int
    batch: int
    feasible: bool
    reason: str
    step_ns: float = math.inf
    per_token_ns: float = math.inf
    bytes_moved: float = 0.0  # per step: KV and queries/outputs over the links, KV through HBM
    energy_pJ_per_token: float = math.inf
    kv_split: str = ""
    terms_ns: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        def r(v: float) -> float | None:
            return None if not math.isfinite(v) else round(float(v), 3)

        return {"step_ns": r(self.step_ns), "per_token_ns": r(self.per_token_ns),
                "bytes_moved": r(self.bytes_moved), "energy_pJ_per_token": r(self.energy_pJ_per_token),
                "kv_split": self.kv_split, "terms_ns": {k: r(v) for k, v in self.terms_ns.items()}}


# ---- the GPUs' own work ---------------------------------------------------------------------------------------

def _roofline_ns(bytes_: float, flops: float, gpu: GpuSpec) -> float:
    return max(bytes_ / gpu.hbm_GBps, flops / (gpu.peak_TFLOPS * 1e3))


def gpu_layer_ns(m: ModelGeometry, gpu: GpuSpec, batch: int, stretch: float = 1.0,
                 table: dict[str, object] | None = None) -> tuple[float, float, float]:
    """(kernels, all-reduces, epilogue) of one GPU: the calibrated model (archsim.gpu), else the roofline.
    `table` caches the batch-only terms for batches up to TABLE_BATCH (one vectorized evaluation)."""
    if table is not None and gpu.preset is not None and m.layer_shape is not None and batch <= TABLE_BATCH:
        if not table:
            table.update(_gpu_table(m, gpu.preset))
        kernels = float(table["kernels"][batch])  # type: ignore[index]
        epi = float(table["epilogue"][batch])  # type: ignore[index]
        if stretch == 1.0 and m.tp > 1:
            allreduce = float(table["allreduce"][batch])  # type: ignore[index]
        else:
            allreduce = _allreduce(m, gpu.preset, batch, stretch)
        return kernels, allreduce, epi
    if gpu.preset is None or m.layer_shape is None:
        layer_flops = 2 * batch * (m.layer_weight_bytes // m.element_bytes) / m.tp
        kernels = _roofline_ns(m.layer_weight_bytes / m.tp, layer_flops, gpu)
        epi = _roofline_ns(m.epilogue_weight_bytes / m.tp, 2 * batch * m.vocab * m.hidden / m.tp, gpu)
        return kernels, 0.0, epi
    preset = gpu.preset
    kernels = float(layer_time_ns(m.layer_shape, batch, m.tp, preset).layer_ns)
    e = m.element_bytes
    epi = (float(elementwise_ns(2 * batch * m.hidden * e, m.hidden, preset.elementwise.norm_efficiency, preset))
           + float(gemm_ns(batch, -(-m.vocab // m.tp), m.hidden, preset, e)))
    return kernels, _allreduce(m, preset, batch, stretch), epi


TABLE_BATCH = 1024


def _allreduce(m: ModelGeometry, preset: GpuPreset, batch: object, stretch: float) -> object:
    """The layer's two all-reduces of batch x hidden elements; `stretch` divides their bus bandwidth."""
    if stretch != 1.0:
        shared = replace(preset.allreduce, bus_bandwidth_GBps=preset.allreduce.bus_bandwidth_GBps / stretch)
        preset = replace(preset, allreduce=shared)
    out = 2.0 * allreduce_ns(np.asarray(batch) * m.hidden, m.tp, preset, m.element_bytes)
    return float(out) if np.ndim(out) == 0 else out


def _gpu_table(m: ModelGeometry, preset: GpuPreset) -> dict[str, object]:
    assert m.layer_shape is not None
    b = np.arange(TABLE_BATCH + 1, dtype=float)
    b[0] = 1
    e = m.element_bytes
    epi = (elementwise_ns(2 * b * m.hidden * e, m.hidden, preset.elementwise.norm_efficiency, preset)
           + gemm_ns(b, -(-m.vocab // m.tp), m.hidden, preset, e))
    return {"kernels": np.asarray(layer_time_ns(m.layer_shape, b, m.tp, preset).layer_ns, dtype=float),
            "epilogue": np.asarray(epi, dtype=float), "allreduce": np.asarray(_allreduce(m, preset, b, 1.0))}


def allreduce_stretch(ring_bytes: float, background_bytes: float, background_share_GBps: float,
                      link_GBps: float) -> float:
    """The ring's slowdown on a GPU link direction it shares with one background flow (max-min fair): while
    both run the background gets a = min(its own bottleneck share, half the link), the ring the rest."""
    if ring_bytes <= 0 or background_bytes <= 0 or link_GBps <= 0:
        return 1.0
    a = min(background_share_GBps, link_GBps / 2)
    ring_rate = link_GBps - a
    t_bg = background_bytes / a
    alone = ring_bytes / link_GBps
    if t_bg >= ring_bytes / ring_rate:
        return (ring_bytes / ring_rate) / alone
    return (t_bg + (ring_bytes - ring_rate * t_bg) / link_GBps) / alone


# ---- the KV's share per channel (head-wise sharding aligned with TP, split over context when needed) ----------

def busiest_channel(head_contexts: int, tokens: int, channels: int) -> tuple[int, int, int]:
    """(tokens, chunks, splits) of the busiest channel: the flat token space of all head contexts cut into
    `channels` contiguous ranges (archsim's layout; at least one 64-token tile per range)."""
    total = head_contexts * tokens
    used = max(1, min(channels, total // 64)) if total >= 64 else 1
    per = -(-total // used)
    if per >= tokens:  # whole head contexts per range, plus a piece at each end
        chunks = min(head_contexts, -(-per // tokens) + (1 if per % tokens else 0))
        splits = 2 if per % tokens else 1
    else:  # a head context split over several channels (flash-decoding style)
        chunks = 2 if tokens % per else 1
        splits = -(-tokens // per) + (1 if tokens % per else 0)
    return per, chunks, splits


def sram_passes(m: ModelGeometry, pool: PoolSpecP, splits: int, tile: int) -> tuple[int, int]:
    """KV re-reads per head context when the query group's working set does not fit the unit's SRAM
    (isa/kernels/gqa_decode.s footprint), and the tile size used."""
    while True:
        for sub in range(m.query_group, 0, -1):
            record = (2 * sub + sub * m.out_dim) * 4
            merge = splits * record if splits > 1 else 0
            need = (sub * m.qk_dim * 4 + sub * tile * 4 + sub * 4 + record + 2 * tile * m.row_bytes + 4 + merge)
            if need <= pool.sram_bytes:
                return math.ceil(m.query_group / sub), tile
        if tile <= 8:
            return m.query_group, 8
        tile //= 2


def pnm_unit_ns(m: ModelGeometry, pool: PoolSpecP, tokens: int, chunks: int, passes: int, tile: int) -> float:
    """The busiest unit's attention time per layer: per token the slowest of the DRAM stream (refresh and the
    exposed activation at each bank change included), the MAC array and the exponent unit, tiles pipelined;
    one tile of fill per chunk (its first load, or its last compute, not overlapped); times the SRAM passes.
    The kernel's per-chunk vector work (query load, record init and write) runs under the first tiles' loads
    (double-buffered DMA), so it adds nothing."""
    stream_GBps = pool.channel_peak_GBps * pool.refresh_efficiency
    stripe_ns = pool.stripe_bytes / stream_GBps
    per_token_mem = m.row_bytes / stream_GBps * (1.0 + pool.row_open_ns / stripe_ns)
    group = m.query_group / passes
    per_token_mac = group * (m.qk_dim + m.out_dim) / pool.macs_per_cycle / pool.pnm_clock_GHz
    per_token_exp = group / pool.exp_per_cycle / pool.pnm_clock_GHz
    per_token = max(per_token_mem, per_token_mac, per_token_exp)
    fill = min(tile, tokens) * min(per_token_mem, max(per_token_mac, per_token_exp))
    return passes * (tokens * per_token + chunks * fill)


# ---- one candidate ----------------------------------------------------------------------------------------------

def predict(inp: PlanInputs, cand: Candidate, context: int, batch: int) -> Prediction:
    """The decode step at `context` cached tokens per sequence and `batch` sequences per instance."""
    m, gpu = inp.model, inp.gpu
    pred = Prediction(cand.name, cand.attention, cand.kv_tier, context, batch, True, "")
    seqs = batch * m.instances
    tokens = context + 1
    W = seqs * m.kv_heads
    layer_kv = W * tokens * m.row_bytes
    step_kv = layer_kv * m.layers
    append = W * m.row_bytes
    why = _infeasible(inp, cand, context, step_kv, W, tokens)
    if why:
        pred.feasible, pred.reason = False, why
        return pred
    L, n = m.layers, m.gpus_used
    macs = W * m.query_group * tokens * (m.qk_dim + m.out_dim)
    attn_flops = 2 * macs / n
    kv_gpu = (layer_kv + append) / n
    q_bytes = W * m.query_group * m.qk_dim * 4
    o_bytes = W * m.query_group * m.out_dim * 4
    stretch = _stretch(m, cand, batch, layer_kv / n, (q_bytes + append) / n, o_bytes / n)
    t_k, t_ar, t_epi = gpu_layer_ns(m, gpu, batch, stretch, inp.gpu_table)
    t_w = t_k + t_ar
    exposed = 0.0
    passes = 1
    terms: dict[str, float] = {"gpu_weights": L * t_k, "allreduce": L * t_ar}
    moved = 0.0
    if cand.kv_tier == "hbm":
        t_attn = hbm_attention_layer_ns(m, gpu, W, tokens)
        t_layer = t_w + t_attn
        terms["gpu_attention"] = L * t_attn
        moved = (layer_kv + append) * L
        pred.kv_split = f"head-wise over {n} GPUs (tensor parallel {m.tp})"
    elif cand.attention == "gpu":
        path = cand.path
        assert path is not None
        t_fetch = path.latency_ns + layer_kv / n / path.fetch_share_GBps
        if cand.pool is not None:
            pool_GBps = cand.pool.channels * cand.pool.channel_peak_GBps * cand.pool.refresh_efficiency
            t_dram = layer_kv / pool_GBps + path.latency_ns
            t_fetch = max(t_fetch, t_dram)
        t_read = _roofline_ns(kv_gpu, attn_flops, gpu)
        if cand.gpu_fetch == "prefetch":
            t_hbm = t_w + _roofline_ns(2 * kv_gpu, attn_flops, gpu)
            t_layer = max(t_hbm, t_fetch - path.latency_ns)
            exposed = path.latency_ns
        else:
            t_layer = t_w + t_fetch + t_read
        # as the step model's breakdown: a prefetched fetch's latency is exposed once per step, not per layer
        terms.update({"kv_fetch": L * (t_fetch - exposed), "gpu_attention": L * t_read, "exposed_latency": exposed})
        moved = (layer_kv + append) * L
        pred.kv_split = f"head-wise: each of {n} GPUs fetches its heads' KV"
    else:
        path, pool = cand.path, cand.pool
        assert path is not None and pool is not None
        t_q, t_pnm, t_o, passes, splits = pnm_attention_layer_ns(m, path, pool, W, tokens)
        t_attn = t_q + t_pnm + t_o
        t_layer = t_w + t_attn
        if cand.sub_batches > 1:
            t_layer, exposed = _sub_batch_layer(inp, cand, context, batch, stretch)
        terms.update({"link_queries": L * t_q, "pnm": L * t_pnm, "link_outputs": L * t_o})
        moved = (q_bytes + append + o_bytes) * L
        pred.kv_split = (f"head-wise over {pool.channels} channels ({W} head contexts)" if splits == 1 else
                         f"{W} head contexts split over the context, up to {splits} channels each")
    step = L * t_layer + t_epi + exposed
    terms["epilogue"] = t_epi
    pred.step_ns = step
    pred.per_token_ns = step / seqs
    pred.bytes_moved = moved
    pred.terms_ns = terms
    counts = _energy_counts(inp, cand, batch, step, step_kv, append * L, macs * L, q_bytes * L, o_bytes * L,
                            passes)
    if cand.attention == "pnm" and cand.sub_batches > 1:  # every sub-batch streams the weights again
        counts["gpu.hbm_bit"] += 8.0 * m.weight_bytes * m.instances * (cand.sub_batches - 1)
    pred.energy_pJ_per_token = sum(energy_breakdown(counts, inp.energy).values()) / seqs
    return pred


def hbm_attention_layer_ns(m: ModelGeometry, gpu: GpuSpec, head_contexts: int, tokens: float) -> float:
    """One layer's decode attention on the GPUs over KV in their HBM: `head_contexts` cached-head contexts (all
    instances) of `tokens` tokens each (the appended one included), read with its append at the roofline."""
    n = m.gpus_used
    kv_gpu = head_contexts * (tokens + 1) * m.row_bytes / n
    flops = 2 * head_contexts * m.query_group * tokens * (m.qk_dim + m.out_dim) / n
    return _roofline_ns(kv_gpu, flops, gpu)


def pnm_attention_layer_ns(m: ModelGeometry, path: PathSpec, pool: PoolSpecP, head_contexts: int,
                           tokens: int) -> tuple[float, float, float, int, int]:
    """One layer's decode attention in the PNM units: (queries in, the busiest unit, outputs back, SRAM passes,
    splits per head context) for `head_contexts` contexts (all instances) of `tokens` tokens each."""
    n = m.gpus_used
    per, chunks, splits = busiest_channel(head_contexts, tokens, pool.channels)
    passes, tile = sram_passes(m, pool, splits, min(pool.tile_tokens, per))
    t_pnm = pnm_unit_ns(m, pool, per, chunks, passes, tile)
    queries = head_contexts * m.query_group * m.qk_dim * 4 + head_contexts * m.row_bytes  # fp32, with the append
    outputs = head_contexts * m.query_group * m.out_dim * 4
    t_q = path.latency_ns + queries / n / path.query_share_GBps
    t_o = path.latency_ns + outputs / n / path.fetch_share_GBps
    return t_q, t_pnm, t_o, passes, splits


def overlapped_layer(g: float, a: float, sub_batches: int) -> tuple[float, float]:
    """N sub-batches, each with GPU work g and PNM attention a per layer: the GPUs run one sub-batch while the
    PNM units run another's attention, so a layer takes max(N g, N a, g + a) (each resource's load, or one
    sub-batch's own chain), plus min(g, a) once per step to fill and drain the pipeline. N = 1: g + a."""
    if sub_batches <= 1:
        return g + a, 0.0
    return max(sub_batches * g, sub_batches * a, g + a), min(g, a)


def _sub_batch_layer(inp: PlanInputs, cand: Candidate, context: int, batch: int, stretch: float) -> tuple[float, float]:
    """The PNM layer with `cand.sub_batches` sub-batches: one sub-batch's GPU work and attention, overlapped."""
    sub_batch = -(-batch // cand.sub_batches)
    one = predict(inp, replace(cand, sub_batches=1), context, sub_batch)
    k, ar, _ = gpu_layer_ns(inp.model, inp.gpu, sub_batch, stretch, inp.gpu_table)
    L = inp.model.layers
    a = (one.terms_ns["link_queries"] + one.terms_ns["pnm"] + one.terms_ns["link_outputs"]) / L
    return overlapped_layer(k + ar, a, cand.sub_batches)


def _stretch(m: ModelGeometry, cand: Candidate, batch: int, fetch_bytes: float, query_bytes: float,
             out_bytes: float) -> float:
    path = cand.path
    if m.tp < 2 or path is None or path.fabric_GBps <= 0:
        return 1.0
    ring = 2 * (m.tp - 1) / m.tp * batch * m.hidden * m.element_bytes
    if cand.attention == "pnm":
        return max(allreduce_stretch(ring, query_bytes, path.query_share_GBps, path.fabric_GBps),
                   allreduce_stretch(ring, out_bytes, path.fetch_share_GBps, path.fabric_GBps))
    return allreduce_stretch(ring, fetch_bytes, path.fetch_share_GBps, path.fabric_GBps)


def _infeasible(inp: PlanInputs, cand: Candidate, context: int, step_kv: int, W: int, tokens: int) -> str:
    m, gib = inp.model, 2**30
    if m.max_context is not None and context > m.max_context:
        return f"context {context} tokens exceeds {m.name}'s maximum of {m.max_context}"
    if inp.gpu.hbm_room_bytes < 0:
        return "the weights exceed the GPUs' HBM budget"
    if cand.kv_tier == "hbm":
        need = step_kv / m.gpus_used
        if need > inp.gpu.hbm_room_bytes:
            return f"KV needs {need / gib:.1f} GiB per GPU, {inp.gpu.hbm_room_bytes / gib:.1f} GiB of HBM left"
    elif cand.pool is not None:
        pool = cand.pool
        if step_kv > pool.capacity_bytes:
            return f"KV {step_kv / gib:.1f} GiB exceeds the pool's {pool.capacity_bytes / gib:.1f} GiB"
        per = -(-W * tokens // pool.channels)
        if per * m.row_bytes * m.layers > pool.channel_capacity_bytes + m.row_bytes * m.layers:
            return "KV exceeds a pool channel's capacity"
    elif cand.capacity_bytes is not None and step_kv > cand.capacity_bytes:
        return f"KV {step_kv / gib:.1f} GiB exceeds the store's {cand.capacity_bytes / gib:.1f} GiB"
    return ""


def _energy_counts(inp: PlanInputs, cand: Candidate, batch: int, step_ns: float, step_kv: float,
                   step_append: float, step_macs: float, step_q: float, step_o: float,
                   passes: int) -> dict[str, float]:
    """The step's action counts (energy_model.py's list) from closed forms, for the energy table's prices."""
    m = inp.model
    L, inst = m.layers, m.instances
    layer_flops = 2 * batch * (m.layer_weight_bytes // m.element_bytes)
    hbm = m.weight_bytes * inst
    flops = (layer_flops * L + 2 * batch * m.vocab * m.hidden) * inst
    if cand.kv_tier == "hbm":
        hbm += step_kv + step_append
    elif cand.attention == "gpu":
        hbm += 2 * step_kv
    if cand.attention == "gpu":
        flops += 2 * step_macs
    counts = {"gpu.hbm_bit": 8.0 * hbm, "gpu.flop": float(flops)}
    if cand.path is not None:
        payload = (step_kv + step_append) if cand.attention == "gpu" else (step_q + step_append + step_o)
        for proto, factor in cand.path.wire_bits_per_payload_bit.items():
            counts[f"link.{proto}.bit"] = 8.0 * payload * factor
        if cand.path.ethernet:
            counts["nic.bit"] = 8.0 * payload
    if cand.pool is not None:
        pool = cand.pool
        read = step_kv * passes
        # the PNM streams whole rows; a GPU fetch round-robins 256-B pieces of every K/V stream of a channel,
        # which the address mapping spreads so that each access finds its row closed
        counts["dram.act"] = read / (pool.row_bytes if cand.attention == "pnm" else pool.access_bytes)
        counts["dram.read_bit.pnm" if cand.attention == "pnm" else "dram.read_bit.host"] = 8.0 * read
        counts["dram.write_bit.host"] = 8.0 * step_append
        counts["dram.ref"] = pool.refresh_GiB_per_ns * step_ns
        counts["dram.background.precharge_standby"] = pool.channels * step_ns
    if cand.device == "ddr5":
        counts["host_dram.bit"] = 8.0 * (step_kv + step_append)
    elif cand.device == "nvme":
        counts["nvme.byte"] = float(step_kv + step_append)
    if cand.attention == "pnm":
        counts["pnm.mac"] = float(step_macs)
        counts["pnm.exp"] = float(step_macs / (m.qk_dim + m.out_dim))
        counts["sram.byte"] = float(2 * step_kv * passes + step_q + step_o)
    return counts


# ---- request level and ranking ----------------------------------------------------------------------------------

def predict_request(inp: PlanInputs, cand: Candidate, context: int, batch: int, output_tokens: int) -> float:
    """A request's end to end (ns): prefill of `context` tokens on the GPUs (matrix FLOPs at peak, causal
    attention), the KV written to its tier over the link (overlapped layer by layer with the prefill: the
    larger of the two), then `output_tokens` decode steps at the mean context."""
    m, gpu = inp.model, inp.gpu
    pred = predict(inp, cand, context + output_tokens // 2, batch)
    if not pred.feasible:
        return math.inf
    flops = context * m.params_per_token_flops / m.tp
    flops += 2 * m.layers * m.kv_heads * m.query_group * context * context * (m.qk_dim + m.out_dim) / 2 / m.tp
    prefill = flops / (gpu.peak_TFLOPS * 1e3) + m.weight_bytes / m.tp / gpu.hbm_GBps
    store = 0.0
    if cand.path is not None:
        kv = context * m.kv_heads * m.row_bytes * m.layers
        store = cand.path.latency_ns + kv / m.tp / cand.path.query_share_GBps
    return max(prefill, store) + output_tokens * pred.step_ns


def plan(inp: PlanInputs, context: int, batch: int, objective: str = "step_latency",
         names: tuple[str, ...] | None = None) -> list[Prediction]:
    """Every (or the named) candidate's prediction, best first; infeasible ones last."""
    cands = [c for c in inp.candidates if names is None or c.name in names]
    preds = [predict(inp, c, context, batch) for c in cands]
    return sorted(preds, key=lambda p: (not p.feasible, objective_value(p, objective), p.candidate))


def objective_value(p: Prediction, objective: str) -> float:
    if not p.feasible:
        return math.inf
    return p.energy_pJ_per_token if objective == "energy_per_token" else p.per_token_ns


def reason(best: Prediction, other: Prediction | None, objective: str) -> str:
    """Why a candidate ranks where it does: its largest term, and its margin over the next one."""
    if not best.feasible:
        return f"infeasible: {best.reason}"
    top = max(best.terms_ns.items(), key=lambda kv: kv[1]) if best.terms_ns else ("", 0.0)
    text = f"largest term {top[0]} {top[1] / 1e6:.3f} ms of {best.step_ns / 1e6:.3f} ms"
    if other is not None and other.feasible:
        a, b = objective_value(best, objective), objective_value(other, objective)
        if a <= b:
            text += f"; {(b / a - 1) * 100:.1f} % ahead of {other.candidate}" if a > 0 else ""
        else:
            text += f"; {a / b:.2f}x the cost of {other.candidate}"
    return text
