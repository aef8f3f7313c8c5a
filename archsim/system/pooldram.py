"""The pool's DRAM during a decode step: KV request streams replayed through the memory core.

Sampled (the default, declared under `sampling:`): one layer (layers are identical), the busiest channel
(channels see statistically identical streams under head-wise sharding) and a window of its stream
(steady state: time scales with the bytes). Full: every channel of every device, every layer, the whole
stream; the tests hold the sampled figures to it. Replays are memoized on their inputs, so systems that
share a pool (G2.5 and G1.5 with PNM) replay it once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from archsim.analytic import unloaded_read_latency_cycles
from archsim.cache import L2Config, simulate_l2
from archsim.config.memory import MemoryConfig
from archsim.kvlayout import KvGeometry, channel_share
from archsim.memory import ReplayResult, Requests, replay
from archsim.report.memory_stats import memory_stats
from archsim.system.kvstream import ChannelStream, channel_local_to_physical, channel_stream

_CACHE: dict[str, PoolDram] = {}


@dataclass(frozen=True)
class PoolDram:
    """DRAM time and counters of one layer's KV traffic in the pool (scaled from the replayed sample)."""

    time_ns: float  # the slowest channel's time for the layer's stream
    replayed_requests: int  # requests the memory core simulated for this figure
    full_requests: int  # requests the busiest channel's full stream holds (sampled) or all channels (full)
    channels_replayed: int
    layers_replayed: int
    read_bytes: int  # the whole pool, one layer
    write_bytes: int
    row_hit_rate: float
    bank_conflicts: float  # the whole pool, one layer (scaled)
    commands: dict[str, float]  # the whole pool, one layer (scaled)
    l2_hit_rate: float | None  # host-path accesses served by the pool's L2 (None: no L2 on this path)
    l2_lines: float  # L2 line reads and writes (lookups, fills, write-backs), whole pool, one layer
    bandwidth_GBps_per_channel: float  # sustained by the replayed channel
    peak_bandwidth_GBps_per_channel: float
    read_latency_ns: dict[str, float]
    sources: dict[str, Any] = field(repr=False)
    result: ReplayResult | None = field(default=None, repr=False, compare=False)

    @property
    def utilization(self) -> float:
        return self.bandwidth_GBps_per_channel / self.peak_bandwidth_GBps_per_channel


def paced_timestamps(n: int, access_bytes: int, rate_GBps: float | None, tck_ns: float) -> np.ndarray:
    """Arrival cycle of each request when the stream arrives at `rate_GBps` (None: all at cycle 0)."""
    if rate_GBps is None or rate_GBps <= 0:
        return np.zeros(n, dtype=np.int64)
    bytes_per_cycle = rate_GBps * tck_ns
    return np.floor(np.arange(n, dtype=np.float64) * access_bytes / bytes_per_cycle).astype(np.int64)


def _key(*parts: Any) -> str:
    return json.dumps(parts, sort_keys=True, default=str)


def replay_stream(memory: MemoryConfig, stream: ChannelStream, timestamps: np.ndarray) -> ReplayResult:
    return replay(memory, Requests.build(timestamps, stream.address, stream.is_write, stream.source))


def _summarize(memory: MemoryConfig, result: ReplayResult, scale_requests: float, channels_scale: float,
               time_ns: float, replayed: int, full: int, channels_replayed: int, layers_replayed: int,
               read_bytes: int, write_bytes: int) -> PoolDram:
    stats = memory_stats(result, reproducible=True)
    mem = stats["memory"]
    org, timing = memory.organization, memory.timing
    span_ns = max(1, result.total_cycles) * timing.tCK_ns
    replayed_channels = max(1, channels_replayed)
    per_channel_bw = (mem["bytes_read"] + mem["bytes_written"]) / span_ns / replayed_channels
    peak = org.n_pseudo_channels * org.bus_width_bits * timing.data_rate_gbps / 8.0 / org.n_channels
    factor = scale_requests * channels_scale
    return PoolDram(
        time_ns=time_ns, replayed_requests=replayed, full_requests=full, channels_replayed=channels_replayed,
        layers_replayed=layers_replayed, read_bytes=read_bytes, write_bytes=write_bytes,
        row_hit_rate=mem["row_hit_rate"], bank_conflicts=mem["bank_conflicts"] * factor, l2_hit_rate=None,
        l2_lines=0.0,
        commands={k: v * factor for k, v in mem["commands"].items()},
        bandwidth_GBps_per_channel=per_channel_bw, peak_bandwidth_GBps_per_channel=peak,
        read_latency_ns=dict(mem["read_latency_ns"]), sources=mem["sources"], result=result)


def sampled_layer(memory: MemoryConfig, geo: KvGeometry, pool_channels: int, order: str, *, tile_tokens: int,
                  interleave_bytes: int, window: int, pool_rate_GBps: float | None,
                  l2: L2Config | None = None) -> PoolDram:
    """One layer from the busiest channel's (windowed) stream; `pool_rate_GBps` paces the whole pool's arrivals
    (the link's delivery rate for GPU fetches; None: as fast as the controller accepts, as the PNM loads).
    `l2`: the channel's slice of the pool's L2, in front of the controller on the host path."""
    share = channel_share(geo, pool_channels)
    key = _key("sampled", memory.resolved_tree, geo.__dict__, share.__dict__, order, tile_tokens, interleave_bytes,
               window, pool_rate_GBps, pool_channels, None if l2 is None else l2.__dict__)
    if key in _CACHE:
        return _CACHE[key]
    stream = channel_stream(memory, geo, share, order, tile_tokens=tile_tokens, interleave_bytes=interleave_bytes,
                            window=window, channel=share.channel % memory.organization.n_channels)
    rate = None if pool_rate_GBps is None else pool_rate_GBps * share.read_bytes(geo) / geo.layer_bytes
    ts = paced_timestamps(len(stream), memory.organization.access_bytes, rate, memory.timing.tCK_ns)
    hit_rate, lines = None, 0.0
    if l2 is not None:
        stream, ts, hit_rate, lines = _through_l2(memory, l2, stream, ts)
    result = replay_stream(memory, stream, ts)
    span_ns = max(1, result.total_cycles) * memory.timing.tCK_ns
    scale = stream.full_requests / len(stream)
    if stream.sampled:
        span_ns = _extrapolated_ns(memory, result, stream.full_requests) / scale
    # the pool's total over the sampled channel's: every channel's bytes relative to the busiest one's
    channels_scale = (geo.layer_bytes + geo.append_layer_bytes) / (stream.full_read_bytes + stream.full_write_bytes)
    out = _summarize(memory, result, scale, channels_scale, span_ns * scale, len(stream), stream.full_requests, 1, 1,
                     geo.layer_bytes, geo.append_layer_bytes)
    if l2 is not None:
        out = replace(out, l2_hit_rate=hit_rate, l2_lines=lines * scale * channels_scale)
    _CACHE[key] = out
    return out


def _through_l2(memory: MemoryConfig, l2: L2Config, stream: ChannelStream,
                ts: np.ndarray) -> tuple[ChannelStream, np.ndarray, float, float]:
    """The channel's requests through its L2 slice (indexed by channel-local address, clocked with the memory):
    what reaches the controller is the miss stream, each line fill or write-back as line-size / access-size
    consecutive requests. A KV stream has no reuse within a step, so hits are the other accesses of a line."""
    access = memory.organization.access_bytes
    miss_latency = unloaded_read_latency_cycles(memory, "miss")
    res = simulate_l2(l2, stream.local, is_write=stream.is_write, source=stream.source,
                      kind=np.ones(len(stream), dtype=np.uint8), arrival_cycle=ts,
                      memory_latency_cycles=miss_latency, flush=True)
    per_line = l2.line_size_bytes // access
    m = res.misses
    local = (m.address[:, None] + np.arange(per_line, dtype=np.uint64)[None, :] * np.uint64(access)).reshape(-1)
    address = channel_local_to_physical(memory.mapping, local, stream.channel)
    filtered = ChannelStream(address, np.repeat(m.is_write, per_line), np.repeat(m.source, per_line),
                             int(round(stream.full_requests * len(local) / len(stream))), stream.full_read_bytes,
                             stream.full_write_bytes, stream.channel, local)
    lines = float(len(stream) + len(m))  # every lookup plus every fill or write-back moves a line
    return filtered, np.repeat(m.cycle, per_line), res.hit_rate(), lines


def min_window_requests(memory: MemoryConfig) -> int:
    """A window must span two refresh intervals at the channel's peak rate (see _steady_ns_per_request)."""
    t = memory.timing
    return int(2 * t.tREFI * memory.organization.pseudo_channels / t.tBURST)


def _extrapolated_ns(memory: MemoryConfig, result: ReplayResult, full_requests: int) -> float:
    """Time the whole stream would take, from a window that spans two refresh intervals or more.

    Refresh deadlines fall on multiples of tREFI from cycle 0, as in an unsampled replay. The window gives the
    refresh-free time per request r0 (first completion to the first deadline), the cost of one refresh c (one
    whole interval minus its requests x r0, the mean over every whole interval in the window) and the fill
    latency d0; the stream's time T then solves T = d0 + N r0 + floor(T / tREFI) c. Without refresh, or with a
    window shorter than two intervals, the time scales with the requests."""
    done = np.sort(result.done_cycle)
    tck = memory.timing.tCK_ns
    period = memory.timing.tREFI
    end = int(done[int(0.98 * (len(done) - 1))])  # the last 2 % complete as the queues drain: not steady
    k = end // period - 1
    d0 = int(done[0])
    if memory.controller.refresh == "none" or k < 1 or d0 >= period:
        return max(1, result.total_cycles) * tck * full_requests / len(done)
    first = int(np.searchsorted(done, period, side="left"))
    r0 = (period - d0) / max(1, first)
    in_periods = int(np.searchsorted(done, (k + 1) * period, side="left")) - first
    cost = max(0.0, (k * period - in_periods * r0) / k)
    t = d0 + full_requests * r0
    for _ in range(64):  # a fixed point: each refresh pushes the end past (at most) one more deadline
        nxt = d0 + full_requests * r0 + (t // period) * cost
        if nxt == t:
            break
        t = nxt
    return t * tck


def full_layer(memory: MemoryConfig, geo: KvGeometry, devices: int, order: str, *, tile_tokens: int,
               interleave_bytes: int, pool_rate_GBps: float | None, layers: int = 1) -> PoolDram:
    """Reference: every channel of every device, whole streams, `layers` layers one after the other;
    returns the per-layer mean (time of the slowest device per layer, summed over layers, / layers)."""
    org = memory.organization
    per_device = org.n_channels
    shares = [channel_share(geo, devices * per_device, c) for c in range(devices * per_device)]
    total_ns, replayed = 0.0, 0
    last: ReplayResult | None = None
    for layer in range(layers):
        worst = 0.0
        for d in range(devices):
            streams: list[ChannelStream] = []
            for c in range(per_device):
                share = shares[d * per_device + c]
                if share.chunks:
                    streams.append(channel_stream(memory, geo, share, order, tile_tokens=tile_tokens,
                                                  interleave_bytes=interleave_bytes, window=0, channel=c,
                                                  layer=layer))
            if not streams:
                continue
            ts_parts = []
            for s in streams:
                rate = None if pool_rate_GBps is None else pool_rate_GBps * (
                    s.full_read_bytes + s.full_write_bytes) / (geo.layer_bytes + geo.append_layer_bytes)
                ts_parts.append(paced_timestamps(len(s), org.access_bytes, rate, memory.timing.tCK_ns))
            address, is_write, source, ts = _merge(streams, ts_parts)
            result = replay(memory, Requests.build(ts, address, is_write, source))
            worst = max(worst, max(1, result.total_cycles) * memory.timing.tCK_ns)
            replayed += len(address)
            last = result
        total_ns += worst
    assert last is not None
    return _summarize(memory, last, 1.0, float(devices), total_ns / layers, replayed, replayed, len(shares), layers,
                      geo.layer_bytes, geo.append_layer_bytes)


def _merge(streams: list[ChannelStream], ts_parts: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    """Interleave channels request by request, then order by arrival (stable): a device-wide stream."""
    longest = max(len(s) for s in streams)
    slot = np.concatenate([np.arange(len(s)) * len(streams) + j for j, s in enumerate(streams)])
    ts = np.concatenate(ts_parts)
    order = np.lexsort((slot, ts))
    address = np.concatenate([s.address for s in streams])[order]
    is_write = np.concatenate([s.is_write for s in streams])[order]
    source = np.concatenate([s.source for s in streams])[order]
    del longest
    return address, is_write, source, ts[order]


def clear_cache() -> None:
    _CACHE.clear()
