"""KV in a PNM pool (G2.5, G1.5): attention beside the pool's memory controllers; only queries, appended K/V and
outputs cross the links.

A layer takes the GPUs' work, then the queries in (flow model), the PNM time (the busiest unit, its DRAM loads
replayed; stretched by the host traffic of a QoS study), then the outputs back, strictly in sequence: attention
needs this layer's query, the next layer needs its output. `schedule.sub_batches` N > 1 pipelines sub-batches
(AttAcc / NeuPIMs interleaving): the GPUs run one sub-batch's projections and FFN while the PNM units run another's
attention.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from archsim.kvlayout import KvGeometry, channel_share, kv_geometry
from archsim.system.attention import PoolAttentionTime, pool_attention_time
from archsim.system.gpu import gpu_layer_time, gpu_work
from archsim.system.links import LayerTraffic, pnm_flows, pnm_traffic
from archsim.system.placements.base import Breakdown, LayerContext, LayerTimes, Placement
from archsim.system.placements.pool import pool_dram, pool_infeasible, qos_study

if TYPE_CHECKING:
    from archsim.interconnect.flows import Flow
    from archsim.system.config import GpuConfig, SystemConfig
    from archsim.system.pooldram import PoolDram
    from archsim.system.qos import QosResult
    from archsim.system.workload import Workload


class PnmPlacement(Placement):
    kind = "pnm"
    gpu_attends = False
    dram_read_action = "dram.read_bit.pnm"

    def serves(self, system: SystemConfig) -> bool:
        return system.kv_location != "gpu" and system.attention == "pnm"

    def infeasible(self, system: SystemConfig, geo: KvGeometry, hbm_room_bytes: int, gpus_used: int) -> str | None:
        return pool_infeasible(system, geo)

    def layer(self, ctx: LayerContext) -> LayerTimes:
        system = ctx.system
        pool = system.pool
        assert pool is not None and pool.pnm is not None
        traffic, dram, pnm, pool_ns, qos = _attention(system, ctx.workload, ctx.geo, ctx.names)
        attention = traffic.time_ns[0] + pool_ns + traffic.time_ns[1]
        peak_pool = pool.channels * dram.peak_bandwidth_GBps_per_channel
        layer = ctx.weights_ns + attention
        analytic = (ctx.weights_ns + 2 * traffic.route_latency_ns
                    + max(ctx.geo.layer_bytes * pnm.sram.passes / peak_pool, pnm.compute_ns))
        if system.sub_batches <= 1:
            return LayerTimes(attention, layer, analytic, 0.0, traffic, dram, pnm, qos)
        sub = _sub_batch_pipeline(system, ctx.workload, ctx.context, ctx.names, ctx.instances, ctx.stretch,
                                  peak_pool)
        return LayerTimes(attention, sub.cycle_ns, sub.analytic_cycle_ns, sub.fill_ns, traffic, dram, pnm, qos,
                          pipelined=True)

    def breakdown(self, layers: int, times: LayerTimes, gpu_terms: dict[str, float], weights_ns: float) -> Breakdown:
        assert times.traffic is not None and times.dram is not None
        L, link = layers, times.traffic.time_ns
        critical = {**gpu_terms, "link_queries": L * link[0], "pnm": L * (times.attention_ns - sum(link)),
                    "link_outputs": L * link[1]}
        overlapped = {"pool_dram": L * times.dram.time_ns}  # the PNM's loads: inside its time
        if times.pipelined:  # the sub-batches' GPU work and attention overlap: the pipeline's cycle is critical
            overlapped.update(critical)
            critical = {"sub_batch_pipeline": L * times.layer_ns, "pipeline_fill": times.exposed_ns}
        return Breakdown(critical, overlapped, L * times.attention_ns)

    def background_flows(self, names: list[str], endpoint: str, geo: KvGeometry) -> list[Flow]:
        inbound, outbound = pnm_flows(names, endpoint, geo)
        return inbound + outbound

    def decode_layer(self, own: dict[str, float], kv_bytes: float, flops: float, pool_ns: float,
                     route_latency_ns: float, system: SystemConfig, gpus: GpuConfig) -> tuple[dict[str, float], float]:
        return {**own, "pnm_attention": pool_ns}, 0.0


def _attention(system: SystemConfig, workload: Workload, geo: KvGeometry,
               names: list[str]) -> tuple[LayerTraffic, PoolDram, PoolAttentionTime, float, QosResult | None]:
    """The layer's query and output traffic, the pool DRAM replayed, the PNM units' timed attention, their time
    with the QoS study's slowdown, and that study (None without one)."""
    pool = system.pool
    assert pool is not None and pool.pnm is not None and system.topology is not None
    assert system.kv_endpoint is not None
    traffic = pnm_traffic(system.topology, names, system.kv_endpoint, geo)
    dram = pool_dram(system, geo, "pnm", None)
    pnm = pool_attention_time(geo, channel_share(geo, pool.channels), pool.pnm, pool.memory, dram,
                              kind="mla" if workload.shape.attention == "mla" else "gqa",
                              sample_tokens=system.sampling.pnm_sample_tokens)
    pool_ns, qos = pnm.time_ns, None
    if system.qos is not None:
        qos = qos_study(system, geo)
        pool_ns *= qos.slowdown["pnm"]  # host traffic at the controllers stretches the PNM's loads
    return traffic, dram, pnm, pool_ns, qos


@dataclass(frozen=True)
class SubBatchPipeline:
    cycle_ns: float  # one layer in steady state: max(N x GPU work, N x attention, one sub-batch's GPU + attention)
    fill_ns: float  # once per step: the first sub-batch's attention before the GPUs overlap, or the last's work
    analytic_cycle_ns: float


def _sub_batch_pipeline(system: SystemConfig, workload: Workload, context: int, names: list[str], instances: int,
                        stretch: float, peak_pool: float) -> SubBatchPipeline:
    """N sub-batches: each resource carries N per layer and each sub-batch needs its GPU work then its
    attention, so a layer takes max(N g, N a, g + a); the pipeline fills and drains once per step (min(g, a))."""
    n = system.sub_batches
    sub_batch = -(-workload.batch // n)
    geo = kv_geometry(workload.shape, workload.dtype, sub_batch * instances, context)
    work = gpu_work(workload.shape, workload.dtype, sub_batch, workload.element_bytes)
    gpu_time = gpu_layer_time(workload.shape, workload.dtype, sub_batch, sub_batch, workload.tensor_parallel,
                              system.gpus, work, allreduce_stretch=stretch)
    g = gpu_time.kernels_ns + gpu_time.allreduce_ns
    traffic, _, pnm, pool_ns, _ = _attention(system, workload, geo, names)
    a = traffic.time_ns[0] + pool_ns + traffic.time_ns[1]
    a_analytic = 2 * traffic.route_latency_ns + max(geo.layer_bytes * pnm.sram.passes / peak_pool, pnm.compute_ns)
    return SubBatchPipeline(max(n * g, n * a, g + a), min(g, a), max(n * g, n * a_analytic, g + a_analytic))
