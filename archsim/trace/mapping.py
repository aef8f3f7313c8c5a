"""Logical trace -> physical request streams for a memory pool placement (vectorized numpy).

Address model. Each pool device has `channels_per_device` channels; the device-local address space is
channel-partitioned: channel c owns [c * C, (c + 1) * C) with C = capacity / channels. A PNM unit sits
at each channel's controller, so placing data on a channel is what makes it local to that unit; the
DRAM model's address map must take the channel from the high address bits for this to hold (what PNM
designs do). Within a channel, regions are bump-allocated in first-touch order, each rounded up to the
access granularity, and never freed (a trace never drops KV it may revisit).

KV placement (paged, like vLLM): a block holds `kv_block_tokens` token slots of one (request, layer,
k|v, group). Tensor parallelism splits the KV heads into `tensor_parallel` shards; shard s lives on its
own share of the devices. The group and the block's channel depend on the layout:
* head_major - group = one KV head; all blocks of a (layer, head) live on one channel (head-wise
  sharding: that channel's PNM unit runs that head's attention). Block = tokens x head bytes.
* token_major - group = the shard's heads together, [token][head][dim] inside a block; blocks go
  round-robin over the shard's channels in first-touch order. Block = tokens x heads x head bytes.
* range - the decode-step model's layout (archsim/kvlayout.py): every (request, KV head) is a head context
  as long as the request's furthest K/V record (a first pass over the trace finds it); a layer's head contexts,
  requests in ascending id order, are cut into one range per channel of every device, a chunk's K block
  then its V block, layer l at l x region. Tensor parallelism does not restrict the channels (the pool is
  shared); weights go above the KV on every channel. A decode trace mapped so lands byte for byte where
  `archsim simulate` streams its KV (tests/test_kvlayout.py).
With prefix_sharing (head_major, token_major), full blocks inside the header's `shared_prefix_tokens` are one
physical block for all requests; only the first request's writes to them are issued.

Weights (weights_in="pool"): each (operator, layer) tensor, split evenly over the TP shards, is spread
in equal contiguous pieces over the shard's channels; a read of n bytes covers the tensor's first n
bytes (an embedding gather reads rows that the trace does not name), issued round-robin over channels.
Activations and "other" stay on the GPU and produce no pool traffic.

Sources: writes and weight reads come from the host (0); KV reads come from the PNM (1) when
attention_on="pnm", else from the host (the no-PNM baseline fetches KV back to the GPU).

Why one module of about 820 lines: `TraceMapper` keeps the region table, the block tables and the stream
cursor of one mapping, which every vectorized step (KV blocks of the three layouts, prefix sharing, weights,
issue times) reads and advances chunk after chunk; the placement and region types beside it are its inputs and
outputs. The range layout's arithmetic lives in archsim/kvlayout.py; here is only its region bookkeeping.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from archsim.errors import ConfigError, TraceError
from archsim.kvlayout import RangeLayout
from archsim.trace.logical import KIND_K, KIND_V, KIND_WEIGHT, OP_WRITE, LogicalTrace
from archsim.units import parse_size_bytes

SOURCE_HOST, SOURCE_PNM = 0, 1
LAYOUTS = ("head_major", "token_major", "range")
REGION_K, REGION_V, REGION_WEIGHT = 0, 1, 2

# bit widths of the packed block key (request+1, layer+1, kind, group, block index)
_KEY_BITS = {"request": 20, "layer": 12, "kind": 1, "group": 12, "block": 18}


@dataclass(frozen=True)
class PoolPlacement:
    """Where the pool keeps KV (and maybe weights), and how it lays them out."""

    devices: int = 1
    channels_per_device: int = 32
    capacity_per_device_bytes: int = 16 * 2**30
    access_granularity_bytes: int = 32
    kv_block_tokens: int = 16
    layout: str = "head_major"
    tensor_parallel: int = 1
    weights_in: str = "gpu"
    prefix_sharing: bool = False
    attention_on: str = "pnm"

    @property
    def channel_capacity_bytes(self) -> int:
        return self.capacity_per_device_bytes // self.channels_per_device

    def validate(self, where: str = "placement") -> None:
        def fail(name: str, message: str) -> None:
            raise ConfigError(f"{message}, got {getattr(self, name)!r}", where=f"{where}.{name}")

        for name in (
            "devices",
            "channels_per_device",
            "capacity_per_device_bytes",
            "access_granularity_bytes",
            "kv_block_tokens",
            "tensor_parallel",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                fail(name, "must be a positive integer")
        if self.devices * self.capacity_per_device_bytes > 2**64:
            fail("capacity_per_device_bytes", f"x {self.devices} devices is beyond the 64-bit pool address space")
        if self.access_granularity_bytes & (self.access_granularity_bytes - 1):
            fail("access_granularity_bytes", "must be a power of two")
        if self.capacity_per_device_bytes % (self.channels_per_device * self.access_granularity_bytes):
            fail("capacity_per_device_bytes", "must split into equal channels of whole accesses")
        if self.layout not in LAYOUTS:
            fail("layout", f"must be one of {LAYOUTS}")
        if self.weights_in not in ("gpu", "pool"):
            fail("weights_in", "must be 'gpu' or 'pool'")
        if self.attention_on not in ("pnm", "host"):
            fail("attention_on", "must be 'pnm' or 'host'")
        if not isinstance(self.prefix_sharing, bool):
            fail("prefix_sharing", "must be true or false")
        if self.layout == "range" and self.prefix_sharing:
            fail("layout", "lays out each request's KV whole and cannot share prefix blocks (prefix_sharing needs "
                 "head_major or token_major)")
        d, t = self.devices, self.tensor_parallel
        if (d >= t and d % t) or (d < t and t % d):
            fail("tensor_parallel", f"and devices ({d}) must divide one another")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "placement") -> PoolPlacement:
        """Strict constructor from config data (sizes may carry units: "16GiB")."""
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"unknown keys {sorted(unknown)} (known: {sorted(known)})", where=where)
        values = dict(data)
        for name in ("capacity_per_device_bytes", "access_granularity_bytes"):
            if name in values:
                values[name] = parse_size_bytes(values[name], f"{where}.{name}")
        placement = cls(**values)
        placement.validate(where)
        return placement

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RangeRows:
    """What the range layout needs from a trace's K/V records: each request's tokens, the row bytes, the layers."""

    requests: np.ndarray  # int64 request ids, ascending: request i's KV is head contexts i x kv_heads + head
    tokens: np.ndarray  # int64 tokens each request holds (the end of its furthest K/V record)
    k_row_bytes: int  # one token of one cached head
    v_row_bytes: int
    layers: int

    @classmethod
    def empty(cls) -> RangeRows:
        return cls(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), 0, 0, 0)

    @classmethod
    def scan(cls, chunks: Iterable[Mapping[str, np.ndarray]]) -> RangeRows:
        """One pass over record chunks (memory: two integers per request)."""
        requests, tokens = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        rows, layers = [0, 0], 0
        for c in chunks:
            kind = c["kind"].astype(np.int64) - KIND_K
            kv = ((kind == 0) | (kind == 1)) & (c["token_count"] > 0) & (c["head_count"] > 0)
            if not kv.any():
                continue
            end = c["token_start"][kv].astype(np.int64) + c["token_count"][kv]
            requests, inverse = np.unique(np.concatenate([requests, c["request"][kv].astype(np.int64)]),
                                          return_inverse=True)
            merged = np.zeros(len(requests), dtype=np.int64)
            np.maximum.at(merged, inverse, np.concatenate([tokens, end]))
            tokens = merged
            layers = max(layers, int(c["layer"][kv].max()) + 1)
            for k in (0, 1):
                first = np.flatnonzero(kv & (kind == k))
                if not rows[k] and len(first):
                    i = int(first[0])
                    rows[k] = int(c["bytes"][i]) // (int(c["token_count"][i]) * int(c["head_count"][i]))
        return cls(requests, tokens, rows[0], rows[1], layers)


@dataclass(frozen=True)
class RegionTable:
    """Every allocated region (KV block or weight piece): where it lives and what it holds."""

    device: np.ndarray  # uint16
    channel: np.ndarray  # uint16
    address: np.ndarray  # uint64, device-local start
    size_bytes: np.ndarray  # int64, rounded up to the access granularity
    what: np.ndarray  # uint8: 0 k block, 1 v block, 2 weight piece
    request: np.ndarray  # int32 (-1: shared prefix block or weight)
    layer: np.ndarray  # int32
    group: np.ndarray  # int32: KV head (head_major) / TP shard (token_major) / operator (weights)
    block: np.ndarray  # int32: block index in token slots / BT (weights: channel piece index)


@dataclass(frozen=True)
class PhysicalStreams:
    """Pool accesses in issue order; one row per access of `access_granularity_bytes`."""

    device: np.ndarray  # uint16
    address: np.ndarray  # uint64, device-local, aligned to the granularity
    is_write: np.ndarray  # uint8
    source: np.ndarray  # uint8: 0 host, 1 pnm
    timestamp_cycles: np.ndarray  # int64: issue order x issue_interval_cycles
    record: np.ndarray  # int64: index of the logical record that caused the access
    regions: RegionTable
    placement: PoolPlacement

    def __len__(self) -> int:
        return len(self.address)

    def flat_address(self) -> np.ndarray:
        """One pool-wide address space: device d occupies [d * capacity, (d + 1) * capacity)."""
        return self.address + self.device.astype(np.uint64) * np.uint64(self.placement.capacity_per_device_bytes)

    def select_device(self, device: int) -> dict[str, np.ndarray]:
        mask = self.device == device
        return {
            "timestamp_cycles": self.timestamp_cycles[mask],
            "address": self.address[mask],
            "is_write": self.is_write[mask],
            "source": self.source[mask],
        }


def _record_key(request: np.ndarray, layer: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """The high bits of a KV block's packed key (request + 1, layer + 1, kind); group and block fill the rest."""
    low = _KEY_BITS["group"] + _KEY_BITS["block"]
    return ((request + 1) << (_KEY_BITS["layer"] + _KEY_BITS["kind"] + low)
            | ((layer + 1) << _KEY_BITS["kind"] | kind) << low)


def _segments(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each piece, repeat its index `counts` times and number the copies 0..count-1."""
    counts = counts.astype(np.int64, copy=False)
    owner = np.repeat(np.arange(len(counts)), counts)
    local = np.arange(len(owner), dtype=np.int64)
    local -= np.repeat(np.cumsum(counts) - counts, counts)
    return owner, local


_OUT_DTYPES = {
    "device": np.uint16,
    "address": np.uint64,
    "is_write": np.uint8,
    "source": np.uint8,
    "timestamp_cycles": np.int64,
    "record": np.int64,
}


class TraceMapper:
    """Maps logical record chunks to physical accesses; allocation state persists across chunks.

    Work happens at two granularities: pieces (one contiguous byte range of one region per record:
    a KV block touched by a record, a weight tensor's slice on one channel) and accesses (pieces cut
    into granularity-sized requests). Pieces are computed for a whole chunk; accesses are expanded in
    batches of about `batch_accesses`, because the expansion is bound by memory traffic and small
    batches stay in cache instead of faulting in fresh pages.
    """

    def __init__(
        self,
        placement: PoolPlacement,
        *,
        kv_heads: int,
        shared_prefix_tokens: int = 0,
        operator_weight_bytes: list[int | None] | None = None,
        issue_interval_cycles: int = 1,
        range_rows: RangeRows | None = None,
    ) -> None:
        placement.validate()
        if kv_heads < 1 or kv_heads % placement.tensor_parallel:
            raise ConfigError(
                f"tensor_parallel ({placement.tensor_parallel}) must divide the trace's "
                f"{kv_heads} cached KV heads (MLA caches one latent head)",
                where="placement.tensor_parallel",
            )
        if kv_heads >= 2 ** _KEY_BITS["group"]:
            raise ConfigError(f"{kv_heads} KV heads exceed the mapper's limit", where="placement")
        if issue_interval_cycles < 0:
            raise ConfigError("must be >= 0", where="issue_interval_cycles")
        self.p = placement
        self.kv_heads = kv_heads
        self.heads_per_shard = kv_heads // placement.tensor_parallel
        self.shared_blocks = shared_prefix_tokens // placement.kv_block_tokens if placement.prefix_sharing else 0
        self.operator_weight_bytes = np.array([b or 0 for b in (operator_weight_bytes or [])], dtype=np.int64)
        self.issue_interval_cycles = issue_interval_cycles
        d, t, c = placement.devices, placement.tensor_parallel, placement.channels_per_device
        # (device, channel) units of each TP shard, channel-major so neighbouring heads change device first
        shard_devices = (
            [list(range(s * d // t, (s + 1) * d // t)) for s in range(t)]
            if d >= t
            else [[s * d // t] for s in range(t)]
        )
        self.units_per_shard = len(shard_devices[0]) * c
        self.unit_device = np.array([[dev for ch in range(c) for dev in devs] for devs in shard_devices])
        self.unit_channel = np.array([[ch for ch in range(c) for _ in devs] for devs in shard_devices])
        self.next_offset = np.zeros(d * c, dtype=np.int64)  # bump pointer per (device, channel)
        self.shard_touches = np.zeros(t, dtype=np.int64)  # token_major round-robin counters
        self.keys = np.empty(0, dtype=np.int64)  # known region keys, sorted
        self.key_region = np.empty(0, dtype=np.int64)
        self.block_owner: dict[int, int] = {}  # shared prefix block -> the request whose writes are issued
        self._regions: list[dict[str, np.ndarray]] = []
        self.region_device = np.empty(0, dtype=np.uint16)
        self.region_address = np.empty(0, dtype=np.int64)
        self.accesses_emitted = 0
        self.pth_bytes: dict[tuple[int, int], int] = {}  # (layer, kind) -> bytes per token per head
        self.range: RangeLayout | None = None
        if placement.layout == "range":
            self._set_range(range_rows or RangeRows.empty())

    def _set_range(self, rows: RangeRows) -> None:
        """The range layout over every channel of every device; weights go above the KV on each channel."""
        p, g = self.p, self.p.access_granularity_bytes
        if rows.k_row_bytes % g or rows.v_row_bytes % g:  # a chunk's blocks must start on an access
            raise ConfigError(f"the range layout needs KV rows ({rows.k_row_bytes} / {rows.v_row_bytes} B per token "
                              f"and head) of whole {g} B accesses", where="placement.access_granularity_bytes")
        self.range_requests = rows.requests
        self.range_tokens = rows.tokens
        self.range = RangeLayout(np.repeat(rows.tokens, self.kv_heads), p.devices * p.channels_per_device,
                                 rows.k_row_bytes, rows.v_row_bytes, rows.layers)
        footprint = (self.range.footprint_bytes + g - 1) // g * g
        self._check_capacity(footprint, 0)
        self.next_offset[:] = footprint

    # -- allocation ---------------------------------------------------------------------------------
    def _regions_for(self, keys: np.ndarray, new_regions: Callable[[np.ndarray], dict[str, np.ndarray]]) -> np.ndarray:
        """Region of each row's key. Unseen keys get regions in first-touch order: `new_regions(rows)` gives their
        device, channel, address, size_bytes and description."""
        unique, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        position = np.searchsorted(self.keys, unique)
        found = position < len(self.keys)
        found[found] = self.keys[position[found]] == unique[found]
        region_of_unique = np.empty(len(unique), dtype=np.int64)
        region_of_unique[found] = self.key_region[position[found]]
        new = np.flatnonzero(~found)
        if len(new):
            order = new[np.argsort(first[new], kind="stable")]
            rows = first[order]
            made = new_regions(rows)
            ids = len(self.region_address) + np.arange(len(rows))
            self._regions.append(made)
            self.region_device = np.concatenate([self.region_device, made["device"].astype(np.uint16)])
            self.region_address = np.concatenate([self.region_address, made["address"].astype(np.int64)])
            region_of_unique[order] = ids
            merged_keys = np.concatenate([self.keys, unique[order]])
            sort = np.argsort(merged_keys, kind="stable")
            self.keys = merged_keys[sort]
            self.key_region = np.concatenate([self.key_region, ids])[sort]
        return region_of_unique[inverse]

    def _allocate(
        self,
        keys: np.ndarray,
        size: np.ndarray,
        place: Callable[[np.ndarray], np.ndarray],
        meta: Callable[[np.ndarray], dict[str, np.ndarray]],
    ) -> np.ndarray:
        """Region of each row's key, new ones bump-allocated: `place(rows)` gives their (shard, unit) as one int
        array shard * units + unit, `meta(rows)` their description."""

        def bump(rows: np.ndarray) -> dict[str, np.ndarray]:
            slot = place(rows)
            shard, unit_in_shard = slot // self.units_per_shard, slot % self.units_per_shard
            device = self.unit_device[shard, unit_in_shard]
            channel = self.unit_channel[shard, unit_in_shard]
            g = self.p.access_granularity_bytes
            sz = (size[rows] + g - 1) // g * g
            unit = device * self.p.channels_per_device + channel
            # bump allocation: each new region starts where the previous one on its channel ended
            by_unit = np.argsort(unit, kind="stable")
            csum = np.cumsum(sz[by_unit])
            run_start = np.flatnonzero(np.r_[True, unit[by_unit][1:] != unit[by_unit][:-1]])
            run_base = np.repeat(csum[run_start] - sz[by_unit][run_start], np.diff(np.r_[run_start, len(rows)]))
            local = np.empty_like(sz)
            local[by_unit] = csum - sz[by_unit] - run_base
            local += self.next_offset[unit]
            np.maximum.at(self.next_offset, unit, local + sz)
            self._check_capacity(int(self.next_offset.max()), int(self.next_offset.argmax()))
            address = channel * self.p.channel_capacity_bytes + local
            return {"device": device, "channel": channel, "address": address, "size_bytes": sz, **meta(rows)}

        return self._regions_for(keys, bump)

    def _check_capacity(self, need_bytes: int, unit: int) -> None:
        capacity = self.p.channel_capacity_bytes
        if need_bytes > capacity:
            raise ConfigError(
                f"the trace needs at least {need_bytes} bytes on device "
                f"{unit // self.p.channels_per_device} channel {unit % self.p.channels_per_device}, "
                f"which holds {capacity} (capacity_per_device_bytes / channels_per_device); "
                "add devices or capacity",
                where="placement.capacity_per_device_bytes",
            )

    def regions(self) -> RegionTable:
        names = [f.name for f in fields(RegionTable)]
        dtypes = {
            "device": np.uint16,
            "channel": np.uint16,
            "address": np.uint64,
            "size_bytes": np.int64,
            "what": np.uint8,
        }
        if not self._regions:
            return RegionTable(**{n: np.empty(0, dtype=dtypes.get(n, np.int32)) for n in names})
        return RegionTable(
            **{n: np.concatenate([r[n] for r in self._regions]).astype(dtypes.get(n, np.int32)) for n in names}
        )

    # -- KV -----------------------------------------------------------------------------------------
    def _kv_records(self, cols: Mapping[str, np.ndarray], idx: np.ndarray) -> dict[str, np.ndarray]:
        """The K/V records' fields as int64, checked: head, token, layer and request ranges, bytes per token and
        head (`pth`), kind 0 (K) or 1 (V)."""
        r = {name: cols[name][idx].astype(np.int64)
             for name in ("head_start", "head_count", "token_start", "token_count", "layer", "request")}
        head_start, head_count, t0, tc = r["head_start"], r["head_count"], r["token_start"], r["token_count"]
        bad = (
            (head_start < 0)
            | (head_count < 1)
            | (head_start + head_count > self.kv_heads)
            | (t0 < 0)
            | (tc < 0)
            | (r["layer"] < 0)
            | (r["request"] < 0)
        )
        if bad.any():
            record = int(idx[np.argmax(bad)])
            raise TraceError("k/v record has an invalid head, token, layer or request range", where=f"record {record}")
        denom = np.maximum(tc * head_count, 1)
        nbytes = cols["bytes"][idx].astype(np.int64)
        r["pth"] = nbytes // denom
        if (r["pth"] * denom != nbytes).any():
            record = int(idx[np.argmax(r["pth"] * denom != nbytes)])
            raise TraceError("k/v bytes are not a whole number per token and head", where=f"record {record}")
        r["kind"] = cols["kind"][idx].astype(np.int64) - KIND_K
        self._check_pth(r["layer"][tc > 0], r["kind"][tc > 0], r["pth"][tc > 0])
        return r

    def _kv_pieces(self, cols: Mapping[str, np.ndarray], idx: np.ndarray) -> dict[str, np.ndarray]:
        """One piece per (record, group, block) touched: region, byte offset, length; in record order."""
        if self.range is not None:
            return self._range_pieces(cols, idx)
        p = self.p
        bt, hps = p.kv_block_tokens, self.heads_per_shard
        r = self._kv_records(cols, idx)
        head_start, head_count, t0, tc = r["head_start"], r["head_count"], r["token_start"], r["token_count"]
        layer, request, pth, kind = r["layer"], r["request"], r["pth"], r["kind"]
        # groups: heads (head_major) or TP shards (token_major) the record touches
        if p.layout == "head_major":
            g_first, g_count = head_start, head_count
        else:
            g_first = head_start // hps
            g_count = (head_start + head_count - 1) // hps - g_first + 1
        b_first = t0 // bt
        b_count = np.where(tc > 0, (t0 + tc - 1) // bt - b_first + 1, 0)
        for name, values in (("request", request + 1), ("layer", layer + 1), ("block", b_first + b_count)):
            if len(values) and int(values.max()) >= 2 ** _KEY_BITS[name]:
                raise ConfigError(
                    f"trace {name} range exceeds the mapper's {_KEY_BITS[name]}-bit key field", where="trace"
                )
        # record-level values are spread to pieces with np.repeat, which is much cheaper than gathers
        n_pieces = g_count * b_count
        owner, k = _segments(n_pieces)

        def spread(values: np.ndarray) -> np.ndarray:
            return np.repeat(values, n_pieces)

        nb = spread(b_count)
        gi = k // nb
        group = spread(g_first) + gi
        block = spread(b_first) + (k - gi * nb)
        block_lo = block * bt
        lo = np.maximum(spread(t0), block_lo)
        hi = np.minimum(spread(t0 + tc), block_lo + bt)
        pth_p = spread(pth)
        if p.layout == "head_major":
            shard = group // hps
            offset = (lo - block_lo) * pth_p
            length = (hi - lo) * pth_p
            block_bytes = bt * pth_p
        else:
            shard = group
            h_lo = np.maximum(head_start[owner], shard * hps)
            h_n = np.minimum(head_start[owner] + head_count[owner], (shard + 1) * hps) - h_lo
            if (h_n != hps).any():  # a partial head range is strided inside a block: one piece per token
                owner2, k2 = _segments(np.where(h_n == hps, 1, hi - lo))
                partial = h_n[owner2] != hps
                owner, group, block, shard, pth_p, h_lo, h_n = (
                    a[owner2] for a in (owner, group, block, shard, pth_p, h_lo, h_n)
                )
                lo, hi = (
                    np.where(partial, lo[owner2] + k2, lo[owner2]),
                    np.where(partial, lo[owner2] + k2 + 1, hi[owner2]),
                )
                block_lo = block * bt
            full = h_n == hps
            slot = lo - block_lo
            offset = np.where(full, slot * hps, slot * hps + h_lo - shard * hps) * pth_p
            length = np.where(full, (hi - lo) * hps, h_n) * pth_p
            block_bytes = bt * hps * pth_p
        # packed key (request + 1, layer + 1, kind, group, block); shared prefix blocks have request -1
        low_bits = _KEY_BITS["kind"] + _KEY_BITS["group"] + _KEY_BITS["block"]
        key = _record_key(request, layer, kind)[owner]
        key |= group << _KEY_BITS["block"] | block
        shared = block < self.shared_blocks
        if self.shared_blocks:
            key = np.where(shared, key & ((1 << (_KEY_BITS["layer"] + low_bits)) - 1), key)
        key_request = (key >> (_KEY_BITS["layer"] + low_bits)) - 1
        layer_p, kind_p = layer[owner], kind[owner]
        write = (cols["op"][idx] == OP_WRITE)[owner]

        def place(rows: np.ndarray) -> np.ndarray:
            if p.layout == "head_major":  # every block of a (layer, head) on one channel
                unit = (layer_p[rows] * hps + group[rows] - shard[rows] * hps) % self.units_per_shard
            else:  # round-robin over the shard's channels in first-touch order
                unit = np.empty(len(rows), dtype=np.int64)
                for s in np.unique(shard[rows]).tolist():
                    mine = shard[rows] == s
                    unit[mine] = (self.shard_touches[s] + np.arange(int(mine.sum()))) % self.units_per_shard
                    self.shard_touches[s] += int(mine.sum())
            return shard[rows] * self.units_per_shard + unit

        def meta(rows: np.ndarray) -> dict[str, np.ndarray]:
            return {
                "what": kind_p[rows],
                "request": key_request[rows],
                "layer": layer_p[rows],
                "group": group[rows],
                "block": block[rows],
            }

        region = self._allocate(key, block_bytes, place, meta)
        keep = np.ones(len(key), dtype=bool)
        shared_writes = np.flatnonzero(shared & write)
        if len(shared_writes):  # only the first writer of a shared prefix block (in trace order) writes it
            writer = request[owner[shared_writes]]
            blocks, first, inverse = np.unique(key[shared_writes], return_index=True, return_inverse=True)
            block_writer = writer[first]
            for i, block_key in enumerate(blocks.tolist()):  # one entry per shared block, not per access
                block_writer[i] = self.block_owner.setdefault(block_key, int(block_writer[i]))
            keep[shared_writes] = writer == block_writer[inverse]
        return {
            "record": idx[owner][keep],
            "region": region[keep],
            "offset": offset[keep],
            "length": length[keep],
            "write": write[keep],
        }

    def _range_pieces(self, cols: Mapping[str, np.ndarray], idx: np.ndarray) -> dict[str, np.ndarray]:
        """`_kv_pieces` on the range layout (archsim.kvlayout): one piece per (record, head, channel crossed); a
        region is the K or V block of one chunk."""
        assert self.range is not None
        r = self._kv_records(cols, idx)
        live = r["token_count"] > 0  # a record of no tokens places nothing
        rank = np.searchsorted(self.range_requests, r["request"])
        known = rank < len(self.range_requests)
        known[known] = self.range_requests[rank[known]] == r["request"][known]
        end = r["token_start"] + r["token_count"]
        beyond = live & (~known | (end > np.append(self.range_tokens, 0)[np.where(known, rank, -1)]))
        if beyond.any():
            record = int(idx[np.argmax(beyond)])
            raise TraceError("k/v record lies outside the requests the range layout was built for",
                             where=f"record {record}")
        for kind, row in ((0, self.range.k_row_bytes), (1, self.range.v_row_bytes)):
            wrong = live & (r["kind"] == kind) & (r["pth"] != row)
            if wrong.any():
                record = int(idx[np.argmax(wrong)])
                raise TraceError(f"{'kv'[kind]} bytes per token and head ({int(r['pth'][np.argmax(wrong)])}) differ "
                                 f"from the layout's row ({row})", where=f"record {record}")
        owner, k = _segments(np.where(live, r["head_count"], 0))
        head = r["head_start"][owner] + k
        pieces = self.range.pieces(rank[owner] * self.kv_heads + head, r["token_start"][owner],
                                   r["token_count"][owner], r["kind"][owner] == 1, r["layer"][owner])
        o = owner[pieces["owner"]]
        h = head[pieces["owner"]]
        key = _record_key(rank, r["layer"], r["kind"])[o]
        key |= h << _KEY_BITS["block"] | pieces["split"]
        cpd, g = self.p.channels_per_device, self.p.access_granularity_bytes

        def new_regions(rows: np.ndarray) -> dict[str, np.ndarray]:
            unit = pieces["channel"][rows]
            return {"device": unit // cpd, "channel": unit % cpd,
                    "address": unit % cpd * self.p.channel_capacity_bytes + pieces["block"][rows],
                    "size_bytes": (pieces["block_bytes"][rows] + g - 1) // g * g,
                    "what": r["kind"][o[rows]], "request": r["request"][o[rows]], "layer": r["layer"][o[rows]],
                    "group": h[rows], "block": pieces["split"][rows]}

        region = self._regions_for(key, new_regions)
        return {
            "record": idx[o],
            "region": region,
            "offset": pieces["offset"] - pieces["block"],
            "length": pieces["length"],
            "write": cols["op"][idx][o] == OP_WRITE,
        }

    def _check_pth(self, layer: np.ndarray, kind: np.ndarray, pth: np.ndarray) -> None:
        # pack (layer, kind, bytes) into one int64: 1-D unique is far cheaper than unique(axis=0)
        for code in np.unique(((layer << 1 | kind) << 40) | pth).tolist():
            lay, kin, value = code >> 41, (code >> 40) & 1, code & ((1 << 40) - 1)
            known = self.pth_bytes.setdefault((lay, kin), value)
            if known != value:
                raise TraceError(
                    f"layer {lay} {'kv'[kin]} records disagree on bytes per token and head ({known} and {value})",
                    where="bytes",
                )

    # -- weights ------------------------------------------------------------------------------------
    def _weight_pieces(self, cols: Mapping[str, np.ndarray], idx: np.ndarray) -> dict[str, np.ndarray]:
        """Per weight record: region and lines read of each of its t * units pieces ([records, pieces])."""
        p = self.p
        t, units, g = p.tensor_parallel, self.units_per_shard, p.access_granularity_bytes
        operator = cols["operator"][idx].astype(np.int64)
        layer = cols["layer"][idx].astype(np.int64)
        nbytes = cols["bytes"][idx].astype(np.int64)
        table = self.operator_weight_bytes
        full = np.where(
            operator < len(table), table[np.minimum(operator, max(len(table) - 1, 0))] if len(table) else 0, 0
        )
        full = np.maximum(full, nbytes)
        per_shard = (full + t - 1) // t
        piece_size = (per_shard + units - 1) // units
        piece_size = (piece_size + g - 1) // g * g
        per_record = t * units
        owner, k = _segments(np.full(len(idx), per_record))
        key = (((operator[owner] + 1) << 13) | (layer[owner] + 1)) << 28 | k
        key = -key - 1  # negative: never collides with a KV key

        def meta(rows: np.ndarray) -> dict[str, np.ndarray]:
            return {
                "what": np.full(len(rows), REGION_WEIGHT),
                "request": np.full(len(rows), -1),
                "layer": layer[owner[rows]],
                "group": operator[owner[rows]],
                "block": k[rows],
            }

        region = self._allocate(key, piece_size[owner], lambda rows: k[rows], meta)
        unit = k % units
        read = np.clip((nbytes[owner] + t - 1) // t - unit * piece_size[owner], 0, piece_size[owner])
        return {
            "record": idx,
            "region": region.reshape(len(idx), per_record),
            "lines": ((read + g - 1) // g).reshape(len(idx), per_record),
        }

    def _weight_accesses(self, pieces: dict[str, np.ndarray], i: int, max_accesses: int) -> Iterator[dict]:
        """Accesses of weight record i in blocks of about `max_accesses`: line j of every piece before
        line j + 1 of any (a wide read streams all channels at once)."""
        regions, lines = pieces["region"][i], pieces["lines"][i]
        base = self.region_address[regions]
        g = self.p.access_granularity_bytes
        record = int(pieces["record"][i])
        row = 0
        # a read covers each shard's first bytes, so piece line counts take at most a few distinct values;
        # between two of them the valid pieces form a rectangle (rows x pieces with more lines)
        for top in np.unique(lines[lines > 0]).tolist():
            columns = np.flatnonzero(lines >= top)
            step = max(1, max_accesses // len(columns))
            for start in range(row, top, step):
                rows = np.arange(start, min(top, start + step), dtype=np.int64) * g
                address = (rows[:, None] + base[columns][None, :]).ravel()
                n = len(address)
                yield {
                    "address": address.view(np.uint64),
                    "device": np.tile(self.region_device[regions[columns]], len(rows)),
                    "is_write": np.zeros(n, dtype=np.uint8),
                    "source": np.full(n, SOURCE_HOST, dtype=np.uint8),
                    "record": np.full(n, record, dtype=np.int64),
                }
            row = top

    def _kv_accesses(self, kv: dict[str, np.ndarray], a: int, b: int) -> dict[str, np.ndarray]:
        """Accesses of KV pieces a..b (pieces are in record order, so no sort is needed)."""
        c = kv["counts"][a:b]
        total = int(c.sum())
        # in-place arithmetic keeps a single access-sized temporary: the cost here is memory traffic
        address = np.repeat(kv["first_line"][a:b] - (np.cumsum(c) - c), c)
        address += np.arange(total, dtype=np.int64)
        address *= self.p.access_granularity_bytes
        return {
            "address": address.view(np.uint64),
            "device": np.repeat(kv["device"][a:b], c),
            "is_write": np.repeat(kv["write"][a:b].astype(np.uint8), c),
            "source": np.repeat(kv["source"][a:b], c),
            "record": np.repeat(kv["record"][a:b], c),
        }

    # -- driver -------------------------------------------------------------------------------------
    def iter_chunk(
        self, cols: Mapping[str, np.ndarray], record_offset: int = 0, *, batch_accesses: int = 1 << 20
    ) -> Iterator[dict[str, np.ndarray]]:
        """Accesses of one chunk of records, in issue order, in batches of about `batch_accesses`."""
        kind = cols["kind"]
        g = self.p.access_granularity_bytes
        kv = self._kv_pieces(cols, np.flatnonzero((kind == KIND_K) | (kind == KIND_V)))
        start = self.region_address[kv["region"]] + kv["offset"]
        kv["first_line"] = start // g
        kv["counts"] = (start + kv["length"] - 1) // g - kv["first_line"] + 1
        kv["device"] = self.region_device[kv["region"]]
        read_source = SOURCE_PNM if self.p.attention_on == "pnm" else SOURCE_HOST
        kv["source"] = np.where(kv["write"], SOURCE_HOST, read_source).astype(np.uint8)
        cumulative = np.cumsum(kv["counts"])
        weights: dict[str, np.ndarray] = {"record": np.empty(0, dtype=np.int64)}
        if self.p.weights_in == "pool":
            w_idx = np.flatnonzero((kind == KIND_WEIGHT) & (cols["bytes"] > 0))
            if len(w_idx):
                weights = self._weight_pieces(cols, w_idx)
        pending: list[dict[str, np.ndarray]] = []
        pending_accesses = 0

        def flush() -> dict[str, np.ndarray]:
            nonlocal pending, pending_accesses
            out = _concat(pending)
            pending, pending_accesses = [], 0
            n = len(out["address"])
            timestamps = np.arange(self.accesses_emitted, self.accesses_emitted + n, dtype=np.int64)
            if self.issue_interval_cycles != 1:
                timestamps *= self.issue_interval_cycles
            out["timestamp_cycles"] = timestamps
            if record_offset:
                out["record"] = out["record"] + record_offset
            self.accesses_emitted += n
            return out

        def parts() -> Iterator[dict[str, np.ndarray]]:
            # KV pieces between consecutive weight records, then that weight record, in record order
            kv_end = np.searchsorted(kv["record"], weights["record"]).tolist() + [len(kv["record"])]
            a = 0
            for i, b in enumerate(kv_end):
                while a < b:  # KV pieces a..b in slices of about batch_accesses
                    done = int(cumulative[a - 1]) if a else 0
                    cut = int(np.searchsorted(cumulative, done + batch_accesses, side="right"))
                    cut = min(b, max(cut, a + 1))
                    yield self._kv_accesses(kv, a, cut)
                    a = cut
                if i < len(weights["record"]):
                    yield from self._weight_accesses(weights, i, batch_accesses)

        for part in parts():
            pending.append(part)
            pending_accesses += len(part["address"])
            if pending_accesses >= batch_accesses:
                yield flush()
        if pending_accesses:
            yield flush()

    def map_chunk(self, cols: Mapping[str, np.ndarray], record_offset: int = 0) -> dict[str, np.ndarray]:
        """All accesses of one chunk of records in one set of arrays."""
        return _concat(list(self.iter_chunk(cols, record_offset)))


def _concat(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if len(parts) == 1:
        return dict(parts[0])
    if not parts:
        return {n: np.empty(0, dtype=d) for n, d in _OUT_DTYPES.items()}
    return {n: np.concatenate([part[n] for part in parts]) for n in parts[0]}


def kv_heads_from_header(header: Mapping[str, Any], where: str = "header") -> int:
    """Cached KV heads of the trace's model (1 for MLA's latent)."""
    try:
        shape = header["model"]["shape"]
        return 1 if shape["attention"] == "mla" else int(shape["num_kv_heads"])
    except (KeyError, TypeError):
        raise TraceError("header lacks model.shape (attention, num_kv_heads)", where="model.shape") from None


def mapper_for(trace: LogicalTrace, placement: PoolPlacement, *, issue_interval_cycles: int = 1) -> TraceMapper:
    """A mapper set up from a trace's header (KV heads, shared prefix, operator weight sizes)."""
    header = trace.header
    rows = None
    if placement.layout == "range":  # the cut needs every request's length first: one pass over seven columns
        rows = RangeRows.scan(trace.chunks(["kind", "request", "token_start", "token_count", "head_count", "layer",
                                            "bytes"]))
    return TraceMapper(
        placement,
        kv_heads=kv_heads_from_header(header),
        shared_prefix_tokens=int(header.get("shared_prefix_tokens", 0) or 0),
        operator_weight_bytes=trace.operator_weight_bytes,
        issue_interval_cycles=issue_interval_cycles,
        range_rows=rows,
    )


def iter_map(
    trace: LogicalTrace,
    placement: PoolPlacement,
    *,
    issue_interval_cycles: int = 1,
    batch_accesses: int = 1 << 20,
) -> Iterator[dict[str, np.ndarray]]:
    """Stream a trace's accesses in issue order, in batches (memory stays bounded by the batch size)."""
    mapper = mapper_for(trace, placement, issue_interval_cycles=issue_interval_cycles)
    offset = 0
    for chunk in trace.chunks():
        yield from mapper.iter_chunk(chunk, offset, batch_accesses=batch_accesses)
        offset += len(chunk["step"])


def map_trace(trace: LogicalTrace, placement: PoolPlacement, *, issue_interval_cycles: int = 1,
              progress: bool = False) -> PhysicalStreams:
    """Map a whole logical trace to the pool's physical request stream, in memory; `progress` shows a bar of the
    records mapped (`archsim.progress`: a terminal only, after 2 s)."""
    from archsim.progress import progress_bar

    mapper = mapper_for(trace, placement, issue_interval_cycles=issue_interval_cycles)
    parts = []
    offset = 0
    with progress_bar(trace.records, "record", "convert", quiet=not progress) as bar:
        for chunk in trace.chunks():
            parts.extend(mapper.iter_chunk(chunk, offset))
            offset += len(chunk["step"])
            bar.update(len(chunk["step"]))
    return PhysicalStreams(**_concat(parts), regions=mapper.regions(), placement=mapper.p)


def map_columns(
    columns: Mapping[str, np.ndarray],
    header: Mapping[str, Any],
    placement: PoolPlacement,
    *,
    operator_weight_bytes: list[int | None] | None = None,
    issue_interval_cycles: int = 1,
) -> PhysicalStreams:
    """Map in-memory records (e.g. a generator's `columns()`); `header` needs model.shape."""
    mapper = TraceMapper(
        placement,
        kv_heads=kv_heads_from_header(header),
        shared_prefix_tokens=int(header.get("shared_prefix_tokens", 0) or 0),
        operator_weight_bytes=operator_weight_bytes,
        issue_interval_cycles=issue_interval_cycles,
        range_rows=RangeRows.scan([columns]) if placement.layout == "range" else None,
    )
    parts = list(mapper.iter_chunk(columns))
    return PhysicalStreams(**_concat(parts), regions=mapper.regions(), placement=mapper.p)
