"""Facade over the controller kernel: feed request arrays in, get completions, command log and stats out."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from archsim.config.memory import (
    ARBITERS,
    REFRESH_MODES,
    ROW_POLICIES,
    SCHEDULERS,
    SOURCES,
    MemoryConfig,
)
from archsim.controller import codes as K  # noqa: N812 - the kernel's codes read as K.ACT
from archsim.controller.kernel import FROZEN_CONTROLLERS, SPECIALIZED_SHAPES, KernelVariant, run_kernel
from archsim.controller.records import CommandLogArrays, KernelState, RequestArrays, RequestOutcomes
from archsim.controller.schedulers import EXTERNAL
from archsim.dram.commands import CommandLog
from archsim.dram.spec import refresh_interval_per_bank
from archsim.dram.timing_table import compile_timing_table
from archsim.errors import EMPTY_TRACE, ConfigError, TraceError
from archsim.kernel_cache import _PREPARED, describe_variant, prepare_kernel, variant_on_disk


@dataclass(frozen=True)
class Requests:
    """A physical request stream in trace order (struct of arrays)."""

    timestamp_cycles: np.ndarray  # int64, earliest injection cycle of the memory command clock
    address: np.ndarray  # uint64 byte address
    is_write: np.ndarray  # uint8
    source: np.ndarray  # uint8 index into `sources`
    sources: tuple[str, ...] = SOURCES  # the ports' names (a two-port trace: host, pnm)

    def __len__(self) -> int:
        return int(self.address.shape[0])

    @staticmethod
    def build(timestamp_cycles: np.ndarray, address: np.ndarray, is_write: np.ndarray,
              source: np.ndarray | None = None, sources: tuple[str, ...] = SOURCES) -> Requests:
        n = len(address)
        src = np.zeros(n, dtype=np.uint8) if source is None else np.asarray(source, dtype=np.uint8)
        return Requests(np.asarray(timestamp_cycles, dtype=np.int64), np.asarray(address, dtype=np.uint64),
                        np.asarray(is_write, dtype=np.uint8), src, tuple(sources))


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
    # qos_counts[opener * P + closer]: row closures by port pair (P ports: `requests.sources`);
    # [P * P + newcomer * P + opener]: requests that found their bank open on another row, by port pair
    qos_counts: np.ndarray
    kernel_cache: str | None = None  # the kernel variant came from numba's cache ("hit"), was compiled ("miss"),
    # or was already loaded in this process (None)


def kernel_params(cfg: MemoryConfig, log_capacity: int, tick_every_cycle: bool = False,
                  sources: tuple[str, ...] = SOURCES) -> np.ndarray:
    org, t, c, f = cfg.organization, cfg.timing, cfg.controller, cfg.frontend
    prm = np.zeros(K.N_PARAMS + K.PORT_PARAMS * len(sources), dtype=np.int64)
    prm[K.P_NCH] = org.n_channels
    prm[K.P_PCS] = org.pseudo_channels
    prm[K.P_RANKS] = org.ranks
    prm[K.P_BGS] = org.bankgroups
    prm[K.P_BANKS] = org.banks_per_group
    prm[K.P_RQ] = c.read_queue_depth
    prm[K.P_WQ] = c.write_queue_depth
    prm[K.P_SCHED] = SCHEDULERS.get(c.scheduler)
    prm[K.P_POLICY] = ROW_POLICIES.get(c.row_policy.impl)
    prm[K.P_CAP] = c.row_policy.cap
    prm[K.P_TIMEOUT] = c.row_policy.timeout_cycles
    prm[K.P_HIGH] = c.write_drain.high_watermark
    prm[K.P_LOW] = c.write_drain.low_watermark
    prm[K.P_IDLE] = c.write_drain.idle_threshold
    prm[K.P_REFHOLD] = c.refresh.holds_columns
    prm[K.P_REFRESH] = REFRESH_MODES.get(c.refresh.impl)
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
    prm[K.P_ARB] = ARBITERS.get(c.arbiter.impl)
    prm[K.P_PORTS] = len(sources)
    prm[K.P_FAVOR], ports = port_parameters(cfg, sources)
    prm[K.N_PARAMS:] = ports.reshape(-1)
    prm[K.P_AGECAP] = c.arbiter.age_cap_cycles
    prm[K.P_BPR] = org.bankgroups * org.banks_per_group
    prm[K.P_BPP] = org.banks_per_pseudo_channel
    prm[K.P_WORDS] = mask_words(org.banks_per_pseudo_channel)
    prm[K.P_SH_PCS] = _pow2_shift(org.pseudo_channels)
    prm[K.P_SH_BPR] = _pow2_shift(org.bankgroups * org.banks_per_group)
    return prm


def port_parameters(cfg: MemoryConfig, sources: tuple[str, ...]) -> tuple[int, np.ndarray]:
    """The favoured port (priority) and the per-port parameter rows (`codes.PORT_*`) of `cfg`'s arbiter on a trace
    whose ports are `sources`. A port the arbiter names that the trace lacks is one error naming the key."""
    a = cfg.controller.arbiter
    where = "memory.controller.arbiter"

    def port(name: str, key: str) -> int:
        if name not in sources:
            raise ConfigError(f"no port {name!r} in the replayed trace (its sources: {', '.join(sources)})",
                              file=cfg.source_file, where=f"{where}.{key}")
        return sources.index(name)

    favor = port(a.favor, "favor") if a.impl == "priority" else -1
    rows = np.zeros((len(sources), K.PORT_PARAMS), dtype=np.int64)
    rows[:, K.PORT_WEIGHT] = 1
    if a.impl == "wrr":
        for name, weight in a.weights:
            rows[port(name, f"weights.{name}"), K.PORT_WEIGHT] = weight
    if a.impl == "reservation":
        for name, share in a.shares:
            p = port(name, f"shares.{name}")
            # tokens accrue per cycle: share x one column command per data-bus burst
            rows[p, K.PORT_RATE] = int(round(share * K.TOKEN / cfg.timing.tBURST))
            rows[p, K.PORT_CAP] = a.burst * K.TOKEN
    return favor, rows


def _pow2_shift(divisor: int) -> int:
    """log2 of a power of two, else -1 (the kernel then divides: `request_lists.quotient`)."""
    return divisor.bit_length() - 1 if divisor & (divisor - 1) == 0 else -1


def kernel_variant(prm: np.ndarray) -> KernelVariant:
    """Which compiled kernel runs these parameters: the variant of a scheduler registered from outside the
    package; on a shipped standard's shape (`kernel.SPECIALIZED_SHAPES`) the first of `kernel.FROZEN_CONTROLLERS`
    whose every frozen parameter has this value (the plain kernel on the defaults, DRAMSim3's, else the general
    kernel of that shape); else the general one, which reads the shape and dispatches on every built-in code."""
    code = int(prm[K.P_SCHED])
    if code in EXTERNAL:
        return KernelVariant(scheduler=code)
    shape = (int(prm[K.P_PCS]), int(prm[K.P_RANKS]), int(prm[K.P_WORDS]))
    if shape in SPECIALIZED_SHAPES:
        controller = next(name for name, frozen in FROZEN_CONTROLLERS.items()
                          if all(int(prm[getattr(K, slot)]) == value for slot, value in frozen.items()))
        return KernelVariant(-1, *shape, controller=controller)
    return KernelVariant()


def mask_words(banks_per_pseudo_channel: int) -> int:
    """64-bit words of a per-pseudo-channel bank mask."""
    return (banks_per_pseudo_channel + 63) // 64


def _initial_refresh_due(cfg: MemoryConfig) -> np.ndarray:
    """First refresh deadline per rank: one interval in, staggered evenly across ranks unless disabled."""
    org, t = cfg.organization, cfg.timing
    n_ranks = org.n_pseudo_channels * org.ranks
    interval = t.tREFI if cfg.controller.refresh.impl == "all_bank" else refresh_interval_per_bank(org, t)
    due = np.full(n_ranks, interval, dtype=np.int64)
    if cfg.controller.refresh.stagger:
        due += (np.arange(n_ranks, dtype=np.int64) * interval) // n_ranks
    return due


def check_addresses(cfg: MemoryConfig, address: np.ndarray, wrap: bool, file: str | None,
                    first: int = 0) -> np.ndarray:
    """The addresses if all are within the memory; folded into it with `wrap`; else an error naming the first
    beyond it (the addresses are requests `first`.. of the trace)."""
    capacity = cfg.organization.capacity_bytes
    over = np.nonzero(address >= np.uint64(capacity))[0]
    if over.size:
        if not wrap:
            k = int(over[0])
            raise TraceError(f"address {int(address[k]):#x} is beyond the memory's capacity "
                             f"of {capacity:#x} bytes (pass --wrap to fold addresses into range)",
                             file=file, where=f"request {first + k}")
        address = address % np.uint64(capacity)
    return address


def request_fields(cfg: MemoryConfig, address: np.ndarray) -> dict[str, np.ndarray]:
    """What the kernel reads of each request, from its address: pseudo-channel, bank within it, row, the address
    as int64, global bank, global bank group and global rank (`RequestArrays`)."""
    org = cfg.organization
    address = np.asarray(address, dtype=np.uint64)
    dec = cfg.mapping.decode(address)
    pc = dec.flat_pseudo_channel(org)
    bank = dec.bank_in_pseudo_channel(org)
    # the rest in place too: a replay computes these for every request
    rank = pc * org.ranks
    rank += dec.rank
    bgf = rank * org.bankgroups
    bgf += dec.bankgroup
    gb = pc * org.banks_per_pseudo_channel
    gb += bank
    return {"pc": pc, "bank": bank, "row": dec.row, "addr": address.astype(np.int64), "gb": gb, "bgf": bgf, "rf": rank}


class MemorySession:
    """The memory as a resumable simulation: addresses are known up front, release times may come later.

    Requests are released in index order (`release`), each with the cycle it may go from; an unreleased request
    holds back every later one, as a trace would. `run_until(cycle)` simulates everything before `cycle` and
    returns; `done_cycle` then shows which requests completed. A closed-loop client (the PNM unit) releases
    its next loads once the data they depend on has arrived. `replay` is the open-loop special case.
    """

    def __init__(self, cfg: MemoryConfig, address: np.ndarray, is_write: np.ndarray,
                 source: np.ndarray | None = None, *, command_log: bool = False,
                 tick_every_cycle: bool = False, sources: tuple[str, ...] = SOURCES) -> None:
        n = len(address)
        self.cfg = cfg
        self.n = n
        self.released = 0
        self.requests = Requests.build(np.full(n, K.INF, dtype=np.int64), address, is_write, source, sources)
        self.pseudo_channel = np.zeros(n, dtype=np.int32)
        # per-request inputs the kernel reads, derived from each address (see `bind`)
        self._derived = {"pc": self.pseudo_channel, "bank": np.zeros(n, dtype=np.int32),
                         "row": np.zeros(n, dtype=np.int32), "addr": np.zeros(n, dtype=np.int64),
                         "gb": np.zeros(n, dtype=np.int64), "bgf": np.zeros(n, dtype=np.int64),
                         "rf": np.zeros(n, dtype=np.int64)}
        self.bind(0, n, self.requests.address, self.requests.is_write)
        d = self._derived
        self._inputs = RequestArrays(self.requests.timestamp_cycles, d["pc"], d["bank"], d["row"],
                                     self.requests.is_write, d["addr"], d["gb"], d["bgf"], d["rf"],
                                     self.requests.source, *_port_order(self.requests.source, len(sources)))
        self._prm = kernel_params(cfg, 1 if command_log else 0, tick_every_cycle, self.requests.sources)
        self._variant = kernel_variant(self._prm)
        # gap[level, command, next command] (dram/timing_table.py), flat; the kernel reads only the cells with a rule
        self._gaps = compile_timing_table(cfg.timing).reshape(-1)
        self._scal = np.zeros(K.N_SCALARS, dtype=np.int64)
        # the kernel's work space within a call (controller/codes.py SCR_*)
        self._scratch = np.zeros(K.SCR_DUE + cfg.organization.n_channels, dtype=np.int64)
        self._outputs = _request_outputs(n)
        self._state, self._named = _kernel_state(cfg, n, len(sources))
        self._named["port_ptr"][:] = self._inputs[-1][:-1]  # each port starts at its first request
        self._log = _log_arrays(4 * n + 1024 if command_log else 1)
        self.command_log_enabled = command_log
        self.wall_s = 0.0
        self.compile_s = 0.0  # compiling or loading this session's kernel variant, outside wall_s
        self.kernel_cache: str | None = None  # "hit", "miss" or None (loaded earlier in this process)

    def _kernel_args(self) -> tuple:
        return (self.n, self._prm, self._gaps, self._scal, self._scratch, self._inputs, self._outputs, self._state,
                self._log)

    def _prepare_kernel(self) -> None:
        """Compile (or load from numba's cache) the kernel variant this session runs, once per process, timed
        apart from the simulation (`compile_s`, `kernel_cache`)."""
        if self._variant in _PREPARED:
            return
        start = time.perf_counter()
        what = describe_variant(self.cfg, self._variant)
        self.kernel_cache = prepare_kernel(self._variant, self._kernel_args(), what)
        self.compile_s += time.perf_counter() - start

    @property
    def now(self) -> int:
        return int(self._scal[K.S_T])

    @property
    def channel_visits(self) -> int:
        """Channel evaluations so far (each a look at a channel's due pseudo-channels): the event-driven
        kernel's work, a count that does not depend on the machine."""
        return int(self._scal[K.S_VISITS])

    @property
    def accept_cycle(self) -> np.ndarray:
        return self._outputs[0]

    @property
    def done_cycle(self) -> np.ndarray:
        """Cycle of each request's last data beat (reads) or completion (writes); -1 while pending."""
        return self._outputs[2]

    def bind(self, first: int, last: int, address: np.ndarray, is_write: np.ndarray) -> None:
        """Set the address and direction of requests [first, last) that are not released yet.

        A closed-loop client whose request order is only known as it runs (several units sharing one
        memory) sizes the session up front and binds each slot just before releasing it. The port of each
        request is fixed at construction.
        """
        if first < self.released:
            raise ValueError(f"cannot rebind requests below {self.released}: they are released")
        address = np.asarray(address, dtype=np.uint64)
        self.requests.address[first:last] = address
        self.requests.is_write[first:last] = np.asarray(is_write, dtype=np.uint8)
        for name, values in request_fields(self.cfg, address).items():
            self._derived[name][first:last] = values

    def release(self, first: int, last: int, cycle: int | np.ndarray) -> None:
        """Requests [first, last) may be injected from `cycle` on (a scalar or one cycle per request)."""
        if first != self.released or last < first or last > self.n:
            raise ValueError(f"release [{first}, {last}) out of order: {self.released} released so far")
        # each port injects in index order, each request no earlier than its own cycle: a cycle below an
        # earlier request's simply waits behind it (no reordering), as in a trace-driven front end
        cycles = np.broadcast_to(np.asarray(cycle, dtype=np.int64), (last - first,))
        self.requests.timestamp_cycles[first:last] = np.maximum(cycles, self.now)
        self.released = last

    def run_until(self, cycle: int, *, stop_after_requests: int | None = None) -> int:
        """Simulate every event before `cycle` (all of them if `cycle` is None-like INF); return the time reached."""
        self._scal[K.S_TLIMIT] = cycle
        stop = self.n if stop_after_requests is None else stop_after_requests
        self._prepare_kernel()
        start = time.perf_counter()
        while True:
            before = (int(self._scal[K.S_PTR]), int(self._scal[K.S_T]))
            run_kernel(self._variant, stop, self._prm, self._gaps, self._scal, self._scratch, self._inputs,
                       self._outputs, self._state, self._log)
            if self._scal[K.S_STALLED]:
                raise RuntimeError(f"the memory controller stalled: {int(self._scal[K.S_QUEUED])} requests queued "
                                   f"and no column command for {K.STALL_CYCLES:,} cycles (cycle {self.now:,}); "
                                   f"a scheduler livelock, please report it with the trace and config")
            if self._scal[K.S_LOGOVF]:
                self._scal[K.S_LOGOVF] = 0
                self._log = CommandLogArrays(*(np.concatenate([a, np.zeros_like(a)]) for a in self._log))
                continue
            after = (int(self._scal[K.S_PTR]), int(self._scal[K.S_T]))
            if self._scal[K.S_DONE] or after[0] >= stop or after[1] >= cycle or after == before:
                break
        self.wall_s += time.perf_counter() - start
        return self.now

    @property
    def finished(self) -> bool:
        return bool(self._scal[K.S_DONE])

    def command_log(self) -> CommandLog | None:
        if not self.command_log_enabled:
            return None
        k = int(self._scal[K.S_NLOG])
        return CommandLog(*(array[:k].copy() for array in self._log))

    def result(self) -> ReplayResult:
        accept, _ready, done, klass, conflict = self._outputs
        return ReplayResult(self.cfg, self.requests, self.pseudo_channel, accept, done, klass, conflict,
                            self._named["cmd_count"], int(self._scal[K.S_LAST]), self.wall_s, self.compile_s,
                            self.command_log(), self._named["qos_counts"], self.kernel_cache)


def replay(cfg: MemoryConfig, requests: Requests, *, command_log: bool = False, progress: bool = False,
           chunk_requests: int = 200_000, tick_every_cycle: bool = False) -> ReplayResult:
    """Run the request stream through the controllers and banks; see docs/memory.md for the semantics.

    `tick_every_cycle` evaluates every channel at every cycle instead of jumping to the next event: same
    results by construction, much slower; tests use it to prove the event-driven wake-ups skip nothing.
    """
    n = len(requests)
    if n == 0:
        raise TraceError(EMPTY_TRACE)
    session = MemorySession(cfg, requests.address, requests.is_write, requests.source, command_log=command_log,
                            tick_every_cycle=tick_every_cycle, sources=requests.sources)
    session.release(0, n, requests.timestamp_cycles)
    bar = _progress_bar(n) if progress else None
    while not session.finished:
        before = int(session._scal[K.S_PTR])
        session.run_until(int(K.INF), stop_after_requests=min(n, before + chunk_requests))
        if bar is not None:
            bar.update(int(session._scal[K.S_PTR]) - before)
        if not session.finished and int(session._scal[K.S_PTR]) == before and before == n:
            raise RuntimeError("the memory kernel stopped making progress")
    if bar is not None:
        bar.close()
    return dataclasses.replace(session.result(), requests=requests)

def _port_order(source: np.ndarray, ports: int) -> tuple[np.ndarray, np.ndarray]:
    """Request indices grouped by port (in the order of the trace's sources), each in trace order, and the group
    bounds."""
    order = np.argsort(source, kind="stable").astype(np.int64)
    counts = np.bincount(source, minlength=ports)
    return order, np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def _request_outputs(n: int) -> RequestOutcomes:
    """accept, ready, done, class, bank_conflict per request."""
    return RequestOutcomes(np.full(n, -1, dtype=np.int64), np.full(n, K.INF, dtype=np.int64),
                           np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int8), np.zeros(n, dtype=np.uint8))


def _kernel_state(cfg: MemoryConfig, n: int, ports: int = len(SOURCES)) -> tuple[KernelState, dict[str, np.ndarray]]:
    """Bank, queue, refresh and port-arbitration state in the kernel's argument order, plus the arrays the
    caller reads back by name."""
    org, c = cfg.organization, cfg.controller
    n_pc = org.n_pseudo_channels
    n_bank = org.n_banks
    n_rank = n_pc * org.ranks
    n_bg = n_rank * org.bankgroups
    window = org.banks_per_pseudo_channel * c.bank_queue_depth

    def per(count: int, fill: int = 0) -> np.ndarray:
        return np.full(count, fill, dtype=np.int64)

    words = mask_words(org.banks_per_pseudo_channel)

    def flat(name: str, rows: int, fill: int = 0, dtype: type = np.int64) -> np.ndarray:
        """An array of K.FLAT_ARRAYS, which the kernel gets flat (controller/index_lowering.py): `rows` rows of
        its length (a length given by name is the bank masks' word count or the ports)."""
        lengths = [{"words": words, "ports": ports}.get(length, length) for length in K.FLAT_ARRAYS[name]]
        return np.full(rows * math.prod(lengths), fill, dtype=dtype)

    timing_rows = tuple(flat(name, count) for name, count in
                        (("nxt_bank", n_bank), ("nxt_bg", n_bg), ("nxt_rank", n_rank), ("nxt_pc", n_pc)))
    faw = flat("faw", n_rank, int(K.NEG))
    # one row of state per bank (columns: controller/codes.py B_*): all closed, no requests listed
    bank_state = flat("bstate", n_bank).reshape(n_bank, K.BANK_COLUMNS)
    bank_state[:, K.B_OPEN] = -1
    bank_state[:, K.B_HEAD:K.B_HEAD + 2] = -1
    bank_state[:, K.B_TAIL:K.B_TAIL + 2] = -1
    bank_state[:, K.B_BGF] = np.arange(n_bank) // org.banks_per_group
    # one row of state per pseudo-channel (columns: controller/codes.py PC_*)
    pc_state = flat("pstate", n_pc).reshape(n_pc, K.PC_COLUMNS)
    pc_state[:, K.PC_CLOSED_ACT] = K.INF  # no closed bank with requests: no ACT bound, no list heads
    pc_state[:, K.PC_CLOSED_HEAD:K.PC_CLOSED_HEAD + 2] = K.INF
    pc_state[:, K.PC_RR_PTR] = org.banks_per_pseudo_channel - 1  # round robin starts at bank 0
    ref_due = _initial_refresh_due(cfg)
    # every channel wakes for its first refresh even if no request ever reaches it
    chan_next = per(org.n_channels, int(K.INF))
    pc_state[:, K.PC_NEXT] = K.INF
    if c.refresh.impl != "none":
        chan_next[:] = ref_due.reshape(org.n_channels, -1).min(axis=1)
        pc_state[:, K.PC_NEXT] = ref_due.reshape(n_pc, -1).min(axis=1)
    # the links of the per-bank request lists (next, previous per request), then per pseudo-channel bit masks of
    # the banks with requests queued, of the banks with a row open and of the banks with row hits queued (reads,
    # writes)
    # per pseudo-channel and port (columns: controller/codes.py PP_*): nothing queued or served, no tokens
    banks = (bank_state.reshape(-1), pc_state.reshape(-1), flat("pport", n_pc), per(n, -1), per(n, -1),
             *(flat(name, n_pc, dtype=np.uint64) for name in ("amask", "omask", "hmask")))
    # the bank-queue variant's transaction queues; each port has its own share (its own request buffer): room for
    # every port, per kind. Then where each port stands in its trace order, and its flags within a cycle
    port_ptr = per(ports)
    queues = (np.zeros((n_pc, ports * (c.read_queue_depth + window)), dtype=np.int64),
              np.zeros((n_pc, ports * (c.write_queue_depth + window)), dtype=np.int64), port_ptr,
              per(ports * K.PF_COLUMNS))
    qos_counts = per(2 * ports * ports)
    cmd_count = per(K.NCMD)
    refresh = (ref_due, per(n_rank), qos_counts, chan_next, cmd_count)
    return KernelState(*timing_rows, faw, per(n_rank), *banks, *queues, *refresh), {"qos_counts": qos_counts,
                                                                         "cmd_count": cmd_count,
                                                                         "port_ptr": port_ptr}


def _log_arrays(capacity: int) -> CommandLogArrays:
    return CommandLogArrays(np.zeros(capacity, dtype=np.int64), np.zeros(capacity, dtype=np.int8),
                            np.zeros(capacity, dtype=np.int32), np.zeros(capacity, dtype=np.int32),
                            np.zeros(capacity, dtype=np.int64))


def _progress_bar(n: int) -> Any:
    from archsim.progress import progress_bar

    return progress_bar(n, "req", "replay")


def kernel_cached(cfg: MemoryConfig) -> bool:
    """Whether numba's cache already holds the kernel variant a replay of `cfg` runs (no command log)."""
    return variant_on_disk(kernel_variant(kernel_params(cfg, 0)))


def warm_up(cfg: MemoryConfig | None = None) -> None:
    """Compile (or load from cache) the kernel variant `cfg` runs (the HBM2 preset's without one), so that a
    caller's own timing leaves it out."""
    from archsim.config.memory import memory_config_from_preset

    cfg = cfg or memory_config_from_preset("HBM2")
    session = MemorySession(cfg, np.zeros(1, dtype=np.uint64), np.zeros(1, dtype=np.uint8))
    session._prepare_kernel()


__all__ = ["Requests", "ReplayResult", "CommandLog", "replay", "check_addresses", "SOURCES", "warm_up"]
