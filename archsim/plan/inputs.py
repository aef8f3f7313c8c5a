"""What the planner reads from a system and a workload: plain numbers for archsim.plan.model, and the system
variant a candidate names (for simulating it with the step model).

Candidates are what the system declares: its KV tiers (`system.kv.tiers`, or `kv.location`'s tiers) with
attention on the GPUs, plus attention in the pool's PNM units when the pool tier has them.
"""

from __future__ import annotations

import copy
from dataclasses import replace

from archsim.errors import ConfigError
from archsim.gpu.shape import DTYPES, LayerShape
from archsim.kvlayout import kv_geometry
from archsim.plan.model import Candidate, GpuSpec, ModelGeometry, PathSpec, PlanInputs, PoolSpecP
from archsim.system.config import SystemConfig, system_config_from_mapping
from archsim.system.gpu import gpu_work, hbm_room_bytes
from archsim.system.links import analytic_share_GBps, collectives_on_fabric
from archsim.system.serving_config import DEVICE_OF_KIND
from archsim.system.workload import Workload


def model_geometry(workload: Workload, gpus: int, file: str | None) -> ModelGeometry:
    shape = workload.shape
    el = workload.element_bytes
    kv = kv_geometry(shape, workload.dtype, 1, 0)
    work = gpu_work(shape, workload.dtype, workload.batch, el)
    layer = None
    if shape.attention == "gqa" and not shape.n_routed_experts and workload.dtype in DTYPES:
        layer = LayerShape.from_model(shape, workload.dtype)
    return ModelGeometry(
        name=shape.name, layers=kv.layers, kv_heads=kv.kv_heads, query_group=kv.query_group,
        k_row_bytes=kv.k_row_bytes, v_row_bytes=kv.v_row_bytes, qk_dim=kv.qk_dim, out_dim=kv.out_dim,
        element_bytes=el, hidden=shape.hidden_size, vocab=shape.vocab_size, tp=workload.tensor_parallel,
        instances=workload.instances_on(gpus, file), max_context=workload.max_context,
        weight_bytes=work.weight_bytes, layer_weight_bytes=work.layer_weight_bytes,
        epilogue_weight_bytes=work.epilogue_weight_bytes, layer_shape=layer,
        params_per_token_flops=2 * (work.weight_bytes // el))


def _path(system: SystemConfig, endpoint: str, gpus_used: int) -> PathSpec:
    topo = system.topology
    assert topo is not None
    names = system.gpu_endpoints(gpus_used)
    route = topo.route(endpoint, names[0])
    latency = route.latency_ns + topo.endpoints[endpoint].access_latency_ns
    wire: dict[str, float] = {}
    for hop in route.hops:
        wire[hop.link.protocol] = wire.get(hop.link.protocol, 0.0) + 1.0 / hop.link.efficiency
    fabric = 0.0
    if collectives_on_fabric(topo, names):
        first = topo.route(names[0], names[1]).hops[0]
        fabric = first.link.effective_GBps(first.forward)
    return PathSpec(latency_ns=latency, fetch_share_GBps=analytic_share_GBps(topo, names, endpoint, None),
                    query_share_GBps=analytic_share_GBps(topo, names, None, endpoint),
                    wire_bits_per_payload_bit=wire, ethernet="ethernet" in wire, fabric_GBps=fabric)


def _pool(system: SystemConfig) -> PoolSpecP:
    pool = system.pool
    assert pool is not None
    org, timing = pool.memory.organization, pool.memory.timing
    peak = org.n_pseudo_channels * org.bus_width_bits * timing.data_rate_gbps / 8.0 / org.n_channels
    refresh = pool.capacity_bytes / 2**30 / (timing.tREFI * timing.tCK_ns)
    spec = PoolSpecP(channels=pool.channels, channel_peak_GBps=peak, capacity_bytes=pool.capacity_bytes,
                     channel_capacity_bytes=org.capacity_bytes // pool.channels_per_device,
                     row_bytes=org.row_bytes, access_bytes=org.access_bytes, refresh_GiB_per_ns=refresh,
                     refresh_efficiency=1.0 - timing.tRFC / timing.tREFI,
                     stripe_bytes=_stripe_bytes(pool.memory.mapping.order, org.access_bytes),
                     row_open_ns=timing.tRCDRD * timing.tCK_ns)
    if pool.pnm is None:
        return spec
    p = pool.pnm
    clock = p.clock_GHz if p.clock_GHz is not None else 1.0 / timing.tCK_ns
    return replace(spec, pnm_clock_GHz=clock, macs_per_cycle=p.macs_per_cycle, exp_per_cycle=p.exp_per_cycle,
                   sram_bytes=p.sram_bytes, tile_tokens=p.tile_tokens)


def _stripe_bytes(order: tuple[str, ...], access_bytes: int) -> int:
    """Bytes of one channel's address space a sequential stream covers before the bank field changes: the
    address-mapping bits below the lowest `ba` bit, the channel bits left out (the stream stays in its channel)."""
    bits = 0
    for field_name in order:  # lowest bit first
        if field_name == "ba":
            break
        if field_name != "ch":
            bits += 1
    return access_bytes << bits


def plan_inputs(system: SystemConfig, workload: Workload) -> PlanInputs:
    """The closed-form model's view of `system` running `workload`; one candidate per (tier, attention)."""
    gpus = system.gpus
    m = model_geometry(workload, gpus.count, system.file)
    room = hbm_room_bytes(gpus, m.weight_bytes // m.tp)
    gpu = GpuSpec(gpus.count, gpus.peak_TFLOPS, gpus.hbm_bandwidth_GBps, room, gpus.preset)
    cands: list[Candidate] = []
    for tier in system.kv_tiers:
        if tier.kind == "hbm":
            cands.append(Candidate("hbm/gpu", "gpu", "hbm", tier.name, None, None, None, None))
            continue
        assert tier.endpoint is not None
        path = _path(system, tier.endpoint, m.gpus_used)
        pool = _pool(system) if tier.kind == "pool" and system.pool is not None else None
        device = DEVICE_OF_KIND.get(tier.kind) if tier.kind != "pool" else None
        base = Candidate(f"{tier.name}/gpu", "gpu", tier.kind, tier.name, path, pool, tier.capacity_bytes, device,
                         gpu_fetch=system.gpu_fetch)
        cands.append(base)
        if pool is not None and pool.pnm_clock_GHz > 0:
            cands.append(replace(base, name=f"{tier.name}/pnm", attention="pnm", sub_batches=system.sub_batches))
    return PlanInputs(system.name, system.file, m, gpu, tuple(cands), system.energy)


def candidate_names(inputs: PlanInputs) -> list[str]:
    return [c.name for c in inputs.candidates]


def check_candidates(inputs: PlanInputs, names: tuple[str, ...]) -> None:
    """Unknown candidate names, or pool candidates on a system without a pool: ConfigError naming the key."""
    known = candidate_names(inputs)
    for name in names:
        if name not in known:
            where = "system.kv.tiers" if name.split("/")[0] in ("pool", "host_dram", "nvme", "rdma") else "--candidates"
            hint = "the system declares no such tier" if where == "system.kv.tiers" else "unknown candidate"
            raise ConfigError(f"{hint}: {name!r} (this system's candidates: {', '.join(known)})",
                              file=inputs.file, where=where)


def candidate_system(system: SystemConfig, cand: Candidate) -> SystemConfig:
    """The system with the KV in the candidate's tier and attention where it says (for simulate_step)."""
    if cand.kv_tier == "hbm":
        return replace(system, kv_location="gpu", kv_endpoint=None, attention="gpu", qos=None)
    tier = next(t for t in system.kv_tiers if t.name == cand.tier_name)
    if cand.kv_tier == "pool":
        return replace(system, kv_location="pool", kv_endpoint=tier.endpoint, attention=cand.attention,
                       qos=system.qos if cand.attention == "pnm" else None)
    return replace(system, kv_location="store", kv_endpoint=tier.endpoint, kv_capacity_bytes=tier.capacity_bytes,
                   kv_device=DEVICE_OF_KIND.get(tier.kind), attention="gpu", qos=None)


def scaled_links_system(system: SystemConfig, tree: dict, scale: float) -> SystemConfig:
    """`system` (read from `tree`) with every link on the GPUs' route to a KV tier scaled by `scale`, through
    the system's own `interconnect.set` overrides."""
    if scale == 1.0:
        return system
    topo = system.topology
    if topo is None:
        return system
    gpu0 = system.gpu_endpoints(1)[0]
    groups: dict[str, tuple[float, float]] = {}
    for tier in system.kv_tiers:
        if tier.endpoint is None:
            continue
        for hop in topo.route(gpu0, tier.endpoint).hops:
            link = hop.link
            groups[link.group] = (link.bandwidth_GBps / link.count, link.reverse_bandwidth_GBps / link.count)
    new = copy.deepcopy(tree)
    root = new["system"]
    ic = root["interconnect"]
    if isinstance(ic, str):
        ic = root["interconnect"] = {"preset": ic}
    sets = dict(ic.get("set") or {})
    for group, (fwd, rev) in sorted(groups.items()):
        sets[f"links.{group}.bandwidth"] = round(fwd * scale, 6)
        if rev != fwd:
            sets[f"links.{group}.reverse_bandwidth"] = round(rev * scale, 6)
    ic["set"] = sets
    try:
        return system_config_from_mapping(new, file=system.file)
    except ConfigError as exc:  # a topology whose links cannot be scaled this way
        raise ConfigError(f"scaling the GPU-pool links by {scale}: {exc.detail}", file=system.file,
                          where=exc.where) from None
