"""System configs (`configs/systems/*.yaml`): GPU hosts, interconnect, KV location, pool devices, PNM, sampling.

File layout (top-level key `system`; docs/systems.md describes every key and cites every default):

    system:
      name: g25
      tier: G2.5
      description: one line
      gpus: {count: 8, peak_TFLOPS: 989.4, hbm_bandwidth: 3.35TB/s, hbm_capacity: 80GB,
             memory_utilization: 0.9, clock: 1.98GHz, endpoint: gpu}
      interconnect: {preset: cxl2_switch, set: {links.pool_link.count: 8}}   # or {inline: {...}} / {file: ...}
                                                     # optional bandwidth_scale: every link's raw rate x this
      kv: {location: pool, endpoint: pool}           # pool | gpu | store (store: also `capacity`, `device`)
      attention: pnm                                 # pnm | gpu
      pool:
        memory: hbm3e                                # configs/memory/<name>.yaml, or a path
        devices: 8
        stacks_per_device: 4
        host_fetch_interleave: 256B
        l2: {...}                                    # optional, archsim.cache.parse_l2 keys
        pnm: {model: auto, clock: 1GHz, macs_per_cycle: 256, exp_per_cycle: 8, sram: 512KiB, tile_tokens: 64}
      schedule: {gpu_fetch: prefetch, sub_batches: 1}   # sub_batches N > 1: GPU work and PNM attention overlap
      sampling: {layers: once, channels: once, window_requests: 65536, pnm_sample_tokens: [1024, 4096]}
      qos: {...}                                     # optional, archsim.system.qos.parse_qos keys
      energy: default

Unknown keys, missing keys, bad units and inconsistent values are ConfigErrors naming the dotted path.

Why one module of about 500 lines: the records of a system and one parser per section of its file, which check
one another's values (KV endpoints against the interconnect, the placement against the tiers) while the tree
is read; the KV tiers and serving keys (serving_config.py) and QoS (qos.py) stand alone in their own modules.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from archsim.cache.l2 import L2Config, parse_l2
from archsim.config.memory import MemoryConfig, load_memory_config
from archsim.config.overrides import apply_overrides
from archsim.config.yaml_files import read_yaml, resolve_preset
from archsim.energy import EnergyTable
from archsim.errors import ConfigError
from archsim.gpu.preset import GpuPreset, load_gpu_preset
from archsim.interconnect import PRESETS_DIR as INTERCONNECT_DIR
from archsim.interconnect import Topology
from archsim.isa.program import MAX_SRAM_BYTES
from archsim.resources import data_path
from archsim.section import Section
from archsim.system.address_map import CXL_WAYS, PoolAddressMap, build_address_map
from archsim.system.pooldram import min_window_requests
from archsim.system.qos import QosSpec, parse_qos, qos_memory
from archsim.system.serving_config import (
    COHERENCE_SCHEMES,
    DECODE_MODES,
    KV_DATA_PATHS,
    PNM_SCHEDULING,
    KvTier,
    ServingConfig,
    location_of,
    parse_serving,
    parse_tiers,
    shorthand_tiers,
)
from archsim.units import parse_bandwidth_GBps, parse_frequency_ghz, parse_size_bytes

CONFIGS_DIR = data_path("configs")
SYSTEMS_DIR = CONFIGS_DIR / "systems"
MEMORY_DIR = CONFIGS_DIR / "memory"
KV_LOCATIONS = ("pool", "gpu", "store")
KV_DEVICES = ("ddr5", "nvme")  # what a `store` holds the KV in, for its device energy (energy_model.py)
ATTENTION_PLACES = ("pnm", "gpu")
PNM_MODELS = ("auto", "roofline", "timed")
SAMPLING_MODES = ("once", "all")
GPU_FETCH_MODES = ("prefetch", "serial")


@dataclass(frozen=True)
class GpuConfig:
    count: int
    peak_TFLOPS: float  # dense BF16 tensor throughput of one GPU
    hbm_bandwidth_GBps: float
    hbm_capacity_bytes: int
    memory_utilization: float  # share of HBM the serving engine may use (weights + KV + workspace)
    clock_GHz: float  # only to express latencies in GPU cycles
    endpoint: str  # the topology endpoint group holding the GPUs
    # the calibrated kernel model (configs/gpus/NAME.yaml), its datasheet values replaced by the ones above;
    # None: the non-attention work is an ideal roofline and tensor-parallel all-reduces are left out
    preset: GpuPreset | None = None


@dataclass(frozen=True)
class PnmSpec:
    """The pool's PNM units: a PNM config file (configs/pnm/, docs/pnm.md) with the system's overrides."""

    model: str  # auto: the timed unit (archsim.pnm.timed.timing) when importable, else the roofline
    config_path: str  # the PNM config its other parameters (pipelines, vector unit, DMA, ...) come from
    clock_GHz: float | None  # None: the memory's command clock
    macs_per_cycle: int
    exp_per_cycle: int
    sram_bytes: int
    tile_tokens: int
    dma_outstanding_loads: int
    scheduling: str = "fair_share"  # several servers: attention jobs of their instances at the units (PNM_SCHEDULING)

    def overrides(self) -> list[str]:
        """The system's values as `--set` overrides of the PNM config (for archsim.pnm.timed.unit_config)."""
        clock = "memory" if self.clock_GHz is None else f"{self.clock_GHz}GHz"
        return [f"pnm.clock={clock}", f"pnm.compute.macs_per_cycle={self.macs_per_cycle}",
                f"pnm.compute.exp_per_cycle={self.exp_per_cycle}", f"pnm.sram.capacity={self.sram_bytes}",
                f"pnm.dma.max_outstanding_loads={self.dma_outstanding_loads}"]


@dataclass(frozen=True)
class PoolSpec:
    memory: MemoryConfig  # one device: `stacks_per_device` stacks
    memory_source: str
    devices: int
    host_fetch_interleave_bytes: int  # GPU-side fetches round-robin over a channel's KV streams at this size
    l2: L2Config | None  # one device's L2, sliced evenly over its channels (ways, line, MSHRs per slice)
    pnm: PnmSpec | None
    address_map: PoolAddressMap | None = None  # servers' windows, interleave, DPA -> DRAM (system.address_map)
    coherence: str = "software"  # several servers: how blocks they share stay coherent (COHERENCE_SCHEMES)
    kv_data_path: str = "dma"  # how KV moves between GPUs and the pool (KV_DATA_PATHS): what coherence covers

    @property
    def channels_per_device(self) -> int:
        return self.memory.organization.n_channels

    @property
    def channels(self) -> int:
        return self.devices * self.channels_per_device

    @property
    def capacity_bytes(self) -> int:
        return self.devices * self.memory.organization.capacity_bytes


@dataclass(frozen=True)
class SamplingSpec:
    layers: str  # once: identical layers simulated once and multiplied
    channels: str  # once: the busiest channel simulated, the others are symmetric
    window_requests: int  # per-channel stream window replayed (0 = the whole stream), steady state extrapolated
    pnm_sample_tokens: tuple[int, int]  # contexts of the two timed PNM runs a per-token cost is fitted to


@dataclass(frozen=True)
class SystemConfig:
    name: str
    tier: str
    description: str
    gpus: GpuConfig
    topology: Topology | None  # None only when the KV stays in GPU HBM
    kv_location: str
    kv_endpoint: str | None
    kv_capacity_bytes: int | None  # for `store` locations (no memory model)
    attention: str
    pool: PoolSpec | None
    gpu_fetch: str
    sampling: SamplingSpec
    qos: QosSpec | None
    energy: EnergyTable
    file: str | None
    kv_device: str | None = None  # `store` locations: ddr5 or nvme (None: no device energy counted)
    kv_tiers: tuple[KvTier, ...] = ()  # fastest first, tier 0 the GPUs' HBM (kv.tiers, or kv.location's)
    kv_decode: str = "load"  # serving: load a remote prefix into HBM once, or stream the KV every step
    serving: ServingConfig | None = None
    sub_batches: int = 1  # schedule.sub_batches: PNM attention of one sub-batch under the GPUs' work on another
    # serving: where running sequences' KV lives -- a tier name (hbm, or a tier with PNM compute), or `auto`
    # (the planner picks per request at admission and whenever its context crosses a multiple of
    # kv_replan_tokens); None: the first PNM tier, else HBM
    kv_placement: str | None = None
    kv_replan_tokens: int = 8192
    servers: int = 1  # the GPUs split evenly into this many servers sharing the pool (gpus.count is all of them)

    @property
    def gpus_per_server(self) -> int:
        return self.gpus.count // self.servers

    def gpu_endpoints(self, n: int) -> list[str]:
        """The first `n` GPU endpoints of the topology group (checked at load time)."""
        assert self.topology is not None
        names = [e.name for e in self.topology.endpoints.values() if e.group == self.gpus.endpoint]
        return names[:n]


def load_system_configs(names: Sequence[str], overrides: Sequence[str] = ()) -> list[SystemConfig]:
    """Several systems for one comparison, each with the same overrides; two with one name are refused, since
    their results could not be told apart."""
    configs = [load_system_config(n, tuple(overrides)) for n in names]
    seen = [c.name for c in configs]
    dup = next((n for n in seen if seen.count(n) > 1), None)
    if dup is not None:
        raise ConfigError(f"two systems are named {dup!r}: results would be ambiguous", where="system.name")
    return configs


def resolve_system_path(name_or_path: str | Path) -> Path:
    """A path, or a preset name (`g25` -> configs/systems/g25.yaml)."""
    return resolve_preset(name_or_path, SYSTEMS_DIR, "system")


POOL_MEMORY_PREFIX = "system.pool.memory."


def apply_system_overrides(tree: Any, overrides: tuple[str, ...] | list[str], file: str | None) -> None:
    """`--set` on a system tree, in place. `system.pool.memory.K=V` sets key K of the pool's resolved memory
    config (configs/memory/, as `memory.K` of `archsim replay --set`): it joins `pool.memory_set`."""
    plain = [o for o in overrides if not o.strip().startswith(POOL_MEMORY_PREFIX)]
    apply_overrides(tree, plain, file)
    for assignment in overrides:
        if assignment in plain:
            continue
        dotted, sep, text = assignment.strip().partition("=")
        if not sep:
            raise ConfigError(f"{assignment!r} is not of the form dotted.key=value", where="--set")
        pool = tree.get("system", {}).get("pool") if isinstance(tree.get("system"), dict) else None
        if not isinstance(pool, dict):
            raise ConfigError("no such config path (the system has no pool)", file=file, where="system.pool")
        sets = pool.setdefault("memory_set", {})
        if not isinstance(sets, dict):
            raise ConfigError("expected a mapping of dotted.key: value", file=file, where="system.pool.memory_set")
        try:
            sets[dotted.removeprefix(POOL_MEMORY_PREFIX)] = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"cannot read value {text!r}: {exc}", file=file, where=dotted) from None


def load_system_config(name_or_path: str | Path, overrides: tuple[str, ...] | list[str] = ()) -> SystemConfig:
    path = resolve_system_path(name_or_path)
    tree = read_yaml(path)
    if isinstance(tree, dict):
        apply_system_overrides(tree, overrides, str(path))
    return system_config_from_mapping(tree, file=str(path))


def system_config_from_mapping(tree: Any, *, file: str | None = None) -> SystemConfig:
    top = Section(tree, "", file)
    root = top.sub("system")
    top.done()
    name = root.name("name")
    tier = root.name("tier", name)
    description = root.str("description", "")
    gpus = _parse_gpus(root.sub("gpus"))
    servers = root.int("servers", 1, minimum=1)
    if gpus.count % servers:
        raise root.error("servers", f"{gpus.count} GPUs do not split evenly over {servers} servers (gpus.count "
                                    "is every server's GPUs together)")
    kv = root.sub("kv")
    attention = root.choice("attention", ATTENTION_PLACES)
    topology = _parse_interconnect(root, file) if root.has("interconnect") else None
    kv_decode = kv.choice("decode", DECODE_MODES, "load")
    kv_placement = kv.str("placement") if kv.has("placement") else None
    replan_tokens = kv.int("replan_tokens", 8192, minimum=1)
    if kv.has("tiers"):
        if kv.raw("location", None) is not None:  # `--set system.kv.location=null` drops a file's shorthand
            raise kv.error("location", "give either kv.tiers or its one-tier shorthand kv.location, not both")
        tiers = parse_tiers(kv.raw("tiers"), kv.where("tiers"), file, attention)
        location, endpoint, capacity, device = location_of(tiers)
    else:
        location = kv.choice("location", KV_LOCATIONS)
        endpoint = kv.str("endpoint") if location != "gpu" else None
        capacity = kv.parsed("capacity", parse_size_bytes) if location == "store" else None
        device = kv.choice("device", KV_DEVICES) if location == "store" and kv.has("device") else None
        over_ethernet = topology is not None and endpoint is not None and _over_ethernet(topology, endpoint)
        tiers = shorthand_tiers(location, endpoint, capacity, device, attention, over_ethernet)
    kv.done()
    serving = parse_serving(root.sub("serving", {}))
    if topology is None and location != "gpu":
        raise root.error("interconnect", "missing: the KV lives outside the GPUs, so a link must reach it")
    pool = _parse_pool(root.sub("pool"), file, servers) if root.has("pool") else None
    schedule = root.sub("schedule", {})
    gpu_fetch = schedule.choice("gpu_fetch", GPU_FETCH_MODES, "prefetch")
    sub_batches = schedule.int("sub_batches", 1, minimum=1)
    schedule.done()
    sampling = _parse_sampling(root.sub("sampling", {}))
    qos = parse_qos(root.sub("qos")) if root.has("qos") else None
    energy = _parse_energy(root, file)
    root.done()

    if location == "pool" and pool is None:
        raise root.error("pool", "missing: kv.location is `pool`")
    if attention == "pnm":
        if location != "pool":
            raise root.error("attention", "`pnm` needs the KV in a pool (kv.location: pool)")
        if pool is None or pool.pnm is None:
            raise root.error("pool.pnm", "missing: attention runs in the pool's PNM units")
    if pool is not None and pool.l2 is not None and "all" in (sampling.layers, sampling.channels):
        raise root.error("sampling", "the full reference simulation does not model the pool's L2: sample "
                                     "(layers: once, channels: once) or drop pool.l2")
    if qos is not None and attention != "pnm":
        raise root.error("qos", "the QoS study arbitrates host and PNM requests at the pool's controllers: "
                                "it needs attention: pnm")
    if qos is not None and pool is not None:
        qos_memory(pool.memory, qos, file)  # the arbiter's keys are checked now, errors under system.qos
    if pool is not None and 0 < sampling.window_requests < min_window_requests(pool.memory):
        raise root.error("sampling.window_requests",
                         f"{sampling.window_requests} requests do not span two refresh intervals of the pool's "
                         f"memory at peak rate: use 0 (whole streams) or >= {min_window_requests(pool.memory)}")
    if topology is not None:
        _check_endpoints(topology, gpus, endpoint, root)
    for i, t in enumerate(tiers):
        if t.endpoint is not None and topology is not None and t.endpoint not in topology.endpoints:
            raise root.error(f"kv.tiers[{i}].endpoint", f"the interconnect has no endpoint {t.endpoint!r}")
    _check_placement(kv_placement, tiers, kv_decode, root)
    return SystemConfig(name, tier, description, gpus, topology, location, endpoint, capacity, attention, pool,
                        gpu_fetch, sampling, qos, energy, file, device, tiers, kv_decode, serving,
                        sub_batches=sub_batches, kv_placement=kv_placement, kv_replan_tokens=replan_tokens,
                        servers=servers)


def _check_placement(placement: str | None, tiers: tuple[KvTier, ...], decode: str, root: Section) -> None:
    """kv.placement names HBM or a tier with PNM compute (where attention can run on the KV), or is `auto`,
    which needs both to choose between."""
    if placement is None:
        return
    homes = [t.name for t in tiers if t.kind == "hbm" or t.compute == "pnm"]
    if placement != "auto" and placement not in homes:
        raise root.error("kv.placement", f"must be auto or one of {', '.join(homes)} (HBM or a tier with PNM "
                                         f"compute), got {placement!r}")
    if placement == "auto" and len(homes) < 2:
        raise root.error("kv.placement", "auto chooses between HBM and a tier with PNM compute; the system has "
                                         "no PNM tier")
    if decode == "stream":
        raise root.error("kv.placement", "decode: stream streams every step from the tier below HBM; give "
                                         "placement only with decode: load")


def _over_ethernet(topology: Topology, endpoint: str) -> bool:
    """A store reached over an Ethernet (RoCE) hop is a remote memory pool (RDMA), not host DRAM."""
    gpu = next(iter(topology.endpoints))
    try:
        return any(h.link.protocol == "ethernet" for h in topology.route(endpoint, gpu).hops)
    except ConfigError:
        return False


def _parse_gpus(s: Section) -> GpuConfig:
    preset = _gpu_preset(s) if s.has("preset") else None
    count = s.int("count", minimum=1)
    tflops = s.float("peak_TFLOPS", preset.peak_TFLOPS) if preset else s.float("peak_TFLOPS")
    bandwidth = (s.parsed("hbm_bandwidth", parse_bandwidth_GBps) if s.has("hbm_bandwidth") or preset is None
                 else preset.hbm_bandwidth_GBps)
    capacity = s.parsed("hbm_capacity", parse_size_bytes)
    utilization = s.float("memory_utilization", 0.9)
    clock = s.parsed("clock", parse_frequency_ghz)
    endpoint = s.str("endpoint", "gpu")
    s.done()
    for key, value in (("peak_TFLOPS", tflops), ("hbm_bandwidth", bandwidth), ("hbm_capacity", capacity),
                       ("clock", clock)):
        if value <= 0:
            raise s.error(key, f"must be positive, got {value}")
    if not 0 < utilization <= 1:
        raise s.error("memory_utilization", f"must lie in (0, 1], got {utilization}")
    if preset is not None:  # a datasheet value given here (a what-if GPU) scales the calibrated model
        preset = replace(preset, peak_TFLOPS=tflops, hbm_bandwidth_GBps=bandwidth)
    return GpuConfig(count, tflops, bandwidth, capacity, utilization, clock, endpoint, preset)


def _gpu_preset(s: Section) -> GpuPreset:
    try:
        return load_gpu_preset(s.str("preset"))
    except ConfigError as err:
        if err.file:  # the preset file itself is malformed: its own file and key
            raise
        raise s.error("preset", err.detail) from None


def _parse_interconnect(root: Section, file: str | None) -> Topology:
    """`interconnect: NAME`, or a mapping with exactly one of preset/file/inline, plus optional `set`."""
    value = root.raw("interconnect")
    where = root.where("interconnect")
    s = Section({"preset": value} if isinstance(value, str) else value, where, file)
    forms = [k for k in ("preset", "file", "inline") if s.has(k)]
    if len(forms) != 1:
        raise ConfigError("give exactly one of preset, file or inline", file=file, where=where)
    sets = s.raw("set", {})
    if not isinstance(sets, dict):
        raise s.error("set", "expected a mapping of dotted.key: value")
    scale = s.float("bandwidth_scale", 1.0)  # a what-if knob for sweeps: every link's raw rate x this
    if scale <= 0:
        raise s.error("bandwidth_scale", f"must be positive, got {scale:g}")
    if forms[0] == "inline":
        data = copy.deepcopy(s.raw("inline"))
        src_file, path = file, f"{where}.inline"
    else:
        p = Path(s.str(forms[0]))
        if forms[0] == "preset":
            p = INTERCONNECT_DIR / f"{p}.yaml"
            if not p.exists():
                known = ", ".join(sorted(q.stem for q in INTERCONNECT_DIR.glob("*.yaml")))
                raise s.error("preset", f"unknown interconnect preset {s.data['preset']!r} (known: {known})")
        elif not p.is_absolute() and file is not None:
            p = Path(file).resolve().parent / p
        loaded = read_yaml(p)
        if not isinstance(loaded, dict) or "interconnect" not in loaded:
            raise ConfigError("expected a top-level `interconnect:` mapping", file=str(p))
        data, src_file, path = loaded["interconnect"], str(p), "interconnect"
    s.done()
    if sets:
        tree = {"interconnect": data}
        try:
            apply_overrides(tree, [f"interconnect.{k}={yaml.safe_dump(v).strip()}" for k, v in sets.items()], file)
        except ConfigError as exc:
            raise ConfigError(exc.detail, file=file, where=f"{where}.set.{exc.where}") from None
        data = tree["interconnect"]
    topology = Topology.from_mapping(data, path=path, file=src_file)
    if scale == 1.0:
        return topology
    links = tuple(replace(link, bandwidth_GBps=link.bandwidth_GBps * scale,
                          reverse_bandwidth_GBps=link.reverse_bandwidth_GBps * scale) for link in topology.links)
    return Topology(topology.endpoints, topology.switches, links, topology.description, topology.file, topology.path)


def _check_endpoints(topology: Topology, gpus: GpuConfig, kv_endpoint: str | None, root: Section) -> None:
    members = [e.name for e in topology.endpoints.values() if e.group == gpus.endpoint]
    if not members:
        raise ConfigError(f"the interconnect has no endpoint group {gpus.endpoint!r}", file=root.file,
                          where=root.where("gpus.endpoint"))
    if len(members) < gpus.count:
        raise ConfigError(f"{gpus.count} GPUs but the interconnect has {len(members)} `{gpus.endpoint}` endpoints",
                          file=root.file, where=root.where("gpus.count"))
    if kv_endpoint is None:
        return
    if kv_endpoint not in topology.endpoints:
        raise ConfigError(f"the interconnect has no endpoint {kv_endpoint!r} "
                          f"(endpoints: {', '.join(topology.endpoints)})", file=root.file,
                          where=root.where("kv.endpoint"))
    for gpu in members[: gpus.count]:
        topology.route(gpu, kv_endpoint)  # an unreachable KV endpoint fails here, naming its config path
        topology.route(kv_endpoint, gpu)


def _memory_path(name: str, file: str | None) -> Path:
    p = Path(name)
    if not p.suffix and (MEMORY_DIR / f"{name}.yaml").exists():
        return MEMORY_DIR / f"{name}.yaml"
    if not p.is_absolute() and file is not None:
        return Path(file).resolve().parent / p
    return p


def _parse_pool(s: Section, file: str | None, servers: int = 1) -> PoolSpec:
    memory_name = s.str("memory")
    sets = s.raw("memory_set", {})
    if not isinstance(sets, dict):
        raise s.error("memory_set", "expected a mapping of dotted.key: value")
    devices = s.int("devices", minimum=1)
    stacks = s.int("stacks_per_device", minimum=1)
    overrides = [f"memory.organization.stacks={stacks}"]
    overrides += [f"memory.{k}={yaml.safe_dump(v).strip()}" for k, v in sets.items()]
    mpath = _memory_path(memory_name, file)
    try:
        memory = load_memory_config(mpath, overrides)
    except ConfigError as exc:
        raise ConfigError(f"memory config {exc.render()}", file=file, where=s.where("memory")) from None
    interleave = s.parsed("host_fetch_interleave", parse_size_bytes, 256)
    access = memory.organization.access_bytes
    if interleave < access or interleave % access:
        raise s.error("host_fetch_interleave", f"must be a positive multiple of the {access} B access")
    l2 = parse_l2(s.sub("l2")) if s.has("l2") else None
    pnm = _parse_pnm(s.sub("pnm"), file) if s.has("pnm") else None
    amap = _parse_address_map(s.sub("address_map", {}), devices, memory, servers)
    coherence = s.choice("coherence", COHERENCE_SCHEMES, "software")
    kv_data_path = s.choice("kv_data_path", KV_DATA_PATHS, "dma")
    s.done()
    if l2 is not None:
        slice_bytes = l2.capacity_bytes // memory.organization.n_channels
        if l2.capacity_bytes % memory.organization.n_channels or slice_bytes % (l2.line_size_bytes * l2.ways):
            raise s.error("l2.capacity", f"{l2.capacity_bytes} B does not slice into whole sets over the device's "
                                         f"{memory.organization.n_channels} channels")
    return PoolSpec(memory, str(mpath), devices, interleave, l2, pnm, amap, coherence, kv_data_path)


def _parse_address_map(s: Section, devices: int, memory: MemoryConfig, system_servers: int) -> PoolAddressMap:
    """`pool.address_map: {ways, granularity, servers, window_base, window_stride}` (archsim.system.address_map);
    every key optional: all devices one interleave set, 4 KiB chunks, a window for each of the system's servers."""
    if not s.has("ways") and devices not in CXL_WAYS:  # the default: every device in one interleave set
        raise ConfigError(f"{devices:,} devices make one {devices:,}-way interleave set, and CXL interleaves 1, 2, 3, "
                          "4, 6, 8, 12 or 16 ways: give pool.address_map.ways", file=s.file,
                          where=s.path.removesuffix(".address_map") + ".devices")
    ways = s.int("ways", devices, minimum=1)
    granularity = s.parsed("granularity", parse_size_bytes, 4096)
    servers = s.int("servers", system_servers, minimum=1)
    base = s.int("window_base", 1 << 40, minimum=0)
    stride = s.int("window_stride", minimum=1) if s.has("window_stride") else None
    s.done()
    return build_address_map(devices, memory.organization.capacity_bytes, memory.mapping, servers=servers,
                             ways=ways, granularity_bytes=granularity, window_base=base, window_stride=stride,
                             where=s.path, file=s.file)


def _parse_pnm(s: Section, file: str | None) -> PnmSpec:
    """`config:` names the PNM config (default: configs/pnm/default.yaml); the keys beside it override it."""
    from archsim.pnm.timed.unit_config import load_pnm_config

    model = s.choice("model", PNM_MODELS, "auto")
    name = s.str("config", "default")
    path = Path(name)
    if not path.suffix:
        path = CONFIGS_DIR / "pnm" / f"{name}.yaml"
    elif not path.is_absolute() and file is not None:
        path = Path(file).resolve().parent / path
    try:
        base = load_pnm_config(path)
    except ConfigError as exc:
        raise ConfigError(f"PNM config {exc.render()}", file=file, where=s.where("config")) from None
    clock: float | None = base.clock_GHz
    if s.has("clock"):
        clock = None if s.raw("clock") == "memory" else s.parsed("clock", parse_frequency_ghz)
    macs = s.int("macs_per_cycle", base.compute.macs_per_cycle, minimum=1)
    exps = s.int("exp_per_cycle", base.compute.exp_per_cycle, minimum=1)
    sram = s.parsed("sram", parse_size_bytes, base.sram.capacity_bytes)
    tile = s.int("tile_tokens", 64, minimum=1)
    outstanding = s.int("dma_outstanding_loads", base.dma.max_outstanding_loads, minimum=1)
    scheduling = s.choice("scheduling", PNM_SCHEDULING, "fair_share")
    s.done()
    if clock is not None and clock <= 0:
        raise s.error("clock", "must be positive")
    if not 0 < sram <= MAX_SRAM_BYTES:
        raise s.error("sram", f"must lie in (0, {MAX_SRAM_BYTES:,}] bytes (a PNM program addresses its SRAM with "
                              f"32 bits), got {sram:,}")
    return PnmSpec(model, str(path), clock, macs, exps, sram, tile, outstanding, scheduling)


def _parse_sampling(s: Section) -> SamplingSpec:
    layers = s.choice("layers", SAMPLING_MODES, "once")
    channels = s.choice("channels", SAMPLING_MODES, "once")
    window = s.int("window_requests", 65536, minimum=0)
    tokens = s.raw("pnm_sample_tokens", [1024, 4096])
    s.done()
    if (not isinstance(tokens, list) or len(tokens) != 2 or not all(isinstance(t, int) and t > 0 for t in tokens)
            or tokens[0] >= tokens[1]):
        raise s.error("pnm_sample_tokens", f"expected two increasing positive token counts, got {tokens!r}")
    return SamplingSpec(layers, channels, window, (tokens[0], tokens[1]))


def _parse_energy(root: Section, file: str | None) -> EnergyTable:
    value = root.str("energy", "default")
    p = Path(value)
    if p.suffix and not p.is_absolute() and file is not None:
        p = Path(file).resolve().parent / p
    try:
        return EnergyTable.load(p if p.suffix else value)
    except ConfigError as exc:
        if exc.file and Path(exc.file).exists():  # the energy file itself is bad: its own key names it
            raise
        raise ConfigError(f"energy table {exc.render()}", file=file, where=root.where("energy")) from None
