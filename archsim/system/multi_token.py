"""Attention of short chunks over a cached prefix in the PNM pool, timed by the multi-token kernel.

A speculative verification step (k + 1 positions), a tree or beam step, or a prompt's last tokens after a
prefix hit is attention of q query tokens at once over a context the pool holds. With the timed PNM model the
pool's units run isa/kernels/tree_decode.s for it (the prefix read once for all q tokens): one head context of
q x group query rows on one unit, at two sample contexts, gives a fixed and a per-token time for that q; a
layer's time is the busiest channel's, its pieces of the layer's head contexts laid end to end and cut evenly
over the channels, as decode lays them (archsim.kvlayout.range_bounds), each piece costing its context's fixed
time plus its tokens at the per-token time. Longer chunks and GQA-less models (MLA) keep the roofline of
archsim.system.mixed.

The same kernel reads a prefix that several decoding sequences share once for all of them (their tokens are its
queries): `shared_prefix_factor` is the decode time with that reading over the time without, which the serving
engine applies to the pool's tabulated decode time.
"""

from __future__ import annotations

import numpy as np

from archsim.errors import ArchsimError
from archsim.kvlayout import range_bounds
from archsim.models import ModelShape
from archsim.system.attention import kernel_kv_dtype, timed_kernels_unavailable, timed_run_ns
from archsim.system.config import SystemConfig

QUERIES_MAX = 16  # chunks up to this many new tokens are timed by the kernel (verification, tree widths)
SAMPLE_TOKENS = (1024, 4096)

_FITS: dict[tuple[object, ...], tuple[float, float] | None] = {}


def unit_fit(system: SystemConfig, shape: ModelShape, element_bytes: int, queries: int,
             roots: bool = False) -> tuple[float, float] | None:
    """(fixed ns, ns per token) of one head context with `queries` new tokens on one PNM unit (a causal chain,
    or with `roots` tokens that see only the context and themselves), or None when the timed unit cannot run
    the kernel here (roofline model, MLA, a scratchpad too small for the query rows)."""
    pool = system.pool
    assert pool is not None and pool.pnm is not None
    pnm = pool.pnm
    key = (repr(pool), shape.name, element_bytes, queries, roots)
    if key not in _FITS:
        _FITS[key] = None
        if shape.attention != "mla" and timed_kernels_unavailable(pnm, element_bytes) is None:
            group = shape.num_attention_heads // shape.kv_cache_heads
            try:
                (t1, _, _), (t2, _, _) = (
                    timed_run_ns(pool.memory, pnm, "tree-roots" if roots else "tree", group, (shape.head_dim, 0),
                                 kernel_kv_dtype(element_bytes), pnm.tile_tokens, n + queries, queries)
                    for n in SAMPLE_TOKENS)
            except ArchsimError:  # the query rows do not fit the unit's SRAM: the roofline answers
                return None
            per_token = (t2 - t1) / (SAMPLE_TOKENS[1] - SAMPLE_TOKENS[0])
            _FITS[key] = (max(0.0, t1 - per_token * (SAMPLE_TOKENS[0] + queries)), per_token)
    return _FITS[key]


def pool_layer_ns(system: SystemConfig, shape: ModelShape, element_bytes: int, cached: np.ndarray,
                  new: np.ndarray) -> float | None:
    """One layer of these chunks' attention (each over its cached prefix and itself) on the pool's busiest
    channel, or None when any of them cannot be timed by the kernel."""
    pool = system.pool
    assert pool is not None
    queries = np.asarray(new, dtype=np.int64)
    if not len(queries) or queries.max() > QUERIES_MAX:
        return None
    fits = {q: unit_fit(system, shape, element_bytes, q) for q in np.unique(queries).tolist()}
    if any(f is None for f in fits.values()):
        return None
    heads = shape.kv_cache_heads
    lengths = np.repeat(np.asarray(cached, dtype=np.int64) + queries, heads)
    fixed = np.repeat([fits[q][0] for q in queries.tolist()], heads)
    per_token = np.repeat([fits[q][1] for q in queries.tolist()], heads)
    return _busiest_channel_ns(lengths, fixed, per_token, pool.channels)


def _busiest_channel_ns(lengths: np.ndarray, fixed: np.ndarray, per_token: np.ndarray, channels: int) -> float:
    """Head contexts of `lengths` tokens laid end to end and cut evenly over the channels; each piece costs its
    context's fixed time plus its tokens at the per-token time; the busiest channel's sum."""
    starts = np.concatenate([[0], np.cumsum(lengths)])
    bounds = range_bounds(int(starts[-1]), channels)
    cuts = np.union1d(starts, bounds)
    lo, tokens = cuts[:-1], np.diff(cuts)
    context = np.searchsorted(starts, lo, side="right") - 1
    channel = np.minimum(np.searchsorted(bounds, lo, side="right") - 1, channels - 1)
    return float(np.bincount(channel, fixed[context] + per_token[context] * tokens, minlength=channels).max())


def shared_prefix_factor(system: SystemConfig, shape: ModelShape, element_bytes: int, prefix_tokens: np.ndarray,
                         private_tokens: list[np.ndarray]) -> float:
    """Decode attention in the pool for groups of sequences sharing a prefix, read once for the group (the
    multi-token kernel with the group's tokens as its queries: compute for all, DRAM bytes once) and then each
    sequence's private tokens, over the same decode read per sequence: the ratio of the kernel's busiest-channel
    times (fits as `unit_fit`). 1.0 when the kernel cannot run (roofline model, MLA)."""
    pool = system.pool
    assert pool is not None
    single = unit_fit(system, shape, element_bytes, 1)
    widths = [len(p) for p in private_tokens]
    fits = {w: unit_fit(system, shape, element_bytes, min(w, QUERIES_MAX), roots=True) if w > 1 else single
            for w in set(widths)}
    if single is None or any(f is None for f in fits.values()):
        return 1.0
    heads = shape.kv_cache_heads
    flat = np.concatenate([p + int(s) for s, p in zip(prefix_tokens.tolist(), private_tokens, strict=True)])
    one = np.full(len(flat) * heads, single[0])
    flat_ns = _busiest_channel_ns(np.repeat(flat, heads), one, np.full(len(flat) * heads, single[1]), pool.channels)
    lengths, fixed, per_token = [], [], []
    for s, p, w in zip(prefix_tokens.tolist(), private_tokens, widths, strict=True):
        f = fits[w]
        assert f is not None
        # more sharers than the kernel's queries: the prefix is read once per QUERIES_MAX of them
        passes = -(-w // QUERIES_MAX) if s > 0 else 0  # a group of no shared tokens only reads its own
        lengths += [s] * passes + p.tolist()
        fixed += [f[0]] * passes + [single[0]] * len(p)
        per_token += [f[1]] * passes + [single[1]] * len(p)
    tree_ns = _busiest_channel_ns(np.repeat(lengths, heads), np.repeat(fixed, heads), np.repeat(per_token, heads),
                                  pool.channels)
    # the host picks the kernel per batch: sharing only where it is faster (short prefixes pay its fixed cost)
    return min(1.0, tree_ns / flat_ns) if flat_ns > 0 else 1.0
