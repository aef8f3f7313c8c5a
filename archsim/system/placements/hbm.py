"""KV in the GPUs' HBM (G1): attention is the GPUs' HBM roofline over their share of the KV and its appends."""

from __future__ import annotations

from typing import TYPE_CHECKING

from archsim.system.gpu import roofline_ns
from archsim.system.placements.base import Breakdown, LayerContext, LayerTimes, Placement

if TYPE_CHECKING:
    from archsim.kvlayout import KvGeometry
    from archsim.system.config import GpuConfig, SystemConfig


class HbmPlacement(Placement):
    kind = "gpu"
    gpu_attends = True
    dram_read_action = "dram.read_bit.host"  # no pool DRAM: never counted

    def serves(self, system: SystemConfig) -> bool:
        return system.kv_location == "gpu"

    def infeasible(self, system: SystemConfig, geo: KvGeometry, hbm_room_bytes: int, gpus_used: int) -> str | None:
        need = geo.step_bytes / gpus_used
        if need > hbm_room_bytes:
            gib = 2**30
            return (f"KV {geo.step_bytes / gib:.1f} GiB needs {need / gib:.1f} GiB per GPU, "
                    f"{hbm_room_bytes / gib:.1f} GiB of HBM left after the weights")
        return None

    def layer(self, ctx: LayerContext) -> LayerTimes:
        attention = roofline_ns(ctx.kv_gpu_bytes, ctx.attention_flops_gpu, ctx.system.gpus)
        layer = ctx.weights_ns + attention
        return LayerTimes(attention, layer, layer)

    def breakdown(self, layers: int, times: LayerTimes, gpu_terms: dict[str, float], weights_ns: float) -> Breakdown:
        return Breakdown({**gpu_terms, "gpu_attention": layers * times.attention_ns}, {}, None)

    def staged_hbm_bytes(self, kv_step_bytes: float, append_step_bytes: float) -> float:
        return kv_step_bytes + append_step_bytes  # read where it lives, appended in place

    def decode_layer(self, own: dict[str, float], kv_bytes: float, flops: float, pool_ns: float,
                     route_latency_ns: float, system: SystemConfig, gpus: GpuConfig) -> tuple[dict[str, float], float]:
        return {**own, "gpu_attention": roofline_ns(kv_bytes, flops, gpus)}, 0.0
