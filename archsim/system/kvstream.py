"""The pool's KV layout and the request streams one channel sees during a decode step.

Layout (head-wise sharding, flash-decoding split): every (sequence, KV head) of a layer is a *head context*
of `tokens` rows of K and `tokens` rows of V. With W head contexts and C pool channels, W >= C gives each
channel ceil(W / C) whole head contexts (the busiest channel decides the time); W < C splits each head
context's tokens into C // W chunks (none shorter than MIN_CHUNK_TOKENS), one per channel, so every PNM
unit works. Inside a channel a chunk is its K block followed by its V block, consecutive chunks back to
back, each layer in its own region.
Addresses are built through the memory's own address mapping (channel-local offsets with the channel bits
inserted, then encoded), so any configured mapping keeps a chunk inside its PNM unit's channel.

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
from archsim.errors import ConfigError
from archsim.models import ModelShape, dtype_bytes

HOST, PNM = 0, 1  # request sources (archsim.config.memory.SOURCES)
# a head context is split over channels only in chunks of at least one kernel tile: shorter chunks would pay
# more in per-chunk setup and partial-result merging than the extra channels give back
MIN_CHUNK_TOKENS = 64


@dataclass(frozen=True)
class KvGeometry:
    """What attention reads in one decode step, per layer, for all model instances together."""

    sequences: int  # batch x instances
    kv_heads: int  # cached heads per layer
    query_group: int  # query heads per cached head
    tokens: int  # cached tokens per sequence after the step's append (context + 1)
    k_row_bytes: int  # one token of one cached head
    v_row_bytes: int
    qk_dim: int  # MACs per token per query head for the scores
    out_dim: int  # MACs per token per query head for the weighted sum
    layers: int
    element_bytes: int

    @property
    def head_contexts(self) -> int:
        return self.sequences * self.kv_heads

    @property
    def row_bytes(self) -> int:
        return self.k_row_bytes + self.v_row_bytes

    @property
    def layer_bytes(self) -> int:
        return self.head_contexts * self.tokens * self.row_bytes

    @property
    def step_bytes(self) -> int:
        return self.layer_bytes * self.layers

    @property
    def append_layer_bytes(self) -> int:
        return self.head_contexts * self.row_bytes

    @property
    def query_layer_bytes(self) -> int:
        """Query vectors sent to the pool per layer (fp32 io, as the PNM kernels take them)."""
        return self.head_contexts * self.query_group * self.qk_dim * 4

    @property
    def output_layer_bytes(self) -> int:
        return self.head_contexts * self.query_group * self.out_dim * 4

    @property
    def layer_macs(self) -> int:
        return self.head_contexts * self.query_group * self.tokens * (self.qk_dim + self.out_dim)

    @property
    def layer_exps(self) -> int:
        return self.head_contexts * self.query_group * self.tokens


def kv_geometry(shape: ModelShape, dtype: str, sequences: int, context_tokens: int) -> KvGeometry:
    el = dtype_bytes(dtype)
    if shape.attention == "mla":  # scores over the latent + RoPE key, weighted sum over the latent
        qk, out = shape.kv_lora_rank + shape.qk_rope_head_dim, shape.kv_lora_rank
    else:
        qk, out = shape.head_dim, shape.head_dim
    heads = shape.kv_cache_heads
    return KvGeometry(sequences, heads, shape.num_attention_heads // heads, context_tokens + 1,
                      shape.k_cache_dim * el, shape.v_cache_dim * el, qk, out, shape.num_layers, el)


@dataclass(frozen=True)
class ChannelShare:
    """The busiest channel's part of one layer."""

    chunks: int  # head-context chunks it holds
    chunk_tokens: int
    active_channels: int  # channels holding any chunk of the layer
    appends: int  # chunks whose last token (the appended one) lives here

    def read_bytes(self, geo: KvGeometry) -> int:
        return self.chunks * self.chunk_tokens * geo.row_bytes


def channel_share(geo: KvGeometry, channels: int) -> ChannelShare:
    w = geo.head_contexts
    if w >= channels:
        return ChannelShare(math.ceil(w / channels), geo.tokens, channels, math.ceil(w / channels))
    splits = max(1, min(channels // w, geo.tokens // MIN_CHUNK_TOKENS))
    return ChannelShare(1, math.ceil(geo.tokens / splits), w * splits, 1)


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
    t = share.chunk_tokens
    per_chunk = t * (k_req + v_req)
    chunk, r = i // per_chunk, i % per_chunk
    tile_req = tile * (k_req + v_req)
    full_tiles = t // tile
    in_full = r < full_tiles * tile_req
    tile_idx = np.where(in_full, r // tile_req, full_tiles)
    tile_tokens = np.where(in_full, tile, t - full_tiles * tile)
    q = np.where(in_full, r % tile_req, r - full_tiles * tile_req)
    is_v = q >= tile_tokens * k_req
    k_off = tile_idx * tile * geo.k_row_bytes + q * access
    v_off = t * geo.k_row_bytes + tile_idx * tile * geo.v_row_bytes + (q - tile_tokens * k_req) * access
    return chunk * t * geo.row_bytes + np.where(is_v, v_off, k_off)


def _host_offsets(n: int, share: ChannelShare, geo: KvGeometry, interleave: int, access: int) -> np.ndarray:
    """Local offsets of the first n reads of the host order: round-robin over the K and V streams of every chunk,
    `interleave` bytes per turn; a stream that has ended drops out of the rotation."""
    t = share.chunk_tokens
    per = interleave // access
    k_chunks = math.ceil(t * geo.k_row_bytes / interleave)
    v_chunks = math.ceil(t * geo.v_row_bytes / interleave)
    lengths = [k_chunks, v_chunks]
    streams = []  # (rounds it lasts, base offset, stream length in bytes)
    for c in range(share.chunks):
        base = c * t * geo.row_bytes
        streams.append((lengths[0], base, t * geo.k_row_bytes))
        streams.append((lengths[1], base + t * geo.k_row_bytes, t * geo.v_row_bytes))
    out: list[np.ndarray] = []
    produced, rnd = 0, 0
    bounds = sorted({s[0] for s in streams})
    for end in bounds:  # rounds [rnd, end): the streams lasting beyond rnd take part
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
        if produced >= n:
            break
    return np.concatenate(out)[:n]


def channel_stream(memory: MemoryConfig, geo: KvGeometry, share: ChannelShare, order: str, *, tile_tokens: int,
                   interleave_bytes: int, window: int, channel: int = 0, layer: int = 0) -> ChannelStream:
    """The channel's requests for one layer: appends (host writes) then KV reads in `order`, cut to `window`
    requests (0 = all). `layer` moves the layer's region so several layers can share one replay."""
    org = memory.organization
    access = org.access_bytes
    if geo.k_row_bytes % access or geo.v_row_bytes % access:
        raise ConfigError(f"a KV row ({geo.k_row_bytes} / {geo.v_row_bytes} B) is not a whole number of "
                          f"{access} B accesses", where="system.pool.memory")
    read_bytes = share.read_bytes(geo)
    region = -(-read_bytes // org.row_bytes) * org.row_bytes * org.banks_per_pseudo_channel * org.pseudo_channels
    channel_capacity = org.capacity_bytes // org.n_channels
    if (layer + 1) * region > channel_capacity:
        raise ConfigError(f"one channel's KV ({(layer + 1) * region} B) exceeds its capacity {channel_capacity} B",
                          where="system.pool")
    n_reads = read_bytes // access
    n_writes = share.appends * geo.row_bytes // access
    total = n_reads + n_writes
    n_take = total if window == 0 else min(total, window)
    writes = min(n_writes, n_take)
    reads = n_take - writes
    t = share.chunk_tokens
    w_off = []
    for c in range(share.appends):  # the last token slot of each appended chunk: its K row, then its V row
        base = c * t * geo.row_bytes
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
