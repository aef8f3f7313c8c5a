"""Iteration costs for the serving engine: the mixed-batch step with its expensive part tabulated.

The engine asks for thousands of iterations at ever-changing batch mixes; replaying DRAM for each would take
hours. archsim.system.mixed splits an iteration into exact closed-form terms (the calibrated GPU kernels and
all-reduces at the batch's tokens, prefill attention, KV writes) and the decode part the decode-step model
times with DRAM and PNM replayed (`DecodeTerms`). Only that part is tabulated: over the decode sequences d
(powers of two) and their total cached tokens N (0, then powers of GRID_RATIO), each grid point a real
decode-step run at d sequences of N / d tokens, filled lazily the first time a cell is needed, and
interpolated bilinearly (the pool's time is close to a + b d + c N + e d N, which bilinear interpolation
reproduces). `check()` measures the interpolation error at iterations the run really had, by running the
decode-step model at their own (d, N); the result entry declares it (`cost_model`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from archsim.models import dtype_bytes
from archsim.step_store import canonical, remembered
from archsim.system.config import SystemConfig
from archsim.system.mixed import (
    NO_PREFILL,
    DecodeTerms,
    attention_constants,
    compose,
    decode_terms,
    gpu_time,
    mixed_step,
    prefill_layer_ns,
    ring_stretch,
)
from archsim.system.multi_token import shared_prefix_factor
from archsim.system.workload import Workload

GRID_RATIO = 4  # cached-token grid: 0, 1024, 4096, ... ; sequences grid: 1, 2, 4, ...
FIRST_TOKENS = 1024
METHOD = ("bilinear in (decode sequences, their cached tokens) over decode-step runs with DRAM and PNM "
          "replayed; GPU kernels, all-reduces, prefill attention and KV writes exact")
SPLIT_METHOD = ("per sequence where its KV is: the HBM roofline (exact), or the PNM pool's decode part "
                "tabulated as below; the layer waits for the slower. " + METHOD)
EXACT_METHOD = ("exact: decode attention reads the KV from GPU HBM (the HBM roofline), nothing tabulated; GPU "
                "kernels, all-reduces, prefill attention and KV writes exact")


def _grid_up_to(first: int, ratio: int, top: int) -> list[int]:
    """first, first x ratio, ... below top, then top itself (the last point never passes the capacity)."""
    points = [first]
    while points[-1] * ratio < top:
        points.append(points[-1] * ratio)
    if top > points[-1]:
        points.append(top)
    return points


@dataclass
class StepCostTable:
    """IterationCost of one model instance of `workload` on `system` (archsim.serving.spec.IterationCost)."""

    system: SystemConfig
    workload: Workload
    max_sequences: int
    max_cached_tokens: int
    # decode: load -- remote KV is loaded into HBM once, so decoding reads it there (the HBM roofline) and
    # only the prefill's write-through crosses the links; stream: every step fetches it (the decode-step model)
    decode_from_hbm: bool = False

    def __post_init__(self) -> None:
        self.seq_grid = _grid_up_to(1, 2, max(1, self.max_sequences))
        self.token_grid = [0, *_grid_up_to(FIRST_TOKENS, GRID_RATIO, max(FIRST_TOKENS, self.max_cached_tokens))]
        self._terms: dict[tuple[int, int], DecodeTerms] = {}
        self._gpu: dict[tuple[int, int, float], Any] = {}  # GPU time per (tokens, sequences, stretch)
        self._seen: list[tuple[int, int]] = []  # (d, N) of iterations the run asked for, for check()
        # decode-only iterations by (d, N): a pure function of the two, asked again and again (requests of like
        # lengths step through the same contexts); bounded, so memory stays flat on any run
        self._decode_only: dict[tuple[int, int], tuple[float, float]] = {}
        self.errors: list[float] = []
        self._identity: bytes | None = None  # (system, workload) as the step store keys them (canonical)

    @property
    def tabulated(self) -> bool:
        """Whether the decode part is interpolated from decode-step runs (KV read in a pool or streamed)."""
        return not (self.system.kv_location == "gpu" or self.decode_from_hbm)

    @property
    def grid_points(self) -> int:
        return len(self._terms)

    def _point(self, d: int, n: int) -> DecodeTerms:
        key = (d, n)
        if key not in self._terms:
            self._terms[key] = self._run_step(d, n // d)
        return self._terms[key]

    def _run_step(self, d: int, context: int) -> DecodeTerms:
        """The decode-step model at d sequences of `context` tokens (kept between runs: archsim.step_store)."""
        if self._identity is None:     # once: the same bytes in a worker, its parent and the next run
            self._identity = canonical((self.system, self.workload))
        return remembered("decode-terms", (self._identity, d, context),
                          lambda: decode_terms(self.system, self.workload, d, context))

    def decode_part(self, d: int, n: int) -> DecodeTerms:
        """DecodeTerms at d sequences holding n cached tokens in all, interpolated between grid points."""
        if not self.tabulated:  # the HBM roofline: exact
            return DecodeTerms(d, n // d, "gpu", 0.0, 0.0, 1.0)
        (d0, d1), wd = _bracket(self.seq_grid, d)
        (n0, n1), wn = _bracket(self.token_grid, n)
        # the corners are nearly always filled: look them up directly, filling (_point) only a missing one
        terms = self._terms
        c00 = terms.get((d0, n0)) or self._point(d0, n0)
        c01 = terms.get((d0, n1)) or self._point(d0, n1)
        c10 = terms.get((d1, n0)) or self._point(d1, n0)
        c11 = terms.get((d1, n1)) or self._point(d1, n1)
        return DecodeTerms(d, n // d, c00.kind, _mix(wd, wn, c00.pool_ns, c01.pool_ns, c10.pool_ns, c11.pool_ns),
                           _mix(wd, wn, c00.route_latency_ns, c01.route_latency_ns, c10.route_latency_ns,
                                c11.route_latency_ns),
                           _mix(wd, wn, c00.allreduce_stretch, c01.allreduce_stretch, c10.allreduce_stretch,
                                c11.allreduce_stretch))

    def shared_prefix_factor(self, prefix_tokens: np.ndarray, private_tokens: list[np.ndarray]) -> float:
        """The pool's decode time with each group's shared prefix read once over the time without (at most 1;
        archsim.system.multi_token.shared_prefix_factor); 1 when decode attention is not in a PNM pool."""
        if not self.tabulated or self.system.attention != "pnm" or self.system.pool is None:
            return 1.0
        return shared_prefix_factor(self.system, self.workload.shape, dtype_bytes(self.workload.dtype), prefix_tokens,
                                    private_tokens)

    def iteration_ns(self, cached_tokens: np.ndarray, new_tokens: np.ndarray, pool_scale: float = 1.0) -> float:
        """`pool_scale`: the pool's decode time scaled (decode sequences sharing a prefix the pool reads once,
        `shared_prefix_factor`)."""
        return self.iteration_pnm_ns(cached_tokens, new_tokens, pool_scale)[0]

    def iteration_pnm_ns(self, cached_tokens: np.ndarray, new_tokens: np.ndarray,
                         pool_scale: float = 1.0) -> tuple[float, float]:
        """iteration_ns, and the PNM units' decode attention in it: the layers' PNM time (with every instance
        attending at once, as the table's decode-step runs have them), 0 when decode attention is elsewhere."""
        cached = np.asarray(cached_tokens, dtype=np.int64)
        new = np.asarray(new_tokens, dtype=np.int64)
        # integer sums over a batch's few rows: Python's sum of the ints is exact and cheaper than ndarray.sum
        new_list = new.tolist()
        tokens, sequences = sum(new_list), len(new_list)
        if tokens == sequences:  # every sequence decodes: the engine's common case, a function of (d, N) alone
            n = sum(cached.tolist())
            if pool_scale == 1.0:
                return self.decode_only_ns(sequences, n)
            self._asked(sequences, n)
            return self._priced(tokens, sequences, sequences, n, NO_PREFILL, pool_scale)
        decoding = new == 1
        d, n = int(decoding.sum()), int(cached[decoding].sum())
        if d:
            self._asked(d, n)
        prefill = prefill_layer_ns(self.system, self.workload, cached[~decoding], new[~decoding])
        return self._priced(tokens, sequences, d, n, prefill, pool_scale)

    def _asked(self, d: int, n: int) -> None:
        """Keep the first 4096 decode parts the run asked for, for check()."""
        if len(self._seen) < 4096:
            self._seen.append((d, n))

    def decode_only_ns(self, d: int, n: int) -> tuple[float, float]:
        """iteration_pnm_ns of d sequences each decoding one token over n cached tokens in all (memoized)."""
        self._asked(d, n)
        hit = self._decode_only.get((d, n))
        if hit is None:
            hit = self._priced(d, d, d, n, NO_PREFILL, 1.0)
            if len(self._decode_only) < 1 << 17:
                self._decode_only[(d, n)] = hit
        return hit

    def _priced(self, tokens: int, sequences: int, d: int, n: int, prefill: dict[str, float],
                pool_scale: float) -> tuple[float, float]:
        """iteration_pnm_ns from the batch's aggregates: `tokens` new tokens of `sequences` sequences, d of them
        decoding over n cached tokens in all, the prefill chunks' per-layer terms."""
        terms = None
        if d:
            terms = self.decode_part(d, n)
            if pool_scale != 1.0 and terms.kind == "pnm":
                terms = replace(terms, pool_ns=terms.pool_ns * pool_scale)
        stretch = ring_stretch(terms.allreduce_stretch, d, tokens) if terms is not None else 1.0
        key = (tokens, sequences, stretch)
        gpu = self._gpu.get(key)
        if gpu is None:
            w = self.workload
            gpu = self._gpu[key] = gpu_time(w.shape, w.dtype, tokens, sequences, w.tensor_parallel,
                                            self.system.gpus, stretch)
        time_ns = compose(self.system, self.workload, tokens, sequences, d, n, prefill, terms, gpu).time_ns
        pnm_ns = self.workload.shape.num_layers * terms.pool_ns if terms is not None and terms.kind == "pnm" else 0.0
        return time_ns, pnm_ns

    def decode_steps_ns(self, cached_tokens: np.ndarray, steps: int) -> np.ndarray:
        """`steps` decode iterations of one batch, sequence s holding cached_tokens[s] + j tokens at step j:
        iteration_ns(cached_tokens + j, ones) for each j, bit for bit, in one vectorized pass when the batch's
        all-reduces do not share a fabric (else one call per step)."""
        return self.decode_steps_pnm_ns(cached_tokens, steps)[0]

    def decode_steps_pnm_ns(self, cached_tokens: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
        """decode_steps_ns, and each step's PNM time as iteration_pnm_ns gives it."""
        cached = np.asarray(cached_tokens, dtype=np.int64)
        d = int(cached.size)
        n = int(cached.sum()) + d * np.arange(steps, dtype=np.int64)
        pool, stretch = self._decode_vectors(d, n)
        if stretch is None:  # a stretch that varies with the context changes the all-reduces: price each step
            ones = np.ones(d, dtype=np.int64)
            pairs = [self.iteration_pnm_ns(cached + j, ones) for j in range(steps)]
            return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
        if len(self._seen) < 4096:
            self._seen.extend((d, int(x)) for x in n[: 4096 - len(self._seen)])
        w, gpus = self.workload, self.system.gpus
        key = (d, d, 1.0)
        gpu = self._gpu.get(key)
        if gpu is None:
            gpu = self._gpu[key] = gpu_time(w.shape, w.dtype, d, d, w.tensor_parallel, gpus, 1.0)
        L = w.shape.num_layers
        if pool is None:  # the GPUs' HBM roofline, as compose's `gpu` kind
            kv_heads, group, row_bytes, macs = attention_constants(w.shape, w.dtype)
            rows = (n + 2 * d).astype(np.float64)
            flops = 2.0 * (n + d).astype(np.float64) * kv_heads * group * macs
            attention = np.maximum(rows * kv_heads * row_bytes / w.tensor_parallel / gpus.hbm_bandwidth_GBps,
                                   flops / w.tensor_parallel / (gpus.peak_TFLOPS * 1e3))
            pnm = np.zeros(steps)
        else:
            attention = pool
            pnm = L * attention
        return L * gpu.kernels_ns + L * gpu.allreduce_ns + L * attention + gpu.epilogue_ns, pnm

    def _decode_vectors(self, d: int, n: np.ndarray) -> tuple[np.ndarray | None, float | None]:
        """The decode part's pool time per step (None: the HBM roofline) and its all-reduce stretch (None when
        it is not 1 everywhere, or the part is a fetch: those steps are priced one by one)."""
        if not self.tabulated:
            return None, 1.0
        (d0, d1), wd = _bracket(self.seq_grid, d)
        grid = np.asarray(self.token_grid, dtype=np.int64)
        upper = np.clip(np.searchsorted(grid, n, side="right"), 1, len(grid) - 1)
        inside = (n > grid[0]) & (n < grid[-1])
        lo = np.where(inside, grid[upper - 1], np.where(n <= grid[0], grid[0], grid[-1]))
        hi = np.where(inside, grid[upper], lo)
        wn = np.where(inside, (n - lo) / np.where(inside, hi - lo, 1), 0.0)
        needed = sorted(set(lo.tolist()) | set(hi.tolist()))
        points = {(a, b): self._point(a, b) for a in (d0, d1) for b in needed}
        if any(p.kind != "pnm" or p.allreduce_stretch != 1.0 for p in points.values()):
            return None, None
        value = {key: p.pool_ns for key, p in points.items()}
        v00 = np.array([value[(d0, b)] for b in lo.tolist()])
        v01 = np.array([value[(d0, b)] for b in hi.tolist()])
        v10 = np.array([value[(d1, b)] for b in lo.tolist()])
        v11 = np.array([value[(d1, b)] for b in hi.tolist()])
        return (1 - wd) * ((1 - wn) * v00 + wn * v01) + wd * ((1 - wn) * v10 + wn * v11), 1.0

    def check(self, samples: int = 6) -> float:
        """Largest relative error of the interpolated decode part against the decode-step model at iterations the
        run had (`samples` spread evenly over them, off-grid ones first). 0 when nothing is tabulated: the
        decode-step model would then time a different path (KV streamed over the link) than the one served."""
        if not self.tabulated:
            return 0.0
        off = sorted({k for k in self._seen if k not in self._terms})
        if not off:
            return max(self.errors, default=0.0)
        picks = [off[i * len(off) // samples] for i in range(min(samples, len(off)))]
        for d, n in picks:
            exact = self._run_step(d, n // d)
            approx = self.decode_part(d, n)
            cached = np.full(d, n // d, dtype=np.int64)
            ones = np.ones(d, dtype=np.int64)
            t_exact = mixed_step(self.system, self.workload, cached, ones, exact).time_ns
            t_approx = mixed_step(self.system, self.workload, cached, ones, approx).time_ns
            self.errors.append(abs(t_approx - t_exact) / t_exact)
        return max(self.errors)

    def pool_energy_coefficients(self) -> tuple[dict[str, float], dict[str, float]]:
        """From the largest tabulated decode step: pJ per byte of KV the pool's units read (DRAM, PNM, SRAM,
        background), and pJ per decode token on the links (its query and output); GPU terms left out."""
        if not self._terms:
            self._point(1, FIRST_TOKENS)
        step = self._terms[max(self._terms, key=lambda k: (k[1], k[0]))].step
        assert step is not None and step.energy_breakdown_pJ_per_token and step.kv_bytes
        per_byte: dict[str, float] = {}
        per_token: dict[str, float] = {}
        for name, pj_per_token in step.energy_breakdown_pJ_per_token.items():
            if name.startswith("gpu."):
                continue
            if name.startswith(("link.", "nic.")):
                per_token[name] = pj_per_token
            else:
                per_byte[name] = pj_per_token * step.tokens / step.kv_bytes
        return per_byte, per_token

    def declaration(self) -> dict[str, Any]:
        return {"grid_points": self.grid_points, "max_rel_error_measured": round(self.check(), 6),
                "checked_iterations": len(self.errors), "method": METHOD if self.tabulated else EXACT_METHOD}


@dataclass
class SplitCost:
    """IterationCost of `kv.placement: auto`: each sequence's KV in HBM (attention on the GPUs, the HBM
    roofline: `hbm`) or in the PNM pool (attention in its units, tabulated: `pool`). `iteration_ns` takes which
    sequences are pooled; with all on one side it is that side's table, bit for bit; mixed, the GPUs' work is
    the whole batch's and the layer waits for the slower of the two attentions (archsim.system.mixed.compose)."""

    hbm: StepCostTable
    pool: StepCostTable

    def iteration_ns(self, cached_tokens: np.ndarray, new_tokens: np.ndarray,
                     pooled: np.ndarray | None = None) -> float:
        cached = np.asarray(cached_tokens, dtype=np.int64)
        new = np.asarray(new_tokens, dtype=np.int64)
        if pooled is None or not pooled.any():
            return self.hbm.iteration_ns(cached, new)
        if pooled.all():
            return self.pool.iteration_ns(cached, new)
        decoding = new == 1
        at_pool, at_hbm = decoding & pooled, decoding & ~pooled
        w, table = self.pool.workload, self.pool
        prefill = dict(NO_PREFILL)
        for side, rows in ((self.hbm, ~decoding & ~pooled), (self.pool, ~decoding & pooled)):
            if rows.any():  # each prefill's prefix attention where its KV is
                for k, v in prefill_layer_ns(side.system, w, cached[rows], new[rows]).items():
                    prefill[k] += v
        d, n = int(at_pool.sum()), int(cached[at_pool].sum())
        hbm = (int(at_hbm.sum()), int(cached[at_hbm].sum()))
        terms = table.decode_part(d, n) if d else None
        stretch = ring_stretch(terms.allreduce_stretch, d, int(new.sum())) if terms is not None else 1.0
        gpu = gpu_time(w.shape, w.dtype, int(new.sum()), int(new.size), w.tensor_parallel, table.system.gpus,
                       stretch)
        if terms is None:  # only the HBM side decodes
            return compose(self.hbm.system, w, int(new.sum()), int(new.size), *hbm, prefill, None, gpu).time_ns
        return compose(table.system, w, int(new.sum()), int(new.size), d, n, prefill, terms, gpu,
                       hbm_decode=hbm).time_ns

    def decode_steps_ns(self, cached_tokens: np.ndarray, steps: int, pooled: np.ndarray | None = None) -> np.ndarray:
        """`steps` decode iterations (as StepCostTable.decode_steps_ns); vectorized when every sequence is on
        one side, else one split iteration per step."""
        cached = np.asarray(cached_tokens, dtype=np.int64)
        if pooled is None or not pooled.any():
            return self.hbm.decode_steps_ns(cached, steps)
        if pooled.all():
            return self.pool.decode_steps_ns(cached, steps)
        ones = np.ones(cached.size, dtype=np.int64)
        return np.array([self.iteration_ns(cached + j, ones, pooled) for j in range(steps)])

    def check(self, samples: int = 6) -> float:
        return self.pool.check(samples)

    @property
    def tabulated(self) -> bool:
        return self.pool.tabulated

    @property
    def grid_points(self) -> int:
        return self.pool.grid_points

    def pool_energy_coefficients(self) -> tuple[dict[str, float], dict[str, float]]:
        return self.pool.pool_energy_coefficients()

    def declaration(self) -> dict[str, Any]:
        return {**self.pool.declaration(), "method": SPLIT_METHOD}


def _mix(wd: float, wn: float, v00: float, v01: float, v10: float, v11: float) -> float:
    """Bilinear blend of a cell's corner values at weights (wd, wn) towards the upper ends (decode_part's)."""
    if v00 == v01 == v10 == v11:  # equal corners: the value itself, not a rounded blend
        return v00
    return ((1 - wd) * ((1 - wn) * v00 + wn * v01) + wd * ((1 - wn) * v10 + wn * v11))


def _bracket(grid: list[int], x: int) -> tuple[tuple[int, int], float]:
    """The grid cell holding x and x's weight towards its upper end (clamped to the grid)."""
    if x <= grid[0]:
        return (grid[0], grid[0]), 0.0
    if x >= grid[-1]:
        return (grid[-1], grid[-1]), 0.0
    i = bisect.bisect_right(grid, x)
    lo, hi = grid[i - 1], grid[i]
    return (lo, hi), (x - lo) / (hi - lo)


def instance_workload(workload: Workload, instances: int) -> Workload:
    """The serving engine's instances of `workload` (the step model times every instance running alike)."""
    return replace(workload, batch=1, instances=instances, max_context=None)
