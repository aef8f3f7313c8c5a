"""Timing model of the PNM unit: in-order issue with a scoreboard, loads through the memory's pnm port.

Each unit replays the dynamic instruction stream of its functional run (archsim/pnm/timed/workload.py) in
unit clock cycles. An instruction issues, in program order and at most `issue.width` per cycle, once

* its scalar source registers are ready (ALU results after 1 cycle, LDR after the SRAM latency),
* the SRAM buffers it reads were written (RAW) and those it writes are no longer read or written by
  earlier instructions (WAR, WAW) -- buffers are the program's `.sram` regions,
* its execution unit accepts new work (MAC array, vector unit, SFU, DMA command port, host port),
* for LD/LDG/ST: fewer than `dma.max_outstanding_loads` transfers are in flight;
  WAIT n: at most n transfers are in flight; BARRIER / HALT: everything drained (and, for BARRIER,
  every unit of the program arrived).

A compute instruction occupies its unit for max(1, MACs / macs_per_cycle, vector ops / vector_lanes,
exponentials / exp_per_cycle, SRAM bytes / SRAM port bandwidth) cycles and its result is ready a pipeline
depth later. A load issues asynchronously: its DMA engine pushes its requests into the memory's pnm port
(source 1) at `dma.requests_per_memory_cycle`, and the transfer completes -- transfers complete in
issue order -- one cycle after the memory delivers its last request (`done_cycle` of the simulated
DRAM). The unit's cycles therefore come from the simulated DRAM, not from a bandwidth formula.

Stall accounting: an instruction that issues later than the in-order front end allowed stalls for the
difference, charged to the constraint that bound it: memory (DRAM data, drains, the outstanding-load
limit), compute (an execution unit busy, or a compute producer still streaming its operands -- a
consumer waiting for a compute result is charged to compute up to the producer's occupancy and to
dependency for the pipeline latency after it), dependency (register results, pipeline latency, a buffer
still being read by a non-compute instruction), host (the host port), barrier (waiting for other units).

Why one module of about 580 lines: the unit's issue loop, its transfer bookkeeping, its lookahead copy and
the device loop that steps the memory between them are one state machine over the same timer fields.
"""

from __future__ import annotations

import bisect
import copy
import time
from dataclasses import dataclass, field

import numpy as np

from archsim.config.memory import MemoryConfig
from archsim.errors import ProgramError
from archsim.isa.table import IsaTable, load_table
from archsim.memory import ReplayResult
from archsim.pnm.timed.address_space import UnitRequests
from archsim.pnm.timed.memport import MemoryDomain, merge_results
from archsim.pnm.timed.unit_config import DeviceLayout, PnmConfig
from archsim.pnm.timed.workload import UnitWork, Workload

STALL_CAUSES: tuple[str, ...] = ("memory", "dependency", "compute", "host", "barrier")
MEM, DEP, COMP, HOST, BAR = range(5)
_COMPUTED = 5  # region produced by a compute instruction: split between compute and dependency

SIMPLE, LDR, WAIT, BARRIER, HALT, LOAD, STORE, RECV, SEND, COMPUTE = range(10)
EXEC_UNITS: tuple[str, ...] = ("ctl", "cfg", "alu", "dma", "host", "mac", "vec", "sfu")
_DMA, _HOST = EXEC_UNITS.index("dma"), EXEC_UNITS.index("host")
RUNNING, BLOCKED, AT_BARRIER, HALTED = range(4)
_NEVER = 1 << 62


class _DryStopError(Exception):
    """Ends a lookahead run at the unit's next push."""


@dataclass(frozen=True)
class IsaTiming:
    """Per-opcode timing facts from the opcode table: what kind of instruction, on which unit."""

    kind: np.ndarray  # int8 [256]
    exec_unit: np.ndarray  # int8 [256]
    reads_sram: np.ndarray  # bool [256]: the instruction reads SRAM at issue (LDG's block table, ST)

    @staticmethod
    def from_table(table: IsaTable) -> IsaTiming:
        kind = np.full(256, -1, dtype=np.int8)
        unit = np.zeros(256, dtype=np.int8)
        reads = np.zeros(256, dtype=bool)
        sync = {"WAIT": WAIT, "BARRIER": BARRIER, "HALT": HALT}
        for op in table.opcodes:
            latency = op.latency
            if latency == "sync":
                if op.mnemonic not in sync:
                    raise ProgramError(f"no timing semantics for synchronizing opcode {op.mnemonic}")
                k = sync[op.mnemonic]
            elif latency in ("ctl", "cfg", "alu"):
                k = SIMPLE
            elif latency == "sram_scalar":
                k = LDR
            elif latency == "dma":
                k = STORE if "dram_write_bytes" in op.counters else LOAD
            elif latency == "host":
                k = RECV if "host_in_bytes" in op.counters else SEND
            elif latency in ("mac", "vec", "sfu"):
                k = COMPUTE
            else:
                raise ProgramError(f"no timing model for latency class {latency!r} of {op.mnemonic}")
            kind[op.code] = k
            unit[op.code] = EXEC_UNITS.index(op.unit)
            reads[op.code] = "sram_read_bytes" in op.counters
        return IsaTiming(kind, unit, reads)


def _ceil_div(a: np.ndarray, b: float) -> np.ndarray:
    return np.ceil(a / b - 1e-9).astype(np.int64)


def instruction_costs(trace_counts: np.ndarray, names: tuple[str, ...], kinds: np.ndarray, units: np.ndarray,
                      pnm: PnmConfig, period_ns: float) -> tuple[np.ndarray, np.ndarray]:
    """(occupancy, latency) in unit cycles of every executed instruction (vectorized)."""
    col = {name: trace_counts[:, i] for i, name in enumerate(names)}
    c, s = pnm.compute, pnm.sram
    sram = np.maximum(_ceil_div(col["sram_read_bytes"], s.read_bytes_per_cycle),
                      _ceil_div(col["sram_write_bytes"], s.write_bytes_per_cycle))
    occ = np.maximum.reduce([np.ones(len(kinds), dtype=np.int64), _ceil_div(col["macs"], c.macs_per_cycle),
                             _ceil_div(col["vec_ops"], c.vector_lanes), _ceil_div(col["exp_ops"], c.exp_per_cycle),
                             sram])
    pipe = np.zeros(len(kinds), dtype=np.int64)
    pipe[units == EXEC_UNITS.index("mac")] = c.mac_pipeline_cycles
    pipe[units == EXEC_UNITS.index("vec")] = c.vector_pipeline_cycles
    pipe[units == EXEC_UNITS.index("sfu")] = c.sfu_pipeline_cycles
    pipe[(units == EXEC_UNITS.index("vec")) & (col["exp_ops"] > 0)] += c.sfu_pipeline_cycles
    host_bytes_per_cycle = pnm.host_port.bandwidth_GBps * period_ns
    host_occ = np.maximum(1, _ceil_div(col["host_in_bytes"] + col["host_out_bytes"], host_bytes_per_cycle))
    host_latency = int(np.ceil(pnm.host_port.latency_ns / period_ns - 1e-9))
    is_host = (kinds == RECV) | (kinds == SEND)
    occ = np.where(is_host, host_occ, np.where(kinds == COMPUTE, occ, 1))
    lat = np.where(is_host, host_occ + host_latency, np.where(kinds == COMPUTE, occ + pipe, 1))
    lat = np.where(kinds == LDR, s.access_latency_cycles + 1, lat)
    return occ.astype(np.int64), lat.astype(np.int64)


@dataclass
class UnitStats:
    stalls: list[int] = field(default_factory=lambda: [0] * len(STALL_CAUSES))
    busy: list[int] = field(default_factory=lambda: [0] * len(EXEC_UNITS))
    issued: int = 0
    transfers: int = 0
    finish_cycle: int = 0


class UnitTimer:
    """One unit's in-order issue over its dynamic instruction stream (see the module docstring)."""

    def __init__(self, work: UnitWork, requests: UnitRequests, domains: list[MemoryDomain], pnm: PnmConfig,
                 layout: DeviceLayout, isa: IsaTiming, table: IsaTable) -> None:
        self.work, self.requests, self.domains = work, requests, domains
        dom = requests.domain
        order = np.argsort(dom, kind="stable")
        local = np.empty(dom.size, dtype=np.int64)
        local[order] = np.arange(dom.size) - np.searchsorted(dom[order], dom[order], side="left")
        self._dom, self._local = dom, local  # domain of each request and its index among the unit's there
        self._changes = (np.flatnonzero(dom[1:] != dom[:-1]) + 1).tolist()
        self._last_request = {int(d): int(np.flatnonzero(dom == d)[-1]) for d in np.unique(dom)}
        self.pushed = 0  # requests [0, pushed) were pushed into their domains
        self.unit = work.unit
        self.pnm, self.clock = pnm, layout.clock
        trace = work.trace
        codes = trace.opcode.astype(np.int64)
        kinds = isa.kind[codes]
        units = isa.exec_unit[codes]
        occ, lat = instruction_costs(trace.counts, trace.counter_names, kinds, units, pnm, layout.unit_period_ns)
        self.n = len(trace)
        self._pc = trace.pc.tolist()
        self._kind = kinds.tolist()
        self._eu = units.tolist()
        self._occ = occ.tolist()
        self._lat = lat.tolist()
        self._first = requests.first.tolist()
        self._reads_sram = isa.reads_sram[codes].tolist()
        self.occupancy = occ
        program = work.program
        self._src: list[tuple[int, ...]] = []
        self._dst: list[tuple[int, ...]] = []
        self._imm: list[int] = []
        for ins in program.instructions:
            spec = table.by_mnemonic[ins.mnemonic]
            regs = [(o.name, v) for o, v in zip(spec.operands, ins.operands, strict=True) if o.kind == "reg"]
            self._src.append(tuple(v for name, v in regs if name != "rd" and v))
            self._dst.append(tuple(v for name, v in regs if name == "rd" and v))
            self._imm.append(int(ins.operands[0]) if ins.operands else 0)
        self._reads, self._writes = work.sram_reads, work.sram_writes
        regions = len(work.region_names)
        self.reg_ready = [0] * table.register_count
        self.w_ready = [0] * regions  # cycle the last write of each buffer completes
        self.w_busy = [0] * regions  # cycle its producer stops streaming (compute producers)
        self.w_cat = [DEP] * regions
        self.w_pending = [-1] * regions  # transfer whose data the buffer awaits (-1: none)
        self.r_done = [0] * regions  # cycle the last reader of each buffer finishes reading it
        self.r_cat = [DEP] * regions
        self.eu_free = [0] * len(EXEC_UNITS)
        self.t_front = 0
        self.last_issue = -1
        self.slots = 0
        self.i = 0
        self.state = RUNNING
        self.blocked_on = -1
        self.barrier_id = -1
        self.arrival = 0
        self.compute_done = 0
        self.send_done = 0
        self.dma_free_memory = 0
        self.t_parts: list[list[tuple[int, int, int]]] = []  # per transfer: (domain, first, last) local ranges
        self.t_issue: list[int] = []
        self.comp: list[int] = []  # in-order completion cycle of transfers [0, len(comp))
        self.stats = UnitStats()
        self._sram_latency = pnm.sram.access_latency_cycles
        self._rate = pnm.dma.requests_per_memory_cycle
        self._max_out = pnm.dma.max_outstanding_loads
        self._width = pnm.issue_width
        # (instruction, earliest, issue cycle, stall cause, producer's busy end) per issued instruction, for the
        # timeline (archsim/pnm/timed/timeline.py); None: not recorded
        self.record: list[tuple[int, int, int, int, int]] | None = None
        self._dry = False  # a lookahead copy (see next_push_bound)
        self.dry_push = _NEVER

    # ------------------------------------------------------------------ transfers
    def _completion(self, k: int) -> int | None:
        """In-order completion (unit cycle) of transfer k, None while the memory has not decided it.

        In a lookahead copy: a lower bound of it instead (never None)."""
        comp = self.comp
        if self._dry:
            return self._completion_bound(k)
        while len(comp) <= k:
            j = len(comp)
            own = self.t_issue[j] + 1
            for d, first, last in self.t_parts[j]:
                done = self.domains[d].completion(self.unit, first, last)
                if done is None:
                    return None
                own = max(own, self.clock.to_unit(done) + 1)  # the last beat is written into SRAM
            comp.append(max(own, comp[j - 1]) if j else own)
        return comp[k]

    def _completion_bound(self, k: int) -> int:
        """A lower bound of transfer k's in-order completion: every undecided request of transfers up to k
        must have completed, which bounds k better than each transfer's own requests do."""
        if k < len(self.comp):
            return self.comp[k]
        bound = max(self.comp[-1] if self.comp else 0, self.t_issue[k] + 1)
        ranges: dict[int, tuple[int, int]] = {}
        for j in range(len(self.comp), k + 1):
            for d, first, last in self.t_parts[j]:
                lo, hi = ranges.get(d, (first, last))
                ranges[d] = (min(lo, first), max(hi, last))
        for d, (first, last) in ranges.items():
            domain = self.domains[d]
            done = domain.completion(self.unit, first, last)
            if done is None:
                done = domain.lower_bound(self.unit, first, last)
            bound = max(bound, self.clock.to_unit(done) + 1)
        return bound

    def next_push_bound(self) -> int:
        """A memory cycle before which this blocked unit cannot push another request.

        A copy of the unit runs on with every undecided transfer completing at a lower bound of its
        completion, until it would push; the in-order model is monotone in completion times (max-plus),
        so the copy's push cycle bounds the real one from below."""
        if not self.future_domains():
            return _NEVER
        dry = copy.copy(self)
        for name in ("reg_ready", "w_ready", "w_busy", "w_cat", "w_pending", "r_done", "r_cat", "eu_free"):
            setattr(dry, name, list(getattr(self, name)))
        dry.stats = UnitStats(list(self.stats.stalls), list(self.stats.busy))
        dry._dry, dry.state, dry.record = True, RUNNING, None  # the lookahead is not part of the timeline
        transfers = len(self.t_parts)  # the copy shares the transfer lists and only appends to them
        try:
            dry.advance()
        except _DryStopError:
            pass
        finally:
            del self.t_parts[transfers:], self.t_issue[transfers:]
        return dry.dry_push

    def awaited(self) -> dict[int, tuple[int, int]]:
        """Per domain, the local request range of the transfers this blocked unit waits for."""
        ranges: dict[int, tuple[int, int]] = {}
        for j in range(len(self.comp), self.blocked_on + 1):
            for d, first, last in self.t_parts[j]:
                lo, hi = ranges.get(d, (first, last))
                ranges[d] = (min(lo, first), max(hi, last))
        return ranges

    def horizon(self) -> tuple[int, dict[int, int]]:
        """(a memory cycle before which this blocked unit cannot push another request, and per awaited
        domain a memory cycle before which the awaited requests there cannot all have completed)."""
        bounds = {d: self.domains[d].lower_bound(self.unit, lo, hi) for d, (lo, hi) in self.awaited().items()}
        push = max(self.next_push_bound(), self.clock.to_memory(self.t_front), *bounds.values())
        return push, bounds

    def future_domains(self) -> list[int]:
        """Domains this unit may still push requests into."""
        return [d for d, last in self._last_request.items() if last >= self.pushed]

    def _push(self, i: int, issue: int, delay: int) -> None:
        first, last = self._first[i], self._first[i + 1]
        parts: list[tuple[int, int, int]] = []
        if last > first:
            start = max(self.clock.to_memory(issue + delay), self.dma_free_memory)
            if self._dry:
                self.dry_push = start
                raise _DryStopError
            count = last - first
            release = start + np.arange(count, dtype=np.int64) // self._rate
            self.dma_free_memory = start + -(-count // self._rate)
            k = bisect.bisect_right(self._changes, first)
            if k == len(self._changes) or self._changes[k] >= last:  # one domain
                d, lo = int(self._dom[first]), int(self._local[first])
                parts.append((d, lo, lo + count))
                self.domains[d].push(self.unit, lo, lo + count, release)
            else:
                doms, local = self._dom[first:last], self._local[first:last]
                for d in np.unique(doms).tolist():
                    sel = doms == d
                    index = local[sel]
                    parts.append((d, int(index[0]), int(index[-1]) + 1))
                    self.domains[d].push(self.unit, int(index[0]), int(index[-1]) + 1, release[sel])
            self.pushed = last
        self.t_parts.append(parts)
        self.t_issue.append(issue)
        self.stats.transfers += 1

    # ------------------------------------------------------------------ issue loop
    def advance(self) -> None:
        """Issue instructions until one needs a memory completion not yet simulated, a barrier, or HALT."""
        if self.state in (AT_BARRIER, HALTED):
            return
        self.state = RUNNING
        pcs, kinds, eus, occs, lats = self._pc, self._kind, self._eu, self._occ, self._lat
        reads_all, writes_all, srcs, dsts = self._reads, self._writes, self._src, self._dst
        reg_ready, w_ready, w_busy, w_cat, w_pending = self.reg_ready, self.w_ready, self.w_busy, self.w_cat, \
            self.w_pending
        r_done, r_cat, eu_free = self.r_done, self.r_cat, self.eu_free
        stalls, busy, record = self.stats.stalls, self.stats.busy, self.record
        sram_latency = self._sram_latency
        n = self.n
        i = self.i
        while i < n:
            pc = pcs[i]
            kind = kinds[i]
            earliest = self.t_front
            bound, cause, split = earliest, -1, 0
            for r in srcs[pc]:
                if reg_ready[r] > bound:
                    bound, cause = reg_ready[r], DEP
            # a buffer read waits for its last write; a buffer write also waits for the reads before it
            n_reads = len(reads_all[i])
            for j, g in enumerate((*reads_all[i], *writes_all[i])):
                k = w_pending[g]
                if k >= 0:
                    c = self._completion(k)
                    if c is None:
                        self._block(i, k)
                        return
                    w_pending[g], w_ready[g], w_busy[g], w_cat[g] = -1, c, c, MEM
                if w_ready[g] > bound:
                    bound, cause, split = w_ready[g], w_cat[g], w_busy[g]
                if j >= n_reads and r_done[g] > bound:
                    bound, cause = r_done[g], r_cat[g]
            if kind == COMPUTE:
                e = eus[i]
                if eu_free[e] > bound:
                    bound, cause = eu_free[e], COMP
            elif kind in (LOAD, STORE):
                if eu_free[_DMA] > bound:
                    bound, cause = eu_free[_DMA], MEM
                issued = len(self.t_parts)
                if issued >= self._max_out:
                    c = self._completion(issued - self._max_out)
                    if c is None:
                        self._block(i, issued - self._max_out)
                        return
                    if c > bound:
                        bound, cause = c, MEM
            elif kind in (RECV, SEND):
                if eu_free[_HOST] > bound:
                    bound, cause = eu_free[_HOST], HOST
            elif kind == WAIT:
                k = len(self.t_parts) - self._imm[pc] - 1
                if k >= 0:
                    c = self._completion(k)
                    if c is None:
                        self._block(i, k)
                        return
                    if c > bound:
                        bound, cause = c, MEM
            elif kind in (BARRIER, HALT):
                if self.t_parts:
                    c = self._completion(len(self.t_parts) - 1)
                    if c is None:
                        self._block(i, len(self.t_parts) - 1)
                        return
                    if c > bound:
                        bound, cause = c, MEM
                if self.compute_done > bound:
                    bound, cause = self.compute_done, COMP
                if self.send_done > bound:
                    bound, cause = self.send_done, HOST
            issue = bound
            stall = issue - earliest
            if record is not None:
                record.append((i, earliest, issue, cause, split))
            if stall > 0:
                if cause == _COMPUTED:
                    part = min(max(split - earliest, 0), stall)
                    stalls[COMP] += part
                    stalls[DEP] += stall - part
                else:
                    stalls[cause] += stall
            # ---- effects
            if kind == COMPUTE:
                e = eus[i]
                o = occs[i]
                eu_free[e] = issue + o
                busy[e] += o
                done = issue + lats[i]
                if done > self.compute_done:
                    self.compute_done = done
                for g in reads_all[i]:
                    if issue + o > r_done[g]:
                        r_done[g], r_cat[g] = issue + o, COMP
                for g in writes_all[i]:
                    w_ready[g], w_busy[g], w_cat[g] = done, issue + o, _COMPUTED
            elif kind == SIMPLE:
                for r in dsts[pc]:
                    reg_ready[r] = issue + 1
            elif kind in (LOAD, STORE):
                eu_free[_DMA] = issue + 1
                busy[_DMA] += 1
                delay = 1 + (sram_latency if self._reads_sram[i] else 0)
                for g in reads_all[i]:
                    if issue + delay > r_done[g]:
                        r_done[g], r_cat[g] = issue + delay, DEP
                self._push(i, issue, delay)
                if kind == LOAD:
                    for g in writes_all[i]:
                        w_pending[g] = len(self.t_parts) - 1
            elif kind == LDR:
                for r in dsts[pc]:
                    reg_ready[r] = issue + lats[i]
                for g in reads_all[i]:
                    if issue + sram_latency > r_done[g]:
                        r_done[g], r_cat[g] = issue + sram_latency, DEP
            elif kind in (RECV, SEND):
                o = occs[i]
                eu_free[_HOST] = issue + o
                busy[_HOST] += o
                done = issue + lats[i]
                if kind == RECV:
                    for g in writes_all[i]:
                        w_ready[g], w_busy[g], w_cat[g] = done, done, HOST
                else:
                    self.send_done = max(self.send_done, done)
                    for g in reads_all[i]:
                        if issue + o > r_done[g]:
                            r_done[g], r_cat[g] = issue + o, HOST
            # ---- in-order front end: `width` issue slots per cycle
            if issue == self.last_issue:
                self.slots += 1
            else:
                self.last_issue, self.slots = issue, 1
            self.t_front = issue + 1 if self.slots >= self._width else issue
            self.stats.issued += 1
            i += 1
            if kind in (BARRIER, HALT):
                self._stop_at(kind, i, pc, issue)
                return
        raise ProgramError("the timed run ran past the end of the trace without HALT",
                           file=self.work.program.source)

    def _stop_at(self, kind: int, i: int, pc: int, issue: int) -> None:
        """A BARRIER or HALT issued at cycle `issue`; `i` is the next instruction."""
        if self._dry:
            self.dry_push = (self.clock.to_memory(issue + self.pnm.barrier_latency_cycles) if kind == BARRIER
                             else _NEVER)  # a barrier releases its units that much after the last arrives
            raise _DryStopError
        if kind == BARRIER:
            self.i, self.state = i, AT_BARRIER
            self.barrier_id, self.arrival = self._imm[pc], issue
        else:
            self.i, self.state = i, HALTED
            self.stats.finish_cycle = issue

    def _block(self, i: int, transfer: int) -> None:
        self.i, self.state, self.blocked_on = i, BLOCKED, transfer

    def release_barrier(self, cycle: int) -> None:
        if self.record is not None and cycle > self.t_front:
            self.record.append((-1, self.t_front, cycle, BAR, 0))  # -1: the wait for the other units
        self.stats.stalls[BAR] += max(0, cycle - self.t_front)
        self.t_front = max(self.t_front, cycle)
        self.state = RUNNING


@dataclass
class TimingRun:
    """The timed run of every unit of the device."""

    timers: list[UnitTimer]
    domains: list[MemoryDomain]
    memory: ReplayResult  # the device's memory (domains merged)
    cycles: int  # unit cycles until the last unit halted
    wall_s: float
    horizon_steps: int


def _step_memory(timers: list[UnitTimer], domains: list[MemoryDomain], barrier_latency_cycles: int) -> bool:
    """Advance every domain some blocked unit waits on, as far as no unit can push into it earlier.

    Returns False when no unit is blocked (all wait at a barrier or halted)."""
    push: dict[int, int] = {}
    wait: dict[int, int] = {}
    arrived = [t.arrival for t in timers if t.state == AT_BARRIER]
    barrier = (max(arrived) + barrier_latency_cycles) if arrived else 0
    for timer in timers:
        if timer.state == BLOCKED:
            bound, awaited = timer.horizon()
            for d, b in awaited.items():
                wait[d] = min(wait.get(d, _NEVER), b)
        elif timer.state == AT_BARRIER:  # it resumes no earlier than the barrier can release
            bound = timer.clock.to_memory(barrier)
        else:
            continue
        for d in timer.future_domains():
            push[d] = min(push.get(d, _NEVER), bound)
    if not wait:
        return False
    for d in wait:
        domain = domains[d]
        horizon = max(push.get(d, _NEVER), domain.now + 1)  # no unit pushes into d again: run it out
        domain.commit(horizon)
        domain.run_until(horizon)
    return True


def simulate(workload: Workload, requests: list[UnitRequests], memory: MemoryConfig, pnm: PnmConfig,
             layout: DeviceLayout, table: IsaTable | None = None, progress: bool = False,
             record: bool = False, record_dram: bool = False) -> TimingRun:
    """Run every unit against the simulated memory; see the module docstring and docs/pnm.md.

    Memory domains: with channel_local addressing every channel group's controllers form a domain of
    their own (a MemorySession each: controllers are independent and each has its own front end); with
    interleaved addressing the whole device is one domain shared by all units. `progress`: a bar of the
    instructions the units have issued (`archsim.progress`: a terminal only, after 2 s). `record`: keep each
    issued instruction's issue cycle and stall in `UnitTimer.record`; `record_dram`: the memory's command log.
    """
    from archsim.progress import progress_bar

    table = table or load_table()
    isa = IsaTiming.from_table(table)
    start = time.perf_counter()
    works = workload.units
    n_domains = len(works) if layout.address_space == "channel_local" else 1
    domains: list[MemoryDomain] = []
    for d in range(n_domains):
        users = [i for i, r in enumerate(requests) if np.any(r.domain == d)]
        domains.append(MemoryDomain(memory, [works[i].unit for i in users],
                                    [requests[i].address[requests[i].domain == d] for i in users],
                                    [requests[i].is_write[requests[i].domain == d] for i in users],
                                    command_log=record_dram))
    timers = [UnitTimer(w, r, domains, pnm, layout, isa, table) for w, r in zip(works, requests, strict=True)]
    for timer in timers:
        timer.record = [] if record else None
    bar = progress_bar(sum(t.n for t in timers), "instr", "pnm run", quiet=not progress)
    issued = 0
    while True:
        for timer in timers:
            timer.advance()
        now = sum(t.i for t in timers)
        bar.update(now - issued)
        issued = now
        if _step_memory(timers, domains, pnm.barrier_latency_cycles):
            continue
        waiting = [t for t in timers if t.state == AT_BARRIER]
        if not waiting:
            break
        ids = {t.barrier_id for t in waiting}
        if len(ids) > 1 or len(waiting) != len(timers):
            seen = ", ".join(f"unit {t.unit}: " + (f"barrier {t.barrier_id}" if t.state == AT_BARRIER else "halted")
                             for t in timers)
            raise ProgramError(f"units disagree at a barrier ({seen})", file=str(workload.kernel))
        release = max(t.arrival for t in waiting) + pnm.barrier_latency_cycles
        for t in waiting:
            t.release_barrier(release)
    bar.close()
    for domain in domains:
        domain.finish()
    merged = merge_results([d.result() for d in domains if d.n])
    cycles = max(t.stats.finish_cycle for t in timers)
    return TimingRun(timers, domains, merged, cycles, time.perf_counter() - start,
                     sum(d.iterations for d in domains))
