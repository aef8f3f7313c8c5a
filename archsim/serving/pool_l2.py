"""The pool's L2 on its host path (`system.pool.l2`) as a serving run's host reads of the pool use it.

What reads the pool through its host port: the GPUs' loads of prefix blocks found in the pool, swap-ins from it,
and streams (`kv.decode: stream`, or a sequence too long for HBM, whose KV is re-read every iteration). A PNM
pool's own attention reads sit at the controllers, below this L2, and are the PNM SRAM's (`pnm_sram_kv_hit_rate`).

Per sampled iteration, the host reads issued since the previous iteration (loads, swap-ins) and the streams of
this one, in that order, one layer of them: every transfer moves its blocks layer by layer, so the reads of one
layer interleave and each layer sees the same block sequence. The stream runs through the configured cache
itself (`archsim.cache.simulate_l2`: its sets, ways and replacement policy) on one channel's slice
(a device's L2 over its channels, as the decode-step model slices it): a block key is a block's place in the
pool (the allocator scatters blocks, so its lines land on the slice's sets by a hash of the key) and one layer
of a block puts `lines_per_block` lines on each channel (the host interleave spreads it evenly). Accesses are
spaced so that every fill returns before the next access: the hit rate is the replacement state's, not an MSHR
race.

A sample starts warm when what the pool served through its host port since the instance's previous iteration
began (that iteration's and every other instance's reads since, all layers) fits the slice: those reads (each
layer its own lines) run through the cache first, so blocks re-read every iteration (a stream) hit across
iterations. When they do not fit, the pool serves more than the L2 holds between one iteration's layer and the
next iteration's same layer, LRU keeps none of it, and the sample starts cold. Sampling: every `stride`-th iteration
that reads the pool through its host port, at most `max_samples` and until `max_lines` lines were simulated
(warm starts, at most the slice's lines each, included), so the cost is bounded on any run.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from archsim.cache.l2 import HIT, L2Config, simulate_l2


@dataclass
class PoolL2Sampler:
    slice_config: L2Config        # one channel's slice of the pool's L2
    lines_per_block: int          # lines one layer of one KV block puts on each channel
    channels: int
    layers: int
    stride: int = 16
    max_samples: int = 512
    max_lines: int = 8_000_000    # lines simulated in all (warm starts included): bounds the cost of any run
    samples: int = 0
    reads: int = 0                # host-path line reads sampled (one channel, one layer)
    hits: int = 0
    _seen: int = 0                # iterations that read the pool through its host port
    warm_samples: int = 0         # samples that started after the previous iteration's reads (they fit)
    _simulated: int = 0
    _pending: list[np.ndarray] = field(default_factory=list)
    # per instance: the blocks the pool served through its host port since that instance's last iteration began
    # (None once they outgrow the slice)
    _since: dict[int, list[np.ndarray] | None] = field(default_factory=dict)
    _iteration_bytes: list[float] = field(default_factory=list)

    @classmethod
    def of(cls, l2: L2Config, channels_per_device: int, channels: int, block_layer_bytes: int,
           layers: int) -> PoolL2Sampler:
        """`l2`: one device's L2 (`system.pool.l2`), sliced over its `channels_per_device`; `channels`: the pool's."""
        slice_config = replace(l2, capacity_bytes=l2.capacity_bytes // channels_per_device)
        lines = max(1, -(-block_layer_bytes // (channels * l2.line_size_bytes)))
        return cls(slice_config, lines, channels, layers)

    def read(self, keys: np.ndarray) -> None:
        """Blocks a transfer (load, swap-in) reads from the pool through its host port, kept for the next
        iteration only while it may be sampled."""
        if len(keys) and self.samples < self.max_samples and self._simulated < self.max_lines:
            self._pending.append(np.asarray(keys, dtype=np.uint64))

    def iteration(self, streamed: list[np.ndarray], instance: int = 0) -> None:
        """An iteration of `instance` starts: `streamed` the blocks each streaming sequence re-reads from the
        pool, in batch order. Simulates the host reads since the previous iteration if this is a sample point,
        warm with every host read since this instance's previous iteration (every instance's, in order)."""
        blocks = [*self._pending, *(np.asarray(k, dtype=np.uint64) for k in streamed if len(k))]
        self._pending = []
        if self.samples >= self.max_samples or self._simulated >= self.max_lines:
            self._since = {}
            return
        if blocks:
            due = self._seen % self.stride == 0
            self._seen += 1
            if due:
                self._simulate(np.concatenate(blocks), self._since.get(instance))
        for other, reads in self._since.items():  # what the pool served since each instance's last iteration
            if reads is not None and other != instance:
                reads.extend(blocks)
                if sum(len(r) for r in reads) * self._lines_per_key > self.slice_config.lines:
                    self._since[other] = None  # more than the slice holds: that warm start would be cold
        self._since[instance] = list(blocks)

    def _lines(self, keys: np.ndarray, layer: int) -> np.ndarray:
        """Line addresses of one layer of `keys`' blocks on the slice: a hash of (key, layer), then the block's
        consecutive lines."""
        with np.errstate(over="ignore"):
            salted = keys ^ (np.uint64(layer) * np.uint64(0xD6E8FEB86659FD93))
            base = (salted * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(24)
            lines = (base[:, None] * np.uint64(self.lines_per_block)
                     + np.arange(self.lines_per_block, dtype=np.uint64)[None, :]).reshape(-1)
        return lines << np.uint64(self.slice_config.line_size_bytes.bit_length() - 1)

    @property
    def _lines_per_key(self) -> int:
        return self.lines_per_block * self.layers  # a block's lines on the slice over all layers

    def _simulate(self, keys: np.ndarray, previous: list[np.ndarray] | None) -> None:
        """Layer 0 of this iteration's reads, after the reads of every layer since the instance's previous
        iteration when they fit the slice (else LRU keeps none of them to this layer: the sample starts cold)."""
        cfg = self.slice_config
        now = self._lines(keys, 0)
        warm = np.zeros(0, dtype=np.uint64)
        if previous:
            before = np.concatenate(previous)
            if len(before) * self._lines_per_key < cfg.lines:
                warm = np.concatenate([self._lines(before, layer) for layer in range(self.layers)])
                self.warm_samples += 1
        address = np.concatenate([warm, now])
        spacing = cfg.hit_latency_cycles + 2  # the fill (1 cycle) returns before the next access issues
        res = simulate_l2(cfg, address, kind=np.ones(len(address), dtype=np.uint8),
                          arrival_cycle=np.arange(len(address), dtype=np.int64) * spacing, memory_latency_cycles=1)
        self.samples += 1
        self._simulated += len(address)
        self.reads += len(now)
        self.hits += int(np.count_nonzero(res.outcome[len(warm):] == HIT))
        self._iteration_bytes.append(float(len(now) * cfg.line_size_bytes * self.channels * self.layers))

    def summary(self) -> dict[str, object]:
        seen = np.array(self._iteration_bytes) if self._iteration_bytes else np.zeros(1)
        cfg = self.slice_config
        return {"capacity_bytes": cfg.capacity_bytes * self.channels, "slice_bytes": cfg.capacity_bytes,
                "line_bytes": cfg.line_size_bytes, "ways": cfg.ways, "policy": cfg.replacement,
                "lines_per_block_per_channel": self.lines_per_block, "sampled_iterations": self.samples,
                "warm_samples": self.warm_samples,
                "kv_line_reads": self.reads, "kv_hit_rate": self.hits / self.reads if self.reads else None,
                "iteration_read_bytes": {"p50": float(np.percentile(seen, 50)), "max": float(seen.max())}}
