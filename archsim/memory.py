"""Facade over the controller kernel: feed request arrays in, get completions, command log and stats out."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from archsim.config.memory import (
    REFRESH_MODES,
    ROW_POLICIES,
    SCHEDULERS,
    SOURCES,
    MemoryConfig,
)
from archsim.controller import kernel as K  # noqa: N812 - the kernel's constants read as K.ACT
from archsim.dram.spec import refresh_interval_per_bank
from archsim.dram.timing_table import compile_timing_table, sparse_timing_table
from archsim.errors import TraceError


@dataclass(frozen=True)
class Requests:
    """A physical request stream in trace order (struct of arrays)."""

    timestamp_cycles: np.ndarray  # int64, earliest injection cycle of the memory command clock
    address: np.ndarray  # uint64 byte address
    is_write: np.ndarray  # uint8
    source: np.ndarray  # uint8 index into SOURCES (0 host, 1 pnm)

    def __len__(self) -> int:
        return int(self.address.shape[0])

    @staticmethod
    def build(timestamp_cycles: np.ndarray, address: np.ndarray, is_write: np.ndarray,
              source: np.ndarray | None = None) -> Requests:
        n = len(address)
        src = np.zeros(n, dtype=np.uint8) if source is None else np.asarray(source, dtype=np.uint8)
        return Requests(np.asarray(timestamp_cycles, dtype=np.int64), np.asarray(address, dtype=np.uint64),
                        np.asarray(is_write, dtype=np.uint8), src)


@dataclass(frozen=True)
class CommandLog:
    """Every command issued, in issue order: cycle, code (archsim.dram.commands), pseudo-channel, bank, row."""

    cycle: np.ndarray
    command: np.ndarray
    pseudo_channel: np.ndarray
    bank: np.ndarray  # bank index within the pseudo-channel: (rank * bankgroups + bankgroup) * banks + bank
    row: np.ndarray  # -1 for commands without a row (PREA, REF)


@dataclass(frozen=True)
class ReplayResult:
    config: MemoryConfig
    requests: Requests
    pseudo_channel: np.ndarray
    accept_cycle: np.ndarray
    done_cycle: np.ndarray
    request_class: np.ndarray  # 0 hit, 1 miss, 2 conflict, 3 forwarded from the write queue
    bank_conflict: np.ndarray
    command_counts: np.ndarray
    total_cycles: int
    wall_s: float
    compile_s: float
    command_log: CommandLog | None


def kernel_params(cfg: MemoryConfig, log_capacity: int, tick_every_cycle: bool = False) -> np.ndarray:
    org, t, c, f = cfg.organization, cfg.timing, cfg.controller, cfg.frontend
    prm = np.zeros(K.N_PARAMS, dtype=np.int64)
    prm[K.P_NCH] = org.n_channels
    prm[K.P_PCS] = org.pseudo_channels
    prm[K.P_RANKS] = org.ranks
    prm[K.P_BGS] = org.bankgroups
    prm[K.P_BANKS] = org.banks_per_group
    prm[K.P_RQ] = c.read_queue_depth
    prm[K.P_WQ] = c.write_queue_depth
    prm[K.P_SCHED] = SCHEDULERS.get(c.scheduler)
    prm[K.P_POLICY] = ROW_POLICIES.get(c.row_policy)
    prm[K.P_CAP] = c.row_policy_cap
    prm[K.P_TIMEOUT] = c.row_policy_timeout_cycles
    prm[K.P_HIGH] = c.write_high_watermark
    prm[K.P_LOW] = c.write_low_watermark
    prm[K.P_REFRESH] = REFRESH_MODES.get(c.refresh)
    prm[K.P_DELAY] = c.frontend_delay_cycles
    prm[K.P_FORWARD] = int(c.write_queue_forwarding)
    prm[K.P_INJCAP] = f.max_injections_per_cycle
    prm[K.P_POSTED] = int(f.posted_writes)
    prm[K.P_CL] = t.CL
    prm[K.P_CWL] = t.CWL
    prm[K.P_BURST] = t.tBURST
    prm[K.P_FAW] = t.tFAW
    prm[K.P_REFI] = t.tREFI
    prm[K.P_REFIPB] = refresh_interval_per_bank(org, t)
    prm[K.P_LOGCAP] = log_capacity
    prm[K.P_BQD] = c.bank_queue_depth
    prm[K.P_TICK] = int(tick_every_cycle)
    return prm


def _initial_refresh_due(cfg: MemoryConfig) -> np.ndarray:
    """First refresh deadline per rank: one interval in, staggered evenly across ranks unless disabled."""
    org, t = cfg.organization, cfg.timing
    n_ranks = org.n_pseudo_channels * org.ranks
    interval = t.tREFI if cfg.controller.refresh == "all_bank" else refresh_interval_per_bank(org, t)
    due = np.full(n_ranks, interval, dtype=np.int64)
    if cfg.controller.refresh_stagger:
        due += (np.arange(n_ranks, dtype=np.int64) * interval) // n_ranks
    return due


def check_addresses(cfg: MemoryConfig, address: np.ndarray, wrap: bool, file: str | None) -> np.ndarray:
    capacity = cfg.organization.capacity_bytes
    over = np.nonzero(address >= np.uint64(capacity))[0]
    if over.size:
        if not wrap:
            first = int(over[0])
            raise TraceError(f"address {int(address[first]):#x} of request {first} is beyond the memory's capacity "
                             f"of {capacity:#x} bytes (pass --wrap to fold addresses into range)",
                             file=file, where=f"request {first}")
        address = address % np.uint64(capacity)
    return address


def replay(cfg: MemoryConfig, requests: Requests, *, command_log: bool = False, progress: bool = False,
           chunk_requests: int = 200_000, tick_every_cycle: bool = False) -> ReplayResult:
    """Run the request stream through the controllers and banks; see docs/memory.md for the semantics.

    `tick_every_cycle` evaluates every channel at every cycle instead of jumping to the next event: same
    results by construction, much slower; tests use it to prove the event-driven wake-ups skip nothing.
    """
    org = cfg.organization
    n = len(requests)
    if n == 0:
        raise TraceError("the trace holds no requests")
    if np.any(np.diff(requests.timestamp_cycles) < 0):
        first = int(np.nonzero(np.diff(requests.timestamp_cycles) < 0)[0][0]) + 1
        raise TraceError(f"timestamps go backwards at request {first}: requests are replayed in trace order",
                         where=f"request {first}")
    dec = cfg.mapping.decode(requests.address)
    pc = dec.flat_pseudo_channel(org).astype(np.int32)
    bank = dec.bank_in_pseudo_channel(org).astype(np.int32)
    row = dec.row.astype(np.int32)
    addr = requests.address.astype(np.int64)
    rank_in_pc = dec.rank.astype(np.int64)
    bgf = ((pc.astype(np.int64) * org.ranks + rank_in_pc) * org.bankgroups + dec.bankgroup).astype(np.int64)
    rf = (pc.astype(np.int64) * org.ranks + rank_in_pc).astype(np.int64)

    log_capacity = 0
    if command_log:
        expected_refreshes = 64 + int(requests.timestamp_cycles[-1] // max(1, cfg.timing.tREFI // 64))
        log_capacity = 4 * n + org.n_pseudo_channels * org.ranks * expected_refreshes
    compile_start = time.perf_counter()
    warm_up()
    compile_s = time.perf_counter() - compile_start
    gb = pc.astype(np.int64) * org.banks_per_pseudo_channel + bank
    inputs = (requests.timestamp_cycles, pc, bank, row, requests.is_write, addr, gb, bgf, rf)
    while True:
        prm = kernel_params(cfg, log_capacity, tick_every_cycle)
        sparse = sparse_timing_table(compile_timing_table(cfg.timing))
        scal = np.zeros(K.N_SCALARS, dtype=np.int64)
        outputs = _request_outputs(n)
        state = _kernel_state(cfg, n)
        log_arrays = _log_arrays(max(1, log_capacity))
        start = time.perf_counter()
        bar = _progress_bar(n) if progress else None
        while scal[K.S_DONE] == 0:
            before = int(scal[K.S_PTR])
            K.run_kernel(min(n, before + chunk_requests), prm, sparse, scal, *inputs, *outputs, *state, *log_arrays)
            if bar is not None:
                bar.update(int(scal[K.S_PTR]) - before)
        if bar is not None:
            bar.close()
        wall_s = time.perf_counter() - start
        if scal[K.S_LOGOVF] == 0:
            break
        log_capacity *= 2
    accept, _ready, done, klass, conflict = outputs
    cmd_count = state[-1]
    log = None
    if command_log:
        k = int(scal[K.S_NLOG])
        log = CommandLog(*(array[:k].copy() for array in log_arrays))
    return ReplayResult(cfg, requests, pc, accept, done, klass, conflict, cmd_count, int(scal[K.S_LAST]), wall_s,
                        compile_s, log)


def _request_outputs(n: int) -> tuple[np.ndarray, ...]:
    """accept, ready, done, class, bank_conflict per request."""
    return (np.full(n, -1, dtype=np.int64), np.full(n, K.INF, dtype=np.int64), np.full(n, -1, dtype=np.int64),
            np.full(n, -1, dtype=np.int8), np.zeros(n, dtype=np.uint8))


def _kernel_state(cfg: MemoryConfig, n: int) -> tuple[np.ndarray, ...]:
    """Bank, queue and refresh state in the kernel's argument order; the last array counts commands."""
    org, c = cfg.organization, cfg.controller
    n_pc = org.n_pseudo_channels
    n_bank = org.n_banks
    n_rank = n_pc * org.ranks
    n_bg = n_rank * org.bankgroups
    window = org.banks_per_pseudo_channel * c.bank_queue_depth

    def per(count: int, fill: int = 0) -> np.ndarray:
        return np.full(count, fill, dtype=np.int64)

    timing_rows = tuple(np.zeros((count, K.NCMD), dtype=np.int64) for count in (n_bank, n_bg, n_rank, n_pc))
    faw = np.full((n_rank, 4), K.NEG, dtype=np.int64)
    banks = (per(n_bank, -1), per(n_bank), per(n_bank), per(n_bank), per(n_bank), per(n_pc), per(n_pc),
             per(n_bank), per(n_bank), per(n_bank),
             np.full((n_bank, 2), -1, dtype=np.int64), np.full((n_bank, 2), -1, dtype=np.int64),
             np.zeros((n_bank, 2), dtype=np.int64), per(n, -1), per(n, -1))
    # banks: open_row col_count last_col hits_r hits_w hsum_r hsum_w pend busy_until win, then the per-bank
    # request lists (head, tail, count per kind) and their links (next, previous per request)
    queues = (np.zeros((n_pc, c.read_queue_depth + window), dtype=np.int64), per(n_pc), per(n_pc),
              np.zeros((n_pc, c.write_queue_depth + window), dtype=np.int64), per(n_pc), per(n_pc),
              np.zeros(n_pc, dtype=np.bool_))
    refresh = (_initial_refresh_due(cfg), per(n_rank), per(org.n_channels, int(K.INF)), per(K.NCMD))
    return (*timing_rows, faw, per(n_rank), *banks, *queues, *refresh)


def _log_arrays(capacity: int) -> tuple[np.ndarray, ...]:
    return (np.zeros(capacity, dtype=np.int64), np.zeros(capacity, dtype=np.int8), np.zeros(capacity, dtype=np.int32),
            np.zeros(capacity, dtype=np.int32), np.zeros(capacity, dtype=np.int64))


def _progress_bar(n: int) -> Any:
    from tqdm import tqdm

    return tqdm(total=n, unit="req", mininterval=1.0, delay=2.0, leave=False)


_WARM = False


def warm_up() -> None:
    """Compile (or load from cache) the kernel once per process on a two-request stream."""
    global _WARM
    if _WARM:
        return
    _WARM = True
    from archsim.config.memory import memory_config_from_preset

    cfg = memory_config_from_preset("HBM2")
    reqs = Requests.build(np.array([0, 1]), np.array([0, 64]), np.array([0, 1]))
    replay(cfg, reqs)


__all__ = ["Requests", "ReplayResult", "CommandLog", "replay", "check_addresses", "SOURCES", "warm_up"]
