"""Links, switches and endpoints as a networkx graph built from YAML; shortest-latency routes between endpoints.

File layout (top-level key `interconnect`; every number has a unit or a unit in its name):

    interconnect:
      description: one line
      endpoints:
        gpu: {count: 8}                # gpu0 .. gpu7
        pool: {access_latency: 0ns}    # one endpoint named "pool"; access_latency: time to first byte
      switches:
        cxl_switch: {ports: 16, latency: 150ns}    # latency = port-to-port, paid on every transit
      links:
        host_link: {from: gpu, to: cxl_switch, protocol: cxl, bandwidth: 64GB/s, efficiency: 0.9265,
                    latency: 50ns, energy_pJ_per_bit: 5.5}
        pool_link: {from: cxl_switch, to: pool, count: 4, ...}

A link is full duplex: `bandwidth` is the raw rate of one direction of one link (`reverse_bandwidth` if the
other direction differs, e.g. an SSD's write rate); `count` bonds identical links (bandwidth and ports x count);
`efficiency` is the payload fraction left after line coding, framing and headers, so the usable rate of a
direction is bandwidth x count x efficiency. A group (`count: N`) on one side of a link makes one link per
member (`host_link0` ..); groups on both sides pair members up, or, when one has k times the other's members,
link k consecutive members to each of the other's (`gpu: {count: 16}` to `server: {count: 2}`: gpu0-7 to
server0). Endpoints never forward traffic: only switches
do (model a NIC or a root complex that forwards as a switch).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx

from archsim.config.yaml_files import read_yaml
from archsim.errors import ConfigError
from archsim.resources import data_path
from archsim.section import Section
from archsim.units import parse_bandwidth_GBps, parse_time_ns

PRESETS_DIR = data_path("configs", "interconnect")


@dataclass(frozen=True)
class Endpoint:
    name: str
    group: str  # the YAML key that defined it (for error paths)
    access_latency_ns: float  # before the first byte of a flow from this endpoint leaves it


@dataclass(frozen=True)
class Switch:
    name: str
    group: str
    ports: int
    latency_ns: float  # port to port


@dataclass(frozen=True)
class Link:
    name: str
    group: str
    a: str
    b: str
    protocol: str  # energy/accounting class: cxl, pcie, nvlink, ethernet, ...
    bandwidth_GBps: float  # raw, one direction a->b, all `count` bonded links together
    reverse_bandwidth_GBps: float  # raw, b->a
    efficiency: float  # payload fraction of the raw rate, 0 < e <= 1
    latency_ns: float
    energy_pJ_per_bit: float  # per transmitted (wire) bit per traversal
    count: int

    def effective_GBps(self, forward: bool = True) -> float:
        """Payload bandwidth of one direction: raw x efficiency (GB/s = bytes per ns)."""
        return (self.bandwidth_GBps if forward else self.reverse_bandwidth_GBps) * self.efficiency


@dataclass(frozen=True)
class Hop:
    link: Link
    forward: bool  # True: a -> b

    @property
    def src(self) -> str:
        return self.link.a if self.forward else self.link.b

    @property
    def dst(self) -> str:
        return self.link.b if self.forward else self.link.a

    @property
    def capacity_GBps(self) -> float:
        return self.link.effective_GBps(self.forward)


@dataclass(frozen=True)
class Route:
    src: str
    dst: str
    nodes: tuple[str, ...]
    hops: tuple[Hop, ...]
    latency_ns: float  # link latencies + port-to-port latency of every switch crossed
    bottleneck_GBps: float  # smallest effective bandwidth along the route

    @property
    def energy_pJ_per_wire_bit(self) -> float:
        return sum(h.link.energy_pJ_per_bit for h in self.hops)


class Topology:
    """The validated graph. `graph` is a networkx DiGraph with one edge per link direction."""

    def __init__(self, endpoints: dict[str, Endpoint], switches: dict[str, Switch], links: tuple[Link, ...],
                 description: str = "", file: str | None = None, path: str = "interconnect") -> None:
        self.endpoints = endpoints
        self.switches = switches
        self.links = links
        self.description = description
        self.file = file
        self.path = path
        self.link_index = {link.name: i for i, link in enumerate(links)}
        self.graph = nx.DiGraph()
        for name in endpoints:
            self.graph.add_node(name, kind="endpoint")
        for name, sw in switches.items():
            self.graph.add_node(name, kind="switch", latency_ns=sw.latency_ns)
        for link in links:
            for forward in (True, False):
                hop = Hop(link, forward)
                self.graph.add_edge(hop.src, hop.dst, hop=hop, latency_ps=round(link.latency_ns * 1000))
        self._switch_ps = {name: round(sw.latency_ns * 1000) for name, sw in switches.items()}
        self._routes: dict[tuple[str, str], Route] = {}

    def __getstate__(self) -> dict:
        # the routes found so far are a memo, not the topology: a pickle (the step store's key) is the same
        # whichever routes a run has asked for before
        return {**self.__dict__, "_routes": {}}

    @staticmethod
    def load(path: str | Path) -> Topology:
        """Load a topology file, or a preset by name (`cxl2_switch` -> configs/interconnect/cxl2_switch.yaml)."""
        p = Path(path)
        if not p.suffix and not p.exists():
            p = PRESETS_DIR / f"{path}.yaml"
        top = Section(read_yaml(p), "", str(p))
        topo = parse_topology(top.sub("interconnect"))
        top.done()
        return topo

    @staticmethod
    def from_mapping(data: Any, *, path: str = "interconnect", file: str | None = None) -> Topology:
        return parse_topology(Section(data, path, file))

    def resource(self, hop: Hop) -> int:
        """Index of one link direction: 2 x link index (+1 for b -> a)."""
        return 2 * self.link_index[hop.link.name] + (0 if hop.forward else 1)

    def route(self, src: str, dst: str) -> Route:
        """Lowest-latency route; ties go to fewer hops, then the lexicographically smallest node sequence."""
        key = (src, dst)
        if key not in self._routes:
            self._routes[key] = self._find_route(src, dst)
        return self._routes[key]

    def _find_route(self, src: str, dst: str) -> Route:
        for name in (src, dst):
            if name not in self.endpoints:
                raise ValueError(f"{name!r} is not an endpoint (endpoints: {', '.join(self.endpoints)})")
        if src == dst:
            raise ValueError(f"route from {src!r} to itself")
        # integer picoseconds make equal-latency paths compare equal exactly, so the tie-break is deterministic
        heap: list[tuple[int, int, tuple[str, ...]]] = [(0, 0, (src,))]
        settled: set[str] = set()
        best: tuple[str, ...] | None = None
        while heap:
            dist, hops, nodes = heapq.heappop(heap)
            node = nodes[-1]
            if node in settled:
                continue
            settled.add(node)
            if node == dst:
                best = nodes
                break
            if node != src and node not in self.switches:
                continue  # endpoints do not forward
            for nxt in sorted(self.graph.successors(node)):
                if nxt in settled:
                    continue
                weight = self.graph[node][nxt]["latency_ps"]
                if nxt in self._switch_ps and nxt != dst:
                    weight += self._switch_ps[nxt]
                heapq.heappush(heap, (dist + weight, hops + 1, (*nodes, nxt)))
        if best is None:
            raise ConfigError(f"endpoint {dst!r} is unreachable from {src!r} (only switches forward traffic)",
                              file=self.file, where=f"{self.path}.endpoints.{self.endpoints[dst].group}")
        path_hops = tuple(self.graph[u][v]["hop"] for u, v in zip(best, best[1:], strict=False))
        latency = sum(h.link.latency_ns for h in path_hops) + sum(self.switches[n].latency_ns for n in best[1:-1])
        return Route(src, dst, best, path_hops, latency, min(h.capacity_GBps for h in path_hops))


def _members(section: Section, key: str) -> tuple[int | None, Section]:
    """A group definition (`name: {count: N, ...}`; `name:` alone is one member with default settings)."""
    value = section.raw(key)
    sub = Section({} if value is None else value, section.where(key), section.file)
    count = sub.int("count", minimum=1) if sub.has("count") else None
    return count, sub


def _expand(name: str, count: int | None) -> list[str]:
    return [name] if count is None else [f"{name}{i}" for i in range(count)]


def _positive(section: Section, key: str, value: float) -> float:
    if value <= 0:
        raise section.error(key, f"must be positive, got {value}")
    return value


def parse_topology(section: Section) -> Topology:
    description = section.str("description", "")
    endpoints: dict[str, Endpoint] = {}
    switches: dict[str, Switch] = {}
    groups: dict[str, list[str]] = {}
    defined_at: dict[str, str] = {}

    def define(name: str, where: str) -> None:
        if name in defined_at:
            raise ConfigError(f"name {name!r} is already defined at {defined_at[name]}", file=section.file,
                              where=where)
        defined_at[name] = where

    ep_section = section.sub("endpoints")
    for group in ep_section.data:
        count, sub = _members(ep_section, group)
        access = sub.parsed("access_latency", parse_time_ns, 0.0)
        sub.done()
        groups[group] = _expand(group, count)
        for name in groups[group]:
            define(name, sub.path)
            endpoints[name] = Endpoint(name, group, access)
    ep_section.done()
    if not endpoints:
        raise section.error("endpoints", "at least one endpoint is needed")
    sw_section = section.sub("switches", {})
    for group in sw_section.data:
        count, sub = _members(sw_section, group)
        ports = sub.int("ports", minimum=2)
        latency = sub.parsed("latency", parse_time_ns)
        sub.done()
        groups[group] = _expand(group, count)
        for name in groups[group]:
            define(name, sub.path)
            switches[name] = Switch(name, group, ports, latency)
    sw_section.done()

    links: list[Link] = []
    pairs: dict[frozenset[str], str] = {}
    ports_used: dict[str, int] = dict.fromkeys(switches, 0)
    link_section = section.sub("links")
    for group in link_section.data:
        sub = link_section.sub(group)
        ends = []
        for key in ("from", "to"):
            ref = sub.str(key)
            if ref in groups:
                ends.append(groups[ref])
            elif ref in defined_at:
                ends.append([ref])
            else:
                raise sub.error(key, f"unknown endpoint or switch {ref!r}")
        count = sub.int("count", 1, minimum=1)
        protocol = sub.str("protocol")
        bandwidth = _positive(sub, "bandwidth", sub.parsed("bandwidth", parse_bandwidth_GBps))
        reverse = _positive(sub, "reverse_bandwidth", sub.parsed("reverse_bandwidth", parse_bandwidth_GBps, bandwidth))
        efficiency = sub.float("efficiency")
        if not 0 < efficiency <= 1:
            raise sub.error("efficiency", f"must lie in (0, 1], got {efficiency}")
        latency = sub.parsed("latency", parse_time_ns)
        energy = sub.float("energy_pJ_per_bit")
        if energy < 0:
            raise sub.error("energy_pJ_per_bit", f"must be >= 0, got {energy}")
        sub.done()
        a_list, b_list = ends
        small, big = sorted((len(a_list), len(b_list)))
        if small > 1 and big % small:
            raise sub.error("to", f"cannot pair {len(a_list)} members with {len(b_list)} (one count must be a "
                                  "multiple of the other)")
        n = big
        for i in range(n):
            # equal groups pair up; a group k times the other's size links k consecutive members to each of its
            # (eight GPUs to their server's switch); a single member links to every member of the other side
            a, b = a_list[i * len(a_list) // n], b_list[i * len(b_list) // n]
            name = group if n == 1 else f"{group}{i}"
            if a == b:
                raise sub.error("to", f"link {name!r} connects {a!r} to itself")
            if frozenset((a, b)) in pairs:
                raise sub.error("to", f"{a!r} and {b!r} are already linked by {pairs[frozenset((a, b))]!r} "
                                      "(bond parallel links with count)")
            define(name, sub.path)
            pairs[frozenset((a, b))] = name
            for end in (a, b):
                if end in ports_used:
                    ports_used[end] += count
            links.append(Link(name, group, a, b, protocol, bandwidth * count, reverse * count, efficiency,
                              latency, energy, count))
    link_section.done()
    section.done()
    for name, used in ports_used.items():
        sw = switches[name]
        if used > sw.ports:
            raise ConfigError(f"switch {name!r} has {sw.ports} ports but {used} link ports attach to it",
                              file=section.file, where=f"{section.where('switches')}.{sw.group}.ports")
    topo = Topology(endpoints, switches, tuple(links), description, section.file, section.path)
    _check_connected(topo, section)
    return topo


def _check_connected(topo: Topology, section: Section) -> None:
    """Every endpoint must be linked to the rest: an island is almost always a typo in `from`/`to`."""
    undirected = topo.graph.to_undirected(as_view=True)
    first = next(iter(topo.endpoints))
    reach = nx.node_connected_component(undirected, first)
    for name, ep in topo.endpoints.items():
        if name not in reach:
            raise ConfigError(f"endpoint {name!r} is unreachable from {first!r}: no links connect them",
                              file=section.file, where=f"{section.where('endpoints')}.{ep.group}")
