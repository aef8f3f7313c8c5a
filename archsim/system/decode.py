"""One decode step of a workload on a system: per layer GPU work, attention where it is placed, link transfers.

Per layer (all layers are identical; the step is L x layer + epilogue), by the system's placement
(`archsim/system/placements/`, one module each):

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

from archsim.kvlayout import KvGeometry, kv_geometry
from archsim.system.config import SystemConfig
from archsim.system.energy_model import step_energy
from archsim.system.gpu import GpuWork, gpu_layer_time, gpu_work, hbm_room_bytes
from archsim.system.links import allreduce_stretch, collectives_on_fabric
from archsim.system.placements import LayerContext, LayerTimes, Placement, placement_of
from archsim.system.pooldram import PoolDram
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


def _infeasible(system: SystemConfig, placement: Placement, geo: KvGeometry, work: GpuWork,
                gpus_used: int, tp: int) -> str | None:
    room = hbm_room_bytes(system.gpus, work.weight_bytes // tp)
    if room < 0:
        return f"the weights ({work.weight_bytes / tp / 2**30:.1f} GiB per GPU) exceed the GPUs' HBM budget"
    return placement.infeasible(system, geo, room, gpus_used)


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
    placement = placement_of(system)
    reason = _infeasible(system, placement, geo, work, gpus_used, tp)
    if workload.max_context is not None and context > workload.max_context:
        reason = (f"context {context} tokens exceeds {workload.shape.name}'s maximum of {workload.max_context} "
                  f"(max_position_embeddings)")
    if reason:
        result.status = f"infeasible: {reason}"
        return result
    L = geo.layers
    stretch = _allreduce_stretch(system, placement, geo, gpus_used, tp, workload)
    gpu_time = gpu_layer_time(workload.shape, workload.dtype, workload.batch, workload.batch, tp, gpus, work,
                              allreduce_stretch=stretch)
    result.allreduce_stretch = stretch
    names = system.gpu_endpoints(gpus_used) if system.topology is not None else []
    weights_ns = gpu_time.kernels_ns + gpu_time.allreduce_ns  # the GPU's non-attention work of a layer
    ctx = LayerContext(system, workload, geo, context, names, gpus_used, instances, stretch, weights_ns,
                       (geo.layer_bytes + geo.append_layer_bytes) / gpus_used, 2 * geo.layer_macs / gpus_used)
    times = placement.layer(ctx)
    step = L * times.layer_ns + gpu_time.epilogue_ns + times.exposed_ns
    result.decode_step_ns = step
    result.attention_ns = L * times.attention_ns
    # gpu_weights: the non-attention kernels (weights streamed from HBM); allreduce: the layer's two collectives
    gpu_terms = {"gpu_weights": L * gpu_time.kernels_ns, "allreduce": L * gpu_time.allreduce_ns}
    parts = placement.breakdown(L, times, gpu_terms, weights_ns)
    result.breakdown_ns = {"critical": {**parts.critical, "epilogue": gpu_time.epilogue_ns},
                           "overlapped": parts.overlapped}
    result.pool_side_ns = parts.pool_side_ns
    result.analytic_decode_step_ns = (L * times.analytic_layer_ns + gpu_time.epilogue_ns
                                      + (times.exposed_ns if times.pipelined else 0.0))
    _record_parts(result, system, times, names, L)
    if times.pipelined:  # every sub-batch streams the weights again
        work = replace(work, weight_bytes=work.weight_bytes * system.sub_batches)
    energy = step_energy(system, workload, geo, work, instances, step, times.traffic, times.dram, times.pnm)
    result.energy_breakdown_pJ_per_token = {k: v / result.tokens for k, v in energy.items()}
    result.energy_pJ_per_token = sum(energy.values()) / result.tokens
    return result


def _record_parts(result: StepResult, system: SystemConfig, times: LayerTimes, names: list[str], L: int) -> None:
    """The links', pool DRAM's, PNM's and QoS study's figures of the step's `L` layers into `result`."""
    traffic, dram, pnm = times.traffic, times.dram, times.pnm
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
    if times.qos is not None:
        result.qos = times.qos.as_dict()


def _allreduce_stretch(system: SystemConfig, placement: Placement, geo: KvGeometry, gpus_used: int, tp: int,
                       workload: Workload) -> float:
    """The slowdown of the all-reduces' transfers when they share the scale-up fabric with the pool traffic."""
    if tp < 2 or system.gpus.preset is None or system.topology is None or system.kv_endpoint is None:
        return 1.0
    names = system.gpu_endpoints(gpus_used)
    if not collectives_on_fabric(system.topology, names):
        return 1.0
    background = placement.background_flows(names, system.kv_endpoint, geo)
    rings = [names[i:i + tp] for i in range(0, len(names), tp)]
    element_bytes = workload.element_bytes
    ring_bytes = 2 * (tp - 1) / tp * workload.batch * workload.shape.hidden_size * element_bytes
    return allreduce_stretch(system.topology, rings, ring_bytes, background)


def _sampling(system: SystemConfig, dram: PoolDram) -> dict[str, Any]:
    s = system.sampling
    return {"layers": s.layers, "channels": s.channels, "window_requests": s.window_requests,
            "replayed_requests": dram.replayed_requests, "channel_stream_requests": dram.full_requests,
            "channels_replayed": dram.channels_replayed, "layers_replayed": dram.layers_replayed}
