"""The memory pool as both pool placements use it: whether the KV fits, its DRAM replayed, its QoS study."""

from __future__ import annotations

from dataclasses import replace

from archsim.kvlayout import KvGeometry, channel_footprint_bytes, channel_share
from archsim.system.config import SystemConfig
from archsim.system.kvstream import channel_stream
from archsim.system.pooldram import PoolDram, full_layer, sampled_layer
from archsim.system.qos import QosResult, qos_memory, run_study


def pool_infeasible(system: SystemConfig, geo: KvGeometry) -> str | None:
    """Why the step's KV does not fit in the pool, or None."""
    assert system.pool is not None
    pool, gib = system.pool, 2**30
    if geo.step_bytes > pool.capacity_bytes:
        return f"KV {geo.step_bytes / gib:.1f} GiB exceeds the pool's {pool.capacity_bytes / gib:.1f} GiB"
    need = channel_footprint_bytes(geo, pool.channels)
    per_channel = pool.memory.organization.capacity_bytes // pool.channels_per_device
    if need > per_channel:  # within a token row per layer and channel of the pool's capacity
        return (f"KV {geo.step_bytes / gib:.1f} GiB placed over {pool.channels} channels needs "
                f"{need / 2**20:.1f} MiB per channel, {per_channel / 2**20:.1f} MiB each")
    return None


def pool_dram(system: SystemConfig, geo: KvGeometry, order: str, rate: float | None) -> PoolDram:
    """The pool DRAM serving a layer's KV through the `order` port (pnm or host), replayed as `system.sampling`
    says; `rate` paces a host fetch at the links' delivery rate."""
    pool, s = system.pool, system.sampling
    assert pool is not None
    tile = pool.pnm.tile_tokens if pool.pnm else 64
    if s.channels == "all" or s.layers == "all":
        return full_layer(pool.memory, geo, pool.devices, order, tile_tokens=tile,
                          interleave_bytes=pool.host_fetch_interleave_bytes, pool_rate_GBps=rate,
                          layers=geo.layers if s.layers == "all" else 1)
    l2 = None
    if pool.l2 is not None and order == "host":  # the PNM sits at the controller, below the host path's L2
        l2 = replace(pool.l2, capacity_bytes=pool.l2.capacity_bytes // pool.channels_per_device)
    return sampled_layer(pool.memory, geo, pool.channels, order, tile_tokens=tile,
                         interleave_bytes=pool.host_fetch_interleave_bytes, window=s.window_requests,
                         pool_rate_GBps=rate, l2=l2)


def qos_study(system: SystemConfig, geo: KvGeometry) -> QosResult:
    """The PNM's loads on the busiest channel against the host traffic `system.qos` adds at the controllers."""
    pool, s = system.pool, system.sampling
    assert pool is not None and pool.pnm is not None and system.qos is not None
    share = channel_share(geo, pool.channels)
    channel = share.channel % pool.channels_per_device
    stream = channel_stream(pool.memory, geo, share, "pnm", tile_tokens=pool.pnm.tile_tokens,
                            interleave_bytes=pool.host_fetch_interleave_bytes, window=s.window_requests,
                            channel=channel)
    memory = qos_memory(pool.memory, system.qos, system.file)
    return run_study(memory, stream.address, stream.is_write, stream.source, system.qos, channel=channel)
