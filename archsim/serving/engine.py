"""Discrete-event continuous batching (issue 19): a RequestTable served by a system's ServingSpec, each iteration
priced by an IterationCost.

Per model instance a vLLM-style scheduler: a waiting queue (FCFS; preempted sequences go back to its front) and
a running list in admission order. Each iteration spends a token budget (`max_batch_tokens`) on the decode token
of every running sequence first, then on prefills already under way, then on new admissions while the sequence
limit (`max_batch_seqs`) and the room of the tier where KV lives allow; without chunked prefill a prompt is
prefilled whole in one iteration, with it in chunks of what is left of the budget. The prefill iteration samples
the first output token (as vLLM does), every later iteration one more. When a decode sequence needs a new block
and its tier is full, the most recently admitted decode sequence is preempted (recompute: its KV is dropped and
it re-prefills prompt + generated tokens; swap: its KV moves to the next tier over that tier's link and back).

KV lives in blocks of `block_tokens` in the KV home (`spec.kv_home`: HBM, per instance; or a PNM pool, shared),
held in the TieredPrefixCache of each instance (its own HBM, the lower tiers shared). On admission the prompt's
blocks are looked up: blocks in the home are free; blocks in a lower tier are either loaded over that tier's
link (a processor-sharing transfer on archsim.serving.transfers, so concurrent loads slow each other; the
sequence joins the batch when its load lands) or recomputed, whichever the costs say is faster; misses are
prefilled. Prefill writes its KV through to the tier below HBM, and a finished turn writes its output blocks,
so later turns and other instances hit them. Writes go the other way over the full-duplex links, at the tier's
write rate, each direction shared by processor sharing of its own: the KV a prefill chunk writes below HBM (into
a pool home, or through to the tier below) is part of its iteration, which lasts until both the GPU work and the
write are done (per-layer overlap; vLLM's KV connector ends the forward pass with `wait_for_save`); an answer's
write-through, demotions (blocks HBM evicts that no tier below holds) and swap-outs are timed in the background
(nobody waits, but they share the direction's bandwidth, and a swapped sequence is not swapped in before its
swap-out lands); decode appends, one token per sequence, are counted, not timed (a batch of 256 appends 80 MiB
of a 70B model's KV, 1.3 ms at 64 GB/s, against a step of tens of ms).
A sequence whose KV alone exceeds HBM lives in the tier below and streams: its KV is re-read over the link every
iteration it is in (as is everyone's with `decode: stream`); such an iteration lasts until both the GPU work and
the stream are done (per-layer overlap).

With several servers (`spec.servers`) the blocks they share through a pool tier cost the coherence scheme's
flushes, invalidations or snoops (archsim.serving.coherence.Holders), owed by the instance that writes, reads or
evicts them and paid in its next iteration; with KV in a PNM pool each iteration's decode attention is a job at
the pool's shared PNM units (archsim.serving.pnm_units), and the rest of the iteration follows it.

Stretches of pure decode (every running sequence decoding, nothing admissible) run on a fast path: the same
iterations back to back without events, up to the next event that could change the batch; a test holds it to
the event-by-event run bit for bit.

Per-request state is numpy arrays indexed by request id; ties between events at one instant are broken by
kind (transfers land, then iterations end, then arrivals) and then by id, so a run is deterministic.

Why one module of about 1,700 lines: the event handlers share some forty per-request and per-instance arrays
and call one another within one event (an iteration's end completes requests, frees blocks, admits, starts
loads and the next iteration); split over modules they would pass the engine itself around. What stands
alone is in its own module: the prefix cache (kvcache.py), the links (transfers.py, paths.py), the iteration
cost (costs.py), shared blocks' coherence (coherence.py), the shared PNM units (pnm_units.py), the activity log
(activity.py), the metrics (metrics.py).
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from dataclasses import dataclass
from functools import partial
from itertools import repeat
from typing import Any

import numpy as np

from archsim.errors import ArchsimError, ConfigError
from archsim.serving.activity import ActivityLog
from archsim.serving.coherence import CoherenceCosts, Holders
from archsim.serving.gpu_l2 import GpuL2Sampler
from archsim.serving.kvcache import LRUTier, TieredPrefixCache
from archsim.serving.paths import PathSharing
from archsim.serving.pnm_units import PnmUnits
from archsim.serving.pool_l2 import PoolL2Sampler
from archsim.serving.requests import RequestTable
from archsim.serving.spec import IterationCost, ServingSpec, validate
from archsim.serving.speculative import Speculation, draft_ns, draft_work, emitted_tokens
from archsim.serving.transfers import Link, LinkSharing, links_of_tiers, server_link_name, write_link_name
from archsim.serving.utilization import Intervals, utilization_over_time
from archsim.system.multi_token import QUERIES_MAX

ARRIVING, WAITING, LOADING, RUNNING, DONE, REJECTED = range(6)
EV_LINK, EV_UNIT, EV_ITER, EV_ARRIVAL = range(4)      # tie order at one instant
# what a finished transfer wakes (activity.TRANSFER_KINDS names them in this order)
X_LOAD, X_SWAP_IN, X_ITER, X_WRITE, X_MOVE, X_ITER_WRITE, X_SWAP_OUT, X_DEMOTE = range(8)
WRITES = (X_WRITE, X_ITER_WRITE, X_SWAP_OUT, X_DEMOTE)  # away from the GPUs: the links' other direction
BACKGROUND = (X_WRITE, X_DEMOTE)                        # nobody waits for these
OF_INSTANCE = (X_ITER, X_ITER_WRITE, X_DEMOTE)          # `who` is an instance, not a request
REJECT_CONTEXT, REJECT_CAPACITY, REJECT_PREVIOUS = 1, 2, 3


@dataclass(frozen=True)
class ServingResult:
    """One run: per-request arrays (NaN where a request never got there) and run totals."""

    spec: ServingSpec
    arrival_ns: np.ndarray
    first_token_ns: np.ndarray
    last_token_ns: np.ndarray
    queueing_ns: np.ndarray        # TTFT = queueing + kv_load + prefill, exactly
    kv_load_ns: np.ndarray
    prefill_ns: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    hit_blocks: np.ndarray         # int64[n, tiers]: prompt blocks found per tier at first admission
    loaded_blocks: np.ndarray      # int64[n, tiers]: blocks loaded from each tier (not recomputed)
    instance: np.ndarray
    completed: np.ndarray          # bool[n]
    rejected: np.ndarray           # int8[n]: 0, or why (REJECT_CONTEXT, REJECT_CAPACITY, REJECT_PREVIOUS)
    streamed: np.ndarray           # bool[n]
    preemptions: np.ndarray        # int64[n]
    tier_read_bytes: np.ndarray    # float64[tiers]: KV read out of each tier (loads, streams, swap-ins)
    tier_write_bytes: np.ndarray   # float64[tiers]: KV written into each tier (prefill/decode, write-through)
    swap_out_bytes: float          # KV of preempted sequences moved down (preemption: swap)
    swap_in_bytes: float
    handover_bytes: float          # KV a decode instance loaded from a prefill instance (disaggregation)
    link_bytes: dict[str, float]
    link_busy_ns: dict[str, float]   # per link, towards the GPUs
    peak_pinned_blocks: np.ndarray  # int64[tiers]: most blocks running sequences held in one copy of the tier
    capacity_blocks: np.ndarray     # int64[tiers]
    iterations: int
    tokens_emitted: int            # output tokens sampled, counted as the iterations produce them
    tokens_computed: int           # tokens whose KV the iterations computed (prefill chunks + decode tokens)
    events: int                    # arrivals + iterations + completions
    inflight_area_ns: float        # integral of (queued + running) requests over time
    span_start_ns: float           # first arrival
    span_end_ns: float             # last departure
    cache_stats: list[dict]
    wall_s: float
    activity: dict[str, object] | None = None  # iterations and timed transfers (archsim.serving.activity)
    home_tier: np.ndarray | None = None  # placement auto: int8[n], the tier its KV was last admitted to
    moves: np.ndarray | None = None      # placement auto: int64[n], moves between HBM and the PNM tier
    move_bytes: float = 0.0
    utilization: dict | None = None      # links and pool DRAM over time (archsim.serving.utilization)
    speculation: dict | None = None      # draft and verify: steps, tokens, rejected KV (serving.speculative)
    gpu_l2: dict | None = None           # the GPU attention's sampled L2 reuse (archsim.serving.gpu_l2)
    pool_l2: dict | None = None          # the pool's host-path L2, sampled (archsim.serving.pool_l2)
    verifier_passes: int = 0             # iterations that ran a tree's own verifier model (its weights read)
    verifier_only_passes: int = 0        # ... and nothing of the target's (whose weights stay unread)
    verifier_rows: np.ndarray | None = None  # bool[n]: the rows that model ran (RequestTable.verifier)
    pool_decode_tokens: tuple[int, int] = (0, 0)  # KV tokens the pool's decode attention read, and fetched
    kv_fetched_bytes: float = 0.0        # KV decode and verification attention fetched from the KV's memory
    link_write_busy_ns: dict[str, float] | None = None  # per link, away from the GPUs (timed writes)
    # per request, what its prefills computed (a recompute preemption prefills prompt and answer again): tokens,
    # their attention pairs (each new token over the context before it, causal), the contexts they ended at;
    # and its decode steps: tokens kept (a token whose KV a re-prefill computed is not one), their pairs
    prefill_tokens: np.ndarray | None = None
    prefill_pairs: np.ndarray | None = None
    prefill_context: np.ndarray | None = None
    decode_tokens: np.ndarray | None = None
    decode_pairs: np.ndarray | None = None
    swap_recomputes: int = 0             # preemption swap: preemptions that recomputed (no tier below the KV)
    coherence: dict | None = None        # several servers on a pool: its shared blocks' coherence traffic and stalls
    pnm_units: dict | None = None        # ... and the attention jobs their instances queued at its PNM units

    @property
    def mean_inflight(self) -> float:
        span = self.span_end_ns - self.span_start_ns
        return self.inflight_area_ns / span if span > 0 else 0.0


def simulate(table: RequestTable, spec: ServingSpec, cost: IterationCost, record: bool = False,
             placer: object | None = None, speculation: Speculation | None = None,
             l2: GpuL2Sampler | None = None, pool_l2: PoolL2Sampler | None = None,
             verifier: IterationCost | None = None) -> ServingResult:
    """Serve every request of `table`; ArchsimError naming the request that blocks a run that cannot finish.
    `record`: keep every iteration and timed transfer (`ServingResult.activity`, for a timeline). `placer`:
    with `placement: auto`, where each sequence's KV goes (archsim.plan.place.Placer); the cost then takes
    which sequences are pooled (archsim.serving.costs.SplitCost). `speculation`: decode by draft and verify
    (archsim.serving.speculative). `l2`: sample the GPU attention's L2 reuse (archsim.serving.gpu_l2); `pool_l2`:
    the pool's host-path L2 (archsim.serving.pool_l2); `verifier`: the cost of the rows a tree's own verifier
    model runs (`table.verifier`), on the same GPUs after the target's part of each iteration."""
    if spec.placement == "auto" and placer is None:
        raise ValueError("placement auto needs a placer")
    engine = _Engine(table, spec, cost, speculation)
    engine.placer = placer
    engine.l2 = l2
    engine.pool_l2 = pool_l2
    if (verifier is None) != (table.verifier is None):
        raise ValueError("a table with verifier rows needs the verifier's cost, and only then")
    engine.verifier = verifier
    engine.activity = ActivityLog() if record else None
    return engine.run()


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def successors(table: RequestTable) -> tuple[np.ndarray, np.ndarray]:
    """(offsets[n+1], ids): the requests that wait for each request (its next turn, or a program's rows that
    fork from it), in row order."""
    waiting = np.flatnonzero(table.prev >= 0)
    ids = waiting[np.argsort(table.prev[waiting], kind="stable")]
    offsets = np.zeros(len(table) + 1, dtype=np.int64)
    np.cumsum(np.bincount(table.prev[waiting], minlength=len(table)), out=offsets[1:])
    return offsets, ids


def context_keys(table: RequestTable, succ: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Block keys of each request's whole KV (prompt + output): full prompt blocks keep the table's keys, blocks
    of the output take the keys of the first request waiting for it that keeps its history (same content), the
    rest get keys of their own (a salted mix of request id and block index). Returns (keys, offsets[n+1])."""
    bt = table.block_tokens
    total_tokens = table.input_tokens + np.maximum(table.output_tokens - 1, 0)
    nblocks = np.maximum(-(-total_tokens // bt), -(-table.input_tokens // bt)).astype(np.int64)
    offsets = np.zeros(len(table) + 1, dtype=np.int64)
    np.cumsum(nblocks, out=offsets[1:])
    rid = np.repeat(np.arange(len(table), dtype=np.uint64), nblocks)
    index = np.arange(offsets[-1], dtype=np.int64) - offsets[:-1].repeat(nblocks)
    with np.errstate(over="ignore"):
        keys = _splitmix64(rid * np.uint64(0xD1B54A32D192ED03) + index.astype(np.uint64) + np.uint64(0x5EED))
        keys = _splitmix64(keys ^ np.uint64(0xA0761D6478BD642F))
    for r in range(len(table)):
        own = table.keys(r)
        full = int(table.input_tokens[r] // bt)
        keys[offsets[r]:offsets[r] + full] = own[:full]
        for nx in _waiting_rows(table, succ, r):
            later = table.keys(nx)
            upto = min(int(total_tokens[r] // bt), len(later), int(nblocks[r]))
            if upto > full and np.array_equal(later[:full], own[:full]):
                keys[offsets[r] + full:offsets[r] + upto] = later[full:upto]
                break
    return keys, offsets


def _waiting_rows(table: RequestTable, succ: tuple[np.ndarray, np.ndarray], r: int) -> list[int]:
    """The rows that wait for row r, and through a tree's own verifier rows (whose KV is another model's) the
    rows that wait for those: a node's expansion waits for its evaluation but continues the node's answer."""
    out = succ[1][succ[0][r]:succ[0][r + 1]].tolist()
    if table.verifier is None:
        return out
    rows: list[int] = []
    while out:
        nx = out.pop(0)
        rows.append(nx)
        if table.verifier[nx]:
            out.extend(succ[1][succ[0][nx]:succ[0][nx + 1]].tolist())
    return rows


class _Engine:
    fast_decode = True     # the decode fast path (exact; off only to test that it is)
    activity: ActivityLog | None = None
    placer: Any = None     # placement auto: archsim.plan.place.Placer
    l2: GpuL2Sampler | None = None
    pool_l2: PoolL2Sampler | None = None
    verifier: IterationCost | None = None
    verifier_passes = verifier_only_passes = 0

    def __init__(self, table: RequestTable, spec: ServingSpec, cost: IterationCost,
                 speculation: Speculation | None = None) -> None:
        validate(spec)
        self.speculation = speculation
        # positions a decode entry verifies: the draft's k tokens after the last one (1 without speculation)
        self.verify_tokens = speculation.k + 1 if speculation is not None else 1
        if spec.disaggregated and spec.kv_home == 0 and len(spec.tiers) < 2:
            raise ConfigError("prefill/decode disaggregation hands KV over through a tier below HBM; the system "
                              "has none", where="system.serving.prefill_instances")
        if table.block_tokens != spec.block_tokens:
            raise ConfigError(f"the requests are keyed in blocks of {table.block_tokens} tokens, the system "
                              f"uses {spec.block_tokens}", where="system.serving.block_tokens")
        self.table, self.spec, self.cost = table, spec, cost
        short = np.nonzero((table.input_tokens < 1) | (table.output_tokens < 1))[0]
        if len(short):
            raise ArchsimError(f"request {int(short[0])} has {int(table.input_tokens[short[0]])} input and "
                               f"{int(table.output_tokens[short[0]])} output tokens; both must be at least 1",
                               where="requests")
        self.n = len(table)
        self.T = len(spec.tiers)
        self.bt = spec.block_tokens
        self.kvb = spec.kv_bytes_per_token
        self.block_bytes = spec.block_bytes
        # the tier running sequences' KV lives in: a pnm pool or HBM, or the tier streamed from; with placement
        # auto each sequence's view tier (res) is 0 (HBM) or the PNM tier's index
        self.auto = spec.placement == "auto"
        self.pool_tier = spec.kv_home if self.auto else -1
        self.base = 0 if self.auto else spec.kv_home if spec.decode == "load" else spec.kv_home + 1
        self.stream_all = spec.decode == "stream"
        self._build_links()
        self._build_caches()
        self._build_units()
        self.in_tokens = table.input_tokens.astype(np.int64)
        self.out_tokens = table.output_tokens.astype(np.int64)
        self.succ_off, self.succ = successors(table)
        content_keys, self.coff = context_keys(table, (self.succ_off, self.succ))
        # the caches and the coherence bookkeeping see each distinct block as its rank among the content keys:
        # the same order and identity, as small ints (cheaper to hash and index); the L2 samplers hash the content
        self.content_keys, ranks = np.unique(content_keys, return_inverse=True)
        self.ckeys = ranks.astype(np.uint64).ravel()
        self._build_coherence()
        self.lookup_blocks = np.maximum(self.in_tokens - 1, 0) // self.bt   # at least one prompt token computes
        self._init_request_state()
        self._init_instances()

    # -- construction --------------------------------------------------------------------------------------

    def _build_links(self) -> None:
        """Transfers towards the GPU (loads, swap-ins, streams) share each link by processor sharing; writes
        away from it (prefill chunks and their write-through, swap-outs, demotions) share the link's other
        direction (`write_link`: the links are full duplex; the same latency, the tier's write rate). Decode
        appends are counted, not timed."""
        reads = links_of_tiers(self.spec.tiers)
        self.servers = self.spec.servers
        tiers = [tier for tier in self.spec.tiers if tier.link is not None]
        write_rate = {tier.link: tier.write_link_GBps for tier in tiers}
        if self.servers > 1:           # each server's own port onto each tier, then the shared side
            rate = {tier.link: tier.server_link_GBps for tier in tiers}
            ports = [(link.name, s, server_link_name(link.name, s)) for link in list(reads)
                     for s in range(self.servers)]
            reads += [Link(port, rate[name]) for name, _, port in ports]
            write_rate.update({port: next(t.server_write_link_GBps for t in tiers if t.link == name)
                               for name, _, port in ports})
        self.write_link = {link.name: write_link_name(link.name) for link in reads}
        writes = [Link(self.write_link[link.name], write_rate[link.name], link.latency_ns) for link in reads]
        self.write_spec = {link.name: link for link in writes}
        self.links: Any = PathSharing(reads + writes) if self.servers > 1 else LinkSharing(reads + writes)
        self.link_of_tier = [tier.link for tier in self.spec.tiers]
        self.link_spec = {link.name: link for link in reads}
        self.written_bytes = dict.fromkeys(self.link_spec, 0.0)   # counted, not timed
        self.paths: dict[tuple[int, int], tuple[str, ...]] = {}    # (tier, instance) -> _path's links
        self.swapping_out = np.zeros(len(self.table), dtype=bool)
        self.transfer_of: dict[int, tuple[int, int]] = {}     # transfer id -> (what, who)
        self.link_version = 0
        pools = [k for k, tier in enumerate(self.spec.tiers) if tier.kind == "pool"]
        self.pool_index = pools[0] if pools else -1
        self.pnm_index = self.pool_index if pools and self.spec.tiers[self.pool_index].compute == "pnm" else -1
        self.pnm_decoders = self.pnm_index >= 0 and not self.auto    # decode sequences may read a prefix once
        self.pool_bytes = Intervals() if pools else None       # what the pool's DRAM served, when
        self.pool_transfer: dict[int, tuple[float, float]] = {}  # timed transfer id -> (start ns, bytes)

    def _build_caches(self) -> None:
        spec = self.spec
        self.cap_blocks = np.array([spec.capacity_blocks(t) for t in range(self.T)], dtype=np.int64)
        shared = {t: LRUTier(spec.tiers[t].name, int(self.cap_blocks[t]), self.block_bytes)
                  for t in range(max(self.base, 1), self.T)}
        pending_shared = {t: set() for t in shared}
        self.views: list[TieredPrefixCache] = []
        self.pending: list[list[set]] = []    # per instance, per view tier: blocks pinned but not yet computed
        for i in range(spec.instances):
            tiers, pend = [], []
            for t in range(self.base, self.T):
                if t == 0:
                    tiers.append(LRUTier(f"{spec.tiers[0].name}{i}", int(self.cap_blocks[0]), self.block_bytes))
                    pend.append(set())
                else:
                    tiers.append(shared[t])
                    pend.append(pending_shared[t])
            view = TieredPrefixCache.of_tiers(tiers)
            view.on_demote = partial(self._demoted, i)
            self.views.append(view)
            self.pending.append(pend)
        self.peak_pinned = np.zeros(self.T, dtype=np.int64)
        self.demoted: dict[tuple[int, int], int] = {}   # (instance, tier) -> blocks demoted into it, not yet timed

    def _build_units(self) -> None:
        """Several servers with their KV in a PNM pool: each iteration's decode attention is a job at the pool's
        shared PNM units (archsim.serving.pnm_units), of the cost table's PNM time over the instances (the table
        has every instance attending at once), the rest of the iteration after it. One server keeps the table's
        price (its symmetric-instance rule)."""
        self.units: PnmUnits | None = None
        self.unit_heap: list[tuple[float, int, int, int]] = []
        if self.servers == 1 or self.auto or self.pnm_index < 0 or self.spec.kv_home != self.pnm_index or \
                not hasattr(self.cost, "iteration_pnm_ns"):
            return
        self.units = PnmUnits(self.servers, self.spec.pnm_scheduling)

    def _build_coherence(self) -> None:
        """Several servers sharing a pool tier: which server holds lines of which of its blocks and version
        (coherence.Holders, `spec.coherence`'s scheme), and what each instance owes its next iteration for it
        (`owed[i]`: flushes, invalidations, snooped blocks; counts, so that a decode stretch owes bit for bit
        what its iterations owe one by one). One server, or no pool: nothing is charged."""
        self.coherence: Holders | None = None
        if self.servers == 1 or self.pool_index < max(self.base, 1):
            return
        self.shared_tier = self.views[0].tiers[self.pool_index - self.base]
        self.shared_tier.written, self.shared_tier.evicted = [], []
        # under DMA no CPU cache holds a block's data: the protocol orders its publication, one metadata line
        costs = CoherenceCosts()
        costs = costs.for_block(costs.line_bytes if self.spec.kv_data_path == "dma" else self.block_bytes)
        # every block's rank (ckeys) is its index there: 0 .. distinct keys - 1
        self.coherence = Holders(np.arange(len(self.content_keys), dtype=np.uint64), self.servers,
                                 self.spec.coherence, costs)
        self.owed = np.zeros((self.spec.instances, 3), dtype=np.int64)

    def _sync_coherence(self, i: int) -> None:
        """Charge instance i for the blocks its last cache operations evicted from and wrote into the shared pool:
        their evictions, then their writes (an operation makes room before it writes)."""
        tier = self.shared_tier
        server = self.server_of[i]
        if tier.evicted:
            self.owed[i, 2] += self.coherence.evict(tier.evicted, server)
            tier.evicted.clear()
        if tier.written:
            flushes, snooped = self.coherence.write(tier.written, server)
            tier.written.clear()
            self.owed[i, 0] += flushes
            self.owed[i, 2] += snooped

    def _read_shared(self, i: int, keys: np.ndarray) -> None:
        """Instance i reads these blocks of the shared pool (in place, or loading them)."""
        if len(keys):
            self.owed[i, 1] += self.coherence.read(keys, self.server_of[i])

    def _owed_ns(self, i: int) -> float:
        """What instance i owes for coherence, in time; paid (zeroed) now."""
        flushes, invalidations, snooped = owed = self.owed[i].tolist()
        if not any(owed):
            return 0.0                 # (stall_ns of nothing)
        self.owed[i] = 0
        return self.coherence.costs.stall_ns(flushes, invalidations, snooped)

    def _init_request_state(self) -> None:
        n, T = self.n, self.T
        self.arrival = np.array(self.table.arrival_ns, dtype=np.float64, copy=True)
        self.state = np.full(n, ARRIVING, dtype=np.int8)
        self.inst = np.full(n, -1, dtype=np.int64)
        self.ctx = np.zeros(n, dtype=np.int64)          # tokens whose KV the sequence holds
        self.target = self.in_tokens.copy()             # tokens to prefill before decoding
        self.out_done = np.zeros(n, dtype=np.int64)
        self.nheld = np.zeros(n, dtype=np.int64)        # blocks pinned in its tier (ckeys[:nheld])
        self.res = np.zeros(n, dtype=np.int64)          # view tier of its KV (0: the home; 1: streamed below)
        self.streams = np.zeros(n, dtype=bool)
        self.any_streams = False                        # whether any sequence has streamed (else skip the test)
        self.swapped = np.zeros(n, dtype=bool)
        self.handed = np.zeros(n, dtype=bool)           # prefilled, waiting for a decode instance to take it
        self.took_over = False
        self.looked_up = np.zeros(n, dtype=bool)
        self.admit_cached = np.zeros(n, dtype=np.int64)   # blocks present (hit or loaded) at admission
        # prompt tokens, from the start, whose blocks the tier below HBM held at admission: recomputed (loading
        # did not pay, or a recompute preemption), not written through again
        self.below_held = np.zeros(n, dtype=np.int64)
        # a request that found no room is not looked at again until some sequence releases blocks
        self.blocked_epoch = np.full(n, -1, dtype=np.int64)
        self.release_epoch = 0
        self.first_ns = np.full(n, np.nan)
        self.last_ns = np.full(n, np.nan)
        self.prefill_start = np.full(n, np.nan)
        self.load_start = np.full(n, np.nan)
        self.kv_load_ns = np.zeros(n)
        self.prefill_ns = np.full(n, np.nan)
        self.queueing_ns = np.full(n, np.nan)
        self.xfers_left = np.zeros(n, dtype=np.int64)
        self.hit_blocks = np.zeros((n, T), dtype=np.int64)
        self.loaded_blocks = np.zeros((n, T), dtype=np.int64)
        self.rejected = np.zeros(n, dtype=np.int8)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.prefill_tokens = np.zeros(n, dtype=np.int64)
        self.prefill_pairs = np.zeros(n, dtype=np.int64)
        self.prefill_context = np.zeros(n, dtype=np.int64)
        self.decode_tokens = np.zeros(n, dtype=np.int64)
        self.decode_pairs = np.zeros(n, dtype=np.int64)
        self.moves = np.zeros(n, dtype=np.int64)
        self.move_bytes = 0.0
        self.tier_read = np.zeros(T)
        self.tier_write = np.zeros(T)
        self.decode_tokens_read = 0   # KV tokens decode attention read, wherever the KV is
        self.pool_decode_tokens = 0   # KV tokens the pool's decode attention read (datapath), and fetched from DRAM
        self.pool_decode_fetched = 0
        self.verify_steps = np.zeros(n, dtype=np.int64)  # speculation: verification steps each request ran
        self.rejected_tokens = 0                         # positions verified, written and then discarded
        self.verified_kv_read = 0.0                      # KV bytes the verification steps read (their contexts)
        self.verified_chunk_read = 0.0                   # ... those of more than one position (not decode entries)
        self.draft_ns = 0.0
        self.draft_passes = self.draft_tokens = self.draft_pairs = 0  # what the draft computed (its energy)
        self.draft_kv_tokens = 0
        self.rejected_pairs = self.rejected_pairs_pnm = 0  # attention pairs of the rejected positions (in a PNM pool)
        self.verified_kv_read_pnm = 0.0                  # ... of verified_kv_read, by a PNM pool's units

    def _init_instances(self) -> None:
        k = self.spec.instances
        self.waiting = [deque() for _ in range(k)]
        self.running: list[list[int]] = [[] for _ in range(k)]
        self.landing: list[set[int]] = [set() for _ in range(k)]  # sequences whose KV is in flight to it
        self.busy = [False] * k
        self.server_of = [int(self.spec.server_of(i)) for i in range(k)]
        self.parts_left = [0] * k
        self.iter_start = [0.0] * k    # when its iteration in progress began
        self.last_step_ns = [0.0] * k  # how long its last event-path iteration took (the fast path's quick test)
        self.batch: list[tuple[np.ndarray, np.ndarray, np.ndarray] | None] = [None] * k
        # its last batch when that was every running sequence decoding one token (ids as a list too): the next
        # is the same while nothing joins, leaves or needs a block (`_same_decoders`)
        self.decoders: list[tuple[np.ndarray, np.ndarray, np.ndarray, list[int]] | None] = [None] * k
        self.lean_plan: list[tuple | None] = [None] * k    # _lean_plan of its last decoders (_start_decoders)
        self.queued_tokens = np.zeros(k, dtype=np.int64)   # input + output tokens of each instance's requests
        self.rr_next = 0
        self.heap: list[tuple[float, int, int, int]] = []        # arrivals
        self.iter_heap: list[tuple[float, int, int, int]] = []   # iteration ends, one per busy instance
        self.link_heap: list[tuple[float, int, int, int]] = []   # the links' next completion (by version)
        # the next completion wakes nobody (a write-through); then `wake_floor` bounds the next one that does:
        # (start + latency + bytes / bandwidth, transfer id) of every transfer someone waits for
        self.quiet_next = False
        self.wake_floor: list[tuple[float, int]] = []
        later = self.table.prev >= 0
        # a finished turn's successor arrives no sooner than this after it (bounds the decode fast path)
        self.min_think_ns = float(self.table.think_ns[later].min()) if later.any() else math.inf
        self.iterations = self.arrivals = self.completions = 0
        self.completed_out_tokens = 0                      # answers of the completed requests (auto's horizon)
        self.tokens_emitted = self.tokens_computed = 0     # output tokens sampled; tokens whose KV was computed
        self.swap_out_bytes = self.swap_in_bytes = self.handover_bytes = 0.0
        self.swap_recomputes = 0
        # disaggregation: instances [0, prefill_instances) prefill, the rest decode
        self.routable = self.spec.prefill_instances if self.spec.disaggregated else self.spec.instances
        self.inflight = 0
        self.inflight_area = 0.0
        self.inflight_t = 0.0
        self.span_start = math.inf
        self.span_end = -math.inf

    # -- the event loop ------------------------------------------------------------------------------------

    def run(self) -> ServingResult:
        wall = time.perf_counter()
        # a batch of the same decoders steps on without being built again (_decode_on) unless iterations are
        # recorded or sequences change places between steps
        self.lean_steps = self.activity is None and not self.auto
        # ... and a decode-only batch's cost is the table's function of (sequences, cached tokens) when it has one
        self.decode_only_cost = getattr(self.cost, "decode_only_ns", None) if not self.auto else None
        first = np.nonzero(self.table.prev < 0)[0]
        if np.isnan(self.arrival[first]).any():
            r = int(first[np.isnan(self.arrival[first])][0])
            raise ArchsimError(f"request {r} starts a session but has no arrival time", where="requests")
        for r in first.tolist():
            heapq.heappush(self.heap, (float(self.arrival[r]), EV_ARRIVAL, r, 0))
        self._plan_arrivals(first)
        heaps = (self.heap, self.iter_heap, self.link_heap, self.unit_heap)
        while True:
            first_heap = None              # the heap whose head comes first (the first such, as min's)
            for h in heaps:
                if h and (first_heap is None or h[0] < first_heap[0]):
                    first_heap = h
            if first_heap is None:
                break
            t, kind, a, b = heapq.heappop(first_heap)
            if kind == EV_ITER:
                self._iteration_part_done(a, t)
            elif kind == EV_ARRIVAL:
                self._arrive(a, t)
            elif kind == EV_LINK:
                self._link_check(b, t)
            else:
                self._unit_check(t)
            if self.demoted:
                self._time_demotions(t)
        self._check_finished()
        return self._result(time.perf_counter() - wall)

    def _plan_arrivals(self, first: np.ndarray) -> None:
        """Round robin, no later turns and no tier but each instance's HBM: every arrival's instance is known
        before the run (the accepted ones in arrival order, one instance after the other), and nothing else
        couples the instances, so a decode stretch need stop only at its own instance's next arrival
        (`own_arrivals[i]`, times ascending; `own_next[i]` the first not yet come). Where they share a tier,
        another instance's admission can take the room a stretch pinned ahead, so every arrival bounds it."""
        self.own_arrivals: list[np.ndarray] | None = None
        k = self.routable
        if self.spec.router != "round_robin" or k < 2 or math.isfinite(self.min_think_ns) or self.T > 1:
            return
        order = first[np.lexsort((first, self.arrival[first]))]     # the heap's order: time, then id
        accepted = np.array([r for r in order.tolist() if not self._refused(r)], dtype=np.int64)
        route = np.arange(len(accepted)) % k
        self.own_arrivals = [self.arrival[accepted[route == i]] for i in range(k)]
        self.own_next = [0] * k

    def _arrival_bound(self, i: int, t: float) -> float:
        """No arrival can change instance i's batch before this."""
        if self.own_arrivals is None:
            return self.heap[0][0] if self.heap else math.inf
        times = self.own_arrivals[i]
        j = self.own_next[i]
        while j < len(times) and times[j] < t:
            j += 1
        self.own_next[i] = j
        return float(times[j]) if j < len(times) else math.inf

    def _push(self, t: float, kind: int, a: int, b: int = 0) -> None:
        heapq.heappush(self.heap, (t, kind, a, b))

    def _count_inflight(self, t: float, delta: int) -> None:
        self.inflight_area += self.inflight * (t - self.inflight_t)
        self.inflight_t = t
        self.inflight += delta

    # -- arrivals and routing ------------------------------------------------------------------------------

    def _refused(self, r: int) -> int:
        """Why request r is rejected when it arrives (REJECT_CONTEXT, REJECT_CAPACITY), or 0: its own lengths
        against the context and the tiers' capacity decide, nothing that happens in the run."""
        total = int(self.in_tokens[r] + self.out_tokens[r])
        need_blocks = -(-(total - 1) // self.bt)
        if total > self.spec.max_context_tokens:
            return REJECT_CONTEXT
        if self.auto:
            return REJECT_CAPACITY if need_blocks > max(self.cap_blocks[0], self.cap_blocks[self.pool_tier]) else 0
        if need_blocks <= self.cap_blocks[self.base] or (self.base == 0 and self.T > 1 and
                                                          need_blocks <= self.cap_blocks[1]):
            return 0
        return REJECT_CAPACITY

    def _arrive(self, r: int, t: float) -> None:
        self.arrivals += 1
        total = int(self.in_tokens[r] + self.out_tokens[r])
        why = self._refused(r)
        if why:
            self._reject(r, why)
            return
        if not self.auto:              # it fits its home, or streams from the tier below
            if -(-(total - 1) // self.bt) <= self.cap_blocks[self.base]:
                self.streams[r] = self.stream_all
            else:
                self.res[r], self.streams[r] = 1, True
            self.any_streams = self.any_streams or bool(self.streams[r])
        self.span_start = min(self.span_start, t)
        self._count_inflight(t, +1)
        self.state[r] = WAITING
        i = self._route(r)
        self.inst[r] = i
        self.queued_tokens[i] += total
        self.waiting[i].append(r)
        self._schedule(i, t)

    def _reject(self, r: int, why: int) -> None:
        self.state[r], self.rejected[r] = REJECTED, why
        stack = self._waiting_for(r)
        while stack:          # what waits for it (later turns, a program's rows) never arrives
            nx = stack.pop()
            self.state[nx], self.rejected[nx] = REJECTED, REJECT_PREVIOUS
            stack.extend(self._waiting_for(nx))

    def _waiting_for(self, r: int) -> list[int]:
        return self.succ[self.succ_off[r]:self.succ_off[r + 1]].tolist()

    def _route(self, r: int) -> int:
        k = self.routable
        if k == 1:
            return 0
        router = self.spec.router
        if router == "round_robin":
            i = self.rr_next
            self.rr_next = (i + 1) % k
            return i
        if router == "least_loaded":
            return int(np.argmin(self.queued_tokens[:k]))
        keys = self._prompt_keys(r)
        best, best_key = 0, None
        for i in range(k):
            hits = self.views[i].lookup(keys, record=False)
            held = int(np.argmin(np.append(hits, -1) == 0)) if self.base == 0 else 0   # leading run in HBM
            key = (-held, int(self.queued_tokens[i]), i)
            if best_key is None or key < best_key:
                best, best_key = i, key
        return best

    def _prompt_keys(self, r: int) -> np.ndarray:
        lo = self.coff[r]
        return self.ckeys[lo:lo + self.lookup_blocks[r]]

    def _seq_keys(self, r: int, blocks: int) -> np.ndarray:
        lo = self.coff[r]
        return self.ckeys[lo:lo + blocks]

    # -- scheduling one iteration --------------------------------------------------------------------------

    def _schedule(self, i: int, t: float) -> None:
        """Start instance i's next iteration if it is idle; pure decode stretches run on the fast path."""
        if self.busy[i]:
            return
        batch = self._build_batch(i, t)
        if batch is None:
            return
        ids, news, prefill, decode_only = batch
        if not (decode_only and self._stretch(i, t, ids)):
            self._start_iteration(i, t, ids, news, prefill, unshared=decode_only)

    def _stretch(self, i: int, t: float, ids: np.ndarray) -> bool:
        """Run the decode batch `ids` on the fast path if it can go a step or more: then instance i is busy until
        the stretch ends and resumes in event order."""
        if not self.fast_decode:
            return False
        t_after = self._fast_decode(i, t, ids)
        if t_after <= t:
            return False
        self.busy[i] = True
        self.batch[i] = None
        self.parts_left[i] = 1
        heapq.heappush(self.iter_heap, (t_after, EV_ITER, i, 0))
        return True

    def _decode_on(self, i: int, t: float) -> bool:
        """Finish instance i's iteration of its last decode-only batch and start the next when that is the same
        batch again (nobody finishes, waits or lands; those whose next token starts a block get it): what
        _finish_iteration and _schedule do then, in the same order, without building the batch again. False,
        having done nothing, otherwise."""
        ids, news, prefill, ids_list = self.decoders[i]
        if self.running[i] != ids_list or self.waiting[i] or self.landing[i]:
            return False
        plan = self.lean_plan[i]
        if plan is None or plan[0] is not ids:
            plan = self.lean_plan[i] = self._lean_plan(i, ids)
        ctx_l, out_l = self.ctx[ids].tolist(), self.out_done[ids].tolist()
        changes = False                # a row's next token starts a block, or it fills its first one
        for c, o, (out_last, ctx_last) in zip(ctx_l, out_l, plan[4], strict=True):
            if o > out_last:
                return False           # it finishes now
            if c > ctx_last:
                if c > ctx_last + 1:
                    return False       # (past its blocks: never so; the build says what then)
                changes = True
        self.batch[i] = None
        self.last_step_ns[i] = t - self.iter_start[i]
        self.iterations += 1
        self.tokens_computed += len(ids_list)
        self.tokens_emitted += len(ids_list)
        ctx_a, out_a, dec_tokens, dec_pairs = self.ctx, self.out_done, self.decode_tokens, self.decode_pairs
        for r, c, o in zip(ids_list, ctx_l, out_l, strict=True):
            dec_tokens[r] += 1         # one token over its c cached ones: c + 1 attention pairs
            dec_pairs[r] += c + 1
            ctx_a[r] = c + 1
            out_a[r] = o + 1
        if changes:
            nheld, bt = self.nheld, self.bt
            grow = [s for s, r in enumerate(ids_list) if ctx_a[r] >= nheld[r] * bt]
            if grow and not self._grant_next_blocks(i, ids, grow):
                self._schedule(i, t)   # no room for them all: building the batch preempts
                return True
            plan = self.lean_plan[i] = self._lean_plan_on(plan, ctx_l)
            if not self._decoders_hold(i, ids_list):
                self._schedule(i, t)   # two of them now share a block: the batch is built again
                return True
        elif self.coherence is not None:  # (which pool decoders share a block changes only with `changes`)
            self._sync_coherence(i)
        if (self.units is not None and len(self.units)) or not self._stretch(i, t, ids):  # (no stretch then)
            self._start_decoders(i, t, plan, news, prefill, [c + 1 for c in ctx_l])
        return True

    def _grant_next_blocks(self, i: int, ids: np.ndarray, grow: list[int]) -> bool:
        """Give rows `grow` of the decode batch `ids` the block their next token starts, as building the batch
        would (_grow_decoders: in batch order, one all-or-nothing insert when they share a tier, then the
        coherence charges); False, changing nothing, when they are in more than one tier or the tier has no room
        for them all (the build then gives them one by one, preempting)."""
        rows = ids[grow]
        if len(set(self.res[rows].tolist())) != 1 or not self._grow_all(i, rows, None, list(range(len(grow)))):
            return False
        if self.coherence is not None:
            self._sync_coherence(i)
        return True

    def _lean_plan_on(self, plan: tuple, ctx_l: list[int]) -> tuple:
        """_lean_plan of the same batch after the step from contexts `ctx_l` in which some rows reached their
        last context (those now hold a block more, or fill their first: past it, only their blocks bound them)."""
        ids, bt, nheld = plan[0], self.bt, self.nheld
        last = [(out_last, int(nheld[r]) * bt - 2) if c > ctx_last else (out_last, ctx_last)
                for r, c, (out_last, ctx_last) in zip(ids.tolist(), ctx_l, plan[4], strict=True)]
        return (*plan[:4], last)

    def _lean_plan(self, i: int, ids: np.ndarray) -> tuple:
        """What every iteration of instance i's decode-only batch `ids` does alike while it stays the same batch:
        (ids, whether _start_decoders may run it, which rows keep their KV in the pool (None without a pool),
        the writes (tier, bytes, links the bytes are counted on) of one appended token each, by tier, and each
        row's last (tokens emitted, context) from which it steps on lean without a look at the cache
        (_decode_on): up to it, it holds its blocks and which pool decoders share a block stays as it is)."""
        lean = self.verifier is None and self.decode_only_cost is not None and self.pool_l2 is None
        res = self.res[ids].tolist()
        on_pool = [self.base + v == self.pool_index for v in res] if self.pool_bytes is not None else None
        writes = [(self.base + v, float(res.count(v) * self.kvb),
                   self._path(self.base + v, i) if self.base + v > 0 else ()) for v in sorted(set(res))]
        ctx_last = self.nheld[ids] * self.bt - 2
        if self.pnm_decoders:          # a pool decoder filling its first block joins the sharing test
            joins = (self.base + self.res[ids] == self.pool_index) & (self.ctx[ids] < self.bt)  # (_pool_decoders)
            ctx_last[joins] = np.minimum(ctx_last[joins], self.bt - 2)
        last = list(zip((self.out_tokens[ids] - 2).tolist(), ctx_last.tolist(), strict=True))
        return ids, lean, on_pool, writes, last

    def _start_decoders(self, i: int, t: float, plan: tuple, news: np.ndarray, prefill: np.ndarray,
                        ctx_l: list[int]) -> None:
        """_start_iteration of the decode-only batch of `plan` (its _lean_plan) again (_decode_on), its contexts
        `ctx_l` (a list): the same bookkeeping in the same order, from the batch's constants."""
        ids, lean, on_pool, writes, _ = plan
        if not lean:
            self._start_iteration(i, t, ids, news, prefill, unshared=True)
            return
        self.busy[i] = True
        self.iter_start[i] = t
        if self.l2 is not None:
            self._sample_l2(ids, self.ctx[ids], self.iterations)
        total = sum(ctx_l)
        self.decode_tokens_read += total
        pooled_tokens = 0
        if on_pool is not None:        # as _decode_reads of a batch that shares nothing
            read = sum(c for c, p in zip(ctx_l, on_pool, strict=True) if p)
            self.pool_decode_tokens += read
            self.pool_decode_fetched += read
            pooled_tokens = read + on_pool.count(True)
        work_ns, rest_ns = self._launch(i, t, (ids, news, prefill), *self._decode_only_ns(len(ctx_l), total))
        if pooled_tokens:
            self.pool_bytes.add(t, (t + work_ns) + rest_ns, float(pooled_tokens * self.kvb))
        for tier, size, path in writes:            # one appended token each: decode appends, counted
            self.tier_write[tier] += size
            for name in path:
                self.written_bytes[name] += size

    def _build_batch(self, i: int, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool] | None:
        """Decode tokens first, then prefills under way, then admissions, within the token budget. The flag
        says the batch is every running sequence decoding from the home tier with nothing left to admit."""
        run = self.running[i]
        last = self.decoders[i]
        if last is not None and self._same_decoders(i, last[3]):
            return last[0], last[1], last[2], True
        budget = self.spec.max_batch_tokens
        ids: list[int] = []
        news: list[int] = []
        prefill: list[bool] = []
        if run:
            decoding, prefilling = self._grow_decoders(i, t)
            if self.speculation is None:   # one position each: the budget takes the first `budget` of them
                fits = max(1, min(len(decoding), budget)) if decoding else 0
                ids.extend(decoding[:fits])
                news.extend([1] * fits)
                budget -= fits
            else:
                dec = np.array(decoding, dtype=np.int64)
                verify = self._verify_tokens(dec)
                fits = max(1, int(np.searchsorted(np.cumsum(verify), budget, side="right"))) if len(verify) else 0
                dec, verify = dec[:fits], verify[:fits]  # the budget counts every verified position
                ids.extend(dec.tolist())
                news.extend(verify.tolist())
                budget -= int(verify.sum())
            prefill.extend([False] * fits)
            ctx, target = self.ctx, self.target
            for r in prefilling:
                if budget <= 0:
                    break
                chunk = int(target[r] - ctx[r])
                if self.spec.chunked_prefill:
                    chunk = min(chunk, budget)
                elif chunk > budget:
                    continue
                self._add_prefill(r, chunk, t, ids, news, prefill)
                budget -= chunk
        waiting = self.waiting[i]
        while waiting and budget > 0 and len(run) + len(self.landing[i]) < self.spec.max_batch_seqs:
            chunk = self._admit(i, waiting[0], t, budget)
            if chunk is None:
                break
            if chunk:
                self._add_prefill(waiting[0], chunk, t, ids, news, prefill)
                budget -= chunk
            waiting.popleft()
        if not ids:
            if self.took_over:           # it joins the batch now: build again with it running
                self.took_over = False
                return self._build_batch(i, t)
            return None
        self.took_over = False
        ids_arr = np.array(ids, dtype=np.int64)
        prefill_arr = np.array(prefill, dtype=bool)
        # (one sequence shares blocks with none: _shares_blocks' first test, without the masks)
        # (no sequence has ever streamed: the streams test needs no gather)
        decode_only = len(ids) == len(run) and not any(prefill) and \
            not (self.any_streams and self.streams[ids_arr].any()) and \
            self.speculation is None and \
            (len(ids) < 2 or not self._shares_blocks(self._pool_decoders(ids_arr, ~prefill_arr)))
        # (the fast path runs one token per sequence and step, each reading its own KV)
        news_arr = np.array(news, dtype=np.int64)
        self.decoders[i] = (ids_arr, news_arr, prefill_arr, ids) if decode_only else None
        return ids_arr, news_arr, prefill_arr, decode_only

    def _same_decoders(self, i: int, ids: list[int]) -> bool:
        """Whether instance i's next batch is its last decode-only one again, as building it would find: the
        same sequences running, none needing a block, nothing waiting or landing. Then the coherence charges
        that giving blocks would have synced are synced here."""
        if self.running[i] != ids or self.waiting[i] or self.landing[i]:
            return False
        bt, ctx, nheld = self.bt, self.ctx, self.nheld
        if any(int(ctx[r]) >= int(nheld[r]) * bt for r in ids):   # ctx + 1 passes what it holds: a new block
            return False
        return self._decoders_hold(i, ids)

    def _decoders_hold(self, i: int, ids: list[int]) -> bool:
        """The rest of _same_decoders, once the batch's shape is known to hold: no two of its pool decoders share
        a block now (then the coherence charges are synced)."""
        if len(ids) > 1:           # a sequence reaching its first full block may start sharing it with another
            arr = np.array(ids, dtype=np.int64)
            if self._shares_blocks(self._pool_decoders(arr, np.ones(len(ids), dtype=bool))):
                return False
        if self.coherence is not None:
            self._sync_coherence(i)
        return True

    def _verify_tokens(self, ids: np.ndarray) -> np.ndarray:
        """Positions each decode sequence computes this iteration: 1, or with speculation the k drafted tokens
        after its last one, never more than it still has to emit (so its blocks stay within its KV)."""
        if self.speculation is None:
            return np.ones(len(ids), np.int64)
        return np.minimum(self.verify_tokens, self.out_tokens[ids] - self.out_done[ids])

    def _fast_decode(self, i: int, t: float, ids: np.ndarray) -> float:
        """Run decode iterations of the unchanged batch `ids` back to back, up to (not into) the iteration
        in which a sequence finishes, a block the tier cannot give, or the next event that could change this
        instance's batch (an arrival, a transfer, or any iteration end when instances share KV room or a
        finished turn's successor could arrive first). Returns the time reached (t if it ran none). Exact:
        the same iterations, at the same times, as the event-by-event path."""
        if self.units is not None and len(self.units):
            return t                   # another server's job is at the PNM units: the steps' times depend on it
        # instances share KV room when it lives in a shared tier (a pool home, placement auto, handovers, a
        # waiting head that streams from the tier below HBM): then every arrival and iteration end can matter
        head = self.waiting[i][0] if self.waiting[i] else -1
        coupled = self.base > 0 or self.auto or self.routable < self.spec.instances or \
            (head >= 0 and self.res[head] > 0)
        limit = t + self.last_step_ns[i]
        bound = math.inf
        if self.iter_heap:             # (first: with several instances it is nearly always the one that binds)
            others = self.iter_heap[0][0]
            bound = others if coupled else others + self.min_think_ns
        if bound >= limit:             # (the bounds below only move cursors past what is over: skipping them is exact)
            bound = min(bound, self._arrival_bound(i, t), self._link_bound())
        if bound < limit:
            return t                   # not even one step of the last one's length fits: the event path runs it
        ctx = self.ctx[ids]
        held_tokens = self.nheld[ids] * self.bt
        left = int((self.out_tokens[ids] - self.out_done[ids]).min()) - 1   # the last one goes the normal way
        if self.auto:                  # so does the step that reaches a replan
            R = self.spec.replan_tokens
            left = min(left, int((R - ctx % R).min()) - 1)
        done, chunk = 0, 8
        step_ends = [t]                # every step's end, for the pool DRAM's bytes over time
        owed_before = self.owed[i].copy() if self.coherence is not None else None
        while done < left:
            steps = min(chunk, left - done)
            chunk *= 2
            owed = None
            if owed_before is not None:
                owed, started, steps = self._owed_ahead(i, ids, ctx, held_tokens, steps, not done)
                if not steps:
                    break
            ends, t_end, works = [], t, []
            for j, (rest_ns, work_ns) in enumerate(self._decode_steps(ctx, steps, ids)):
                if owed is not None:
                    rest_ns = rest_ns + owed[j]
                works.append(work_ns)
                # as the event path: alone at the PNM units its job ends `work_ns` after the step starts
                t_end = t_end + rest_ns if not work_ns else (t_end + work_ns) + rest_ns
                if t_end >= bound:
                    break
                ends.append(t_end)
            fits = self._grow_ahead(i, ids, ctx, held_tokens, len(ends))
            if owed_before is not None:    # what the steps run paid comes off what the instance owes
                self._sync_coherence(i)
                if fits:
                    self.owed[i, 0] -= int(started[:fits].sum())
                    if not done:
                        self.owed[i] -= owed_before
            if fits:
                if self.units is not None:
                    alone = [(s, w) for s, w in zip([t, *ends[:fits - 1]], works[:fits], strict=True) if w]
                    self.units.ran_alone(int(self.spec.server_of(i)), [s for s, _ in alone], [w for _, w in alone])
                if self.activity is not None:
                    self.activity.decode_steps(i, t, ends[:fits], len(ids))
                t = ends[fits - 1]
                step_ends.extend(ends[:fits])
                ctx += fits
                done += fits
            if fits < steps:
                break
        if done:
            self._sample_l2(ids, ctx - done, self.iterations, done)
            self.decode_tokens_read += int(done * int((ctx - done).sum()) + len(ids) * done * (done - 1) // 2)
            self._count_decoded(ids, ctx - done, done)
            self.ctx[ids] = ctx
            self.out_done[ids] += done
            self.iterations += done
            self.tokens_emitted += done * len(ids)
            self.tokens_computed += done * len(ids)
            res = self.res[ids]
            for v in sorted(set(res.tolist())):
                size = float(done * int((res == v).sum()) * self.kvb)
                self.tier_write[self.base + v] += size
                if self.base + v > 0:
                    self._count_written(self.base + v, i, size)
            if self.pool_bytes is not None:
                on_pool = self.base + res == self.pool_index
                n = int(on_pool.sum())
                if n:  # step j reads ctx0 + j tokens of each sequence and appends one, over that step
                    first = int((ctx[on_pool] - done).sum())
                    read = done * first + n * done * (done - 1) // 2
                    self.pool_decode_tokens += read
                    self.pool_decode_fetched += read
                    tokens = first + n * np.arange(1, done + 1, dtype=np.int64)
                    edges = np.array(step_ends, dtype=np.float64)
                    self.pool_bytes.add_many(edges[:-1], edges[1:], (tokens * self.kvb).astype(np.float64))
        return t

    def _owed_ahead(self, i: int, ids: np.ndarray, ctx: np.ndarray, held_tokens: np.ndarray, steps: int,
                    first: bool) -> tuple[list[float], np.ndarray, int]:
        """What each of the next `steps` decode steps of batch `ids` owes for coherence: the flushes (software)
        of the blocks it starts in the shared pool, and the first step of a stretch what the instance owes now.
        Returns (stall per step, blocks started in the pool per step, steps that may run ahead). The steps stop
        before the first whose blocks make their tier evict where that costs (back-invalidation snoops what
        it evicts; a home outside the pool may demote into it), or, with back-invalidation, whose blocks were in
        the pool before (their holders are snooped): the event path prices those."""
        started = np.zeros(steps, dtype=np.int64)
        limit = steps
        first_step = held_tokens - ctx                 # as _grow_ahead: when each sequence needs its next block
        needs = first_step < steps
        if needs.any():
            if len(set(self.res[ids[needs]].tolist())) > 1:
                return [], started, 0                  # placement auto, both sides growing: the event path
            events = sorted((j, s) for s in np.flatnonzero(needs).tolist()
                            for j in range(int(first_step[s]), steps, self.bt))
            order: dict[int, int] = {}
            positions = []
            for _, s in events:
                g = int(ids[s])
                m = order.get(g, 0)
                order[g] = m + 1
                positions.append(self.coff[g] + self.nheld[g] + m)
            keys = self.ckeys[np.asarray(positions, dtype=np.int64)]
            v = int(self.res[ids[needs][0]])
            tier = self.views[i].tiers[v]
            new = ~tier.holds_mask(keys.tolist())
            js = np.array([j for j, _ in events], dtype=np.int64)
            in_pool = self.base + v == self.pool_index
            software = self.spec.coherence == "software"
            free = math.inf if tier.unbounded else tier.capacity_blocks - len(tier)
            stop = np.cumsum(new) > free if not (in_pool and software) else np.zeros(len(js), dtype=bool)
            if in_pool and not software:
                held = self.coherence.held[np.searchsorted(self.coherence.keys, keys)]
                stop |= new & (held != 0)
            if stop.any():
                limit = int(js[int(np.argmax(stop))])
            if in_pool and software:
                started = np.bincount(js[new], minlength=steps).astype(np.int64)
        costs = self.coherence.costs
        owed = [costs.stall_ns(int(n), 0, 0) for n in started[:limit].tolist()]
        if first and limit:
            flushes, invalidations, snooped = self.owed[i].tolist()
            owed[0] = costs.stall_ns(flushes + int(started[0]), invalidations, snooped)
        return owed, started, limit

    def _link_bound(self) -> float:
        """No transfer anyone waits for completes before this (the fast path's bound from the links)."""
        if not self.quiet_next:
            return self.link_heap[0][0] if self.link_heap else math.inf
        floor = self.wake_floor
        while floor and floor[0][1] not in self.transfer_of:
            heapq.heappop(floor)
        return floor[0][0] if floor else math.inf

    def _add_prefill(self, r: int, chunk: int, t: float, ids: list, news: list, prefill: list) -> None:
        if np.isnan(self.prefill_start[r]):
            self.prefill_start[r] = t
        ids.append(r)
        news.append(chunk)
        prefill.append(True)

    def _decode_steps(self, ctx: np.ndarray, steps: int, ids: np.ndarray) -> list[tuple[float, float]]:
        """`_decode_steps_ns` as (time after the PNM units' job, the job's work) per step, as `_start_iteration`
        splits an iteration when the units are modelled (work 0: no job)."""
        if self.units is None:
            return [(x, 0.0) for x in self._decode_steps_ns(ctx, steps, ids)]
        vectorized = getattr(self.cost, "decode_steps_pnm_ns", None)
        if vectorized is not None:
            totals, pnm = vectorized(ctx, steps)
        else:
            ones = np.ones(len(ctx), dtype=np.int64)
            totals, pnm = zip(*(self.cost.iteration_pnm_ns(ctx + j, ones) for j in range(steps)), strict=True)
        instances = self.spec.instances
        return [(float(x) - float(p), float(p) / instances) if p > 0 else (float(x), 0.0)
                for x, p in zip(np.asarray(totals).tolist(), np.asarray(pnm).tolist(), strict=True)]

    def _decode_steps_ns(self, ctx: np.ndarray, steps: int, ids: np.ndarray) -> list[float]:
        """Durations of `steps` decode iterations of one batch, sequence s holding ctx[s] + j tokens at step j:
        the cost's own `decode_steps_ns` when it has one (a vectorized form of the same), else one call each."""
        if self.auto:
            return [float(x) for x in self.cost.decode_steps_ns(ctx, steps, self.res[ids] > 0)]
        vectorized = getattr(self.cost, "decode_steps_ns", None)
        if vectorized is not None:
            return [float(x) for x in vectorized(ctx, steps)]
        ones = np.ones(len(ctx), dtype=np.int64)
        return [float(self.cost.iteration_ns(ctx + j, ones)) for j in range(steps)]

    def _grow_all(self, i: int, ids: np.ndarray, held_tokens: np.ndarray | None, seqs: list[int]) -> bool:
        """Give batch sequences ids[s] for s in `seqs` (one block per entry, in that order) their next blocks in
        one all-or-nothing insert (the cache ends as after one insert per block); False, changing nothing, when
        the tier has no room for them all."""
        counts = np.bincount(np.asarray(seqs, dtype=np.int64), minlength=len(ids))
        order: dict[int, int] = {}
        positions = []
        for s in seqs:
            g = int(ids[s])
            m = order.get(g, 0)
            order[g] = m + 1
            positions.append(self.coff[g] + self.nheld[g] + m)
        g = int(ids[seqs[0]])
        if not self.views[i].insert(self.ckeys[np.asarray(positions, dtype=np.int64)], int(self.res[g]), pin=True):
            return False
        self.nheld[ids] += counts
        if held_tokens is not None:
            held_tokens += counts * self.bt
        self._note_pinned(i, int(self.res[g]))
        return True

    def _grow_ahead(self, i: int, ids: np.ndarray, ctx: np.ndarray, held_tokens: np.ndarray, steps: int) -> int:
        """Give the decode batch the blocks its next `steps` iterations start, in the order the event-by-event
        path would (by step, then batch order); returns how many steps got every block they need."""
        if not steps:
            return 0
        first = held_tokens - ctx                      # the step at which each sequence needs its next block
        needs = first < steps
        if not needs.any():
            return steps
        events = sorted((j, s) for s in np.flatnonzero(needs).tolist()
                        for j in range(int(first[s]), steps, self.bt))
        stop = self._demoting_step(i, ids, events)
        if stop is not None:            # the event path runs that step: it times the demotion at its start
            steps = stop
            events = [e for e in events if e[0] < stop]
            if not events:
                return steps
        view = self.views[i]
        one_tier = len(set(self.res[ids[needs]].tolist())) == 1   # placement auto mixes HBM and the pool
        if one_tier and self._grow_all(i, ids, held_tokens, [s for _, s in events]):
            return steps
        for j, s in events:
            g = int(ids[s])
            if not view.insert(self._seq_keys(g, int(self.nheld[g]) + 1)[-1:], int(self.res[g]), pin=True):
                steps = j                               # a preemption is due at step j: the normal path does it
                break
            self.nheld[g] += 1
            held_tokens[s] += self.bt
        for v in set(self.res[ids[needs]].tolist()):
            self._note_pinned(i, v)
        return steps

    def _demoting_step(self, i: int, ids: np.ndarray, events: list[tuple[int, int]]) -> int | None:
        """The first step of `events` ((step, batch index), one per block, in insertion order) whose block
        evicts a block that no slower tier holds (a demotion, a timed write); None if none would."""
        steps_by_tier: dict[int, list[int]] = {}
        for j, s in events:
            steps_by_tier.setdefault(int(self.res[ids[s]]), []).append(j)
        stops = []
        for v, steps in steps_by_tier.items():
            k = self.views[i].first_demotion(v, len(steps))
            if k is not None:
                stops.append(steps[k])
        return min(stops) if stops else None

    def _grow_decoders(self, i: int, t: float) -> tuple[list[int], list[int]]:
        """Give every decode sequence whose next token starts a block that block, preempting when full. Returns
        the running sequences then, in order: those decoding, and those still prefilling."""
        ctx, nheld, bt = self.ctx, self.nheld, self.bt
        decoding, prefilling, dec_ctx = self._split_running(i)
        if self.speculation is None:   # one position each: short of a block when ctx + 1 passes what it holds
            held = nheld[decoding].tolist()
            short = [-(-(c + 1) // bt) - h for c, h in zip(dec_ctx, held, strict=True)]
        else:
            dec = np.array(decoding, dtype=np.int64)
            short = (-(-(ctx[dec] + self._verify_tokens(dec)) // bt) - nheld[dec]).tolist()
        grow = [r for r, k in zip(decoding, short, strict=True) if k > 0]
        seqs = [s for s, k in enumerate(k for k in short if k > 0) for _ in range(k)]
        if not grow or (len(set(self.res[grow].tolist())) == 1 and
                        self._grow_all(i, np.array(grow, dtype=np.int64), None, seqs)):
            if self.coherence is not None:
                self._sync_coherence(i)
            return decoding, prefilling
        view = self.views[i]
        for g in [grow[s] for s in seqs]:
            if self.state[g] != RUNNING:
                continue
            v = int(self.res[g])
            key = self._seq_keys(g, int(self.nheld[g]) + 1)[-1:]
            while not view.insert(key, v, pin=True):
                # placement auto: only a sequence on g's side frees room there, and one squeezed out of HBM moves
                # to the pool over the link when the pool has room rather than computing its whole context again
                victim = self._victim(i, v if self.auto else None)
                if not (self.auto and v == 0 and self._start_move(i, victim, t)):
                    self._preempt(i, victim, t)
                if victim == g:
                    break
            else:
                self.nheld[g] += 1
                self._note_pinned(i, v)
        if self.coherence is not None:
            self._sync_coherence(i)
        decoding, prefilling, _ = self._split_running(i)  # preemptions and moves left the running list
        return decoding, prefilling

    def _split_running(self, i: int) -> tuple[list[int], list[int], list[int]]:
        """Instance i's running sequences in order: those decoding, those still prefilling, and the decoders'
        contexts (one pass in Python ints over the batch's few rows)."""
        run = self.running[i]
        arr = np.array(run, dtype=np.int64)
        decoding: list[int] = []
        prefilling: list[int] = []
        dec_ctx: list[int] = []
        for r, c, g in zip(run, self.ctx[arr].tolist(), self.target[arr].tolist(), strict=True):
            if c >= g:
                decoding.append(r)
                dec_ctx.append(c)
            else:
                prefilling.append(r)
        return decoding, prefilling, dec_ctx

    def _victim(self, i: int, tier: int | None = None) -> int:
        """The most recently admitted decode sequence (its prompt KV is complete, so caching it stays valid), of
        those whose KV is in view tier `tier` when given."""
        for r in reversed(self.running[i]):
            if self.ctx[r] >= self.target[r] and (tier is None or self.res[r] == tier):
                return r
        raise AssertionError("a growing sequence is itself a decode sequence")

    def _preempt(self, i: int, r: int, t: float) -> None:
        self.running[i].remove(r)
        self.preemptions[r] += 1
        v = int(self.res[r])
        self.views[i].unpin(self._seq_keys(r, int(self.nheld[r])), v)
        self.release_epoch += 1
        below = self.base + v + 1
        if self.spec.preemption == "swap" and below < self.T:
            size = float(self.ctx[r] * self.kvb)
            self.swapping_out[r] = self._transfer(below, size, X_SWAP_OUT, r, t)
            self.tier_write[below] += size
            self.swap_out_bytes += size
            self.swapped[r] = True
        else:                                  # recompute: prefill prompt + generated tokens again
            # (with swap: a sequence whose KV lives in the last tier, streamed or placed there)
            self.swap_recomputes += self.spec.preemption == "swap"
            self.target[r] = self.in_tokens[r] + self.out_done[r]
            self.ctx[r] = 0
        self.nheld[r] = 0
        self.state[r] = WAITING
        self.waiting[i].appendleft(r)

    def _admit(self, i: int, r: int, t: float, budget: int) -> int | None:
        """Take the head of the waiting queue if its KV fits: returns the prefill tokens it adds to this
        iteration (0 when it first loads KV), or None when it must wait."""
        if self.blocked_epoch[r] == self.release_epoch:
            return None                        # nothing was released since it last found no room
        if self.swapped[r]:
            return self._swap_in(i, r, t)
        if self.handed[r]:
            return self._take_over(i, r, t)
        if self.auto:
            self._place(i, r)
        view, v = self.views[i], int(self.res[r])
        keys = self._prompt_keys(r)
        # the cache's counters and recency see each request's first look only (a retry is a peek)
        # a sequence whose KV lives in tier v reads its prefix from v on (HBM sequences write theirs through)
        hits = view.lookup(keys, record=not self.looked_up[r], first_tier=v)
        self.looked_up[r] = True
        found = int(np.count_nonzero(hits >= 0))
        pend = self.pending[i]
        if any(pend):                          # a block whose KV is still being computed is no hit yet
            for b, (key, w) in enumerate(zip(keys[:found].tolist(), hits[:found].tolist(), strict=True)):
                if key in pend[w]:
                    found = b
                    break
        hits = hits[:found]
        free = hits <= v
        lead = int(np.argmin(np.append(free, False)))
        use_load = found > lead and self._load_pays(r, hits, lead, found, v)
        cached_blocks = found if use_load else lead
        nblocks = -(-int(self.target[r]) // self.bt)
        seq_keys = self._seq_keys(r, nblocks)
        tier = view.tiers[v]
        if nblocks > tier.room_blocks() and \
                list(map(tier.pin_count, seq_keys.tolist())).count(0) > tier.room_blocks():
            self.blocked_epoch[r] = self.release_epoch
            return None
        new_tokens = int(self.target[r]) - cached_blocks * self.bt
        if not use_load and not self.spec.chunked_prefill and new_tokens > budget:
            return None
        if use_load:                           # the cache counts the loaded blocks as promotions
            ok = view.promote(seq_keys[:cached_blocks], v, pin=True) and \
                view.insert(seq_keys[cached_blocks:], v, pin=True)
        else:
            ok = view.insert(seq_keys, v, pin=True)
        if not ok:
            raise AssertionError(f"request {r}: its blocks were counted to fit")
        if self.coherence is not None:       # its new blocks written into the shared pool, its hits there read
            self._sync_coherence(i)
            self._read_shared(i, seq_keys[:cached_blocks][self.base + hits[:cached_blocks] == self.pool_index])
        if not self.preemptions[r]:            # what the request found when it was admitted
            self.hit_blocks[r, self.base:] = np.bincount(hits, minlength=self.T - self.base)
        self.admit_cached[r] = cached_blocks
        if self.base == 0 and v == 0:
            below = hits[cached_blocks:] == 1
            self.below_held[r] = (cached_blocks + int(np.argmin(np.append(below, False)))) * self.bt
        self._note_pinned(i, v)
        pend[v].update(seq_keys[cached_blocks:].tolist())
        self.nheld[r] = nblocks
        self.ctx[r] = cached_blocks * self.bt
        if use_load:
            self._start_load(i, r, seq_keys, hits, cached_blocks, t)
            return 0
        self.state[r] = RUNNING
        self.running[i].append(r)
        return min(new_tokens, budget) if self.spec.chunked_prefill else new_tokens

    def _sides(self, i: int, exclude: int = -1) -> tuple[tuple[int, int], tuple[int, int]]:
        """placement auto: (sequences, tokens) of instance i's running sequences with KV in HBM, and in the PNM
        tier (a prefilling one counted at its whole prompt). A sequence whose KV is on its way to the instance (a
        move, a load or a swap-in) counts on the side it lands on: otherwise the sequences that reach a multiple
        of replan_tokens in one step would each see the earlier movers on neither side and all move one way."""
        arr = np.array([r for r in (*self.running[i], *sorted(self.landing[i])) if r != exclude], dtype=np.int64)
        pooled = self.res[arr] > 0
        held = np.maximum(self.ctx[arr], self.target[arr])
        return ((int((~pooled).sum()), int(held[~pooled].sum())), (int(pooled.sum()), int(held[pooled].sum())))

    def _place(self, i: int, r: int) -> None:
        """placement auto: the side the placer prefers for the sequence, unless only the other has room now."""
        nblocks = -(-int(self.target[r]) // self.bt)
        hbm, pool = self._sides(i)
        chunk = self.spec.max_batch_tokens if self.spec.chunked_prefill else int(self.target[r])
        pooled = self.placer.prefers_pool(hbm, pool, int(self.target[r]), chunk, self._decode_horizon())
        sides = (self.pool_tier, 0) if pooled else (0, self.pool_tier)
        first, other = sides

        def fits_now(v: int) -> bool:
            return self.views[i].tiers[v].room_blocks() >= nblocks

        too_big = self.cap_blocks[first] < nblocks       # the arrival check let it in: the other side holds it
        self.res[r] = other if too_big or (not fits_now(first) and fits_now(other)) else first

    def _decode_horizon(self) -> int:
        """Decode steps a placement is expected to serve before it is planned again: the mean answer of the
        requests completed so far (what a server can know); before any, the longest answer generated so far
        (a lower bound, 0 at the start: the first sequences stay in HBM unless the pool costs them nothing);
        at most replan_tokens."""
        if not self.completions:
            return int(min(self.spec.replan_tokens, int(self.out_done.max())))
        mean = self.completed_out_tokens / self.completions
        return max(1, min(self.spec.replan_tokens, round(mean)))

    def _replan(self, i: int, decoded: np.ndarray, advanced: np.ndarray, t: float) -> None:
        """placement auto: a decode sequence whose context just reached (or, advancing several tokens, passed) a
        multiple of replan_tokens moves to the other side when what that saves over the next replan_tokens steps
        exceeds the move."""
        R = self.spec.replan_tokens
        ctx = self.ctx[decoded]
        for r in decoded[ctx // R > (ctx - advanced) // R].tolist():
            if self.state[r] == RUNNING:
                self._move_if_it_pays(i, r, t)

    def _move_if_it_pays(self, i: int, r: int, t: float) -> None:
        src = int(self.res[r])
        hbm, pool = self._sides(i, exclude=r)
        gain_ns = self.placer.step_gain_ns(hbm, pool, int(self.ctx[r]), src > 0) * self._decode_horizon()
        if gain_ns > self._alone_ns(self.pool_tier, i, float(self.ctx[r] * self.kvb)):
            self._start_move(i, r, t)

    def _start_move(self, i: int, r: int, t: float) -> bool:
        """Move r's KV to the other side over the PNM tier's link (r leaves the batch until it lands); False,
        changing nothing, when the other side has no room now."""
        src = int(self.res[r])
        dest = 0 if src else self.pool_tier
        size = float(self.ctx[r] * self.kvb)
        keys = self._seq_keys(r, int(self.nheld[r]))
        view = self.views[i]
        if not view.insert(keys, dest, pin=True):
            return False
        view.unpin(keys, src)
        if self.coherence is not None:
            self._sync_coherence(i)
            if self.base + src == self.pool_index:
                self._read_shared(i, keys)
        if self.pool_l2 is not None and src == self.pool_index:  # a move out of the pool reads it, host port
            self.pool_l2.read(keys)
        self.release_epoch += 1
        self._note_pinned(i, dest)
        self.res[r] = dest
        self.moves[r] += 1
        self.move_bytes += size
        self.tier_read[src] += size
        self.tier_write[dest] += size
        self.running[i].remove(r)
        self.state[r] = LOADING
        self.landing[i].add(r)
        self.xfers_left[r] = 1
        self._transfer(self.pool_tier, size, X_MOVE, r, t)   # timed on the PNM tier's link either way
        return True

    def _iteration_ns(self, ids: np.ndarray, cached: np.ndarray, news: np.ndarray) -> float:
        if self.auto:
            return float(self.cost.iteration_ns(cached, news, self.res[ids] > 0))
        return float(self.cost.iteration_ns(cached, news))

    def _speculate(self, ids: np.ndarray, cached: np.ndarray, news: np.ndarray, prefill: np.ndarray) -> float:
        """The draft's part of an iteration (it proposes before the target verifies; a tree's own verifier's rows
        are not the draft's), counting what it and the verification read."""
        sp = self.speculation
        assert sp is not None
        rows = ~self.table.verifier[ids] if self.table.verifier is not None else np.ones(len(ids), dtype=bool)
        drafting = 0.0
        if rows.any():
            c, m, verifying = cached[rows], news[rows], ~prefill[rows]
            drafting = draft_ns(sp, c, m, verifying)
            passes, tokens, pairs, kv = draft_work(sp, c, m, verifying)
            self.draft_passes += passes
            self.draft_tokens += tokens
            self.draft_pairs += pairs
            self.draft_kv_tokens += kv
        self.draft_ns += drafting
        decoding = ~prefill
        self.verified_kv_read += float(cached[decoding].sum() * self.kvb)
        self.verified_kv_read_pnm += float(cached[decoding & self._in_pnm(ids)].sum() * self.kvb)
        self.verified_chunk_read += float(cached[decoding & (news > 1)].sum() * self.kvb)
        return drafting

    def _in_pnm(self, ids: np.ndarray) -> np.ndarray:
        """Which of `ids` keep their KV in a PNM pool (their attention runs in its units)."""
        if self.pnm_index < 0:
            return np.zeros(len(ids), dtype=bool)
        return self.base + self.res[ids] == self.pnm_index

    def _compute_ns(self, ids: np.ndarray, cached: np.ndarray, news: np.ndarray,
                    scale: float, unshared: bool = False) -> tuple[float, float]:
        """The target's part of an iteration, then the verifier's rows (a tree's own verifier model) on the same
        GPUs; and the shared PNM units' part of it (0 unless they are modelled: `_build_units`). `unshared`: a
        decode-only batch (one token each, no shared block)."""
        mine = self.table.verifier[ids] if self.verifier is not None else None
        if mine is None or not mine.any():
            return self._target_ns(ids, cached, news, scale, unshared)
        assert self.verifier is not None
        self.verifier_passes += 1
        verify_ns = float(self.verifier.iteration_ns(cached[mine], news[mine]))
        rest = ~mine
        if not rest.any():
            self.verifier_only_passes += 1  # the target's weights stay unread this iteration
            return verify_ns, 0.0
        target_ns, pnm_ns = self._target_ns(ids[rest], cached[rest], news[rest], scale)
        return target_ns + verify_ns, pnm_ns

    def _target_ns(self, ids: np.ndarray, cached: np.ndarray, news: np.ndarray,
                   scale: float, unshared: bool = False) -> tuple[float, float]:
        if unshared and self.decode_only_cost is not None:   # a function of (sequences, cached tokens) alone
            return self._decode_only_ns(len(ids), sum(cached.tolist()))
        if self.units is not None:
            time_ns, pnm_ns = self.cost.iteration_pnm_ns(cached, news, scale)
            return float(time_ns), float(pnm_ns)
        return (float(self.cost.iteration_ns(cached, news, scale)) if scale < 1.0 else
                self._iteration_ns(ids, cached, news)), 0.0

    def _decode_only_ns(self, sequences: int, cached_tokens: int) -> tuple[float, float]:
        """The cost table's price of a decode-only iteration, and its PNM units' part where they are modelled."""
        time_ns, pnm_ns = self.decode_only_cost(sequences, cached_tokens)
        return time_ns, pnm_ns if self.units is not None else 0.0

    def _sample_l2(self, ids: np.ndarray, cached: np.ndarray, first: int, count: int = 1) -> None:
        """The GPU attention's block reads of iterations [first, first + count) of this batch, if any of them is
        a sample point (sequences whose KV is in HBM)."""
        if self.l2 is None or not self.l2.points(first, count):
            return
        on_gpu = (self.base + self.res[ids] == 0) & (cached > 0)
        blocks = [self.content_keys[self.ckeys[self.coff[r]:self.coff[r] + -(-int(c) // self.bt)]]
                  for r, c in zip(ids[on_gpu].tolist(), cached[on_gpu].tolist(), strict=True)]
        self.l2.sample(first, blocks, count)

    def _decode_reads(self, ids: np.ndarray, cached: np.ndarray, news: np.ndarray,
                      on_pool: list[bool] | None, unshared: bool = False) -> float:
        """The pool's decode-time scale for this batch (below 1 when its multi-token kernel reads prefixes that
        decode sequences share once), counting the KV tokens the pool's decode attention reads and fetches.
        `on_pool`: which of `ids` keep their KV in the pool (None without one); `unshared`: known to share none."""
        # integer sums over a handful of rows in one pass: Python's, exactly numpy's
        total = read = pooled = 0
        for c, m, p in zip(cached.tolist(), news.tolist(), on_pool or repeat(False), strict=on_pool is not None):
            if m == 1:
                total += c
                if p:
                    read += c
                    pooled += 1
        self.decode_tokens_read += total
        if on_pool is None:
            return 1.0
        self.pool_decode_tokens += read
        # (a batch with fewer than two pool decoders shares nothing: _shared_groups' first test)
        shared = self._shared_groups(ids, news == 1) if not (unshared or self.auto) and self.pnm_decoders and \
            pooled > 1 else None
        scale = getattr(self.cost, "shared_prefix_factor", None)
        factor = scale(*shared) if shared is not None and scale is not None else 1.0
        saved = 0
        if factor < 1.0 and shared is not None:  # a group's prefix is read once per QUERIES_MAX of its sharers
            saved = sum(int(p) * (len(q) - -(-len(q) // QUERIES_MAX))
                        for p, q in zip(shared[0].tolist(), shared[1], strict=True))
        self.pool_decode_fetched += read - saved
        return factor

    def _shared_groups(self, ids: np.ndarray, decoding: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]] | None:
        """Decode sequences in a PNM pool that share leading KV blocks (forks of one program, a common prompt):
        every such sequence in groups -- the tokens of the blocks a group's members all hold, and each member's
        other tokens; a sequence that shares nothing is a group of its own with no shared tokens -- which the
        pool's multi-token kernel reads once per group and once per sequence (None: nothing is shared)."""
        dec = self._pool_decoders(ids, decoding)
        if not self._shares_blocks(dec):
            return None
        full = {r: int(self.ctx[r] // self.bt) for r in dec.tolist()}
        groups: list[tuple[list[int], int]] = []
        for members in self._by_key(dec.tolist(), full, 0).values():
            groups.extend(self._best_groups(members, full, 0)[1])
        if all(len(m) < 2 or blocks == 0 for m, blocks in groups):
            return None
        prefixes = [blocks * self.bt if len(m) > 1 else 0 for m, blocks in groups]
        privates = [self.ctx[np.asarray(m, dtype=np.int64)] - prefix for (m, _), prefix in zip(groups, prefixes,
                                                                                              strict=True)]
        return np.asarray(prefixes, dtype=np.int64), privates

    def _pool_decoders(self, ids: np.ndarray, decoding: np.ndarray) -> np.ndarray:
        """The decode sequences of a batch whose KV is in a PNM pool and fills at least one block."""
        if not self.pnm_decoders:
            return ids[:0]
        dec = ids[decoding]
        return dec[(self.base + self.res[dec] == self.pool_index) & (self.ctx[dec] >= self.bt)]

    def _shares_blocks(self, dec: np.ndarray) -> bool:
        """Whether two of these sequences hold the same first block (then they share a leading run of blocks)."""
        return len(dec) > 1 and len(set(self.ckeys[self.coff[dec]].tolist())) < len(dec)

    def _by_key(self, members: list[int], full: dict[int, int], depth: int) -> dict[int, list[int]]:
        """Members that hold block `depth`, by its key (the others, whose context ends before it, leave)."""
        out: dict[int, list[int]] = {}
        for r in members:
            if full[r] > depth:
                out.setdefault(int(self.ckeys[self.coff[r] + depth]), []).append(r)
        return out

    def _best_groups(self, members: list[int], full: dict[int, int],
                     depth: int) -> tuple[int, list[tuple[list[int], int]]]:
        """Members sharing their first `depth` blocks: as one group at their longest common run of blocks, or
        split where they part into groups that share more, whichever saves more block reads (saved, groups)."""
        if len(members) < 2:
            return 0, [(members, 0)]
        reach = min(full[r] for r in members)
        head = self.ckeys[self.coff[members[0]]:self.coff[members[0]] + reach]
        common = reach
        for r in members[1:]:
            same = self.ckeys[self.coff[r]:self.coff[r] + reach] == head
            common = min(common, int(np.argmin(np.append(same, False))))
        parts = self._by_key(members, full, common)
        whole = (common * (len(members) - 1), [(members, common)])
        ended = [r for r in members if full[r] <= common]
        split_saved, split_groups = 0, [([r], 0) for r in ended]
        for part in parts.values():
            saved, found = self._best_groups(part, full, common + 1) if len(part) > 1 else (0, [(part, 0)])
            split_saved += saved
            split_groups += found
        return whole if whole[0] >= split_saved else (split_saved, split_groups)

    def _load_pays(self, r: int, hits: np.ndarray, lead: int, found: int, v: int) -> bool:
        """Loading the hit blocks from lower tiers beats recomputing them (and what follows the first)."""
        load_ns = 0.0
        i = int(self.inst[r])
        for w in np.unique(hits[hits > v]).tolist():
            size = np.count_nonzero(hits == w) * self.block_bytes
            load_ns = max(load_ns, self._alone_ns(self.base + w, i, size, shared=True))
        target = int(self.target[r])
        c_lead, c_all = lead * self.bt, found * self.bt
        one = np.array([r], dtype=np.int64)
        recompute_ns = self._iteration_ns(one, np.array([c_lead]), np.array([target - c_lead])) - \
            self._iteration_ns(one, np.array([c_all]), np.array([target - c_all]))
        return load_ns < recompute_ns

    def _alone_ns(self, tier: int, instance: int, size_bytes: float, shared: bool = False,
                  write: bool = False) -> float:
        """A transfer's time over instance's path to `tier` (`write`: from it, the links' other direction): its
        links' latency, and its bytes at the slowest link's rate (`shared`: that link's bandwidth split with
        the transfers on it now, one more for this)."""
        path = [self.write_spec[self.write_link[name]] if write else self.link_spec[name]
                for name in self._path(tier, instance)]
        bytes_ns = max(size_bytes * ((self.links.in_flight(x.name) + 1) if shared else 1) / x.bandwidth_GBps
                       for x in path)
        return sum(x.latency_ns for x in path) + bytes_ns

    def _start_load(self, i: int, r: int, seq_keys: np.ndarray, hits: np.ndarray, cached_blocks: int,
                    t: float) -> None:
        v = int(self.res[r])
        lower = hits > v
        self.pending[i][v].update(seq_keys[:cached_blocks][lower].tolist())
        for w in np.unique(hits[lower]).tolist():
            blocks = int(np.count_nonzero(hits == w))
            if self.pool_l2 is not None and self.base + w == self.pool_index:
                self.pool_l2.read(seq_keys[:cached_blocks][hits == w])
            size = float(blocks * self.block_bytes)
            self.loaded_blocks[r, self.base + w] += blocks
            self.tier_read[self.base + w] += size
            self.tier_write[self.base + v] += size
            self._transfer(self.base + w, size, X_LOAD, r, t)
            self.xfers_left[r] += 1
        self.state[r] = LOADING
        self.load_start[r] = t
        self.landing[i].add(r)

    def _take_over(self, i: int, r: int, t: float) -> int | None:
        """A decode instance takes a prefilled sequence: its KV comes over the link of the tier below HBM (the
        prefill wrote it there), or stays where it is when it lives in a shared tier (a pool)."""
        self.handed[r] = False
        if self.base + self.res[r] > 0:
            if self.coherence is not None and self.base + self.res[r] == self.pool_index:
                self._read_shared(i, self._seq_keys(r, int(self.nheld[r])))   # the prefill side wrote them
            self.state[r] = RUNNING
            self.running[i].append(r)
            self.took_over = True
            return 0
        taken = self._swap_in(i, r, t, handover=True)
        if taken is None:
            self.handed[r] = True
        return taken

    def _hand_over(self, i: int, r: int, t: float) -> None:
        """Disaggregation: a prefill instance passes a prefilled sequence to the least loaded decode instance."""
        self.running[i].remove(r)
        if self.base + self.res[r] == 0:           # its HBM copy stays cached here; the decode side loads it
            self.views[i].unpin(self._seq_keys(r, int(self.nheld[r])), 0)
            self.nheld[r] = 0
            self.release_epoch += 1
        d = self.routable + int(np.argmin(self.queued_tokens[self.routable:]))
        total = self.in_tokens[r] + self.out_tokens[r]
        self.queued_tokens[i] -= total
        self.queued_tokens[d] += total
        self.inst[r] = d
        self.state[r] = WAITING
        self.handed[r] = True
        self.blocked_epoch[r] = -1                 # what held it back on the prefill side does not hold here
        self.waiting[d].append(r)
        self._schedule(d, t)

    def _swap_in(self, i: int, r: int, t: float, handover: bool = False) -> int | None:
        if self.swapping_out[r]:       # its KV is not in the tier below yet; the swap-out's end reschedules
            return None
        v = int(self.res[r])
        nblocks = -(-int(self.ctx[r] + 1) // self.bt)
        keys = self._seq_keys(r, nblocks)
        if not self.views[i].insert(keys, v, pin=True):
            self.blocked_epoch[r] = self.release_epoch
            return None
        self._note_pinned(i, v)
        self.nheld[r] = nblocks
        below = self.base + v + 1
        if self.coherence is not None:
            self._sync_coherence(i)
            if handover and below == self.pool_index:     # what the prefill side wrote through
                self._read_shared(i, keys[self.shared_tier.holds_mask(keys.tolist())])
        size = float(self.ctx[r] * self.kvb)
        if self.pool_l2 is not None and below == self.pool_index:
            self.pool_l2.read(self._seq_keys(r, -(-int(self.ctx[r]) // self.bt)))
        self.tier_read[below] += size
        self.tier_write[self.base + v] += size
        self._transfer(below, size, X_SWAP_IN, r, t)
        if handover:
            self.handover_bytes += size
        else:
            self.swap_in_bytes += size
        self.xfers_left[r] = 1
        self.swapped[r] = False
        self.state[r] = LOADING
        self.landing[i].add(r)
        return 0

    def _note_pinned(self, i: int, v: int) -> None:
        t = self.base + v
        pinned = self.views[i].tiers[v].pinned_blocks
        if pinned > self.peak_pinned[t]:
            self.peak_pinned[t] = pinned

    # -- iterations ----------------------------------------------------------------------------------------

    def _start_iteration(self, i: int, t: float, ids: np.ndarray, news: np.ndarray, prefill: np.ndarray,
                         unshared: bool = False) -> None:
        """`unshared`: the batch is known to hold no two pool decoders sharing a block (a decode-only batch)."""
        self.busy[i] = True
        self.iter_start[i] = t
        cached = self.ctx[ids]
        res = self.res[ids].tolist()
        any_prefill = True in prefill.tolist()     # (cheaper than ndarray.any on a batch's few rows)
        # which sequences keep their KV in the pool (pool_bytes exists exactly when a pool does)
        on_pool = [self.base + v == self.pool_index for v in res] if self.pool_bytes is not None else None
        self._sample_l2(ids, cached, self.iterations)
        scale = self._decode_reads(ids, cached, news, on_pool, unshared)
        compute_ns, pnm_ns = self._compute_ns(ids, cached, news, scale, unshared)
        draft_ns = self._speculate(ids, cached, news, prefill) if self.speculation is not None else 0.0
        work_ns, rest_ns = self._launch(i, t, (ids, news, prefill), compute_ns, pnm_ns, draft_ns)
        if on_pool is not None and any(on_pool):   # the pool's KV read (decode, prefixes, streams) and appended
            tokens = sum(c + m for c, m, p in zip(cached.tolist(), news.tolist(), on_pool, strict=True) if p)
            self.pool_bytes.add(t, (t + work_ns) + rest_ns, float(tokens * self.kvb))  # (as it lasts alone)
        if self.activity is not None:
            self.activity.begin(i, t, len(ids), int(news.sum()), int(prefill.sum()))
        if any_prefill:                            # what each request's prefills computed (its energy)
            rows, n, c = ids[prefill], news[prefill], cached[prefill]
            self.prefill_tokens[rows] += n
            self.prefill_pairs[rows] += n * c + n * (n + 1) // 2
        self._iteration_writes(i, t, ids, cached, news, prefill, work_ns + rest_ns, res, any_prefill)
        if not self.any_streams and self.pool_l2 is None:   # no sequence ever streamed: nothing below to read
            return
        streaming = self.streams[ids]
        if self.pool_l2 is not None:
            pooled = streaming & (self.base + self.res[ids] == self.pool_index)
            self.pool_l2.iteration([self.content_keys[self._seq_keys(r, -(-int(c) // self.bt))]
                                    for r, c in zip(ids[pooled].tolist(), cached[pooled].tolist(), strict=True)], i)
        if streaming.any():
            for v in np.unique(self.res[ids][streaming]).tolist():
                rows = streaming & (self.res[ids] == v)
                size = float(cached[rows].sum() * self.kvb)
                self.tier_read[self.base + v] += size
                if self._transfer(self.base + v, size, X_ITER, i, t):
                    self.parts_left[i] += 1

    def _launch(self, i: int, t: float, batch: tuple[np.ndarray, np.ndarray, np.ndarray], compute_ns: float,
                pnm_ns: float, draft_ns: float = 0.0) -> tuple[float, float]:
        """Instance i's iteration of `batch` takes `compute_ns`, `pnm_ns` of it the decode attention at the shared
        PNM units (0: none), then the draft's `draft_ns` and what it owes for coherence: its attention joins the
        units' jobs, the rest follows it; or its end is set. Returns the job's work alone (ns, 0 without one)
        and the time after it."""
        work_ns = 0.0
        if pnm_ns > 0:                     # the decode attention: a job at the shared PNM units, the rest after it
            compute_ns -= pnm_ns
            work_ns = pnm_ns / self.spec.instances
        if self.speculation is not None:
            compute_ns += draft_ns
        if self.coherence is not None:     # flushes, invalidations, snoops of its blocks in the shared pool
            compute_ns += self._owed_ns(i)
        self.batch[i] = batch
        self.parts_left[i] = 1
        if work_ns > 0:          # a job ending now (its event not yet taken) is handed over first
            self._jobs_done(self.units.start_owned(work_ns, self.server_of[i], t, i, compute_ns))
            self._recheck_units()
        else:
            heapq.heappush(self.iter_heap, (t + compute_ns, EV_ITER, i, 0))
        return work_ns, compute_ns

    def _iteration_writes(self, i: int, t: float, ids: np.ndarray, cached: np.ndarray, news: np.ndarray,
                          prefill: np.ndarray, compute_ns: float, res: list[int], any_prefill: bool) -> None:
        """The KV an iteration writes. Where it lives below HBM (a pool, a streamed tier) it crosses the link:
        prefill chunks timed, as part of the iteration; decode appends counted. A prefill chunk computed in
        HBM is written through to the tier below as it is computed, and the iteration ends when that write has
        landed too (vLLM's KV connector: `wait_for_save` ends the forward pass), so that is its one charge; the
        blocks that tier already held are not written again (a connector checks before it saves). `res`: the
        sequences' view tiers (a list), `any_prefill`: whether a prefill chunk is in the batch."""
        kvb = self.kvb
        # per view tier, its tokens and those of prefill chunks: integer sums of the batch's few rows, in one pass
        counts: dict[int, list[int]] = {}
        for m, w, p in zip(news.tolist(), res, prefill.tolist() if any_prefill else repeat(False), strict=False):
            c = counts.setdefault(w, [0, 0])
            c[0] += m
            if p:
                c[1] += m
        timed = [0.0] * self.T
        for v in sorted(counts):
            size, chunks = float(counts[v][0] * kvb), float(counts[v][1] * kvb)
            self.tier_write[self.base + v] += size
            if self.base + v > 0:      # decode appends counted, prefill chunks timed
                timed[self.base + v] += chunks
                self._count_written(self.base + v, i, size - chunks)
        if self.base == 0 and self.T > 1 and any_prefill:   # (no prefill chunk: no write-through)
            rows = (self.res[ids] == 0) & prefill
            end = cached[rows] + news[rows]
            fresh = np.maximum(0, end - np.maximum(cached[rows], self.below_held[ids[rows]]))
            through = float(fresh.sum() * self.kvb)
            self.tier_write[1] += through
            timed[1] += through
            if through and self.pool_index == 1:       # the pool's DRAM takes it over the iteration
                self.pool_bytes.add(t, t + compute_ns, through)
        for tier in [k for k, size in enumerate(timed) if size]:
            if self._transfer(tier, timed[tier], X_ITER_WRITE, i, t):
                self.parts_left[i] += 1

    def _iteration_part_done(self, i: int, t: float) -> None:
        self.parts_left[i] -= 1
        if self.parts_left[i] == 0:
            self._finish_iteration(i, t)

    def _finish_iteration(self, i: int, t: float) -> None:
        self.busy[i] = False
        if self.batch[i] is None:      # the end of a fast-path stretch: its iterations are already counted
            self._schedule(i, t)
            return
        if self.lean_steps and self.decoders[i] is not None and self.batch[i][0] is self.decoders[i][0] and \
                not self.any_streams and self._decode_on(i, t):
            return
        ids, news, prefill = self.batch[i]
        self.batch[i] = None
        self.last_step_ns[i] = t - self.iter_start[i]
        if self.activity is not None:
            self.activity.end(i, t)
        self.iterations += 1
        self.tokens_computed += sum(news.tolist())     # (ints: exact, and cheaper than ndarray.sum on few rows)
        if True in prefill.tolist():
            decoded = ids[~prefill]
            advanced = self._emitted(decoded, news[~prefill])
            self._count_decoded(decoded, self.ctx[decoded], advanced)
            self.ctx[ids[prefill]] += news[prefill]
            self.ctx[decoded] += advanced
            self.out_done[decoded] += advanced
            filled = ids[prefill]
            filled = filled[self.ctx[filled] >= self.target[filled]]
            self.tokens_emitted += int(advanced.sum()) + len(filled)
            if len(filled):
                self.out_done[filled] += 1
                for r in filled.tolist():
                    self._prefill_done(i, r, t)
            finished = ids[self.out_done[ids] >= self.out_tokens[ids]]
        else:                          # every sequence decoded (a batch holds each once): the same, read once
            decoded, filled = ids, ids[:0]
            advanced = self._emitted(ids, news)
            # a batch holds few rows: Python ints per row cost less than numpy's fancy-index gathers and scatters
            # (integer arithmetic, so the same counts; no row repeats, so no scatter collides)
            ctx_a, out_a, out_tokens = self.ctx, self.out_done, self.out_tokens
            dec_tokens, dec_pairs = self.decode_tokens, self.decode_pairs
            done_rows = []
            kept_sum = 0
            for r, k in zip(ids.tolist(), advanced.tolist(), strict=True):
                c = int(ctx_a[r])
                dec_tokens[r] += k
                dec_pairs[r] += k * c + k * (k + 1) // 2
                ctx_a[r] = c + k
                o = int(out_a[r]) + k
                out_a[r] = o
                kept_sum += k
                if o >= out_tokens[r]:
                    done_rows.append(r)
            self.tokens_emitted += kept_sum
            finished = np.array(done_rows, dtype=ids.dtype)
        for r in finished.tolist():
            self._complete(i, r, t)
        if i < self.routable < self.spec.instances and len(filled):
            for r in filled[self.out_done[filled] < self.out_tokens[filled]].tolist():
                self._hand_over(i, r, t)
        if self.auto and len(decoded):
            self._replan(i, decoded, advanced, t)
        self._schedule(i, t)
        if len(finished) and (self.base > 0 or (self.res[finished] > 0).any()):
            for j in range(self.spec.instances):       # room freed in a shared tier
                if j != i:
                    self._schedule(j, t)

    def _count_decoded(self, ids: np.ndarray, ctx: np.ndarray, kept: np.ndarray | int) -> None:
        """Decode sequences `ids` at contexts `ctx` kept `kept` more tokens' KV (a step's accepted positions,
        or a stretch's steps): tokens and attention pairs, each over the context before it (its energy)."""
        self.decode_tokens[ids] += kept
        self.decode_pairs[ids] += kept * ctx + kept * (kept + 1) // 2

    def _emitted(self, decoded: np.ndarray, verified: np.ndarray) -> np.ndarray:
        """Tokens each decode sequence emits: 1, or with speculation its accepted drafts plus the target's next
        token (archsim.serving.speculative), at most the positions it verified."""
        if self.speculation is None or not len(decoded):
            return verified
        sp = self.speculation
        drawn = emitted_tokens(sp.k, sp.acceptance, sp.seed, decoded, self.verify_steps[decoded])
        self.verify_steps[decoded] += 1
        advanced = np.minimum(drawn, verified)
        self.rejected_tokens += int((verified - advanced).sum())
        # positions advanced + 1 .. verified attended over the context and the positions before them
        ctx = self.ctx[decoded]
        pairs = (verified - advanced) * ctx + (verified * (verified + 1) - advanced * (advanced + 1)) // 2
        self.rejected_pairs += int(pairs.sum())
        self.rejected_pairs_pnm += int(pairs[self._in_pnm(decoded)].sum())
        return advanced

    def _prefill_done(self, i: int, r: int, t: float) -> None:
        self.prefill_context[r] += self.target[r]
        v = int(self.res[r])
        nblocks = int(self.nheld[r])
        keys = self._seq_keys(r, nblocks)
        self.pending[i][v].difference_update(keys.tolist())
        if np.isnan(self.first_ns[r]):
            self.first_ns[r] = t
            self.prefill_ns[r] = t - self.prefill_start[r]
            self.queueing_ns[r] = t - self.arrival[r] - self.kv_load_ns[r] - self.prefill_ns[r]
        # the prefill's iterations wrote these blocks down as they computed them: now the tier below holds them
        self._write_through(i, r, keys[:int(self.in_tokens[r] // self.bt)], t, written=True)

    def _write_through(self, i: int, r: int, keys: np.ndarray, t: float, written: bool = False) -> None:
        """KV computed in HBM is also written to the tier below, so other instances and later turns hit it:
        in the background (an answer's blocks), or `written` already (a prefill's, by its iterations)."""
        if self.base != 0 or self.res[r] != 0 or self.T < 2 or not len(keys):
            return
        lower = self.views[i].tiers[1]
        before = lower.counters.insertions
        self.views[i].insert_prefix(keys, 1)
        if self.coherence is not None:
            self._sync_coherence(i)
        if written:
            return
        size = float((lower.counters.insertions - before) * self.block_bytes)
        self.tier_write[1] += size
        self._transfer(1, size, X_WRITE, r, t)

    def _demoted(self, i: int, below: int) -> None:
        """The prefix cache of instance i demoted a block into its view tier `below` (an evicted block no
        slower tier held); the event's end times it (`_time_demotions`)."""
        key = (i, self.base + below)
        self.demoted[key] = self.demoted.get(key, 0) + 1

    def _time_demotions(self, t: float) -> None:
        """The blocks demoted in this event, written down each tier's link in the background."""
        for (i, tier), blocks in sorted(self.demoted.items()):
            size = float(blocks * self.block_bytes)
            self.tier_write[tier] += size
            self._transfer(tier, size, X_DEMOTE, i, t)
        self.demoted.clear()

    def _complete(self, i: int, r: int, t: float) -> None:
        self.last_ns[r] = t
        self.state[r] = DONE
        self.completions += 1
        self.completed_out_tokens += int(self.out_tokens[r])
        self.running[i].remove(r)
        keys = self._seq_keys(r, int(self.nheld[r]))
        self.views[i].unpin(keys, int(self.res[r]))
        self.release_epoch += 1
        self.nheld[r] = 0
        self.queued_tokens[i] -= self.in_tokens[r] + self.out_tokens[r]
        self._count_inflight(t, -1)
        self.span_end = max(self.span_end, t)
        waiting = self._waiting_for(r)
        if waiting:
            # the output's blocks (the prompt's went down when its prefill finished)
            self._write_through(i, r, keys[int(self.in_tokens[r] // self.bt):int(self.ctx[r] // self.bt)], t)
        for nx in waiting:
            self.arrival[nx] = t + float(self.table.think_ns[nx])
            self._push(float(self.arrival[nx]), EV_ARRIVAL, nx)

    # -- transfers -----------------------------------------------------------------------------------------

    def _transfer(self, tier: int, size_bytes: float, what: int, who: int, t: float) -> bool:
        """Move KV over the link of `tier`, a write (WRITES) in its direction away from the GPUs: a timed
        transfer whose end wakes `who`. False when there is nothing to move."""
        if size_bytes <= 0:
            return False
        instance = who if what in OF_INSTANCE else int(self.inst[who])
        path = self._path(tier, instance)
        write = what in WRITES
        if write:                    # the other direction: the same latency, the tier's write rate
            path = tuple(self.write_link[name] for name in path)
        tid = self.links.start(path if self.servers > 1 else path[0], size_bytes, t)
        self.transfer_of[tid] = (what, who)
        if what not in BACKGROUND:   # no sooner than alone on its path
            heapq.heappush(self.wake_floor, (t + self._alone_ns(tier, instance, size_bytes, write=write), tid))
        name = path[0]
        if self.pool_bytes is not None and tier == self.pool_index and what not in (X_ITER, X_ITER_WRITE):
            self.pool_transfer[tid] = (t, size_bytes)    # an iteration's reads and writes count with it
        if self.activity is not None:
            self.activity.transfer_started(tid, name, size_bytes, what, t)
        self._recheck_links()
        return True

    def _path(self, tier: int, instance: int) -> tuple[str, ...]:
        """The links towards the GPUs a transfer of `instance` from `tier` crosses: the tier's link, or with
        several servers the instance's server's port and then the tier's shared side."""
        path = self.paths.get((tier, instance))
        if path is None:
            name = self.link_of_tier[tier]
            path = (name,) if self.servers == 1 else (server_link_name(name, self.spec.server_of(instance)), name)
            self.paths[(tier, instance)] = path
        return path

    def _count_written(self, tier: int, instance: int, size_bytes: float) -> None:
        """Bytes written down a tier's path without link time (decode appends)."""
        for name in self._path(tier, instance):
            self.written_bytes[name] += size_bytes

    def _recheck_links(self) -> None:
        self.link_version += 1
        nxt = self.links.next_completion()
        self.quiet_next = nxt is not None and self.transfer_of[nxt[1]][0] in BACKGROUND
        if nxt is not None:
            heapq.heappush(self.link_heap, (nxt[0], EV_LINK, 0, self.link_version))

    def _recheck_units(self) -> None:
        nxt = self.units.next_completion()
        # the units' next completion replaces the one before (which the jobs since may have moved): their "heap"
        # holds just it, so no stale event is ever pushed or taken
        self.unit_heap[:] = [(nxt[0], EV_UNIT, 0, 0)] if nxt is not None else []

    def _unit_check(self, t: float) -> None:
        """A job at the PNM units is done: the rest of its iteration follows."""
        self._jobs_done(self.units.advance_owned(t))
        self._recheck_units()

    def _jobs_done(self, done: list[tuple[float, int, float]]) -> None:
        """Jobs the units finished, as (time, instance, the rest of its iteration): the rest follows each."""
        for t_done, i, rest_ns in done:
            heapq.heappush(self.iter_heap, (t_done + rest_ns, EV_ITER, i, 0))

    def _link_check(self, version: int, t: float) -> None:
        if version != self.link_version:
            return
        for t_done, tid in self.links.advance(t):   # a write-through may have landed before t unseen
            if self.activity is not None:
                self.activity.transfer_done(tid, t_done)
            self._transfer_done(*self.transfer_of.pop(tid), t_done)
            started = self.pool_transfer.pop(tid, None)
            if started is not None:
                self.pool_bytes.add(started[0], t_done, started[1])
        self._recheck_links()

    def _transfer_done(self, what: int, who: int, t: float) -> None:
        if what in (X_ITER, X_ITER_WRITE):
            self._iteration_part_done(who, t)
        elif what == X_SWAP_OUT:
            self.swapping_out[who] = False
            if self.state[who] == WAITING:
                self._schedule(int(self.inst[who]), t)
        elif what in (X_LOAD, X_SWAP_IN, X_MOVE):
            self.xfers_left[who] -= 1
            if self.xfers_left[who]:
                return
            i = int(self.inst[who])
            if what == X_LOAD:
                if np.isnan(self.first_ns[who]):      # TTFT's part (not the reload of a preempted sequence)
                    self.kv_load_ns[who] += t - self.load_start[who]
                keys = self._seq_keys(who, int(self.admit_cached[who]))
                self.pending[i][int(self.res[who])].difference_update(keys.tolist())
            self.state[who] = RUNNING
            self.landing[i].discard(who)
            self.running[i].append(who)
            self._schedule(i, t)

    # -- the end -------------------------------------------------------------------------------------------

    def _check_finished(self) -> None:
        stuck = np.nonzero((self.state == WAITING) | (self.state == LOADING) | (self.state == RUNNING))[0]
        if not len(stuck):
            return
        heads = [q[0] for q in self.waiting if q]
        r = min(heads, key=lambda x: (self.arrival[x], x)) if heads else int(stuck[0])
        i = int(self.inst[r])
        new = int(self.target[r] - self.ctx[r])
        if not self.spec.chunked_prefill and new > self.spec.max_batch_tokens:
            why = (f"its prompt needs {new} tokens in one iteration, more than max_batch_tokens "
                   f"{self.spec.max_batch_tokens} (set chunked_prefill or raise max_batch_tokens)")
        else:
            v = int(self.res[r])
            tier = self.views[i].tiers[v]
            why = (f"its KV needs {-(-int(self.target[r]) // self.bt)} blocks of {self.bt} tokens in "
                   f"{tier.name}, which has {int(tier.room_blocks())} of {tier.capacity_blocks} free")
        raise ArchsimError(f"the run cannot make progress: request {r} (session {int(self.table.session[r])}, "
                           f"turn {int(self.table.turn[r])}, instance {i}) blocks it: {why}", where="system.serving")

    def _result(self, wall_s: float) -> ServingResult:
        tier_write = self.tier_write.copy()
        link_bytes = {name: self.links.counters(name).bytes_started + self.written_bytes[name]
                      + self.links.counters(self.write_link[name]).bytes_started for name in self.link_spec}
        stats = []
        for view in self.views:
            stats.extend(s for s in view.stats() if s["name"] not in {x["name"] for x in stats})
        coherence = self._coherence_result(link_bytes)
        return ServingResult(
            spec=self.spec, arrival_ns=self.arrival, first_token_ns=self.first_ns, last_token_ns=self.last_ns,
            queueing_ns=self.queueing_ns, kv_load_ns=np.where(np.isnan(self.first_ns), np.nan, self.kv_load_ns),
            prefill_ns=self.prefill_ns, input_tokens=self.in_tokens, output_tokens=self.out_tokens,
            hit_blocks=self.hit_blocks, loaded_blocks=self.loaded_blocks, instance=self.inst,
            completed=self.state == DONE, rejected=self.rejected, streamed=self.streams.copy(),
            preemptions=self.preemptions, tier_read_bytes=self.tier_read.copy(), tier_write_bytes=tier_write,
            swap_out_bytes=self.swap_out_bytes, swap_in_bytes=self.swap_in_bytes,
            handover_bytes=self.handover_bytes,
            link_bytes=link_bytes, link_busy_ns={name: self.links.counters(name).busy_ns for name in self.link_spec},
            link_write_busy_ns={self.write_link[name]: self.links.counters(self.write_link[name]).busy_ns
                                for name in self.link_spec},
            peak_pinned_blocks=self.peak_pinned.copy(), capacity_blocks=self.cap_blocks.copy(),
            iterations=self.iterations, tokens_emitted=self.tokens_emitted, tokens_computed=self.tokens_computed,
            events=self.arrivals + self.iterations + self.completions,
            inflight_area_ns=self.inflight_area, span_start_ns=self.span_start, span_end_ns=self.span_end,
            cache_stats=stats, wall_s=wall_s, activity=self.activity.arrays() if self.activity is not None else None,
            home_tier=self.res.astype(np.int8) if self.auto else None, moves=self.moves.copy() if self.auto else None,
            move_bytes=self.move_bytes, utilization=self._utilization(), speculation=self._speculation(),
            gpu_l2=self.l2.summary() if self.l2 is not None and self.l2.reads else None,
            pool_l2=self.pool_l2.summary() if self.pool_l2 is not None else None,
            verifier_passes=self.verifier_passes, verifier_only_passes=self.verifier_only_passes,
            verifier_rows=self.table.verifier,
            pool_decode_tokens=(self.pool_decode_tokens, self.pool_decode_fetched),
            kv_fetched_bytes=self._kv_fetched_bytes(), prefill_tokens=self.prefill_tokens.copy(),
            prefill_pairs=self.prefill_pairs.copy(), prefill_context=self.prefill_context.copy(),
            decode_tokens=self.decode_tokens.copy(), decode_pairs=self.decode_pairs.copy(),
            swap_recomputes=self.swap_recomputes, coherence=coherence,
            pnm_units=self.units.summary(self.span_end - self.span_start) if self.units is not None else None)

    def _coherence_result(self, link_bytes: dict[str, float]) -> dict | None:
        """The shared pool's coherence totals and each server's; back-invalidation's snoops and responses are
        added to the bytes of the holder's port and the pool's shared side (counted, not timed). A software
        flush's bytes are the written block's own, already on the links."""
        c = self.coherence
        if c is None:
            return None
        name = self.link_of_tier[self.pool_index]
        for s in range(self.servers):
            snooped = float(c.snooped[s] * c.costs.snoop_bytes)
            if snooped:
                link_bytes[server_link_name(name, s)] += snooped
                link_bytes[name] += snooped
        return {**c.summary(), "servers": c.per_server()}

    def _kv_fetched_bytes(self) -> float:
        """KV the decode and verification attention fetched from where it lives: HBM reads every sequence's
        blocks, a PNM pool a prefix its sequences share once."""
        fetched = self.decode_tokens_read - (self.pool_decode_tokens - self.pool_decode_fetched)
        return float(fetched * self.kvb + self.verified_chunk_read)

    def _speculation(self) -> dict | None:
        sp = self.speculation
        if sp is None:
            return None
        steps = int(self.verify_steps.sum())
        done = self.state == DONE
        emitted = int(np.maximum(self.out_tokens[done] - 1, 0).sum())  # decode tokens; the first comes from prefill
        return {"k": sp.k, "acceptance": sp.acceptance, "expected_tokens_per_step": sp.expected_tokens(),
                "verification_steps": steps, "tokens_per_step": emitted / steps if steps else None,
                "rejected_tokens": self.rejected_tokens, "rejected_kv_bytes": float(self.rejected_tokens * self.kvb),
                "kv_read_bytes": self.verified_kv_read,
                "kv_read_bytes_per_step": self.verified_kv_read / steps if steps else None,
                "kv_read_bytes_per_token": self.verified_kv_read / emitted if emitted else None,
                "draft_ms": self.draft_ns / 1e6, "rejected_attention_pairs": self.rejected_pairs,
                "rejected_attention_pairs_pnm": self.rejected_pairs_pnm, "kv_read_bytes_pnm": self.verified_kv_read_pnm,
                "draft_passes": self.draft_passes, "draft_tokens": self.draft_tokens,
                "draft_attention_pairs": self.draft_pairs, "draft_kv_tokens_read": self.draft_kv_tokens}

    def _utilization(self) -> dict | None:
        busy = {name: self.links.busy_periods(name) for name in self.link_spec}
        busy.update({self.write_link[name]: self.links.busy_periods(self.write_link[name]) for name in self.link_spec})
        pool = self.pool_bytes.arrays() if self.pool_bytes is not None else None
        return utilization_over_time((self.span_start, self.span_end), busy, pool, self.spec.pool_dram_GBps)
