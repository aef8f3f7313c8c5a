"""One decode step of a workload on a system: per layer GPU work, attention where it is placed, link transfers.

Per layer (all layers are identical; the step is L x layer + epilogue):

* G1, KV in GPU HBM: t = roofline(weights) + roofline(KV read + append, attention FLOPs).
* GPU attention on remote KV (G2, G3, RDMA, pools without PNM): the layer's KV is fetched over the links
  (flow model) while the pool's DRAM serves it (memory core, paced by the links' delivery rate); fetch =
  max(link, DRAM). `schedule.gpu_fetch: prefetch` (default) fetches layer l+1 while layer l computes, so
  t = max(roofline(weights) + attention compute, fetch), and one route latency per step is exposed;
  `serial`: t = roofline(weights) + max(fetch, attention compute).
* PNM attention: t = roofline(weights) + queries in (flow) + PNM time (busiest unit) + outputs back (flow),
  strictly in sequence: attention needs this layer's query, the next layer needs its output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from archsim.system.attention import PoolAttentionTime, pool_attention_time
from archsim.system.config import SystemConfig
from archsim.system.energy_model import step_energy
from archsim.system.gpu import GpuWork, gpu_layer_time, gpu_work, hbm_room_bytes, roofline_ns
from archsim.system.kvstream import KvGeometry, channel_footprint_bytes, channel_share, channel_stream, kv_geometry
from archsim.system.links import (
    LayerTraffic,
    allreduce_stretch,
    analytic_share_GBps,
    collectives_on_fabric,
    fetch_flows,
    fetch_traffic,
    pnm_flows,
    pnm_traffic,
)
from archsim.system.pooldram import PoolDram, full_layer, sampled_layer
from archsim.system.qos import QosResult, qos_memory, run_study
from archsim.system.workload import Workload


@dataclass
class StepResult:
    system: str
    tier: str
    context: int
    status: str  # "ok" or "infeasible: why"
    decode_step_ns: float | None = None
    attention_ns: float | None = None
    # {critical: terms summing to decode_step_ns, overlapped: work hidden under the critical terms}
    breakdown_ns: dict[str, dict[str, float]] = field(default_factory=dict)
    pool_side_ns: float | None = None  # the pool's share of the step: queries + PNM + outputs, or the KV fetch
    analytic_decode_step_ns: float | None = None
    link_bytes: dict[str, float] = field(default_factory=dict)
    gpu_link_bytes: float = 0.0
    kv_bytes: int = 0
    energy_pJ_per_token: float | None = None
    energy_breakdown_pJ_per_token: dict[str, float] = field(default_factory=dict)
    bank_conflicts: float | None = None
    row_hit_rate: float | None = None
    dram_utilization: float | None = None
    link_peak_utilization: float | None = None
    l2_hit_rate: float | None = None
    sram_hit_rate: float | None = None
    sram_reuse_factor: float | None = None
    qos: dict[str, Any] | None = None
    pnm_model: str | None = None
    pnm_note: str = ""
    sampling: dict[str, Any] = field(default_factory=dict)
    tokens: int = 0  # tokens one step produces (sequences over all instances)
    gpu_clock_GHz: float = 1.0
    allreduce_stretch: float = 1.0  # the all-reduces' bandwidth slowdown on a fabric shared with pool traffic

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def term_ns(self, name: str) -> float:
        """A breakdown term, critical or overlapped (0 when the system has no such part)."""
        for part in ("critical", "overlapped"):
            if name in self.breakdown_ns.get(part, {}):
                return self.breakdown_ns[part][name]
        return 0.0

    def as_dict(self) -> dict[str, Any]:
        def r6(v: float | None) -> float | None:
            return None if v is None else round(float(v), 6)

        out = {
            "system": self.system, "tier": self.tier, "context": self.context, "status": self.status,
            "decode_step_ns": r6(self.decode_step_ns), "attention_ns": r6(self.attention_ns),
            "decode_step_cycles": None if self.decode_step_ns is None
            else int(math.ceil(self.decode_step_ns * self.gpu_clock_GHz - 1e-9)),
            "tokens_per_s": None if not self.decode_step_ns else r6(self.tokens / self.decode_step_ns * 1e9),
            "analytic_decode_step_ns": r6(self.analytic_decode_step_ns),
            "breakdown_ns": {part: {k: r6(v) for k, v in terms.items()} for part, terms in self.breakdown_ns.items()},
            "pool_side_ns": r6(self.pool_side_ns),
            "link_bytes": {k: r6(v) for k, v in sorted(self.link_bytes.items())},
            "gpu_link_bytes": r6(self.gpu_link_bytes), "kv_bytes": self.kv_bytes,
            "energy_pJ_per_token": r6(self.energy_pJ_per_token),
            "energy_breakdown_pJ_per_token": {k: r6(v) for k, v in self.energy_breakdown_pJ_per_token.items()},
            "bank_conflicts": r6(self.bank_conflicts), "row_hit_rate": r6(self.row_hit_rate),
            "dram_utilization": r6(self.dram_utilization), "link_peak_utilization": r6(self.link_peak_utilization),
            "l2_hit_rate": r6(self.l2_hit_rate), "sram_hit_rate": r6(self.sram_hit_rate),
            "sram_reuse_factor": r6(self.sram_reuse_factor), "qos": self.qos,
            "pnm_model": self.pnm_model, "pnm_note": self.pnm_note, "sampling": self.sampling,
        }
        return out


def _infeasible(system: SystemConfig, workload: Workload, geo: KvGeometry, work: GpuWork,
                gpus_used: int) -> str | None:
    tp = workload.tensor_parallel
    room = hbm_room_bytes(system.gpus, work.weight_bytes // tp)
    gib = 2**30
    if room < 0:
        return f"the weights ({work.weight_bytes / tp / gib:.1f} GiB per GPU) exceed the GPUs' HBM budget"
    if system.kv_location == "gpu":
        need = geo.step_bytes / gpus_used
        if need > room:
            return (f"KV {geo.step_bytes / gib:.1f} GiB needs {need / gib:.1f} GiB per GPU, "
                    f"{room / gib:.1f} GiB of HBM left after the weights")
    elif system.kv_location == "pool":
        assert system.pool is not None
        pool = system.pool
        if geo.step_bytes > pool.capacity_bytes:
            return f"KV {geo.step_bytes / gib:.1f} GiB exceeds the pool's {pool.capacity_bytes / gib:.1f} GiB"
        need = channel_footprint_bytes(geo, pool.channels)
        per_channel = pool.memory.organization.capacity_bytes // pool.channels_per_device
        if need > per_channel:  # within a token row per layer and channel of the pool's capacity
            return (f"KV {geo.step_bytes / gib:.1f} GiB placed over {pool.channels} channels needs "
                    f"{need / 2**20:.1f} MiB per channel, {per_channel / 2**20:.1f} MiB each")
    elif system.kv_capacity_bytes is not None and geo.step_bytes > system.kv_capacity_bytes:
        return f"KV {geo.step_bytes / gib:.1f} GiB exceeds the store's {system.kv_capacity_bytes / gib:.1f} GiB"
    return None


def _pool_dram(system: SystemConfig, geo: KvGeometry, order: str, rate: float | None) -> PoolDram:
    pool, s = system.pool, system.sampling
    assert pool is not None
    tile = pool.pnm.tile_tokens if pool.pnm else 64
    if s.channels == "all" or s.layers == "all":
        return full_layer(pool.memory, geo, pool.devices, order, tile_tokens=tile,
                          interleave_bytes=pool.host_fetch_interleave_bytes, pool_rate_GBps=rate,
                          layers=geo.layers if s.layers == "all" else 1)
    l2 = None
    if pool.l2 is not None and order == "host":  # the PNM sits at the controller, below the host path's L2
        l2 = replace(pool.l2, capacity_bytes=pool.l2.capacity_bytes // pool.channels_per_device)
    return sampled_layer(pool.memory, geo, pool.channels, order, tile_tokens=tile,
                         interleave_bytes=pool.host_fetch_interleave_bytes, window=s.window_requests,
                         pool_rate_GBps=rate, l2=l2)


def _qos(system: SystemConfig, geo: KvGeometry) -> QosResult:
    pool, s = system.pool, system.sampling
    assert pool is not None and pool.pnm is not None and system.qos is not None
    share = channel_share(geo, pool.channels)
    channel = share.channel % pool.channels_per_device
    stream = channel_stream(pool.memory, geo, share, "pnm", tile_tokens=pool.pnm.tile_tokens,
                            interleave_bytes=pool.host_fetch_interleave_bytes, window=s.window_requests,
                            channel=channel)
    memory = qos_memory(pool.memory, system.qos, system.file)
    return run_study(memory, stream.address, stream.is_write, stream.source, system.qos, channel=channel)


def simulate_step(system: SystemConfig, workload: Workload, context: int) -> StepResult:
    """The decode step at `context` cached tokens per sequence (see the module docstring)."""
    gpus = system.gpus
    instances = workload.instances_on(gpus.count, system.file)
    tp = workload.tensor_parallel
    gpus_used = instances * tp
    geo = kv_geometry(workload.shape, workload.dtype, workload.batch * instances, context)
    work = gpu_work(workload.shape, workload.dtype, workload.batch, workload.element_bytes)
    result = StepResult(system.name, system.tier, context, "ok", kv_bytes=geo.step_bytes,
                        tokens=workload.batch * instances, gpu_clock_GHz=gpus.clock_GHz)
    reason = _infeasible(system, workload, geo, work, gpus_used)
    if workload.max_context is not None and context > workload.max_context:
        reason = (f"context {context} tokens exceeds {workload.shape.name}'s maximum of {workload.max_context} "
                  f"(max_position_embeddings)")
    if reason:
        result.status = f"infeasible: {reason}"
        return result
    L = geo.layers
    stretch = _allreduce_stretch(system, geo, gpus_used, tp, workload)
    gpu_time = gpu_layer_time(workload.shape, workload.dtype, workload.batch, workload.batch, tp, gpus, work,
                              allreduce_stretch=stretch)
    t_kernels, t_allreduce = gpu_time.kernels_ns, gpu_time.allreduce_ns
    result.allreduce_stretch = stretch
    t_weights = t_kernels + t_allreduce  # the GPU's non-attention work of a layer
    t_epilogue = gpu_time.epilogue_ns
    attn_flops_gpu = 2 * geo.layer_macs / gpus_used
    kv_gpu_bytes = (geo.layer_bytes + geo.append_layer_bytes) / gpus_used
    traffic: LayerTraffic | None = None
    dram: PoolDram | None = None
    pnm: PoolAttentionTime | None = None
    qos: QosResult | None = None
    exposed = t_read = t_hbm = 0.0
    if system.kv_location == "gpu":
        t_attn = roofline_ns(kv_gpu_bytes, attn_flops_gpu, gpus)
        t_layer = t_weights + t_attn
        analytic_layer = t_layer
    else:
        assert system.topology is not None and system.kv_endpoint is not None
        names = system.gpu_endpoints(gpus_used)
        if system.attention == "pnm":
            pool = system.pool
            assert pool is not None and pool.pnm is not None
            traffic = pnm_traffic(system.topology, names, system.kv_endpoint, geo)
            dram = _pool_dram(system, geo, "pnm", None)
            share = channel_share(geo, pool.channels)
            pnm = pool_attention_time(geo, share, pool.pnm, pool.memory, dram,
                                      kind="mla" if workload.shape.attention == "mla" else "gqa",
                                      sample_tokens=system.sampling.pnm_sample_tokens)
            t_pool = pnm.time_ns
            if system.qos is not None:
                qos = _qos(system, geo)
                t_pool *= qos.slowdown["pnm"]  # host traffic at the controllers stretches the PNM's loads
            t_attn = traffic.time_ns[0] + t_pool + traffic.time_ns[1]
            t_layer = t_weights + t_attn
            peak_pool = pool.channels * dram.peak_bandwidth_GBps_per_channel
            analytic_layer = (t_weights + 2 * traffic.route_latency_ns
                              + max(geo.layer_bytes * pnm.sram.passes / peak_pool, pnm.compute_ns))
            if system.sub_batches > 1:
                sub = _sub_batch_pipeline(system, workload, context, names, instances, stretch, peak_pool)
                t_layer, exposed, analytic_layer = sub.cycle_ns, sub.fill_ns, sub.analytic_cycle_ns
        else:
            traffic = fetch_traffic(system.topology, names, system.kv_endpoint, geo)
            t_link = traffic.time_ns[0]
            t_fetch = t_link
            if system.kv_location == "pool":
                dram = _pool_dram(system, geo, "host", traffic.kv_rate_GBps)
                t_fetch = max(t_link, dram.time_ns + traffic.route_latency_ns)
            # fetched KV is staged in HBM: the copy engine writes it, the attention kernel reads it
            t_read = roofline_ns(kv_gpu_bytes, attn_flops_gpu, gpus)
            t_attn = t_fetch + t_read
            if system.gpu_fetch == "prefetch":  # the staged KV's write and read join the layer's HBM work
                t_hbm = t_weights + roofline_ns(2 * kv_gpu_bytes, attn_flops_gpu, gpus)
                t_layer = max(t_hbm, t_fetch - traffic.route_latency_ns)
                exposed = traffic.route_latency_ns
            else:
                t_layer = t_weights + t_attn
            share_GBps = analytic_share_GBps(system.topology, names, system.kv_endpoint, None)
            analytic_layer = max(t_weights + 2 * kv_gpu_bytes / gpus.hbm_bandwidth_GBps,
                                 geo.layer_bytes / gpus_used / share_GBps)
    step = L * t_layer + t_epilogue + exposed
    result.decode_step_ns = step
    result.attention_ns = L * t_attn
    pipelined = system.attention == "pnm" and system.sub_batches > 1
    # gpu_weights: the non-attention kernels (weights streamed from HBM); allreduce: the layer's two collectives
    gpu_terms = {"gpu_weights": L * t_kernels, "allreduce": L * t_allreduce}
    critical: dict[str, float] = dict(gpu_terms)
    overlapped: dict[str, float] = {}
    if pnm is not None and traffic is not None:
        critical.update({"link_queries": L * traffic.time_ns[0], "pnm": L * (t_attn - sum(traffic.time_ns)),
                         "link_outputs": L * traffic.time_ns[1]})
        assert dram is not None
        overlapped["pool_dram"] = L * dram.time_ns  # the PNM's loads: inside its time
        result.pool_side_ns = L * t_attn
        if pipelined:  # the sub-batches' GPU work and attention overlap: the pipeline's cycle is critical
            overlapped.update({k: v for k, v in critical.items()})
            critical = {"sub_batch_pipeline": L * t_layer, "pipeline_fill": exposed}
    elif traffic is not None:
        t_fetch = t_attn - t_read
        result.pool_side_ns = L * t_fetch
        overlapped["link_fetch"] = L * traffic.time_ns[0]
        if dram is not None:
            overlapped["pool_dram"] = L * dram.time_ns
        if system.gpu_fetch == "serial":
            critical.update({"kv_fetch": L * t_fetch, "gpu_attention": L * t_read})
        elif t_hbm >= t_fetch - exposed:  # the GPUs' HBM work hides the next layer's fetch
            critical["gpu_attention"] = L * (t_hbm - t_weights)
            overlapped["kv_fetch"] = L * t_fetch
        else:  # the fetch stream decides; the GPUs' weights and attention run under it
            for name in gpu_terms:
                del critical[name]
            overlapped.update({**gpu_terms, "gpu_attention": L * (t_hbm - t_weights)})
            critical["kv_fetch"] = L * (t_fetch - exposed)
        critical["exposed_latency"] = exposed
    else:
        critical["gpu_attention"] = L * t_attn
    critical["epilogue"] = t_epilogue
    result.breakdown_ns = {"critical": critical, "overlapped": overlapped}
    result.analytic_decode_step_ns = L * analytic_layer + t_epilogue + (exposed if pipelined else 0.0)
    if traffic is not None:
        result.link_bytes = {k: v * L for k, v in traffic.link_bytes().items()}
        result.gpu_link_bytes = sum(v for k, v in result.link_bytes.items()
                                    if any(f":{g}->" in k or k.endswith(f"->{g}") for g in names))
        result.link_peak_utilization = traffic.peak_utilization()
    if dram is not None:
        result.bank_conflicts = dram.bank_conflicts * L
        result.row_hit_rate = dram.row_hit_rate
        result.dram_utilization = dram.utilization
        result.l2_hit_rate = dram.l2_hit_rate
        result.sampling = _sampling(system, dram)
    if pnm is not None:
        result.pnm_model, result.pnm_note = pnm.model, pnm.note
        result.sram_hit_rate, result.sram_reuse_factor = pnm.sram.hit_rate, pnm.sram.reuse_factor
    if qos is not None:
        result.qos = qos.as_dict()
    if pipelined:  # every sub-batch streams the weights again
        work = replace(work, weight_bytes=work.weight_bytes * system.sub_batches)
    energy = step_energy(system, workload, geo, work, instances, step, traffic, dram, pnm)
    result.energy_breakdown_pJ_per_token = {k: v / result.tokens for k, v in energy.items()}
    result.energy_pJ_per_token = sum(energy.values()) / result.tokens
    return result


@dataclass(frozen=True)
class SubBatchPipeline:
    cycle_ns: float  # one layer in steady state: max(N x GPU work, N x attention, one sub-batch's GPU + attention)
    fill_ns: float  # once per step: the first sub-batch's attention before the GPUs overlap, or the last's work
    analytic_cycle_ns: float


def _sub_batch_pipeline(system: SystemConfig, workload: Workload, context: int, names: list[str], instances: int,
                        stretch: float, peak_pool: float) -> SubBatchPipeline:
    """`schedule.sub_batches` N > 1 (AttAcc / NeuPIMs interleaving): the batch splits into N sub-batches; the GPUs
    run one sub-batch's projections and FFN (weights streamed again each time) while the PNM units run another's
    attention. Each resource carries N sub-batches per layer and each sub-batch needs its GPU work then its
    attention, so a layer takes max(N g, N a, g + a); the pipeline fills and drains once per step (min(g, a))."""
    pool = system.pool
    assert pool is not None and pool.pnm is not None and system.topology is not None
    assert system.kv_endpoint is not None
    n = system.sub_batches
    sub_batch = -(-workload.batch // n)
    geo = kv_geometry(workload.shape, workload.dtype, sub_batch * instances, context)
    work = gpu_work(workload.shape, workload.dtype, sub_batch, workload.element_bytes)
    gpu_time = gpu_layer_time(workload.shape, workload.dtype, sub_batch, sub_batch, workload.tensor_parallel,
                              system.gpus, work, allreduce_stretch=stretch)
    g = gpu_time.kernels_ns + gpu_time.allreduce_ns
    traffic = pnm_traffic(system.topology, names, system.kv_endpoint, geo)
    dram = _pool_dram(system, geo, "pnm", None)
    pnm = pool_attention_time(geo, channel_share(geo, pool.channels), pool.pnm, pool.memory, dram,
                              kind="mla" if workload.shape.attention == "mla" else "gqa",
                              sample_tokens=system.sampling.pnm_sample_tokens)
    t_pool = pnm.time_ns * (_qos(system, geo).slowdown["pnm"] if system.qos is not None else 1.0)
    a = traffic.time_ns[0] + t_pool + traffic.time_ns[1]
    a_analytic = 2 * traffic.route_latency_ns + max(geo.layer_bytes * pnm.sram.passes / peak_pool, pnm.compute_ns)
    return SubBatchPipeline(max(n * g, n * a, g + a), min(g, a), max(n * g, n * a_analytic, g + a_analytic))


def _allreduce_stretch(system: SystemConfig, geo: KvGeometry, gpus_used: int, tp: int, workload: Workload) -> float:
    """The slowdown of the all-reduces' transfers when they share the scale-up fabric with the pool traffic."""
    if tp < 2 or system.gpus.preset is None or system.topology is None or system.kv_endpoint is None:
        return 1.0
    names = system.gpu_endpoints(gpus_used)
    if not collectives_on_fabric(system.topology, names):
        return 1.0
    if system.attention == "pnm":
        inbound, outbound = pnm_flows(names, system.kv_endpoint, geo)
        background = inbound + outbound
    else:
        background = fetch_flows(names, system.kv_endpoint, geo)
    rings = [names[i:i + tp] for i in range(0, len(names), tp)]
    element_bytes = workload.element_bytes
    ring_bytes = 2 * (tp - 1) / tp * workload.batch * workload.shape.hidden_size * element_bytes
    return allreduce_stretch(system.topology, rings, ring_bytes, background)


def _sampling(system: SystemConfig, dram: PoolDram) -> dict[str, Any]:
    s = system.sampling
    return {"layers": s.layers, "channels": s.channels, "window_requests": s.window_requests,
            "replayed_requests": dram.replayed_requests, "channel_stream_requests": dram.full_requests,
            "channels_replayed": dram.channels_replayed, "layers_replayed": dram.layers_replayed}
