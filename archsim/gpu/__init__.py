"""The GPU side's kernel-level time model, calibrated per GPU type on measured kernels (docs/gpu.md).

    gpu = load_gpu_preset("h100")
    times = layer_time_ns(shape, tokens=16, tp=8, gpu=gpu)   # KernelTimes; times.layer_ns
    allreduce_ns(16 * shape.hidden, tp=8, gpu=gpu)           # one of the layer's two all-reduces
"""

from archsim.gpu.model import (
    KERNELS,
    KernelTimes,
    allreduce_ns,
    elementwise_ns,
    gemm_ns,
    layer_allreduce_ns,
    layer_time_ns,
    lm_head_ns,
)
from archsim.gpu.preset import GPUS_DIR, GpuPreset, load_gpu_preset
from archsim.gpu.shape import LayerShape, parse_shape_spec

__all__ = ["GPUS_DIR", "KERNELS", "GpuPreset", "KernelTimes", "LayerShape", "allreduce_ns", "elementwise_ns",
           "gemm_ns", "layer_allreduce_ns", "layer_time_ns", "lm_head_ns", "load_gpu_preset", "parse_shape_spec"]
