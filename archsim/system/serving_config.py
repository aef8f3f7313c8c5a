"""The serving keys of a system file: `system.kv.tiers` (with `kv.location` as a one-tier shorthand),
`system.kv.decode` and `system.serving` (docs/design-serving.md, docs/serving.md).

Defaults follow vLLM's engine arguments: block_size 16, max_num_seqs 256, max_num_batched_tokens 8192 with
chunked prefill on (vLLM V1), preemption by recompute.
"""

from __future__ import annotations

from dataclasses import dataclass

from archsim.errors import ConfigError
from archsim.section import Section
from archsim.units import parse_size_bytes

TIER_KINDS = ("hbm", "pool", "host_dram", "nvme", "rdma")
STORE_KINDS = ("host_dram", "nvme", "rdma")
DEVICE_OF_KIND = {"host_dram": "ddr5", "nvme": "nvme", "rdma": None}  # device energy of a store (energy_model)
ROUTERS = ("round_robin", "least_loaded", "prefix")
PREEMPTIONS = ("recompute", "swap")
DECODE_MODES = ("load", "stream")
# several servers on one pool: how shared blocks stay coherent (archsim.serving.coherence) and how the PNM
# units order attention jobs from several servers (archsim.serving.pnm_units)
COHERENCE_SCHEMES = ("software", "back_invalidate")
# how the GPUs' KV moves to and from the pool: by DMA, which no CPU cache holds (coherence covers a block's
# metadata line), or copied by CPUs through their caches (coherence covers every line of the block)
KV_DATA_PATHS = ("dma", "cpu")
PNM_SCHEDULING = ("fifo", "fair_share")


@dataclass(frozen=True)
class KvTier:
    name: str
    kind: str  # hbm | pool | host_dram | nvme | rdma
    capacity_bytes: int | None  # None: derived (hbm: room after the weights; pool: the modelled pool's size)
    endpoint: str | None  # the topology endpoint the tier sits behind (None for hbm)
    compute: str  # pnm | none


@dataclass(frozen=True)
class ServingConfig:
    instances: int | None  # None: as many as the GPUs hold at tensor_parallel
    tensor_parallel: int
    router: str
    max_batch_tokens: int
    max_batch_seqs: int
    chunked_prefill: bool
    block_tokens: int
    preemption: str
    prefill_instances: int  # > 0: prefill/decode disaggregation, this many prefill-only instances


def parse_serving(s: Section) -> ServingConfig:
    instances = s.int("instances", minimum=1) if s.has("instances") else None
    cfg = ServingConfig(
        instances=instances,
        tensor_parallel=s.int("tensor_parallel", 8, minimum=1),
        router=s.choice("router", ROUTERS, "round_robin"),
        max_batch_tokens=s.int("max_batch_tokens", 8192, minimum=1),
        max_batch_seqs=s.int("max_batch_seqs", 256, minimum=1),
        chunked_prefill=s.bool("chunked_prefill", True),
        block_tokens=s.int("block_tokens", 16, minimum=1),
        preemption=s.choice("preemption", PREEMPTIONS, "recompute"),
        prefill_instances=s.int("prefill_instances", 0, minimum=0),
    )
    s.done()
    return cfg


def shorthand_tiers(location: str, endpoint: str | None, capacity: int | None, device: str | None,
                    attention: str, over_ethernet: bool) -> tuple[KvTier, ...]:
    """`kv.location` as tiers: gpu -> [hbm]; pool -> [hbm, pool]; store -> [hbm, nvme | rdma | host_dram]."""
    hbm = KvTier("hbm", "hbm", None, None, "none")
    if location == "gpu":
        return (hbm,)
    if location == "pool":
        return hbm, KvTier("pool", "pool", None, endpoint, "pnm" if attention == "pnm" else "none")
    kind = "nvme" if device == "nvme" else "rdma" if over_ethernet else "host_dram"
    return hbm, KvTier(kind, kind, capacity, endpoint, "none")


def parse_tiers(items: object, where: str, file: str | None, attention: str) -> tuple[KvTier, ...]:
    """An explicit `kv.tiers` list, fastest first, tier 0 the GPUs' HBM."""
    if not isinstance(items, list) or not items:
        raise ConfigError(f"expected a non-empty list of tiers, got {items!r}", file=file, where=where)
    tiers = []
    for i, item in enumerate(items):
        s = Section(item, f"{where}[{i}]", file)
        kind = s.choice("kind", TIER_KINDS)
        name = s.name("name", kind)
        capacity = s.parsed("capacity", parse_size_bytes) if kind in STORE_KINDS else None
        endpoint = s.str("endpoint") if kind != "hbm" else None
        compute = s.choice("compute", ("pnm", "none"), "none")
        s.done()
        if (i == 0) != (kind == "hbm"):
            raise s.error("kind", "tier 0 and only tier 0 is the GPUs' HBM (`kind: hbm`)")
        if compute == "pnm" and kind != "pool":
            raise s.error("compute", "only a `pool` tier has PNM units")
        if capacity is not None and capacity <= 0:
            raise s.error("capacity", f"must be positive, got {capacity}")
        tiers.append(KvTier(name, kind, capacity, endpoint, compute))
    names = [t.name for t in tiers]
    if len(set(names)) != len(names):
        raise ConfigError(f"tier names must differ, got {names}", file=file, where=where)
    pools = [i for i, t in enumerate(tiers) if t.kind == "pool"]
    if len(pools) > 1:
        raise ConfigError("at most one `pool` tier (the system's modelled pool)", file=file, where=where)
    if (attention == "pnm") != any(t.compute == "pnm" for t in tiers):
        raise ConfigError("`attention: pnm` needs a pool tier with `compute: pnm`, and such a tier needs "
                          "`attention: pnm`", file=file, where=where)
    return tuple(tiers)


def location_of(tiers: tuple[KvTier, ...]) -> tuple[str, str | None, int | None, str | None]:
    """What the decode-step model sees of explicit tiers: the first tier below HBM is where the KV lives
    (location, endpoint, capacity, device)."""
    if len(tiers) == 1:
        return "gpu", None, None, None
    home = tiers[1]
    if home.kind == "pool":
        return "pool", home.endpoint, None, None
    return "store", home.endpoint, home.capacity_bytes, DEVICE_OF_KIND[home.kind]
