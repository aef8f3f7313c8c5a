"""From a system file and a model to what the serving engine reads: ServingSpec (tiers with their capacity and
link, batching limits) and the iteration cost table.

* HBM's capacity per instance: each GPU's HBM x memory_utilization minus its share of the weights, over the
  instance's tensor-parallel GPUs (vLLM's KV budget);
* the pool's: the modelled pool's size; a store's: its `capacity`;
* a tier's link for loads into HBM: the route from its endpoint to one instance's GPUs through the topology,
  at the rate all of the instance's GPUs reach together (the flow model's max-min share, so a shared pool
  port or NIC caps it), never above what every GPU of the system gets when all load at once times the
  instance's GPUs; its latency the route's one way plus the endpoint's access latency.
"""

from __future__ import annotations

from dataclasses import replace

from archsim.dram.spec import peak_bandwidth_GBps
from archsim.errors import ConfigError
from archsim.kvlayout import kv_bytes_per_token
from archsim.models import ModelShape, dtype_bytes
from archsim.serving.costs import SplitCost, StepCostTable, instance_workload
from archsim.serving.spec import ServingSpec, TierSpec, validate
from archsim.system.config import SystemConfig
from archsim.system.gpu import gpu_work, hbm_room_bytes
from archsim.system.links import analytic_share_GBps, route_latency_ns
from archsim.system.workload import Workload


def serving_workload(system: SystemConfig, shape: ModelShape, dtype: str, max_context: int | None,
                     scenario: str) -> Workload:
    """The model as the decode-step model takes it, at the system's serving tensor parallelism."""
    serving = system.serving
    assert serving is not None
    tp = serving.tensor_parallel
    if tp > system.gpus.count:
        raise ConfigError(f"tensor_parallel {tp} needs more GPUs than the system's {system.gpus.count}",
                          file=system.file, where="system.serving.tensor_parallel")
    if shape.attention != "mla" and shape.kv_cache_heads % tp and tp % shape.kv_cache_heads:
        raise ConfigError(f"{shape.kv_cache_heads} KV heads do not split over tensor_parallel {tp}",
                          file=system.file, where="system.serving.tensor_parallel")
    per_server = system.gpus_per_server
    if system.servers > 1 and (tp > per_server or per_server % tp):
        raise ConfigError(f"tensor_parallel {tp} does not split a server's {per_server} GPUs (an instance stays "
                          f"in one of the {system.servers} servers)", file=system.file,
                          where="system.serving.tensor_parallel")
    instances = serving.instances if serving.instances is not None else system.gpus.count // tp
    if instances * tp > system.gpus.count:
        raise ConfigError(f"{instances} instances x tensor_parallel {tp} need more than the system's "
                          f"{system.gpus.count} GPUs", file=system.file, where="system.serving.instances")
    if instances % system.servers:
        raise ConfigError(f"{instances} instances do not split evenly over {system.servers} servers",
                          file=system.file, where="system.serving.instances")
    base = Workload(scenario, "", shape, dtype, 1, tp, instances, (0,), 1, system.file or "<system>", max_context)
    return instance_workload(base, instances)


def pool_peak_GBps(system: SystemConfig) -> float:
    """Every pseudo-channel of every pool device moving data every cycle (0 without a modelled pool)."""
    if system.pool is None:
        return 0.0
    memory = system.pool.memory
    return system.pool.devices * peak_bandwidth_GBps(memory.organization, memory.timing)


def serving_spec(system: SystemConfig, workload: Workload, max_context: int) -> ServingSpec:
    serving = system.serving
    assert serving is not None and workload.instances is not None
    tp, instances = workload.tensor_parallel, workload.instances
    weights = gpu_work(workload.shape, workload.dtype, 1, dtype_bytes(workload.dtype)).weight_bytes
    hbm = max(0, hbm_room_bytes(system.gpus, weights // tp)) * tp
    tiers = [TierSpec("hbm", "hbm", hbm, None, 0.0, 0.0, "none")]
    for t in system.kv_tiers[1:]:
        capacity = t.capacity_bytes
        if t.kind == "pool":
            assert system.pool is not None
            capacity = system.pool.capacity_bytes
        assert capacity is not None and t.endpoint is not None
        rate, latency = _link(system, t.endpoint, tp)
        write = _link(system, t.endpoint, tp, write=True)[0]
        server_rate = server_write = 0.0
        if system.servers > 1:       # the pool side at what every GPU reaches together, each server's own port
            rate, server_rate = _server_links(system, t.endpoint)
            write, server_write = _server_links(system, t.endpoint, write=True)
        tiers.append(TierSpec(t.name, t.kind, capacity, f"{t.name}->gpu", rate, latency, t.compute, server_rate,
                              write, server_write))
    if serving.prefill_instances and not 1 <= serving.prefill_instances < instances:
        raise ConfigError(f"disaggregation needs 1 <= prefill_instances < instances ({instances}), got "
                          f"{serving.prefill_instances}", file=system.file, where="system.serving.prefill_instances")
    home = next((i for i, t in enumerate(tiers) if t.compute == "pnm"), 0)
    if system.kv_placement not in (None, "auto"):  # a named home (checked when the system was read)
        home = next(i for i, t in enumerate(system.kv_tiers) if t.name == system.kv_placement)
    spec = ServingSpec(
        system=system.name, tier_label=system.tier, instances=instances, tensor_parallel=tp,
        router=serving.router, max_batch_tokens=serving.max_batch_tokens, max_batch_seqs=serving.max_batch_seqs,
        chunked_prefill=serving.chunked_prefill, block_tokens=serving.block_tokens, preemption=serving.preemption,
        kv_bytes_per_token=kv_bytes_per_token(workload.shape, workload.dtype), tiers=tuple(tiers), kv_home=home,
        max_context_tokens=max_context, decode=system.kv_decode, disaggregated=serving.prefill_instances > 0,
        prefill_instances=serving.prefill_instances,
        placement="auto" if system.kv_placement == "auto" else "fixed", replan_tokens=system.kv_replan_tokens,
        pool_dram_GBps=pool_peak_GBps(system), servers=system.servers,
        coherence=system.pool.coherence if system.pool is not None else "software",
        kv_data_path=system.pool.kv_data_path if system.pool is not None else "dma",
        pnm_scheduling=system.pool.pnm.scheduling if system.pool is not None and system.pool.pnm is not None
        else "fair_share")
    try:
        validate(spec)
    except ConfigError as exc:
        raise exc.located(system.file) from None
    return spec


def _link(system: SystemConfig, endpoint: str, tp: int, write: bool = False) -> tuple[float, float]:
    """GB/s one instance's GPUs reach together from `endpoint` (`write`: towards it, over the links' other
    direction, which may be slower: an SSD's sequential write), and the one-way latency."""
    topology = system.topology
    assert topology is not None
    every = system.gpu_endpoints(system.gpus.count)
    mine = every[:tp]
    src, dst = (None, endpoint) if write else (endpoint, None)
    alone = analytic_share_GBps(topology, mine, src, dst) * len(mine)
    together = analytic_share_GBps(topology, every, src, dst) * len(mine)
    return min(alone, together), route_latency_ns(topology, endpoint, mine[0])


def _server_links(system: SystemConfig, endpoint: str, write: bool = False) -> tuple[float, float]:
    """Several servers: GB/s every GPU of the system reaches from `endpoint` (`write`: towards it) when all move
    KV at once (the shared pool side), and GB/s one server's GPUs reach alone (its port, and anything else on
    its route)."""
    topology = system.topology
    assert topology is not None
    every = system.gpu_endpoints(system.gpus.count)
    server = every[:system.gpus_per_server]
    src, dst = (None, endpoint) if write else (endpoint, None)
    together = analytic_share_GBps(topology, every, src, dst) * len(every)
    return together, analytic_share_GBps(topology, server, src, dst) * len(server)


def cost_table(system: SystemConfig, workload: Workload, spec: ServingSpec) -> StepCostTable | SplitCost:
    """The iteration cost of one instance, its decode part tabulated up to the KV home's capacity; with
    `placement: auto` one table per side (HBM, the PNM tier)."""
    if spec.placement == "auto":
        return SplitCost(cost_table(system, workload, replace(spec, placement="fixed", kv_home=0)),
                         cost_table(system, workload, replace(spec, placement="fixed")))
    home = spec.tiers[spec.kv_home]
    # decode sequences never hold more KV than their home (HBM for load systems, the pool for PNM)
    tokens = home.capacity_bytes // spec.kv_bytes_per_token
    if spec.kv_home != 0:  # the pool is shared by every instance; each instance's share is what one iteration sees
        tokens //= spec.instances
    tokens -= 2 * spec.max_batch_seqs  # the step model counts each sequence's appended token on top
    from_hbm = spec.kv_home == 0 and spec.decode == "load"
    if spec.kv_home == 0 and system.attention == "pnm":  # kv.placement hbm: prefill attends to its prefix in HBM
        system = replace(system, attention="gpu")
    return StepCostTable(system, workload, spec.max_batch_seqs, max(1, int(tokens)), decode_from_hbm=from_hbm)


def with_overrides(system: SystemConfig, **changes: object) -> SystemConfig:
    """A copy of the system with serving keys replaced (tests and sweeps)."""
    assert system.serving is not None
    return replace(system, serving=replace(system.serving, **changes))
