"""The memory config: a DRAM standard preset plus overrides, the controller, and the replay front end.

File layout (top-level key `memory`):

    memory:
      preset: HBM3            # archsim/dram/standards/HBM3.yaml; organization/timing keys below override it
      organization: {...}
      timing: {...}
      address_mapping: {scheme: rorabgbapcchco, xor: [ba]}
      controller: {...}
      frontend: {...}
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from archsim.config.overrides import apply_overrides, deep_merge
from archsim.config.yaml_files import read_yaml
from archsim.controller.codes import (
    ARB_PRIORITY,
    ARB_RESERVE,
    ARB_SHARED,
    ARB_WRR,
    POL_CLOSED,
    POL_OPEN,
    POL_OPEN_CAP,
    POL_TIMEOUT,
    SCHED_FCFS,
    SCHED_FRFCFS,
    SCHED_ROUND_ROBIN,
    SOURCES,  # noqa: F401 - re-exported (a two-port trace's port names)
)
from archsim.dram.address_map import AddressMapping, parse_address_mapping
from archsim.dram.spec import Organization, Timing, parse_organization, parse_timing
from archsim.errors import ConfigError
from archsim.registry import Registry
from archsim.section import Section
from archsim.units import parse_time_ns

# The kernel holds each queue as arrays of depth x pseudo-channels int64 entries; real controllers queue 32-128
# requests, and 65,536 keeps a queue's arrays within tens of MB on the largest preset instead of TiB.
MAX_QUEUE_DEPTH = 1 << 16
STANDARDS_DIR = Path(__file__).resolve().parent.parent / "dram" / "standards"

SCHEDULERS: Registry[int] = Registry("scheduler")
SCHEDULERS.add("frfcfs", SCHED_FRFCFS)
SCHEDULERS.add("fcfs", SCHED_FCFS)
SCHEDULERS.add("round_robin", SCHED_ROUND_ROBIN)

ROW_POLICIES: Registry[int] = Registry("row policy")
ROW_POLICIES.add("open", POL_OPEN)
ROW_POLICIES.add("closed", POL_CLOSED)
ROW_POLICIES.add("open_cap", POL_OPEN_CAP)
ROW_POLICIES.add("timeout", POL_TIMEOUT)

REFRESH_MODES: Registry[int] = Registry("refresh mode")
REFRESH_MODES.add("none", 0)
REFRESH_MODES.add("all_bank", 1)
REFRESH_MODES.add("per_bank", 2)

ARBITERS: Registry[int] = Registry("port arbiter")
ARBITERS.add("shared", ARB_SHARED)  # one FR-FCFS order for every port
ARBITERS.add("priority", ARB_PRIORITY)  # `favor`'s requests first (a host or the pnm)
ARBITERS.add("wrr", ARB_WRR)  # weighted round-robin of column commands between the ports
ARBITERS.add("reservation", ARB_RESERVE)  # token buckets guaranteeing each source its share of column commands



@dataclass(frozen=True)
class RowPolicyConfig:
    """When an open row closes (`ROW_POLICIES`; the kernel's `controller/row_policies/`)."""

    impl: str = "open"
    cap: int = 4  # open_cap: after this many column accesses a waiting conflict may close the row
    timeout_cycles: int = 64  # timeout: idle cycles before an open row is closed


@dataclass(frozen=True)
class WriteDrainConfig:
    """When the write queue is served (the kernel's `controller/stages/write_drain.py`)."""

    high_watermark: int
    low_watermark: int
    # -1: writes are also served whenever no read waits. N >= 0: DRAMSim3's batch rule, writes are served only in
    # drains, which start at the high watermark or above N writes with no command queued, and serve the writes
    # present at their start (the low watermark is unused)
    idle_threshold: int = -1


@dataclass(frozen=True)
class RefreshConfig:
    """Refresh (`REFRESH_MODES`; the kernel's `controller/stages/refresh.py`)."""

    impl: str = "all_bank"
    stagger: bool = False  # spread ranks' refresh deadlines over tREFI (False: all ranks refresh together)
    holds_columns: bool = False  # a due refresh also holds column commands to its rank (bank) until it issues


@dataclass(frozen=True)
class ArbiterConfig:
    """Arbitration between the request ports (`ARBITERS`; the kernel's `controller/arbiters/`). Ports are named by
    the trace's sources (`host` and `pnm`, or a version-2 trace's own table: `host0`, `host1`, ..., `pnm`, at most
    65); a name the replayed trace lacks is refused when the replay starts (`port_parameters`)."""

    impl: str = "shared"
    favor: str = "host"  # priority: the favoured port
    weights: tuple[tuple[str, int], ...] = (("host", 1), ("pnm", 1))  # wrr: column commands per round, by port
    # (a port not named weighs 1)
    shares: tuple[tuple[str, float], ...] = ()  # reservation: each named port's guaranteed fraction of each
    # pseudo-channel's column-command slots, 0-1, at most 1 together
    burst: int = 4  # reservation: column commands a bucket may bank
    age_cap_cycles: int = 0  # any arbiter: a request waiting this long goes first (0 = off)


@dataclass(frozen=True)
class ControllerConfig:
    """The memory controller, one record per policy (each built by keyword from its YAML section)."""

    read_queue_depth: int
    write_queue_depth: int
    scheduler: str
    row_policy: RowPolicyConfig
    write_drain: WriteDrainConfig
    refresh: RefreshConfig
    arbiter: ArbiterConfig
    frontend_delay_cycles: int
    write_queue_forwarding: bool  # reads of a queued write's address are served from it; repeated writes merge
    bank_queue_depth: int  # 0: the scheduler sees the whole queue; >0: per-bank command queues fed 1/cycle
    # per port, the 99th percentile of its reads' latency from the trace timestamp it should not exceed (ns)
    qos_targets: tuple[tuple[str, float], ...] = ()

    def summary_items(self) -> list[tuple[str, object]]:
        """Every value under the flat names `archsim config show --resolved` prints."""
        r, d, f, a = self.row_policy, self.write_drain, self.refresh, self.arbiter
        return [("read_queue_depth", self.read_queue_depth), ("write_queue_depth", self.write_queue_depth),
                ("scheduler", self.scheduler), ("row_policy", r.impl), ("row_policy_cap", r.cap),
                ("row_policy_timeout_cycles", r.timeout_cycles), ("write_high_watermark", d.high_watermark),
                ("write_low_watermark", d.low_watermark), ("write_idle_threshold", d.idle_threshold),
                ("refresh", f.impl), ("arbiter", a.impl), ("arbiter_favor", a.favor),
                ("arbiter_weights", dict(a.weights)), ("reservation_shares", dict(a.shares)),
                ("reservation_burst", a.burst), ("age_cap_cycles", a.age_cap_cycles),
                ("refresh_stagger", f.stagger), ("refresh_holds_columns", f.holds_columns),
                ("frontend_delay_cycles", self.frontend_delay_cycles),
                ("write_queue_forwarding", self.write_queue_forwarding), ("bank_queue_depth", self.bank_queue_depth),
                ("qos_targets_ns", dict(self.qos_targets))]


@dataclass(frozen=True)
class FrontendConfig:
    max_injections_per_cycle: int  # 0 = unlimited
    posted_writes: bool


@dataclass(frozen=True)
class MemoryConfig:
    standard: str
    organization: Organization
    timing: Timing
    mapping: AddressMapping
    controller: ControllerConfig
    frontend: FrontendConfig
    source_file: str | None
    resolved_tree: dict[str, Any]


def _impl_section(section: Section, key: str, registry: Registry, default: str) -> tuple[str, Section]:
    """`key: name` or `key: {impl: name, ...params}`."""
    value = section.raw(key, default)
    if isinstance(value, str):
        value = {"impl": value}
    sub = Section(value, section.where(key), section.file)
    name = sub.choice("impl", registry.names())
    return name, sub


def parse_controller(section: Section) -> ControllerConfig:
    rq = section.int("read_queue_depth", 32, minimum=1, maximum=MAX_QUEUE_DEPTH)
    wq = section.int("write_queue_depth", 32, minimum=1, maximum=MAX_QUEUE_DEPTH)
    scheduler = section.choice("scheduler", SCHEDULERS.names(), "frfcfs")
    row_policy = _parse_row_policy(section)
    write_drain = _parse_write_drain(section, wq)
    refresh, refresh_section = _impl_section(section, "refresh", REFRESH_MODES, "all_bank")
    refresh_cfg = RefreshConfig(impl=refresh, stagger=refresh_section.bool("stagger", False),
                                holds_columns=refresh_section.bool("hold_columns", False))
    refresh_section.done()
    arbiter = _parse_arbiter(section)
    delay = section.int("frontend_delay_cycles", 1, minimum=1)
    forward = section.bool("write_queue_forwarding", True)
    bank_queue_depth = section.int("bank_queue_depth", 0, minimum=0, maximum=MAX_QUEUE_DEPTH)
    qos_targets = _parse_qos_targets(section)
    section.done()
    return ControllerConfig(read_queue_depth=rq, write_queue_depth=wq, scheduler=scheduler, row_policy=row_policy,
                            write_drain=write_drain, refresh=refresh_cfg, arbiter=arbiter,
                            frontend_delay_cycles=delay, write_queue_forwarding=forward,
                            bank_queue_depth=bank_queue_depth, qos_targets=qos_targets)


def _parse_row_policy(section: Section) -> RowPolicyConfig:
    policy, policy_section = _impl_section(section, "row_policy", ROW_POLICIES, "open")
    cap = policy_section.int("cap", 4, minimum=1) if policy == "open_cap" else 4
    timeout = policy_section.int("timeout_cycles", 64, minimum=1) if policy == "timeout" else 64
    policy_section.done()
    return RowPolicyConfig(impl=policy, cap=cap, timeout_cycles=timeout)


def _parse_write_drain(section: Section, wq: int) -> WriteDrainConfig:
    drain = section.sub("write_drain", {})
    high = drain.int("high_watermark", max(1, wq * 3 // 4), minimum=1)
    low = drain.int("low_watermark", max(0, wq // 4), minimum=0)
    idle_threshold = drain.int("idle_threshold", -1, minimum=-1)
    drain.done()
    if high > wq:
        raise drain.error("high_watermark", f"{high} exceeds write_queue_depth {wq}")
    if low >= high:
        raise drain.error("low_watermark", f"{low} must be below high_watermark {high}")
    return WriteDrainConfig(high_watermark=high, low_watermark=low, idle_threshold=idle_threshold)


def _parse_arbiter(section: Section) -> ArbiterConfig:
    """The port arbiter's section; the age cap (a flat key of the controller) applies to every arbiter."""
    arbiter, arb = _impl_section(section, "arbiter", ARBITERS, "shared")
    favor = _port_name(arb, "favor", arb.str("favor")) if arbiter == "priority" else "host"
    weights: tuple[tuple[str, int], ...] = (("host", 1), ("pnm", 1))
    if arbiter == "wrr":
        w = arb.sub("weights")
        weights = tuple((_port_name(w, name, name), w.int(name, minimum=1)) for name in w.data)
        if not weights:
            raise arb.error("weights", "name at least one port's weight ({host: 3, pnm: 1})")
        w.done()
    shares: tuple[tuple[str, float], ...] = ()
    burst = 4
    if arbiter == "reservation":
        shares = _parse_shares(arb)
        burst = arb.int("burst", 4, minimum=1)
    arb.done()
    age_cap = section.int("age_cap_cycles", 0, minimum=0)
    return ArbiterConfig(impl=arbiter, favor=favor, weights=weights, shares=shares, burst=burst,
                         age_cap_cycles=age_cap)


def is_port_name(name: object) -> bool:
    """A request port's name: `pnm`, `host`, or `host<k>` (one of several hosts sharing the memory)."""
    return isinstance(name, str) and (name in SOURCES or re.fullmatch(r"host\d{1,3}", name) is not None)


def _parse_qos_targets(section: Section) -> tuple[tuple[str, float], ...]:
    """`qos_targets: {host0: 500ns, pnm: 2us}`: per port, the 99th-percentile read latency (from its trace
    timestamp) it should stay under; the replay reports each port's and the violations."""
    sub = section.sub("qos_targets", {})
    targets = []
    for name in sub.data:
        _port_name(sub, name, name)
        value = sub.parsed(name, parse_time_ns)
        if value <= 0:
            raise sub.error(name, f"a latency target must be positive, got {value:g} ns")
        targets.append((name, value))
    sub.done()
    return tuple(targets)


def _port_name(section: Section, key: str, name: object) -> str:
    """`name`, found at `key`, as a port's name (`is_port_name`)."""
    if not is_port_name(name):
        raise section.error(key, f"unknown port {name!r} (ports are host, pnm, or host0, host1, ... of several "
                                 f"hosts)")
    assert isinstance(name, str)
    return name


def _parse_shares(arb: Section) -> tuple[tuple[str, float], ...]:
    """The reserved shares: `source` and `share` for one port, or `shares: {port: share, ...}` (per-host shares);
    each in (0, 1], at most 1 (100 %) together."""
    if arb.has("shares"):
        sub = arb.sub("shares")
        shares = tuple((_port_name(sub, name, name), sub.float(name)) for name in sub.data)
        sub.done()
        if not shares:
            raise arb.error("shares", "name at least one port's share ({host0: 0.3, host1: 0.3})")
    else:
        shares = ((_port_name(arb, "source", arb.str("source")), arb.float("share")),)
    where = "shares" if arb.has("shares") else "share"
    for name, share in shares:
        if not 0.0 < share <= 1.0:
            raise arb.error(f"shares.{name}" if where == "shares" else "share",
                            f"a reservation must be a share in (0, 1] (0-100 %), got {share:g}")
    total = sum(share for _, share in shares)
    if total > 1.0 + 1e-12:
        raise arb.error(where, f"the reserved shares add up to {total:.3g}, above 1 (100 %)")
    return shares


def parse_frontend(section: Section) -> FrontendConfig:
    cap = section.int("max_injections_per_cycle", 0, minimum=0)
    posted = section.bool("posted_writes", True)
    section.done()
    return FrontendConfig(cap, posted)


def available_standards() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in STANDARDS_DIR.glob("*.yaml")))


def resolve_memory_tree(tree: Any, file: str | None, overrides: tuple[str, ...] | list[str] = ()) -> dict:
    """The full `memory` mapping: preset values under the file's values, then the overrides."""
    if not isinstance(tree, dict) or "memory" not in tree:
        raise ConfigError("expected a top-level `memory:` mapping", file=file, where="memory")
    unknown_top = sorted(set(tree) - {"memory"})
    if unknown_top:
        raise ConfigError(f"unknown key {unknown_top[0]!r}", file=file, where=unknown_top[0])
    memory = tree["memory"]
    if not isinstance(memory, dict):
        raise ConfigError("expected a mapping", file=file, where="memory")
    preset = memory.get("preset")
    merged: dict[str, Any] = {}
    if preset is not None:
        if preset not in available_standards():
            raise ConfigError(f"unknown preset {preset!r} (available: {', '.join(available_standards())})",
                              file=file, where="memory.preset")
        base = read_yaml(STANDARDS_DIR / f"{preset}.yaml")
        merged = deep_merge(base, {})
    merged = deep_merge(merged, memory)
    merged.setdefault("controller", {})
    merged.setdefault("frontend", {})
    full = {"memory": merged}
    apply_overrides(full, overrides, file)
    return full


def build_memory_config(full: dict[str, Any], file: str | None) -> MemoryConfig:
    root = Section(full["memory"], "memory", file)
    standard = root.str("preset", "custom")
    organization = parse_organization(root.sub("organization"))
    timing = parse_timing(root.sub("timing"), organization)
    mapping = parse_address_mapping(root.sub("address_mapping"), organization)
    controller = parse_controller(root.sub("controller"))
    frontend = parse_frontend(root.sub("frontend"))
    root.done()
    return MemoryConfig(standard, organization, timing, mapping, controller, frontend, file, full)


def load_memory_config(path: str | Path, overrides: tuple[str, ...] | list[str] = ()) -> MemoryConfig:
    path = Path(path)
    full = resolve_memory_tree(read_yaml(path), str(path), overrides)
    return build_memory_config(full, str(path))


def memory_config_from_preset(preset: str, overrides: tuple[str, ...] | list[str] = (),
                              extra: dict[str, Any] | None = None) -> MemoryConfig:
    """Build from a preset name without a file (tests, scripts)."""
    tree = {"memory": deep_merge({"preset": preset}, extra or {})}
    full = resolve_memory_tree(tree, None, overrides)
    return build_memory_config(full, None)
