"""One layer's traffic between the GPUs and the KV's home, through the interconnect's flow model.

Every GPU of every model instance moves its share at once (its KV heads: tensor parallelism splits them), so
flows from several GPUs meet on the switch's pool port and share it max-min fairly (archsim.interconnect).

* GPU attention on remote KV: KV flows home -> GPU (the whole layer's KV), appends GPU -> home.
* PNM attention: query + append flows GPU -> pool, then, after the PNM's work, output flows pool -> GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from weakref import WeakKeyDictionary

from archsim.interconnect import Flow, FlowSchedule, Topology, simulate_flows
from archsim.kvlayout import KvGeometry


@dataclass(frozen=True)
class LayerTraffic:
    schedules: tuple[FlowSchedule, ...]  # one per phase (fetch; or queries then outputs)
    time_ns: tuple[float, ...]  # makespan of each phase, route latency included
    kv_rate_GBps: float | None  # aggregate payload rate of the KV fetch (paces the pool DRAM), None for PNM
    route_latency_ns: float

    def link_bytes(self) -> dict[str, float]:
        """Payload bytes per link direction for the layer, all phases."""
        out: dict[str, float] = {}
        for sched in self.schedules:
            for usage in sched.links:
                out[usage.name] = out.get(usage.name, 0.0) + usage.payload_bytes
        return out

    def wire_bits(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for sched in self.schedules:
            for key, bits in sched.wire_bits_by_protocol().items():
                out[key] = out.get(key, 0.0) + bits
        return out

    def payload_bits(self, protocol: str) -> float:
        """Payload bits the layer moves over hops of `protocol`, every direction, all phases."""
        return 8.0 * sum(u.payload_bytes for sched in self.schedules for u in sched.links
                         if u.hop.link.protocol == protocol)

    def peak_utilization(self) -> float:
        """Highest epoch rate over capacity, any link direction, any phase (<= 1 by the flow model)."""
        return max((u.peak_rate_GBps / u.capacity_GBps for s in self.schedules for u in s.links), default=0.0)


_SHARES: WeakKeyDictionary = WeakKeyDictionary()   # topology -> {(gpus, src_of, dst_of): share}: it never changes


def analytic_share_GBps(topology: Topology, gpus: list[str], src_of: str | None, dst_of: str | None) -> float:
    """Closed-form check of the flow model: each GPU's rate if every shared link direction were split evenly
    among the GPUs crossing it (the smallest such share over the route). One of src_of/dst_of is the home.
    Memoized per topology (a serving run asks at every prefill chunk)."""
    memo = _SHARES.setdefault(topology, {})
    key = (tuple(gpus), src_of, dst_of)
    share = memo.get(key)
    if share is None:
        share = memo[key] = _even_share_GBps(topology, gpus, src_of, dst_of)
    return share


def _even_share_GBps(topology: Topology, gpus: list[str], src_of: str | None, dst_of: str | None) -> float:
    routes = [topology.route(src_of or g, dst_of or g) for g in gpus]
    users: dict[int, int] = {}
    for r in routes:
        for h in r.hops:
            users[topology.resource(h)] = users.get(topology.resource(h), 0) + 1
    return min(min(h.capacity_GBps / users[topology.resource(h)] for h in r.hops) for r in routes)


def route_latency_ns(topology: Topology, a: str, b: str) -> float:
    """One way from endpoint a to b: the route's links and switches plus a's access latency."""
    return topology.route(a, b).latency_ns + topology.endpoints[a].access_latency_ns


def fetch_flows(gpus: list[str], home: str, geo: KvGeometry) -> list[Flow]:
    """The layer's KV from `home` to the GPUs (each its share), and the appends back, concurrently."""
    n = len(gpus)
    flows = [Flow(home, g, geo.layer_bytes / n, name=f"kv->{g}") for g in gpus]
    return flows + [Flow(g, home, geo.append_layer_bytes / n, name=f"append<-{g}") for g in gpus]


def pnm_flows(gpus: list[str], pool: str, geo: KvGeometry) -> tuple[list[Flow], list[Flow]]:
    """Queries with the new token's K and V to the pool; attention outputs back."""
    n = len(gpus)
    inbound = [Flow(g, pool, (geo.query_layer_bytes + geo.append_layer_bytes) / n, name=f"q<-{g}") for g in gpus]
    return inbound, [Flow(pool, g, geo.output_layer_bytes / n, name=f"o->{g}") for g in gpus]


def fetch_traffic(topology: Topology, gpus: list[str], home: str, geo: KvGeometry) -> LayerTraffic:
    """The layer's KV from `home` to the GPUs (each its share), and the appends back, concurrently."""
    sched = simulate_flows(topology, fetch_flows(gpus, home, geo))
    kv = [r for r in sched.flows if r.flow.name.startswith("kv->")]
    first = min(r.first_byte_ns for r in kv)
    last = max(r.last_byte_sent_ns for r in kv)
    rate = geo.layer_bytes / (last - first) if last > first else None
    makespan = max(r.completion_ns for r in kv)
    return LayerTraffic((sched,), (makespan,), rate, route_latency_ns(topology, home, gpus[0]))


def pnm_traffic(topology: Topology, gpus: list[str], pool: str, geo: KvGeometry) -> LayerTraffic:
    """Queries (with the new token's K and V) to the pool, outputs back: two phases around the PNM's work."""
    flows_in, flows_out = pnm_flows(gpus, pool, geo)
    inbound, outbound = simulate_flows(topology, flows_in), simulate_flows(topology, flows_out)
    return LayerTraffic((inbound, outbound), (inbound.makespan_ns, outbound.makespan_ns), None,
                        route_latency_ns(topology, gpus[0], pool))


def collectives_on_fabric(topology: Topology, gpus: list[str]) -> bool:
    """Whether the GPUs' all-reduces cross the modelled topology: its GPU-to-GPU route is a scale-up
    (NVLink/UALink-class) route. Otherwise (a CXL or PCIe host network) the GPUs' own NVLink domain, outside
    the topology, carries them, and the pool's traffic does not meet them."""
    if len(gpus) < 2:
        return False
    return all(h.link.protocol == "nvlink" for h in topology.route(gpus[0], gpus[1]).hops)


def allreduce_stretch(topology: Topology, rings: list[list[str]], bytes_per_gpu: float,
                      background: list[Flow]) -> float:
    """How much concurrent pool traffic slows the all-reduces' transfers: the ring's per-GPU bytes sent to each
    GPU's neighbour, alone and together with `background`, through the flow model (1.0: no slowdown).

    The layer's pool traffic is taken as concurrent with its all-reduces: instances and micro-batches
    interleave their phases, so one's all-reduce meets another's queries, outputs and KV (for a single
    instance this is an upper bound on the interference)."""
    ring_flows = [Flow(g, ring[(i + 1) % len(ring)], bytes_per_gpu, name=f"allreduce:{g}")
                  for ring in rings if len(ring) > 1 for i, g in enumerate(ring)]
    if not ring_flows or bytes_per_gpu <= 0:
        return 1.0

    def transfer_ns(flows: list[Flow]) -> float:
        sched = simulate_flows(topology, flows)
        return max(r.last_byte_sent_ns - r.first_byte_ns for r in sched.flows
                   if r.flow.name.startswith("allreduce:"))

    return max(1.0, transfer_ns(ring_flows + background) / transfer_ns(ring_flows))
