"""The request streams one channel sees during a decode step, on the pool's KV layout (`archsim/kvlayout.py`).

Layout: `archsim.kvlayout` (head contexts cut into one contiguous range per pool channel; in a channel a chunk is
its K block then its V block; layer l at l x region). Addresses are built through the memory's own address
mapping (channel-local offsets with the channel bits inserted, then encoded), so any configured mapping keeps a
chunk inside its PNM unit's channel.

Request orders (access-sized requests, `memory.organization.access_bytes` each):
* pnm:  the unit streams chunk by chunk, tile by tile: the K rows of a tile, then its V rows (the
        double-buffered flash-decoding loop of isa/kernels/gqa_decode.s).
* host: a GPU fetching the KV reads all of the channel's streams (K and V of every chunk) at once; its
        requests reach the channel round-robin over those streams, `interleave` bytes at a time.
Both orders start with the host's appends: the new token's K and V rows of every chunk ending here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from archsim.config.memory import MemoryConfig
from archsim.dram.address_map import AddressMapping
from archsim.errors import ArchsimError, ConfigError
from archsim.kvlayout import ChannelShare, KvGeometry

HOST, PNM = 0, 1  # request sources (archsim.config.memory.SOURCES)


def channel_local_to_physical(mapping: AddressMapping, local: np.ndarray, channel: int) -> np.ndarray:
    """Physical addresses of channel-local byte offsets: the channel bits inserted, then encoded so that XOR
    folding of the channel bits (if configured) still lands every address in `channel`."""
    local = np.asarray(local, dtype=np.uint64)
    positions = [mapping.offset_bits + i for i, f in enumerate(mapping.order) if f == "ch"]
    if mapping.top == "ch":
        physical = local | (np.uint64(channel) << np.uint64(mapping.offset_bits + len(mapping.order)))
    else:
        physical = local
        for i, p in enumerate(positions):  # ascending: each insertion shifts the higher bits up by one
            low = physical & np.uint64((1 << p) - 1)
            high = physical >> np.uint64(p)
            bit = np.uint64((channel >> i) & 1)
            physical = (high << np.uint64(p + 1)) | (bit << np.uint64(p)) | low
    decoded = mapping.decode(physical)
    forced = type(decoded)(np.full_like(decoded.channel, channel), decoded.pseudo_channel, decoded.rank,
                           decoded.bankgroup, decoded.bank, decoded.row, decoded.column)
    return mapping.encode(forced)


@dataclass(frozen=True)
class ChannelStream:
    """Requests of one channel, in arrival order; the whole stream would hold `full_requests` requests."""

    address: np.ndarray
    is_write: np.ndarray
    source: np.ndarray
    full_requests: int
    full_read_bytes: int
    full_write_bytes: int
    channel: int
    local: np.ndarray  # channel-local byte offsets (what a per-channel L2 slice indexes)

    def __len__(self) -> int:
        return int(self.address.shape[0])

    @property
    def sampled(self) -> bool:
        return len(self) < self.full_requests


def _pnm_offsets(n: int, share: ChannelShare, geo: KvGeometry, tile: int, access: int) -> np.ndarray:
    """Local offsets of the first n reads of the PNM order (see the module docstring)."""
    i = np.arange(n, dtype=np.int64)
    k_req, v_req = geo.k_row_bytes // access, geo.v_row_bytes // access
    tokens = np.array([c.tokens for c in share.chunks], dtype=np.int64)
    ends = np.cumsum(tokens * (k_req + v_req))
    chunk = np.searchsorted(ends, i, side="right")
    r = i - (ends[chunk] - tokens[chunk] * (k_req + v_req))
    t = tokens[chunk]
    tile_req = tile * (k_req + v_req)
    full_tiles = t // tile
    in_full = r < full_tiles * tile_req
    tile_idx = np.where(in_full, r // tile_req, full_tiles)
    tile_tokens = np.where(in_full, tile, t - full_tiles * tile)
    q = np.where(in_full, r % tile_req, r - full_tiles * tile_req)
    is_v = q >= tile_tokens * k_req
    k_off = tile_idx * tile * geo.k_row_bytes + q * access
    v_off = t * geo.k_row_bytes + tile_idx * tile * geo.v_row_bytes + (q - tile_tokens * k_req) * access
    return share.chunk_bases(geo)[chunk] + np.where(is_v, v_off, k_off)


def _host_offsets(n: int, share: ChannelShare, geo: KvGeometry, interleave: int, access: int) -> np.ndarray:
    """Local offsets of the first n reads of the host order: round-robin over the K and V streams of every chunk,
    `interleave` bytes per turn; a stream that has ended drops out of the rotation."""
    per = interleave // access
    streams = []  # (rounds it lasts, base offset, stream length in bytes)
    for chunk, base in zip(share.chunks, share.chunk_bases(geo).tolist(), strict=True):
        k_len, v_len = chunk.tokens * geo.k_row_bytes, chunk.tokens * geo.v_row_bytes
        streams.append((math.ceil(k_len / interleave), base, k_len))
        streams.append((math.ceil(v_len / interleave), base + k_len, v_len))
    out: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
    produced, rnd = 0, 0
    bounds = sorted({s[0] for s in streams})
    for end in bounds:  # rounds [rnd, end): the streams lasting beyond rnd take part
        if produced >= n:
            break
        live = [s for s in streams if s[0] > rnd]
        rounds = min(end - rnd, math.ceil((n - produced) / (len(live) * per)) + 1)
        base = np.array([s[1] for s in live], dtype=np.int64)
        length = np.array([s[2] for s in live], dtype=np.int64)
        rr = np.arange(rnd, rnd + rounds, dtype=np.int64)
        off = (rr[:, None, None] * interleave + np.arange(per, dtype=np.int64)[None, None, :] * access)
        off = np.broadcast_to(off, (rounds, len(live), per))
        valid = off < length[None, :, None]
        block = (off + base[None, :, None])[valid]
        out.append(block)
        produced += block.size
        rnd = end
    return np.concatenate(out)[:n]


def channel_stream(memory: MemoryConfig, geo: KvGeometry, share: ChannelShare, order: str, *, tile_tokens: int,
                   interleave_bytes: int, window: int, channel: int = 0, layer: int = 0) -> ChannelStream:
    """The channel's requests for one layer: appends (host writes) then KV reads in `order`, cut to `window`
    requests (0 = all). `channel` is the channel within its device (what the addresses decode to); `layer` puts
    the requests in that layer's region (layer x layer_region_bytes), so several layers can share one replay."""
    org = memory.organization
    access = org.access_bytes
    if geo.k_row_bytes % access or geo.v_row_bytes % access:
        raise ConfigError(f"a KV row ({geo.k_row_bytes} / {geo.v_row_bytes} B) is not a whole number of "
                          f"{access} B accesses", where="system.pool.memory")
    read_bytes = share.read_bytes(geo)
    region = share.region_bytes
    channel_capacity = org.capacity_bytes // org.n_channels
    if layer * region + read_bytes > channel_capacity:
        raise ArchsimError(f"layer {layer}'s KV ends at {layer * region + read_bytes} B, beyond the channel's "
                           f"{channel_capacity} B: check channel_footprint_bytes before building streams")
    n_reads = read_bytes // access
    n_writes = share.appends * geo.row_bytes // access
    total = n_reads + n_writes
    n_take = total if window == 0 else min(total, window)
    writes = min(n_writes, n_take)
    reads = n_take - writes
    w_off = []
    for c, base in zip(share.chunks, share.chunk_bases(geo).tolist(), strict=True):
        if c.first_token + c.tokens != share.head_tokens:
            continue
        t = c.tokens  # the chunk's last token slot holds the appended token: its K row, then its V row
        w_off.append(base + (t - 1) * geo.k_row_bytes + np.arange(geo.k_row_bytes // access) * access)
        w_off.append(base + t * geo.k_row_bytes + (t - 1) * geo.v_row_bytes
                     + np.arange(geo.v_row_bytes // access) * access)
    w = np.concatenate(w_off)[:writes] if writes else np.zeros(0, dtype=np.int64)
    if order == "pnm":
        r = _pnm_offsets(reads, share, geo, tile_tokens, access)
    elif order == "host":
        r = _host_offsets(reads, share, geo, interleave_bytes, access)
    else:
        raise ValueError(f"unknown order {order!r}")
    local = np.concatenate([w.astype(np.int64), r]) + layer * region
    address = channel_local_to_physical(memory.mapping, local.astype(np.uint64), channel)
    is_write = np.concatenate([np.ones(writes, np.uint8), np.zeros(reads, np.uint8)])
    source = np.concatenate([np.full(writes, HOST, np.uint8),
                             np.full(reads, PNM if order == "pnm" else HOST, np.uint8)])
    return ChannelStream(address, is_write, source, total, n_reads * access, n_writes * access, channel,
                         local.astype(np.uint64))
