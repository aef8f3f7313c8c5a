"""Attention in the pool: how long the busiest PNM unit needs for one layer.

`pool_attention_time` is the one interface the decode model calls. Two implementations:

* roofline: memory time = the busiest channel's KV stream replayed through the memory core (sampled; see
  pooldram.py) times the SRAM reload factor; compute time = MACs / (macs_per_cycle x clock) against
  exponentials / exp_per_cycle (separate units, overlapped); time = max of the two + one tile of the smaller
  (the pipeline's fill/drain: the first tile's load and the last tile's compute are not overlapped).
* timed: the PNM unit's own timing model (archsim.pnm.timed.timing: in-order issue, scoreboard, DMA through the
  memory's pnm port) runs the attention kernel (isa/kernels/*.s) for one head context at two sample
  contexts; a per-token cost and a fixed cost are fitted and applied to the busiest unit's chunks.
  Imported lazily: when the module or its API is missing the roofline answers and says so.

SRAM: the kernel keeps the queries, scores, partial record and four K/V tiles (double-buffered) of a
query group in SRAM (isa/kernels/gqa_decode.s `.sram` lines). When the group does not fit, the unit runs
the group in passes of the largest sub-group that fits and re-reads the KV once per pass. The SRAM hit rate
is the share of the datapath's KV operand reads served by bytes already in SRAM, 1 - (DRAM bytes brought
into SRAM) / (KV bytes the datapath reads), counted by the timed unit (archsim.pnm.timed.stats.sram_reuse: one KV
element per QK / PV multiply-accumulate); the roofline derives it as 1 - passes / group. MHA decode: ~0,
GQA: ~1 - 1/group (the reuse factor is the group).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from archsim.config.memory import MemoryConfig
from archsim.errors import ConfigError
from archsim.kvlayout import ChannelShare, KvGeometry
from archsim.resources import data_path
from archsim.system.config import PnmSpec
from archsim.system.pooldram import PoolDram

KERNELS = data_path("isa", "kernels")
_KV_DTYPES = {2: "bf16"}  # element bytes -> the kernels' KV dtype for the model's bf16/fp16 cache


@dataclass(frozen=True)
class SramUse:
    bytes_needed: int  # the kernel's SRAM footprint for one pass
    tile_tokens: int
    passes: int  # KV re-reads per head context
    hit_rate: float  # KV operand reads served from SRAM (counted by the timed unit; else 1 - passes / group)
    reuse_factor: float  # datapath KV reads per byte brought into SRAM
    traffic_bytes: int  # per layer, pool-wide: KV written into and read from SRAM, queries and outputs


@dataclass(frozen=True)
class PoolAttentionTime:
    time_ns: float  # one layer, the busiest unit
    memory_ns: float
    compute_ns: float
    model: str  # "roofline" or "timed"
    note: str
    sram: SramUse
    macs: int  # per layer, pool-wide
    exps: int


def sram_bytes(geo: KvGeometry, group: int, tile: int, splits: int) -> int:
    """The footprint of isa/kernels/gqa_decode.s for `group` query heads and `tile` tokens per tile."""
    record = (2 * group + group * geo.out_dim) * 4
    merge = splits * record if splits > 1 else 0
    return (group * geo.qk_dim * 4 + group * tile * 4 + group * 4 + record
            + 2 * tile * (geo.k_row_bytes + geo.v_row_bytes) + 4 + merge)


def plan_sram(geo: KvGeometry, share: ChannelShare, pnm: PnmSpec) -> SramUse:
    splits = share.max_splits
    tile = max(1, min(pnm.tile_tokens, share.max_chunk_tokens))
    while True:
        for sub in range(geo.query_group, 0, -1):
            need = sram_bytes(geo, sub, tile, splits)
            if need <= pnm.sram_bytes:
                passes = math.ceil(geo.query_group / sub)
                kv = geo.layer_bytes * passes
                traffic = 2 * kv + geo.query_layer_bytes + geo.output_layer_bytes
                return SramUse(need, tile, passes, 1.0 - passes / geo.query_group, geo.query_group / passes,
                               traffic)
        if tile <= 8:
            raise ConfigError(f"{pnm.sram_bytes} B of SRAM cannot hold one query head and two 8-token K/V tiles "
                              f"({sram_bytes(geo, 1, 8, splits)} B needed)", where="system.pool.pnm.sram")
        tile //= 2


def _compute_ns(geo: KvGeometry, share: ChannelShare, pnm: PnmSpec, memory: MemoryConfig) -> float:
    """Busiest unit's arithmetic at peak rates (passes split the group: the total is the same)."""
    tokens = share.tokens
    macs = geo.query_group * tokens * (geo.qk_dim + geo.out_dim)
    exps = geo.query_group * tokens
    clock_GHz = pnm.clock_GHz if pnm.clock_GHz is not None else 1.0 / memory.timing.tCK_ns
    return max(macs / pnm.macs_per_cycle, exps / pnm.exp_per_cycle) / clock_GHz


def roofline(geo: KvGeometry, share: ChannelShare, pnm: PnmSpec, dram: PoolDram, sram: SramUse,
             memory: MemoryConfig) -> PoolAttentionTime:
    memory_ns = dram.time_ns * sram.passes
    compute_ns = _compute_ns(geo, share, pnm, memory)
    tiles = max(1, sum(math.ceil(c.tokens / sram.tile_tokens) for c in share.chunks) * sram.passes)
    time = max(memory_ns, compute_ns) + min(memory_ns, compute_ns) / tiles
    return PoolAttentionTime(time, memory_ns, compute_ns, "roofline", "", sram, geo.layer_macs, geo.layer_exps)


def _timed_api() -> tuple[object, ...] | str:
    """The timed PNM model's entry points, or why they are unavailable."""
    try:
        from archsim.memory import warm_up
        from archsim.pnm.problem.shape import parse_shape
        from archsim.pnm.timed.address_space import unit_requests
        from archsim.pnm.timed.stats import sram_reuse
        from archsim.pnm.timed.timing import simulate
        from archsim.pnm.timed.unit_config import device_layout, load_pnm_config
        from archsim.pnm.timed.workload import build_workload
    except ImportError as exc:  # the timed unit is optional: fall back to the roofline and report it
        return f"timed PNM model unavailable ({exc})"
    return warm_up, unit_requests, parse_shape, simulate, device_layout, load_pnm_config, build_workload, sram_reuse


def timed_kernels_unavailable(pnm: PnmSpec, element_bytes: int) -> str | None:
    """Why the timed PNM unit cannot run kernels for this pool (the roofline model, no timed unit, a KV element
    size without a kernel dtype), or None when it can."""
    if pnm.model == "roofline":
        return "pnm.model is roofline"
    reason = _timed_api()
    if isinstance(reason, str):
        return reason
    return None if element_bytes in _KV_DTYPES else f"no PNM kernel for {element_bytes}-byte KV elements"


def kernel_kv_dtype(element_bytes: int) -> str:
    return _KV_DTYPES[element_bytes]


_TIMED: dict[tuple[object, ...], tuple[float, float, float]] = {}


def timed_run_ns(memory: MemoryConfig, pnm: PnmSpec, kind: str, group: int, dims: tuple[int, int], dtype: str,
                 tile: int, context: int, queries: int = 1) -> tuple[float, float, float]:
    """Time of one head context on one unit, and the SRAM hit rate and reuse factor the run counted; kind
    "tree": `queries` new tokens of the context at once (isa/kernels/tree_decode.s, a causal chain), "tree-roots":
    `queries` tokens that each see the context and themselves (sequences sharing the context as a prefix)."""
    key = (str(memory.resolved_tree), pnm, kind, group, dims, dtype, tile, context, queries)
    if key not in _TIMED:
        _TIMED[key] = _timed_run_uncached(memory, pnm, kind, group, dims, dtype, tile, context, queries)
    return _TIMED[key]


def _timed_run_uncached(memory: MemoryConfig, pnm: PnmSpec, kind: str, group: int, dims: tuple[int, int], dtype: str,
                        tile: int, context: int, queries: int) -> tuple[float, float, float]:
    api = _timed_api()
    assert not isinstance(api, str)
    warm_up, unit_requests, parse_shape, simulate, device_layout, load_pnm_config, build_workload, sram_reuse = api
    config = load_pnm_config(pnm.config_path, pnm.overrides())
    layout = device_layout(config, memory)
    if kind == "mla":
        kernel = KERNELS / "mla_decode.s"
        text = f"heads={group},kv_lora_rank={dims[0]},rope_dim={dims[1]},context={context},batch=1,tile={tile}"
    else:
        tree = {"tree": f",queries={queries}", "tree-roots": ",parents=" + ":".join(["-1"] * queries)}
        kernel = KERNELS / ("tree_decode.s" if kind in tree else "gqa_decode.s")
        text = (f"heads={group},kv_heads=1,head_dim={dims[0]},context={context},batch=1,tile={tile},"
                f"kv_dtype={dtype}" + tree.get(kind, ""))
    warm_up(memory)
    shape = parse_shape(text, kernel)
    work = build_workload(shape, kernel, units=1, address_space="channel_local",
                          unit_capacity_bytes=layout.unit_capacity_bytes, sram_capacity_bytes=pnm.sram_bytes)
    requests = unit_requests(work.units, layout, memory.mapping, memory.organization.access_bytes)
    run = simulate(work, requests, memory, config, layout)
    _, hit_rate, reuse = sram_reuse(work.units, shape.spec.kv_dtype)
    return float(run.cycles) * layout.unit_period_ns, hit_rate, reuse


def timed(geo: KvGeometry, share: ChannelShare, pnm: PnmSpec, memory: MemoryConfig, sram: SramUse,
          sample_tokens: tuple[int, int], kind: str) -> PoolAttentionTime:
    """Fit fixed + per-token time of one head context on one unit, apply to the busiest unit's chunks."""
    group = math.ceil(geo.query_group / sram.passes)
    dims = (geo.out_dim, geo.qk_dim - geo.out_dim) if kind == "mla" else (geo.qk_dim, 0)
    dtype = _KV_DTYPES[geo.element_bytes]
    (t1, _, _), (t2, hit_rate, reuse) = (timed_run_ns(memory, pnm, kind, group, dims, dtype, sram.tile_tokens, n)
                                         for n in sample_tokens)
    sram = replace(sram, hit_rate=hit_rate, reuse_factor=reuse)  # counted by the unit, not derived
    per_token = (t2 - t1) / (sample_tokens[1] - sample_tokens[0])
    fixed = max(0.0, t1 - per_token * sample_tokens[0])
    time = sram.passes * sum(fixed + per_token * c.tokens for c in share.chunks)
    compute_ns = _compute_ns(geo, share, pnm, memory)
    note = (f"timed unit fitted on {sample_tokens[0]} and {sample_tokens[1]} tokens: {fixed:.0f} ns + "
            f"{per_token:.3f} ns/token per head context")
    return PoolAttentionTime(time, time, compute_ns, "timed", note, sram, geo.layer_macs, geo.layer_exps)


def pool_attention_time(geo: KvGeometry, share: ChannelShare, pnm: PnmSpec, memory: MemoryConfig, dram: PoolDram,
                        *, kind: str = "gqa", sample_tokens: tuple[int, int] = (1024, 4096)) -> PoolAttentionTime:
    """One layer of attention on the busiest PNM unit (see the module docstring); `dram` is the replayed PNM
    stream of that unit's channel (the roofline's memory time)."""
    sram = plan_sram(geo, share, pnm)
    base = roofline(geo, share, pnm, dram, sram, memory)
    if pnm.model == "roofline":
        return base
    reason = _timed_api()
    if isinstance(reason, str) or geo.element_bytes not in _KV_DTYPES:
        reason = reason if isinstance(reason, str) else f"no PNM kernel for {geo.element_bytes}-byte KV elements"
        if pnm.model == "timed":
            raise ConfigError(reason, where="system.pool.pnm.model")
        return replace(base, note=reason)
    try:
        return timed(geo, share, pnm, memory, sram, sample_tokens, kind)
    except (AttributeError, TypeError) as exc:  # the timed unit's API moved under us: say so, keep going
        if pnm.model == "timed":
            raise ConfigError(f"timed PNM model failed: {exc}", where="system.pool.pnm.model") from None
        return replace(base, note=f"timed PNM model failed ({exc}); roofline used")
