"""The one KV layout: how many bytes a token's KV takes and where a pool places it.

Every command that places KV reads this module: the decode-step model's channel streams
(`system/kvstream.py`), the serving engine's bytes per token (`serving/build.py`), the planner's geometry
(`plan/inputs.py`) and the trace mapper's `range` layout (`trace/mapping.py`), so one logical trace gets the
same physical KV stream in `trace map` as in `simulate`.

Bytes. A token adds one K row and one V row per cached head per layer: `shape.k_cache_dim` and
`shape.v_cache_dim` elements of the KV dtype (MLA caches one latent head: the latent c_KV and the decoupled
RoPE key).

Placement (head-wise sharding, flash-decoding split). A (sequence, cached head) pair is a *head context*;
head context h = sequence x kv_heads + head. A layer's head contexts laid end to end form a flat token space
(head context h, token t -> start[h] + t) that is cut into one contiguous range per pool channel, every
channel of every device within one token of the mean; a range's pieces of head contexts are its *chunks* (a
head context longer than a range is split over several channels, and a range may end one head context and
start the next). Only when the layer holds fewer than MIN_CHUNK_TOKENS tokens per channel are fewer channels
used. Inside a channel a chunk is its K block followed by its V block, chunks back to back; every layer has its
own region of the largest range's size (layer l at l x region), so a channel holds layers x region bytes.
The decode step's head contexts all have one length (`KvGeometry.tokens`); a trace's have each its request's
(`RangeLayout`): both cut with `range_bounds`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from archsim.models import ModelShape, dtype_bytes

# a channel's range is at least one kernel tile: shorter ranges would pay more in per-chunk setup and
# partial-result merging than the extra channels give back
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
    def token_bytes(self) -> int:
        """One token's K and V over every layer and cached head of one sequence."""
        return self.layers * self.kv_heads * self.row_bytes

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


def kv_bytes_per_token(shape: ModelShape, dtype: str) -> int:
    """One token's K and V over every layer and cached head of one model instance."""
    return kv_geometry(shape, dtype, 1, 0).token_bytes


def range_bounds(total_tokens: int, channels: int) -> np.ndarray:
    """Start of each channel's range of a layer's flat token space, channels + 1 entries: channel c holds
    [bounds[c], bounds[c + 1]), every used channel within one token of the mean (all of them unless the layer
    has fewer than MIN_CHUNK_TOKENS tokens per channel)."""
    active = max(1, min(channels, total_tokens // MIN_CHUNK_TOKENS))
    bounds = np.full(channels + 1, total_tokens, dtype=np.int64)
    bounds[: active + 1] = (np.arange(active + 1, dtype=np.int64) * total_tokens) // active
    return bounds


def channel_bounds(geo: KvGeometry, channels: int) -> np.ndarray:
    """`range_bounds` of a decode step's layer (every head context `geo.tokens` long)."""
    return range_bounds(geo.head_contexts * geo.tokens, channels)


@dataclass(frozen=True)
class Chunk:
    """A token range of one head context held by one channel."""

    head: int  # head context of the layer (sequence x cached head)
    first_token: int
    tokens: int


@dataclass(frozen=True)
class ChannelShare:
    """One channel's part of one layer: the head-context chunks it holds, back to back in its layer region."""

    channel: int  # pool-wide channel index (device = channel // channels per device)
    chunks: tuple[Chunk, ...]
    head_tokens: int  # tokens of a whole head context (geo.tokens)
    max_splits: int  # most channels any head context of the layer is split over (partial records merged)
    region_bytes: int  # channel-local bytes every layer's region spans (layer l starts at l x this)

    @property
    def tokens(self) -> int:
        return sum(c.tokens for c in self.chunks)

    @property
    def appends(self) -> int:
        """Chunks whose last token (the step's appended one) lives here."""
        return sum(1 for c in self.chunks if c.first_token + c.tokens == self.head_tokens)

    @property
    def max_chunk_tokens(self) -> int:
        return max((c.tokens for c in self.chunks), default=0)

    def read_bytes(self, geo: KvGeometry) -> int:
        return self.tokens * geo.row_bytes

    def chunk_bases(self, geo: KvGeometry) -> np.ndarray:
        """Channel-local offset of each chunk in the layer region: chunks back to back, K block then V block."""
        sizes = np.array([c.tokens for c in self.chunks], dtype=np.int64) * geo.row_bytes
        return np.cumsum(sizes) - sizes


def _chunks_per_channel(geo: KvGeometry, bounds: np.ndarray) -> np.ndarray:
    t = geo.tokens
    lo, hi = bounds[:-1], bounds[1:]
    return np.where(hi > lo, (hi - 1) // t - lo // t + 1, 0)


def busiest_channel(geo: KvGeometry, channels: int) -> int:
    """The channel with the most chunks (each costs the kernel a prologue and a partial record), then the most
    tokens; the lowest index among equals."""
    bounds = channel_bounds(geo, channels)
    chunks = _chunks_per_channel(geo, bounds)
    tokens = np.diff(bounds)
    key = chunks * (int(tokens.max()) + 1) + tokens
    return int(np.argmax(key))


def _max_splits(geo: KvGeometry, bounds: np.ndarray) -> int:
    heads = np.arange(geo.head_contexts, dtype=np.int64) * geo.tokens
    first = np.searchsorted(bounds, heads, side="right") - 1
    last = np.searchsorted(bounds, heads + geo.tokens - 1, side="right") - 1
    return int((last - first).max()) + 1


def channel_share(geo: KvGeometry, channels: int, channel: int | None = None) -> ChannelShare:
    """The layer's chunks on `channel` (None: the busiest channel, the one that decides the layer's time)."""
    bounds = channel_bounds(geo, channels)
    c = busiest_channel(geo, channels) if channel is None else channel
    lo, hi, t = int(bounds[c]), int(bounds[c + 1]), geo.tokens
    chunks = []
    u = lo
    while u < hi:
        head, first = divmod(u, t)
        n = min(t - first, hi - u)
        chunks.append(Chunk(head, first, n))
        u += n
    return ChannelShare(c, tuple(chunks), t, _max_splits(geo, bounds), layer_region_bytes(geo, channels))


def layer_region_bytes(geo: KvGeometry, channels: int) -> int:
    """Channel-local bytes one layer occupies on every channel (the largest share): layer l starts at l x this."""
    return int(np.diff(channel_bounds(geo, channels)).max()) * geo.row_bytes


def channel_footprint_bytes(geo: KvGeometry, channels: int) -> int:
    """Bytes of every layer's KV on the fullest channel: the placement fits when this is within a channel."""
    return geo.layers * layer_region_bytes(geo, channels)


@dataclass(frozen=True)
class RangeLayout:
    """The layout of head contexts of any lengths (a trace's requests): the same cut and chunk order as a decode
    step's, which is the case of equal lengths."""

    head_tokens: np.ndarray  # int64 tokens of each head context, in head-context order
    channels: int  # pool-wide
    k_row_bytes: int
    v_row_bytes: int
    layers: int

    @cached_property
    def starts(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.head_tokens)]).astype(np.int64)

    @cached_property
    def bounds(self) -> np.ndarray:
        return range_bounds(int(self.head_tokens.sum()), self.channels)

    @cached_property
    def region_bytes(self) -> int:
        return int(np.diff(self.bounds).max()) * (self.k_row_bytes + self.v_row_bytes)

    @property
    def footprint_bytes(self) -> int:
        return self.layers * self.region_bytes

    def pieces(self, head: np.ndarray, first_token: np.ndarray, tokens: np.ndarray, is_v: np.ndarray,
               layer: np.ndarray) -> dict[str, np.ndarray]:
        """Where token ranges of head contexts live: one piece per (range, channel it crosses), in input order,
        each with its channel, channel-local byte offset and length, the K or V block of the chunk it lies in
        (`block` offset, `block_bytes`), its `owner` (the input row) and `split` (0 for the head context's first
        channel, 1 for the next, ...)."""
        starts, bounds, row_bytes = self.starts, self.bounds, self.k_row_bytes + self.v_row_bytes
        u0 = starts[head] + first_token
        c0 = np.searchsorted(bounds, u0, side="right") - 1
        c1 = np.searchsorted(bounds, u0 + np.maximum(tokens, 1) - 1, side="right") - 1
        count = np.where(tokens > 0, c1 - c0 + 1, 0)
        owner = np.repeat(np.arange(len(head), dtype=np.int64), count)
        channel = c0[owner] + np.arange(len(owner), dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
        h = head[owner]
        chunk_lo = np.maximum(bounds[channel], starts[h])
        chunk_tokens = np.minimum(bounds[channel + 1], starts[h + 1]) - chunk_lo
        lo = np.maximum(u0[owner], bounds[channel])
        hi = np.minimum(u0[owner] + tokens[owner], bounds[channel + 1])
        v = is_v[owner].astype(bool)
        row = np.where(v, self.v_row_bytes, self.k_row_bytes)
        base = layer[owner] * self.region_bytes + (chunk_lo - bounds[channel]) * row_bytes
        first_channel = np.searchsorted(bounds, starts[h], side="right") - 1
        block = base + np.where(v, chunk_tokens * self.k_row_bytes, 0)
        return {"owner": owner, "channel": channel, "offset": block + (lo - chunk_lo) * row,
                "length": (hi - lo) * row, "block": block, "block_bytes": chunk_tokens * row,
                "split": channel - first_channel}
