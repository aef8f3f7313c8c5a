"""Flow-level bandwidth sharing: max-min fair rates (progressive filling) and a fluid schedule of flow sets.

Model: every flow takes its topology route; each link direction is a resource of capacity bandwidth x
efficiency (payload GB/s = bytes per ns). At any instant the active flows get the max-min fair allocation:
all rates rise together until a resource saturates (or a flow reaches its own `rate_limit_GBps`); the flows
crossing it freeze and the rest keep rising (Bertsekas & Gallager, Data Networks, sec. 6.5.2). The fluid
schedule recomputes the allocation whenever a flow starts or finishes.

Timing of one flow: its first byte is ready at start_ns + the source endpoint's access latency; it then
occupies bandwidth on every link of its route at once (no per-hop store-and-forward); its completion is
the moment its last byte has been sent plus the route latency (links + switch transits).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from archsim.interconnect.topology import Hop, Route, Topology

_REL_TOL = 1e-12  # float slack for "this resource is full" and "this flow has finished"


@dataclass(frozen=True)
class Flow:
    src: str
    dst: str
    size_bytes: float
    start_ns: float = 0.0
    rate_limit_GBps: float | None = None  # the flow's own ceiling (e.g. a DMA engine); None = unlimited
    name: str = ""


@dataclass(frozen=True)
class FlowResult:
    flow: Flow
    route: Route
    initial_rate_GBps: float  # rate in the flow's first epoch
    first_byte_ns: float
    last_byte_sent_ns: float
    completion_ns: float  # last byte sent + route latency

    @property
    def mean_rate_GBps(self) -> float:
        span = self.last_byte_sent_ns - self.first_byte_ns
        return self.flow.size_bytes / span if span > 0 else math.inf


@dataclass(frozen=True)
class LinkUsage:
    """Traffic of one link direction over the whole schedule."""

    hop: Hop
    capacity_GBps: float  # effective: raw x efficiency
    payload_bytes: float
    peak_rate_GBps: float  # highest summed rate of any epoch (never above capacity_GBps)
    window_ns: float  # the schedule's span, first byte ready to last byte sent

    @property
    def name(self) -> str:
        return f"{self.hop.link.name}:{self.hop.src}->{self.hop.dst}"

    @property
    def wire_bytes(self) -> float:
        """Bytes on the wire including line coding and framing: payload / efficiency."""
        return self.payload_bytes / self.hop.link.efficiency

    @property
    def utilization(self) -> float:
        """Mean payload rate over the window / effective bandwidth (0..1)."""
        return self.payload_bytes / (self.capacity_GBps * self.window_ns) if self.window_ns > 0 else 0.0

    @property
    def energy_pJ(self) -> float:
        return self.wire_bytes * 8 * self.hop.link.energy_pJ_per_bit


@dataclass(frozen=True)
class Epoch:
    start_ns: float
    end_ns: float
    rates_GBps: dict[int, float]  # flow index -> rate, active flows only


@dataclass(frozen=True)
class FlowSchedule:
    flows: tuple[FlowResult, ...]
    links: tuple[LinkUsage, ...]  # link directions that carried traffic, in topology order
    epochs: tuple[Epoch, ...] = field(repr=False)
    makespan_ns: float  # latest completion

    def link(self, link_name: str, src: str | None = None) -> LinkUsage:
        """The usage of `link_name` (in the direction leaving `src`, if given)."""
        for usage in self.links:
            if usage.hop.link.name == link_name and (src is None or usage.hop.src == src):
                return usage
        raise KeyError(f"no traffic on link {link_name!r}" + (f" from {src!r}" if src else ""))

    def wire_bits_by_protocol(self) -> dict[str, float]:
        """Action counts for the energy table: wire bits x hops per protocol, keyed `link.<protocol>.bit`."""
        out: dict[str, float] = {}
        for usage in self.links:
            key = f"link.{usage.hop.link.protocol}.bit"
            out[key] = out.get(key, 0.0) + usage.wire_bytes * 8
        return out


def max_min_rates(capacities: Sequence[float], paths: Sequence[Sequence[int]],
                  limits: Sequence[float | None] | None = None) -> list[float]:
    """Max-min fair rates of flows over resources by progressive filling.

    `paths[f]` lists the resource indices flow f crosses; `limits[f]` is its own ceiling (None = none).
    Every flow must cross at least one resource or have a limit (else its fair rate is unbounded).
    """
    n = len(paths)
    limits = list(limits) if limits is not None else [None] * n
    remaining = [float(c) for c in capacities]
    users: list[list[int]] = [[] for _ in capacities]
    for f, path in enumerate(paths):
        if not path and limits[f] is None:
            raise ValueError(f"flow {f} crosses no resource and has no rate limit: its rate is unbounded")
        for r in set(path):
            users[r].append(f)
    rate = [0.0] * n
    frozen = [False] * n
    active_on = [len(u) for u in users]
    unfrozen = n
    while unfrozen:
        step = math.inf
        for r, cnt in enumerate(active_on):
            if cnt:
                step = min(step, remaining[r] / cnt)
        for f in range(n):
            if not frozen[f] and limits[f] is not None:
                step = min(step, limits[f] - rate[f])
        step = max(step, 0.0)
        for f in range(n):
            if not frozen[f]:
                rate[f] += step
        full = []
        for r, cnt in enumerate(active_on):
            if cnt:
                remaining[r] -= step * cnt
                if remaining[r] <= _REL_TOL * max(capacities[r], 1.0):
                    full.append(r)
        to_freeze = {f for r in full for f in users[r] if not frozen[f]}
        for f in range(n):
            lim = limits[f]
            if not frozen[f] and lim is not None and rate[f] >= lim * (1 - _REL_TOL):
                to_freeze.add(f)
        for f in sorted(to_freeze):
            frozen[f] = True
            unfrozen -= 1
            for r in set(paths[f]):
                active_on[r] -= 1
    return rate


def _resources(topology: Topology, flows: Sequence[Flow]) -> tuple[list[Route], list[list[int]], list[float]]:
    routes = [topology.route(f.src, f.dst) for f in flows]
    paths = [[topology.resource(h) for h in r.hops] for r in routes]
    caps = [0.0] * (2 * len(topology.links))
    for link in topology.links:
        i = topology.link_index[link.name]
        caps[2 * i], caps[2 * i + 1] = link.effective_GBps(True), link.effective_GBps(False)
    return routes, paths, caps


def allocate(topology: Topology, flows: Sequence[Flow]) -> list[float]:
    """Max-min fair rates (GB/s) of `flows` if all were active at once (start times ignored)."""
    _, paths, caps = _resources(topology, flows)
    return max_min_rates(caps, paths, [f.rate_limit_GBps for f in flows])


def simulate_flows(topology: Topology, flows: Sequence[Flow]) -> FlowSchedule:
    """Fluid schedule: rates re-allocated at every flow start and finish; see the module docstring."""
    for i, f in enumerate(flows):
        if f.size_bytes < 0 or f.start_ns < 0:
            raise ValueError(f"flow {i}: size_bytes and start_ns must be >= 0")
        if f.rate_limit_GBps is not None and f.rate_limit_GBps <= 0:
            raise ValueError(f"flow {i}: rate_limit_GBps must be positive")
    routes, paths, caps = _resources(topology, flows)
    ready = [f.start_ns + topology.endpoints[f.src].access_latency_ns for f in flows]
    left = [float(f.size_bytes) for f in flows]
    initial: list[float | None] = [None] * len(flows)
    sent_at = list(ready)  # zero-byte flows are done the moment they are ready
    waiting = sorted((t, i) for i, t in enumerate(ready) if left[i] > 0)
    peak = [0.0] * len(caps)
    epochs: list[Epoch] = []
    active: list[int] = []
    t = waiting[0][0] if waiting else 0.0
    w = 0
    while w < len(waiting) or active:
        while w < len(waiting) and waiting[w][0] <= t:
            active.append(waiting[w][1])
            w += 1
        if not active:
            t = waiting[w][0]
            continue
        active.sort()
        rates = max_min_rates(caps, [paths[f] for f in active], [flows[f].rate_limit_GBps for f in active])
        finish_in = min(left[f] / r for f, r in zip(active, rates, strict=True))
        next_start = waiting[w][0] if w < len(waiting) else math.inf
        finishing = t + finish_in <= next_start
        end = t + finish_in if finishing else next_start
        epochs.append(Epoch(t, end, dict(zip(active, rates, strict=True))))
        load = [0.0] * len(caps)
        still = []
        for f, r in zip(active, rates, strict=True):
            if initial[f] is None:
                initial[f] = r
            for res in paths[f]:
                load[res] += r
            left[f] -= r * (end - t)
            # the flows that set `finish_in` are done; float leftovers of a few ulps count as done too
            if (finishing and left[f] <= r * finish_in * _REL_TOL) or left[f] <= _REL_TOL * flows[f].size_bytes:
                left[f] = 0.0
                sent_at[f] = end
            else:
                still.append(f)
        for res, value in enumerate(load):
            peak[res] = max(peak[res], value)
        active = still
        t = end
    results = tuple(
        FlowResult(f, r, initial[i] or 0.0, ready[i], sent_at[i], sent_at[i] + r.latency_ns)
        for i, (f, r) in enumerate(zip(flows, routes, strict=True)))
    moving = [i for i, f in enumerate(flows) if f.size_bytes > 0]
    window = (max(sent_at[i] for i in moving) - min(ready[i] for i in moving)) if moving else 0.0
    carried = [0.0] * len(caps)
    for i in moving:
        for res in paths[i]:
            carried[res] += flows[i].size_bytes
    usages = []
    for link in topology.links:
        for forward in (True, False):
            hop = Hop(link, forward)
            res = topology.resource(hop)
            if carried[res] > 0:
                usages.append(LinkUsage(hop, caps[res], carried[res], peak[res], window))
    makespan = max((x.completion_ns for x in results), default=0.0)
    return FlowSchedule(results, tuple(usages), tuple(epochs), makespan)


__all__ = ["Epoch", "Flow", "FlowResult", "FlowSchedule", "LinkUsage", "allocate", "max_min_rates", "simulate_flows"]
