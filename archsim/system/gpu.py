"""The GPUs' own work: the non-attention kernels of a decoder layer, its all-reduces, and attention in HBM.

With a GPU preset (`gpus: {preset: h100}`, the default of every shipped system) the non-attention kernels
and the two tensor-parallel all-reduces per layer come from the calibrated kernel model (archsim.gpu,
docs/gpu.md): dense GQA layers through the calibrated layer, MoE and MLA layers through the same GEMM and
element-wise models applied to their expert and latent projections. Without a preset, the kernels are an
ideal roofline, max(bytes / HBM bandwidth, FLOPs / peak), and all-reduces are left out. GPU attention is a
roofline in both cases (the calibration files hold no attention kernels; docs/gpu.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from archsim.gpu.model import allreduce_ns, elementwise_ns, gemm_ns, layer_ns_each, layer_time_ns
from archsim.gpu.preset import GpuPreset
from archsim.gpu.shape import DTYPES, LayerShape
from archsim.models import ModelShape, dtype_bytes
from archsim.system.config import GpuConfig
from archsim.workloads import decode_step_bytes
from archsim.workloads.generators import expected_distinct_experts
from archsim.workloads.ops import layer_ops


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


@dataclass(frozen=True)
class GpuLayerTime:
    """One GPU's non-attention time per decoder layer (mean over the layers) and per step's epilogue."""

    kernels_ns: float  # norms, projections, RoPE, MLP/experts, residual add
    allreduce_ns: float  # the layer's two tensor-parallel all-reduces, alone on their fabric (0 at tp 1)
    epilogue_ns: float  # embedding rows, final norm, lm_head
    calibrated: bool


def gpu_layer_time(shape: ModelShape, dtype: str, tokens: int, sequences: int, tp: int, gpu: GpuConfig,
                   work: GpuWork | None, allreduce_stretch: float = 1.0) -> GpuLayerTime:
    """`tokens` new tokens of `sequences` sequences on one model instance of `tp` GPUs (work: roofline inputs).
    `work` (the roofline's inputs) is only read without a preset (None: built here).
    `allreduce_stretch` > 1 divides the all-reduces' bus bandwidth (other traffic on their fabric); their
    latency and floor stay."""
    if gpu.preset is None:
        per_gpu = (work or gpu_work(shape, dtype, tokens, dtype_bytes(dtype))).per_gpu(tp)
        return GpuLayerTime(roofline_ns(per_gpu.layer_weight_bytes, per_gpu.layer_flops, gpu), 0.0,
                            roofline_ns(per_gpu.epilogue_weight_bytes, per_gpu.epilogue_flops, gpu), False)
    preset = gpu.preset
    kernels = _layer_kernels_ns(shape, dtype, tokens, tp, preset)
    allreduce = layer_allreduce_ns(shape, dtype, tokens, tp, preset, allreduce_stretch)
    return GpuLayerTime(kernels, allreduce, _epilogue_ns(shape, dtype, sequences, tp, preset), True)


@lru_cache(maxsize=1 << 12)
def _epilogue_ns(shape: ModelShape, dtype: str, sequences: int, tp: int, preset: GpuPreset) -> float:
    """Each sequence's last token: its final norm and lm_head (memoized: a function of the sequence count)."""
    h, e = shape.hidden_size, dtype_bytes(dtype)
    return (float(elementwise_ns(2 * sequences * h * e, h, preset.elementwise.norm_efficiency, preset))
            + float(gemm_ns(sequences, -(-shape.vocab_size // tp), h, preset, e)))


def layer_allreduce_ns(shape: ModelShape, dtype: str, tokens: int, tp: int, preset: GpuPreset,
                       allreduce_stretch: float = 1.0) -> float:
    """The layer's two all-reduces of `tokens` x hidden elements, their bus bandwidth divided by the stretch
    (latency and floor kept): the only part of gpu_layer_time a stretch changes."""
    if allreduce_stretch != 1.0:
        shared = replace(preset.allreduce, bus_bandwidth_GBps=preset.allreduce.bus_bandwidth_GBps / allreduce_stretch)
        preset = replace(preset, allreduce=shared)
    return 2.0 * float(allreduce_ns(tokens * shape.hidden_size, tp, preset, dtype_bytes(dtype)))


# a dense layer's kernel time by token count, 1 .. TABLE_TOKENS (a serving run asks for most counts up to its
# batch token budget, over and over): one vectorized pass instead of one call per count, bit for bit the same
TABLE_TOKENS = 16384


@lru_cache(maxsize=16)
def _layer_kernels_table(shape: ModelShape, dtype: str, tp: int, preset: GpuPreset) -> list[float]:
    layer = LayerShape.from_model(shape, dtype)
    return layer_ns_each(layer, np.arange(1, TABLE_TOKENS + 1), tp, preset).tolist()


def _layer_kernels_ns(shape: ModelShape, dtype: str, tokens: int, tp: int, preset: GpuPreset) -> float:
    if shape.attention == "gqa" and not shape.n_routed_experts and dtype in DTYPES:
        if 0 < tokens <= TABLE_TOKENS:
            return _layer_kernels_table(shape, dtype, tp, preset)[tokens - 1]
        layer = LayerShape.from_model(shape, dtype)
        return float(layer_time_ns(layer, tokens, tp, preset).layer_ns)
    # MoE / MLA: the same kernel models over the layer's own projections, mean over the layers; a layer is dense
    # or MoE, so each kind is timed once (the first `dense` layers are dense, the rest MoE when experts exist)
    L = shape.num_layers
    dense = min(L, shape.first_k_dense_replace) if shape.n_routed_experts else L
    total = 0.0
    for first, count in ((0, dense), (dense, L - dense)):
        if count:
            total += count * _ops_layer_ns(shape, first, dtype, tokens, tp, preset)
    return total / L


# row-parallel projections split their input over the tensor-parallel GPUs; the small MLA down-projections
# and the MoE router are replicated; every other projection splits its output
_ROW_PARALLEL = ("o_proj", "down_proj")
_REPLICATED = ("q_a_proj", "kv_a_proj_with_mqa", "mlp.gate")


def _ops_layer_ns(shape: ModelShape, layer: int, dtype: str, tokens: int, tp: int, preset: GpuPreset) -> float:
    e, ew = dtype_bytes(dtype), preset.elementwise
    total = float(elementwise_ns(3 * tokens * shape.hidden_size * e, 0, ew.add_efficiency, preset))  # residual
    for op in layer_ops(shape, layer):
        if op.special:
            continue
        n_in, n_out = op.reads[0].width, op.writes[0].width
        if op.routed_experts:
            total += _experts_ns(shape, dtype, tokens, tp, preset)
        elif op.weight_elements < n_in * n_out:  # a norm: one weight per element of the row
            total += float(elementwise_ns(2 * tokens * n_in * e, n_in, ew.norm_efficiency, preset))
        elif op.name.endswith(_ROW_PARALLEL):
            total += float(gemm_ns(tokens, n_out, -(-n_in // tp), preset, e))
        elif op.name.endswith(_REPLICATED):
            total += float(gemm_ns(tokens, n_out, n_in, preset, e))
        else:
            total += float(gemm_ns(tokens, -(-n_out // tp), n_in, preset, e))
        if op.name.endswith("up_proj"):  # SiLU(gate) * up of this MLP
            width = -(-n_out // tp)
            total += float(elementwise_ns(3 * tokens * width * e, width, ew.act_efficiency, preset))
    return total


def _experts_ns(shape: ModelShape, dtype: str, tokens: int, tp: int, preset: GpuPreset) -> float:
    """Routed experts: the distinct experts the tokens pick, each a gated MLP over its share of the tokens."""
    e = dtype_bytes(dtype)
    picked = expected_distinct_experts(shape.n_routed_experts, shape.num_experts_per_tok, tokens)
    per_expert = max(1, -(-tokens * shape.num_experts_per_tok // picked))
    h, inter = shape.hidden_size, -(-shape.moe_intermediate_size // tp)
    one = (float(gemm_ns(per_expert, 2 * inter, h, preset, e)) + float(gemm_ns(per_expert, h, inter, preset, e))
           + float(elementwise_ns(3 * per_expert * inter * e, inter, preset.elementwise.act_efficiency, preset)))
    return picked * one
