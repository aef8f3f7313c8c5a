"""Remote KV fetched to the GPUs (G2, G3, the RDMA pool, the pools without PNM): GPU attention over KV that
crosses the links every step.

The layer's KV is fetched over the links (flow model) while the pool's DRAM serves it (memory core, paced by the
links' delivery rate): fetch = max(link, DRAM); a store without a memory model (host DRAM, NVMe, an RDMA server)
is its links alone. The fetched KV is staged in HBM (the copy engine writes it, the attention kernel reads it).
`schedule.gpu_fetch: prefetch` fetches layer l+1 while layer l computes, so a layer takes max(its HBM work with
the staged KV, the fetch) and one route latency per step is exposed; `serial`: weights, then fetch, then attention.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from archsim.system.gpu import roofline_ns
from archsim.system.links import analytic_share_GBps, fetch_flows, fetch_traffic
from archsim.system.placements.base import Breakdown, LayerContext, LayerTimes, Placement
from archsim.system.placements.pool import pool_dram, pool_infeasible

if TYPE_CHECKING:
    from archsim.interconnect.flows import Flow
    from archsim.kvlayout import KvGeometry
    from archsim.system.config import GpuConfig, SystemConfig


class FetchPlacement(Placement):
    kind = "fetch"
    gpu_attends = True
    dram_read_action = "dram.read_bit.host"

    def serves(self, system: SystemConfig) -> bool:
        return system.kv_location != "gpu" and system.attention != "pnm"

    def infeasible(self, system: SystemConfig, geo: KvGeometry, hbm_room_bytes: int, gpus_used: int) -> str | None:
        if system.kv_location == "pool":
            return pool_infeasible(system, geo)
        if system.kv_capacity_bytes is not None and geo.step_bytes > system.kv_capacity_bytes:
            gib = 2**30
            return f"KV {geo.step_bytes / gib:.1f} GiB exceeds the store's {system.kv_capacity_bytes / gib:.1f} GiB"
        return None

    def layer(self, ctx: LayerContext) -> LayerTimes:
        system, geo, gpus = ctx.system, ctx.geo, ctx.system.gpus
        assert system.topology is not None and system.kv_endpoint is not None
        traffic = fetch_traffic(system.topology, ctx.names, system.kv_endpoint, geo)
        fetch = traffic.time_ns[0]
        dram = None
        if system.kv_location == "pool":
            dram = pool_dram(system, geo, "host", traffic.kv_rate_GBps)
            fetch = max(fetch, dram.time_ns + traffic.route_latency_ns)
        read = roofline_ns(ctx.kv_gpu_bytes, ctx.attention_flops_gpu, gpus)
        attention = fetch + read
        hbm = exposed = 0.0
        if system.gpu_fetch == "prefetch":  # the staged KV's write and read join the layer's HBM work
            hbm = ctx.weights_ns + roofline_ns(2 * ctx.kv_gpu_bytes, ctx.attention_flops_gpu, gpus)
            layer = max(hbm, fetch - traffic.route_latency_ns)
            exposed = traffic.route_latency_ns
        else:
            layer = ctx.weights_ns + attention
        share_GBps = analytic_share_GBps(system.topology, ctx.names, system.kv_endpoint, None)
        analytic = max(ctx.weights_ns + 2 * ctx.kv_gpu_bytes / gpus.hbm_bandwidth_GBps,
                       geo.layer_bytes / ctx.gpus_used / share_GBps)
        return LayerTimes(attention, layer, analytic, exposed, traffic, dram, gpu_read_ns=read, hbm_ns=hbm,
                          serial=system.gpu_fetch == "serial")

    def breakdown(self, layers: int, times: LayerTimes, gpu_terms: dict[str, float], weights_ns: float) -> Breakdown:
        assert times.traffic is not None
        L, exposed = layers, times.exposed_ns
        fetch = times.attention_ns - times.gpu_read_ns
        critical = dict(gpu_terms)
        overlapped = {"link_fetch": L * times.traffic.time_ns[0]}
        if times.dram is not None:
            overlapped["pool_dram"] = L * times.dram.time_ns
        if times.serial:
            critical.update({"kv_fetch": L * fetch, "gpu_attention": L * times.gpu_read_ns})
        elif times.hbm_ns >= fetch - exposed:  # the GPUs' HBM work hides the next layer's fetch
            critical["gpu_attention"] = L * (times.hbm_ns - weights_ns)
            overlapped["kv_fetch"] = L * fetch
        else:  # the fetch stream decides; the GPUs' weights and attention run under it
            critical = {}
            overlapped.update({**gpu_terms, "gpu_attention": L * (times.hbm_ns - weights_ns)})
            critical["kv_fetch"] = L * (fetch - exposed)
        critical["exposed_latency"] = exposed
        return Breakdown(critical, overlapped, L * fetch)

    def staged_hbm_bytes(self, kv_step_bytes: float, append_step_bytes: float) -> float:
        return 2 * kv_step_bytes  # written by the copy engine, read by the attention kernel

    def background_flows(self, names: list[str], endpoint: str, geo: KvGeometry) -> list[Flow]:
        return fetch_flows(names, endpoint, geo)

    def decode_layer(self, own: dict[str, float], kv_bytes: float, flops: float, pool_ns: float,
                     route_latency_ns: float, system: SystemConfig, gpus: GpuConfig) -> tuple[dict[str, float], float]:
        if system.gpu_fetch == "prefetch":  # the next layer's fetch runs under this layer's HBM work
            hbm = {**own, "gpu_attention": roofline_ns(2 * kv_bytes, flops, gpus)}
            fetch = pool_ns - route_latency_ns
            return (hbm if sum(hbm.values()) >= fetch else {"kv_fetch": fetch}), route_latency_ns
        return {**own, "kv_fetch": pool_ns, "gpu_attention": roofline_ns(kv_bytes, flops, gpus)}, 0.0
