"""Host/PNM interference at a pool controller: mixed request streams, the alone runs, slowdowns, fairness.

The study runs on one channel (the busiest PNM unit's): its PNM stream (KV reads, source 1, plus the host's
KV appends) and a background host stream (other tenants, prefix-reuse reads: source 0) at a configured share
of the channel's peak bandwidth. Three replays through the memory core:

* PNM alone, every request released at cycle 0 (the unit's DMA keeps its share of the queues full);
* host alone, paced at its configured rate;
* mixed: both. Each port injects its own requests in its own order into its own share of the controller's
  queues (archsim's memory front end), and the controller's port arbiter - `qos.policy`, passed to the
  pool memory's `controller.arbiter`: shared, priority, wrr, reservation, plus `qos.age_cap_cycles` -
  decides whose ready request goes first.

Metrics: per-source bandwidth and read latency p50/p99; slowdown = PNM finish time mixed / alone, host mean
read latency (from release, queueing included) mixed / alone; Jain's fairness index over 1 / slowdown; the
controller's interference counters (rows opened for one port closed for the other, bank conflicts by
newcomer and opener port); violations of configured targets and bandwidth guarantees (`reservation`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np

from archsim.config.memory import ARBITERS, SOURCES, MemoryConfig, build_memory_config
from archsim.errors import ConfigError
from archsim.memory import ReplayResult, Requests, replay
from archsim.report.memory_stats import jain_index, memory_stats
from archsim.section import Section
from archsim.units import parse_time_ns

PATTERNS = ("random", "sequential")
_TARGETS = ("pnm_slowdown", "host_slowdown", "host_read_p99", "pnm_read_p99")


@dataclass(frozen=True)
class HostTraffic:
    bandwidth_share: float  # of one channel's peak bandwidth
    pattern: str
    read_fraction: float
    region_bytes: int  # random traffic spreads over this much of the channel


@dataclass(frozen=True)
class QosSpec:
    policy: dict[str, Any]  # the pool controllers' port arbiter (memory.controller.arbiter), `impl` + its keys
    age_cap_cycles: int  # memory.controller.age_cap_cycles: lifts a request that waited this long (0: off)
    host: HostTraffic | None
    reservation: dict[str, float]  # source -> guaranteed share of the channel's peak bandwidth
    targets: dict[str, float]  # pnm_slowdown / host_slowdown (ratios), host_read_p99 / pnm_read_p99 (ns)


def parse_qos(s: Section) -> QosSpec:
    raw = s.raw("policy", "shared")
    policy = {"impl": raw} if isinstance(raw, str) else raw
    if not isinstance(policy, dict) or policy.get("impl") not in ARBITERS.names():
        raise s.error("policy", f"expected an arbiter ({', '.join(ARBITERS.names())}) or a mapping with `impl:`, "
                                f"got {raw!r}")
    age_cap = s.int("age_cap_cycles", 0, minimum=0)
    host = None
    if s.has("host_traffic"):
        h = s.sub("host_traffic")
        share = h.float("bandwidth_share")
        pattern = h.choice("pattern", PATTERNS, "random")
        reads = h.float("read_fraction", 1.0)
        region = h.int("region_bytes", 256 << 20, minimum=1 << 16)
        h.done()
        if not 0 < share <= 1:
            raise h.error("bandwidth_share", f"must lie in (0, 1], got {share}")
        if not 0 <= reads <= 1:
            raise h.error("read_fraction", f"must lie in [0, 1], got {reads}")
        host = HostTraffic(share, pattern, reads, region)
    r = s.sub("reservation", {})
    reservation = {src: r.float(src) for src in SOURCES if r.has(src)}
    r.done()
    for src, value in reservation.items():
        if not 0 <= value <= 1:
            raise r.error(src, f"a reservation is a share of the channel's bandwidth in [0, 1], got {value}")
    if sum(reservation.values()) > 1 + 1e-9:
        total = " + ".join(f"{v:g}" for v in reservation.values())
        raise s.error("reservation", f"reservations add up to {total} = {100 * sum(reservation.values()):.0f} % "
                                     "of the channel's bandwidth (more than 100 %)")
    t = s.sub("targets", {})
    targets: dict[str, float] = {}
    for key in _TARGETS:
        if t.has(key):
            targets[key] = t.parsed(key, parse_time_ns) if key.endswith("p99") else t.float(key)
            if targets[key] <= 0:
                raise t.error(key, f"must be positive, got {targets[key]}")
    t.done()
    s.done()
    return QosSpec(dict(policy), age_cap, host, reservation, targets)


def qos_memory(memory: MemoryConfig, spec: QosSpec, file: str | None = None) -> MemoryConfig:
    """The pool's memory with the study's port arbiter and age cap (checked by the memory config's parser)."""
    tree = copy.deepcopy(memory.resolved_tree)
    controller = tree["memory"].setdefault("controller", {})
    controller["arbiter"] = copy.deepcopy(spec.policy)
    controller["age_cap_cycles"] = spec.age_cap_cycles
    try:
        return build_memory_config(tree, memory.source_file)
    except ConfigError as exc:
        where = (exc.where or "").replace("memory.controller.arbiter", "system.qos.policy")
        where = where.replace("memory.controller.age_cap_cycles", "system.qos.age_cap_cycles")
        raise ConfigError(exc.detail, file=file, where=where) from None


@dataclass(frozen=True)
class QosResult:
    sources: dict[str, dict[str, float]]
    slowdown: dict[str, float]
    jain_fairness: float
    interference: dict[str, int]
    violations: list[str]
    mixed: ReplayResult

    def as_dict(self) -> dict[str, Any]:
        return {"sources": self.sources, "slowdown": self.slowdown, "jain_fairness": self.jain_fairness,
                "interference": self.interference, "violations": list(self.violations)}


def host_stream(memory: MemoryConfig, traffic: HostTraffic, channel: int, span_cycles: int,
                seed: int = 7) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Background host requests in `channel` (upper half of its space) over `span_cycles`: address, write, cycle."""
    from archsim.system.kvstream import channel_local_to_physical

    org, timing = memory.organization, memory.timing
    access = org.access_bytes
    peak_per_channel = org.n_pseudo_channels * org.bus_width_bits * timing.data_rate_gbps / 8 / org.n_channels
    bytes_per_cycle = traffic.bandwidth_share * peak_per_channel * timing.tCK_ns
    n = max(1, int(span_cycles * bytes_per_cycle / access))
    rng = np.random.default_rng(seed)
    half = org.capacity_bytes // org.n_channels // 2
    region = min(traffic.region_bytes, half) // access
    sequential = traffic.pattern == "sequential"
    slots = np.arange(n, dtype=np.int64) % region if sequential else rng.integers(0, region, n)
    local = (half + slots * access).astype(np.uint64)
    address = channel_local_to_physical(memory.mapping, local, channel)
    is_write = (rng.random(n) >= traffic.read_fraction).astype(np.uint8)
    cycles = np.floor(np.arange(n) * access / bytes_per_cycle).astype(np.int64)
    return address, is_write, cycles


def _interference(result: ReplayResult) -> dict[str, int]:
    """The controller's own counts (memory.qos.*): rows opened for one port closed for the other, and requests
    that found their bank open on another port's row."""
    qos = memory_stats(result, reproducible=True)["memory"]["qos"]
    out = {f"row_closures.{k}": v for k, v in qos["row_closures"].items()}
    out.update({f"bank_conflicts.{k}": v for k, v in qos["bank_conflicts"].items()})
    return out


def _source_stats(result: ReplayResult, code: int, tck: float, peak: float) -> dict[str, float]:
    req = result.requests
    sel = req.source == code
    reads = sel & (req.is_write == 0)
    lat = (result.done_cycle - result.accept_cycle)[reads] * tck
    total = (result.done_cycle - req.timestamp_cycles)[reads] * tck
    # over the source's own active window, first release to last completion: a port that finishes early is
    # not charged the other's tail
    span = (max(1, int(result.done_cycle[sel].max() - req.timestamp_cycles[sel].min())) * tck if sel.any() else 1.0)
    bw = float(np.where(result.request_class[sel] != 3, 1, 0).sum()) * result.config.organization.access_bytes / span

    def pct(a: np.ndarray, q: float) -> float:
        return float(np.percentile(a, q)) if a.size else 0.0

    return {"requests": int(sel.sum()), "bandwidth_GBps": round(bw, 6), "share_of_peak": round(bw / peak, 6),
            "read_latency_ns_p50": round(pct(lat, 50), 3), "read_latency_ns_p99": round(pct(lat, 99), 3),
            "read_total_latency_ns_mean": round(float(total.mean()) if total.size else 0.0, 3),
            "finish_ns": round(float(result.done_cycle[sel].max()) * tck if sel.any() else 0.0, 3)}


def run_study(memory: MemoryConfig, pnm_address: np.ndarray, pnm_is_write: np.ndarray, pnm_source: np.ndarray,
              spec: QosSpec, channel: int = 0) -> QosResult:
    org, tck = memory.organization, memory.timing.tCK_ns
    peak = org.n_pseudo_channels * org.bus_width_bits * memory.timing.data_rate_gbps / 8 / org.n_channels
    zeros = np.zeros(len(pnm_address), dtype=np.int64)
    alone = replay(memory, Requests.build(zeros, pnm_address, pnm_is_write, pnm_source))
    stats = {"pnm_alone": _source_stats(alone, 1, tck, peak)}
    if spec.host is None:
        mixed = alone
        host_alone_stats = None
    else:
        h_addr, h_write, h_cycle = host_stream(memory, spec.host, channel, alone.total_cycles)
        h_src = np.zeros(len(h_addr), dtype=np.uint8)
        host_alone = replay(memory, Requests.build(h_cycle, h_addr, h_write, h_src))
        host_alone_stats = _source_stats(host_alone, 0, tck, peak)
        # each port injects its own requests in its own order (archsim memory front end): the PNM's DMA keeps
        # its queue share full from cycle 0, the host's requests arrive at their pace
        cycles = np.concatenate([zeros, h_cycle])
        order = np.argsort(cycles, kind="stable")
        mixed = replay(memory, Requests.build(cycles[order], np.concatenate([pnm_address, h_addr])[order],
                                              np.concatenate([pnm_is_write, h_write])[order],
                                              np.concatenate([pnm_source, h_src])[order]))
    sources = {"pnm": _source_stats(mixed, 1, tck, peak), "host": _source_stats(mixed, 0, tck, peak),
               "pnm_alone": stats["pnm_alone"]}
    slowdown = {"pnm": sources["pnm"]["finish_ns"] / max(stats["pnm_alone"]["finish_ns"], 1e-9)}
    if host_alone_stats is not None:
        sources["host_alone"] = host_alone_stats
        slowdown["host"] = (sources["host"]["read_total_latency_ns_mean"]
                            / max(host_alone_stats["read_total_latency_ns_mean"], 1e-9))
    slowdown = {k: round(v, 6) for k, v in slowdown.items()}
    fairness = round(jain_index([1 / v for v in slowdown.values()]), 6)
    violations = _violations(spec, sources, slowdown, host_alone_stats)
    return QosResult(sources, slowdown, fairness, _interference(mixed), violations, mixed)


def _violations(spec: QosSpec, sources: dict[str, dict[str, float]], slowdown: dict[str, float],
                host_alone: dict[str, float] | None) -> list[str]:
    out = []
    checks = (("pnm_slowdown", slowdown.get("pnm")), ("host_slowdown", slowdown.get("host")),
              ("host_read_p99", sources["host"]["read_latency_ns_p99"] if host_alone else None),
              ("pnm_read_p99", sources["pnm"]["read_latency_ns_p99"]))
    for key, value in checks:
        if key in spec.targets and value is not None and value > spec.targets[key]:
            out.append(f"targets.{key}: {value:g} > {spec.targets[key]:g}")
    demand = {"pnm": sources["pnm_alone"]["share_of_peak"],
              "host": host_alone["share_of_peak"] if host_alone else 0.0}
    for src, reserved in spec.reservation.items():
        wanted = min(reserved, demand[src])  # a source that asks for less than its reservation is owed only that
        got = sources[src]["share_of_peak"]
        if got + 1e-6 < wanted * 0.98:
            out.append(f"reservation.{src}: got {100 * got:.1f} % of the channel, reserved {100 * reserved:.1f} % "
                       f"(demand {100 * demand[src]:.1f} %)")
    return out
