"""The GPUs' own work as a roofline: weights from local HBM, matrix FLOPs, and attention when it stays there.

Per GPU of a model instance (tensor parallelism splits weights, FLOPs and KV heads evenly): an operator takes
max(bytes / HBM bandwidth, FLOPs / peak). Tensor-parallel all-reduces are not modelled: they are the same in
every system compared (docs/systems.md, Limits).
"""

from __future__ import annotations

from dataclasses import dataclass

from archsim.models import ModelShape
from archsim.system.config import GpuConfig
from archsim.workloads import decode_step_bytes


@dataclass(frozen=True)
class GpuWork:
    layer_weight_bytes: int  # one decoder layer, whole model instance
    epilogue_weight_bytes: int  # embedding rows, final norm, lm_head
    layer_flops: int  # one decoder layer's matrix FLOPs, whole instance, whole batch
    epilogue_flops: int
    weight_bytes: int  # the whole model read once per step

    def per_gpu(self, tp: int) -> GpuWork:
        return GpuWork(self.layer_weight_bytes // tp, self.epilogue_weight_bytes // tp, self.layer_flops // tp,
                       self.epilogue_flops // tp, self.weight_bytes // tp)


def gpu_work(shape: ModelShape, dtype: str, batch: int, element_bytes: int) -> GpuWork:
    """Bytes and FLOPs of one decode step outside attention (decode_step_bytes is the byte oracle)."""
    weights = decode_step_bytes(shape, batch=batch, context_tokens=1, dtype=dtype)["weight_read"]
    h, el = shape.hidden_size, element_bytes
    epilogue = batch * h * el + h * el + shape.vocab_size * h * el  # embedding rows, final norm, lm_head
    layer = (weights - epilogue) // shape.num_layers
    # every weight element is one multiply-add per token of the batch (routed experts: only those read)
    return GpuWork(layer, epilogue, 2 * batch * (layer // el), 2 * batch * shape.vocab_size * h, weights)


def roofline_ns(bytes_: float, flops: float, gpu: GpuConfig) -> float:
    return max(bytes_ / gpu.hbm_bandwidth_GBps, flops / (gpu.peak_TFLOPS * 1e3))


def hbm_room_bytes(gpu: GpuConfig, weights_per_gpu: int) -> int:
    """HBM a GPU has left for KV after its weights, within the serving engine's memory budget."""
    return int(gpu.hbm_capacity_bytes * gpu.memory_utilization) - weights_per_gpu
