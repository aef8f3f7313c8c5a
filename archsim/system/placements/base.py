"""The interface of a placement: where a system keeps the KV cache and where attention runs over it.

A placement answers, for one decode layer, what the decode-step model (`system/decode.py`), the mixed-batch step
(`system/mixed.py`) and the energy model (`system/energy_model.py`) need from it: whether the KV fits, how long
the layer's attention takes and what it moves (links, pool DRAM, PNM units), which of that is on the critical
path, what the GPUs' HBM and the pool DRAM count for energy, and what other traffic shares the scale-up fabric
with the all-reduces. The placements are `hbm.py` (KV in the GPUs' HBM), `fetch.py` (remote KV fetched to the
GPUs) and `pnm.py` (KV in a PNM pool, attention beside its controllers); `placements/__init__.py` picks one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from archsim.interconnect.flows import Flow
    from archsim.kvlayout import KvGeometry
    from archsim.system.attention import PoolAttentionTime
    from archsim.system.config import GpuConfig, SystemConfig
    from archsim.system.links import LayerTraffic
    from archsim.system.pooldram import PoolDram
    from archsim.system.qos import QosResult
    from archsim.system.workload import Workload


@dataclass(frozen=True)
class LayerContext:
    """One decode layer as every placement sees it (all instances of the workload on the system)."""

    system: SystemConfig
    workload: Workload
    geo: KvGeometry  # the KV of every sequence of every instance
    context: int  # cached tokens per sequence
    names: list[str]  # the GPU endpoints in use
    gpus_used: int
    instances: int
    stretch: float  # the all-reduces' slowdown on a fabric shared with the pool's traffic
    weights_ns: float  # the GPUs' non-attention work of the layer: kernels and all-reduces
    kv_gpu_bytes: float  # one GPU's share of the layer's KV and appends
    attention_flops_gpu: float  # one GPU's share of the layer's attention FLOPs


@dataclass(frozen=True)
class LayerTimes:
    """What a placement's decode layer takes and moves."""

    attention_ns: float  # the attention's time on the layer's path
    layer_ns: float  # the whole layer
    analytic_layer_ns: float  # the closed-form check of `layer_ns`
    exposed_ns: float = 0.0  # once per step (a prefetch's route latency, a pipeline's fill)
    traffic: LayerTraffic | None = None
    dram: PoolDram | None = None
    pnm: PoolAttentionTime | None = None
    qos: QosResult | None = None
    gpu_read_ns: float = 0.0  # fetch: the attention kernel's read of the staged KV
    hbm_ns: float = 0.0  # fetch under prefetch: the layer's HBM work with the staged KV's write and read
    serial: bool = False  # fetch under `schedule.gpu_fetch: serial`
    pipelined: bool = False  # PNM sub-batches: the GPUs' work and the attention overlap


@dataclass(frozen=True)
class Breakdown:
    critical: dict[str, float]  # terms of the step (without the epilogue) on its critical path
    overlapped: dict[str, float]  # work hidden under them
    pool_side_ns: float | None  # the pool's share of the step, when the KV is remote


class Placement(ABC):
    """One placement; `kind` is its name in results (`DecodeTerms.kind`)."""

    kind: str
    gpu_attends: bool  # attention runs on the GPUs (its FLOPs are theirs)
    dram_read_action: str  # the energy action of the pool DRAM's KV reads

    @abstractmethod
    def serves(self, system: SystemConfig) -> bool:
        """Whether this placement is the system's (`kv.location`, `attention`)."""

    @abstractmethod
    def infeasible(self, system: SystemConfig, geo: KvGeometry, hbm_room_bytes: int, gpus_used: int) -> str | None:
        """Why the step's KV does not fit where this placement keeps it, or None."""

    @abstractmethod
    def layer(self, ctx: LayerContext) -> LayerTimes:
        """The decode layer's attention, timed (links, pool DRAM and PNM simulated where it has them)."""

    @abstractmethod
    def breakdown(self, layers: int, times: LayerTimes, gpu_terms: dict[str, float], weights_ns: float) -> Breakdown:
        """The step's terms: `gpu_terms` the GPUs' non-attention work over the `layers`."""

    def staged_hbm_bytes(self, kv_step_bytes: float, append_step_bytes: float) -> float:
        """The step's KV bytes in the GPUs' HBM besides the weights (energy: gpu.hbm_bit)."""
        return 0.0

    def background_flows(self, names: list[str], endpoint: str, geo: KvGeometry) -> list[Flow]:
        """The pool traffic of a layer that shares the scale-up fabric with the all-reduces."""
        return []

    @abstractmethod
    def decode_layer(self, own: dict[str, float], kv_bytes: float, flops: float, pool_ns: float,
                     route_latency_ns: float, system: SystemConfig, gpus: GpuConfig) -> tuple[dict[str, float], float]:
        """A mixed-batch layer's critical terms around the GPUs' `own` work, given the decode sequences' HBM
        `kv_bytes` and attention `flops` per GPU and the decode-step model's `pool_ns` per layer; and the latency
        exposed once per step. Scalar arithmetic: the serving engine's hot path."""
