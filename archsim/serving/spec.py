"""What the serving engine is given about a system: its KV tiers, its batching limits and the cost of one
iteration. The lead builds these from `system.kv.tiers` and `system.serving`; the engine only reads them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from archsim.errors import ConfigError
from archsim.system.serving_config import (  # the system file's words
    COHERENCE_SCHEMES,
    DECODE_MODES,
    KV_DATA_PATHS,
    PNM_SCHEDULING,
    PREEMPTIONS,
    ROUTERS,
    TIER_KINDS,
)


class IterationCost(Protocol):
    """What one iteration costs. A cost may also define `decode_steps_ns(cached_tokens, steps) -> ndarray`:
    the durations of `steps` decode iterations of one batch, sequence s holding cached_tokens[s] + j tokens at
    step j, equal to iteration_ns(cached_tokens + j, ones) for each j; the engine then prices a stretch of pure
    decode in one call instead of one per iteration (docs/serving-engine.md)."""

    def iteration_ns(self, cached_tokens: np.ndarray, new_tokens: np.ndarray) -> float:
        """One iteration of one model instance on a mixed batch: sequence s has cached_tokens[s] tokens of KV
        already and computes new_tokens[s] tokens now (decode: 1; a prefill chunk: the chunk)."""
        ...


@dataclass(frozen=True)
class TierSpec:
    name: str
    kind: str                 # hbm|pool|host_dram|nvme|rdma
    capacity_bytes: int       # hbm: per instance (room after weights); lower tiers: shared by every instance
    link: str | None          # the link a load from this tier into HBM crosses (None for hbm)
    link_GBps: float
    link_latency_ns: float
    compute: str              # pnm|none
    # several servers: link_GBps is the pool side every server shares, this each server's own port onto it
    server_link_GBps: float = 0.0
    # the direction away from the GPUs (writes into the tier), when it differs (an SSD writes slower than it
    # reads); 0: as fast as link_GBps (server_link_GBps)
    write_GBps: float = 0.0
    server_write_GBps: float = 0.0

    @property
    def write_link_GBps(self) -> float:
        return self.write_GBps or self.link_GBps

    @property
    def server_write_link_GBps(self) -> float:
        return self.server_write_GBps or self.server_link_GBps


@dataclass(frozen=True)
class ServingSpec:
    system: str
    tier_label: str
    instances: int
    tensor_parallel: int
    router: str                     # round_robin|least_loaded|prefix
    max_batch_tokens: int
    max_batch_seqs: int
    chunked_prefill: bool
    block_tokens: int
    preemption: str                 # recompute|swap
    kv_bytes_per_token: int         # one model instance, all layers
    tiers: tuple[TierSpec, ...]     # fastest first
    kv_home: int                    # tier index where running sequences' KV lives (0: HBM; a pnm pool's index)
    max_context_tokens: int
    decode: str                     # load|stream
    disaggregated: bool = False
    prefill_instances: int = 0
    # auto: each sequence's KV in HBM or in the PNM tier `kv_home`, as a placer decides at admission and
    # whenever its context crosses a multiple of replan_tokens (archsim.plan.place); fixed: all in kv_home
    placement: str = "fixed"
    replan_tokens: int = 8192
    pool_dram_GBps: float = 0.0     # the modelled pool's peak DRAM bandwidth (0: no pool), for utilization over time
    servers: int = 1                # instances split evenly over servers, each reaching the tiers by its own port
    # several servers on a pool: the scheme keeping the blocks they share coherent, and the PNM units' order of
    # their attention jobs (`system.pool.coherence`, `system.pool.pnm.scheduling`)
    coherence: str = "software"
    kv_data_path: str = "dma"       # `system.pool.kv_data_path`: what coherence covers (a block's metadata line
    # under DMA, its every line when CPUs copy it)
    pnm_scheduling: str = "fair_share"

    def server_of(self, instance: Any) -> Any:
        """The server of an instance (or of an array of them)."""
        return instance * self.servers // self.instances

    @property
    def block_bytes(self) -> int:
        return self.block_tokens * self.kv_bytes_per_token

    def capacity_blocks(self, tier: int) -> int:
        return int(self.tiers[tier].capacity_bytes // self.block_bytes)


def validate(spec: ServingSpec) -> None:
    """Raise ConfigError naming the `system.serving` / `system.kv` key that is out of range."""
    def need(ok: bool, where: str, what: str) -> None:
        if not ok:
            raise ConfigError(what, where=where)

    need(spec.instances >= 1, "system.serving.instances", f"must be at least 1, got {spec.instances}")
    need(spec.router in ROUTERS, "system.serving.router", f"must be one of {', '.join(ROUTERS)}, got {spec.router!r}")
    need(spec.preemption in PREEMPTIONS, "system.serving.preemption",
         f"must be one of {', '.join(PREEMPTIONS)}, got {spec.preemption!r}")
    need(spec.decode in DECODE_MODES, "system.kv.decode", f"must be load or stream, got {spec.decode!r}")
    need(spec.max_batch_tokens >= 1, "system.serving.max_batch_tokens",
         f"must be positive, got {spec.max_batch_tokens}")
    need(spec.max_batch_seqs >= 1, "system.serving.max_batch_seqs", f"must be positive, got {spec.max_batch_seqs}")
    need(spec.block_tokens >= 1, "system.serving.block_tokens", f"must be positive, got {spec.block_tokens}")
    need(spec.kv_bytes_per_token >= 1, "model.kv_bytes_per_token", f"must be positive, got {spec.kv_bytes_per_token}")
    need(len(spec.tiers) >= 1, "system.kv.tiers", "needs at least one tier")
    need(0 <= spec.kv_home < len(spec.tiers), "system.kv.tiers",
         f"kv_home {spec.kv_home} is not a tier index (0..{len(spec.tiers) - 1})")
    for t, tier in enumerate(spec.tiers):
        need(tier.kind in TIER_KINDS, f"system.kv.tiers[{t}].kind",
             f"must be one of {', '.join(TIER_KINDS)}, got {tier.kind!r}")
        need(tier.capacity_bytes >= 0, f"system.kv.tiers[{t}].capacity", "must not be negative")
        if t > 0:
            need(tier.link_GBps > 0, f"system.kv.tiers[{t}].endpoint", f"link bandwidth must be positive, got "
                 f"{tier.link_GBps} GB/s")
    need(spec.placement in ("fixed", "auto"), "system.kv.placement", f"unknown mode {spec.placement!r}")
    need(spec.placement == "fixed" or (spec.kv_home > 0 and spec.decode == "load"), "system.kv.placement",
         "auto needs a PNM tier to place KV in besides HBM, and decode: load")
    home = spec.tiers[spec.kv_home]
    need(spec.kv_home == 0 or home.compute == "pnm", "system.kv.tiers",
         f"KV can live in tier {home.name!r} only if it computes attention (compute: pnm)")
    need(spec.decode == "load" or len(spec.tiers) > spec.kv_home + 1, "system.kv.decode",
         "stream needs a tier below the KV home to stream from")
    lives = spec.kv_home + (spec.decode == "stream")   # where running sequences' KV is (auto: HBM, or the pool)
    need(spec.preemption != "swap" or lives + 1 < len(spec.tiers) or spec.placement == "auto",
         "system.serving.preemption", f"swap moves a preempted sequence's KV to the tier below "
         f"{spec.tiers[min(lives, len(spec.tiers) - 1)].name}, and the system has none (use recompute)")
    need(spec.servers >= 1 and spec.instances % spec.servers == 0, "system.servers",
         f"{spec.instances} instances do not split evenly over {spec.servers} servers")
    for t, tier in enumerate(spec.tiers[1:], start=1):
        need(spec.servers == 1 or tier.server_link_GBps > 0, f"system.kv.tiers[{t}].endpoint",
             f"with {spec.servers} servers each needs a port to the tier, got {tier.server_link_GBps} GB/s")
    need(spec.coherence in COHERENCE_SCHEMES, "system.pool.coherence",
         f"must be one of {', '.join(COHERENCE_SCHEMES)}, got {spec.coherence!r}")
    need(spec.kv_data_path in KV_DATA_PATHS, "system.pool.kv_data_path",
         f"must be one of {', '.join(KV_DATA_PATHS)}, got {spec.kv_data_path!r}")
    need(spec.pnm_scheduling in PNM_SCHEDULING, "system.pool.pnm.scheduling",
         f"must be one of {', '.join(PNM_SCHEDULING)}, got {spec.pnm_scheduling!r}")
    need(spec.servers <= 64, "system.servers", f"at most 64 servers share a pool, got {spec.servers}")
    need(not spec.disaggregated or 1 <= spec.prefill_instances < spec.instances, "system.serving.prefill_instances",
         f"disaggregation needs 1 <= prefill_instances < instances ({spec.instances}), got {spec.prefill_instances}")
