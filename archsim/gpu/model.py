"""Kernel-level GPU time of one decoder layer's non-attention work and of a tensor-parallel all-reduce.

GEMM (M tokens x K inputs -> N outputs per GPU): launch + (compute^p + memory^p)^(1/p), where memory is the
operands' bytes at the achieved HBM bandwidth and compute is tile and wave quantized: for each CUTLASS-class
tile shape Mt x Nt (64/128/256 each way) the output needs ceil(M/Mt) ceil(N/Nt) tiles; too few tiles to fill
the SMs are split along K (split-K, never below `split_k_min_depth`); the waves over the SMs each take one
tile's FLOPs at the SM's share of peak times flops_efficiency / (1 + tile_overhead (1/Mt + 1/Nt)) (smaller
tiles reuse less); the library is taken to pick the fastest tile; a CTA's serial walk over its K slice adds
k_step_ns per element. Element-wise kernels (norms, RoPE, activation, residual add): launch + max(bytes /
achieved bandwidth, one row at the per-block rate), the latter being the floor of a one-block-per-token
kernel (norms, RoPE, activation; the residual add is a grid-stride kernel). All-reduce of B bytes on n
GPUs: a direct exchange for small buffers between few GPUs, else max(floor(n), alpha + 2 (n-1)/n B / bus
bandwidth).

Every function takes scalars or numpy arrays of tokens (the fit evaluates all measured rows at once).
docs/gpu.md gives the equations, the parameters' sources and the errors against the measurements.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from archsim.errors import ConfigError
from archsim.gpu.preset import GpuPreset
from archsim.gpu.shape import LayerShape, LayerSplit
from archsim.models import ModelShape

TILE_SIZES = (64, 128, 256)  # CUTLASS/cuBLAS Hopper tensor-core tile edges
KERNELS = ("input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
           "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")  # the calibration files' column names, in order
GEMM_KERNELS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")


@dataclass(frozen=True)
class KernelTimes:
    """Predicted ns of each non-attention kernel of one decoder layer on one GPU (floats or arrays)."""

    input_layernorm: float
    attn_pre_proj: float
    attn_rope: float
    attn_post_proj: float
    post_attention_layernorm: float
    mlp_up_proj: float
    mlp_act: float
    mlp_down_proj: float
    add: float

    @property
    def layer_ns(self) -> float:
        """The sum of the nine kernels (the calibration files' layer)."""
        return sum(getattr(self, name) for name in KERNELS)

    def as_dict(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in KERNELS}


def gemm_ns(m: object, n: int, k: int, gpu: GpuPreset, element_bytes: int = 2) -> np.ndarray | float:
    """Time of an (m x k) @ (k x n) matrix product on one GPU; m may be an array of token counts."""
    total = _gemm_total_ns(*_gemm_parts(np.asarray(m, dtype=float), n, k, gpu, element_bytes), gpu)
    return float(total) if total.ndim == 0 else total


def gemm_ns_each(m: np.ndarray, n: int, k: int, gpu: GpuPreset, element_bytes: int = 2) -> np.ndarray:
    """gemm_ns of each of the token counts `m` as a call with that one count gives it, bit for bit: the terms
    vectorized, the overlap's powers taken one by one (a scalar's pow is the C library's, an array's numpy's
    vectorized one, which can differ in the last bit)."""
    parts = _gemm_parts(np.asarray(m, dtype=float), n, k, gpu, element_bytes)
    return np.array([_gemm_total_ns(c, mem, ks, gpu) for c, mem, ks in zip(*(x.tolist() for x in parts), strict=True)])


def _gemm_total_ns(compute: object, memory: object, k_slice: object, gpu: GpuPreset) -> object:
    g = gpu.gemm
    p = g.overlap_exponent
    return g.launch_ns + g.k_step_ns * k_slice + (compute**p + memory**p) ** (1 / p)


def _gemm_parts(m_arr: np.ndarray, n: int, k: int, gpu: GpuPreset, element_bytes: int) -> tuple:
    """gemm_ns's compute and memory terms and a CTA's K slice."""
    g = gpu.gemm
    sm_flops_per_ns = gpu.peak_TFLOPS * 1e3 / gpu.sm_count * g.flops_efficiency
    compute = np.full(m_arr.shape, np.inf)
    for tile_m in TILE_SIZES:
        for tile_n in TILE_SIZES:
            tiles = np.ceil(m_arr / tile_m) * np.ceil(n / tile_n)
            splits = np.clip(np.floor(gpu.sm_count / tiles), 1, max(1, k // g.split_k_min_depth))
            waves = np.ceil(tiles * splits / gpu.sm_count)
            tile_ns = 2.0 * tile_m * tile_n * (k / splits) / sm_flops_per_ns
            compute = np.minimum(compute, waves * tile_ns * (1 + g.tile_overhead * (1 / tile_m + 1 / tile_n)))
    memory = (m_arr * k + k * n + m_arr * n) * element_bytes / (gpu.hbm_bandwidth_GBps * g.hbm_efficiency)
    # a CTA walks its K slice serially (load, wait, multiply): a floor that split-K shortens (64 x 64 tiles)
    small_tiles = np.ceil(m_arr / TILE_SIZES[0]) * np.ceil(n / TILE_SIZES[0])
    k_slice = k / np.clip(np.floor(gpu.sm_count / small_tiles), 1, max(1, k // g.split_k_min_depth))
    return compute, memory, k_slice


def elementwise_ns(bytes_: object, row_elements: int, efficiency: float, gpu: GpuPreset) -> np.ndarray | float:
    """A memory-bound kernel moving `bytes_`; `row_elements` > 0: one block per token row (0: grid-stride)."""
    e = gpu.elementwise
    streaming = np.asarray(bytes_, dtype=float) / (gpu.hbm_bandwidth_GBps * efficiency)
    total = e.launch_ns + np.maximum(streaming, row_elements / e.row_elements_per_ns)
    return float(total) if total.ndim == 0 else total


def _layer_shape(shape: LayerShape | ModelShape) -> LayerShape:
    return LayerShape.from_model(shape) if isinstance(shape, ModelShape) else shape


def layer_time_ns(shape: LayerShape | ModelShape, tokens: object, tp: int, gpu: GpuPreset) -> KernelTimes:
    """The nine non-attention kernels of one decoder layer on one of `tp` GPUs, `tokens` in the batch."""
    split = _layer_shape(shape).split(tp)
    t = np.asarray(tokens, dtype=float)
    if np.any(t <= 0):
        raise ConfigError("tokens must be positive", where="tokens")
    return _kernel_times(split, t, gpu)


def layer_ns_each(shape: LayerShape | ModelShape, tokens: np.ndarray, tp: int, gpu: GpuPreset) -> np.ndarray:
    """layer_time_ns(...).layer_ns of each of the positive token counts `tokens` as a call with that one count
    gives it, bit for bit (gemm_ns_each), in one vectorized pass."""
    t = np.asarray(tokens, dtype=float)
    if np.any(t <= 0):
        raise ConfigError("tokens must be positive", where="tokens")
    return np.asarray(_kernel_times(_layer_shape(shape).split(tp), t, gpu, gemm_ns_each).layer_ns)


def _kernel_times(split: LayerSplit, t: np.ndarray, gpu: GpuPreset, gemm: Callable = gemm_ns) -> KernelTimes:
    s, e, ew = split.shape, split.shape.element_bytes, gpu.elementwise
    h = s.hidden
    norm = elementwise_ns(2 * t * h * e, h, ew.norm_efficiency, gpu)  # read x, write normed x
    act_tensors = 3 if s.gated else 2  # gated: read gate and up, write their product
    return KernelTimes(
        input_layernorm=norm,
        attn_pre_proj=gemm(t, split.qkv_width, h, gpu, e),
        attn_rope=elementwise_ns(2 * t * split.rope_width * e, split.rope_width, ew.rope_efficiency, gpu),
        attn_post_proj=gemm(t, h, split.attn_out_width, gpu, e),
        post_attention_layernorm=norm,
        mlp_up_proj=gemm(t, split.up_width, h, gpu, e),
        mlp_act=elementwise_ns(act_tensors * t * split.ffn * e, split.ffn, ew.act_efficiency, gpu),
        mlp_down_proj=gemm(t, h, split.ffn, gpu, e),
        add=elementwise_ns(3 * t * h * e, 0, ew.add_efficiency, gpu),  # read both operands, write the sum
    )


def lm_head_ns(shape: LayerShape | ModelShape, tokens: object, tp: int, gpu: GpuPreset) -> np.ndarray | float:
    """The output projection to the vocabulary (split over tp GPUs); 0 when the shape has no vocab."""
    s = _layer_shape(shape)
    s.split(tp)
    if not s.vocab:
        return 0.0
    return gemm_ns(tokens, -(-s.vocab // tp), s.hidden, gpu, s.element_bytes)


def allreduce_ns(elements: object, tp: int, gpu: GpuPreset, element_bytes: int = 2) -> np.ndarray | float:
    """One NCCL all-reduce of `elements` fp16 values over `tp` GPUs of one node (0 at tp 1)."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp <= 0:
        raise ConfigError(f"must be a positive integer, got {tp!r}", where="tp")
    size = np.asarray(elements, dtype=float) * element_bytes
    if tp == 1:
        total = np.zeros(size.shape)
    else:
        a = gpu.allreduce
        ring = a.latency_ns + 2 * (tp - 1) / tp * size / a.bus_bandwidth_GBps
        total = np.maximum(a.floor_for(tp), ring)
        if tp <= a.small_max_gpus:
            direct = a.small_latency_ns + size / a.bus_bandwidth_GBps
            total = np.where(size <= a.small_max_bytes, direct, total)
    return float(total) if total.ndim == 0 else total


def layer_allreduce_ns(shape: LayerShape | ModelShape, tokens: object, tp: int, gpu: GpuPreset) -> np.ndarray | float:
    """One of a layer's two all-reduces (after the output and the down projection): tokens x hidden elements."""
    s = _layer_shape(shape)
    s.split(tp)
    return allreduce_ns(np.asarray(tokens, dtype=float) * s.hidden, tp, gpu, s.element_bytes)
