"""The functional half of a timed run: place the problem, partition it over the units, run each unit's
program in access-trace mode and record, per executed instruction, which SRAM buffers it reads and writes.

Partitioning: the units form `groups = gcd(kv_heads, units)` head groups of `kv_heads / groups` KV heads;
each head group's context is split over `splits = units / groups` units (flash-decoding split-K), so every
unit gets the same amount of work and every unit of the device is busy whatever the head count.

Address spaces (pnm.units.address_space):
* channel_local: the units of a head group share one DRAM image laid out like a single-group problem
  (the default [batch][head][token][dim] layout of that group's heads); each unit addresses the DRAM of
  its own channel group with these local addresses (archsim/pnm/timed/address_space.py maps them to physical
  ones). The host places each head group's KV in its units' channels, which is what head-wise sharding
  across PNM units means physically.
* interleaved: one DRAM image and layout for the whole problem in the device's physical address space;
  every unit's loads spread over every channel through the memory's address mapping.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from archsim.errors import ConfigError
from archsim.isa.assembler import assemble_file
from archsim.isa.program import Program, SramRegion
from archsim.isa.table import IsaTable
from archsim.limits import check_fits_memory
from archsim.pnm.machine.functional import Executor, UnitConfig
from archsim.pnm.machine.lockstep import run_lockstep
from archsim.pnm.machine.trace import ProgramTrace, TraceRecorder
from archsim.pnm.problem.partition import UnitAssignment, partition_kv_heads, unit_defines
from archsim.pnm.problem.placement import Placement, place_decode_attention
from archsim.pnm.problem.shape import Shape

OTHER_REGION = "(undeclared)"


class _RegionRecorder(TraceRecorder):
    """A TraceRecorder that also notes the SRAM regions each executed instruction reads and writes."""

    def __init__(self, table: IsaTable, regions: tuple[SramRegion, ...]) -> None:
        super().__init__(table)
        used = sorted((r for r in regions if r.size_bytes > 0), key=lambda r: r.address)
        self.region_names = tuple(r.name for r in used) + (OTHER_REGION,)
        self._starts = [r.address for r in used]
        self._ends = [r.end for r in used]
        self.reads: list[tuple[int, ...]] = []
        self.writes: list[tuple[int, ...]] = []
        self._r: set[int] = set()
        self._w: set[int] = set()

    def begin(self, pc: int, code: int) -> None:
        if self._pcs:
            self._flush()
        super().begin(pc, code)

    def _flush(self) -> None:
        self.reads.append(tuple(sorted(self._r)))
        self.writes.append(tuple(sorted(self._w)))
        self._r, self._w = set(), set()

    def touch(self, address: int, size_bytes: int, write: bool) -> None:
        target = self._w if write else self._r
        hi = address + size_bytes
        i = max(bisect.bisect_right(self._starts, address) - 1, 0)
        inside = 0
        while i < len(self._starts) and self._starts[i] < hi:  # regions are disjoint
            overlap = min(self._ends[i], hi) - max(self._starts[i], address)
            if overlap > 0:
                target.add(i)
                inside += overlap
            i += 1
        if inside < size_bytes:  # a byte outside every declared region: one conservative catch-all buffer
            target.add(len(self.region_names) - 1)

    def finish(self) -> ProgramTrace:
        if len(self.reads) < len(self._pcs):
            self._flush()
        return super().finish()


class _TimingExecutor(Executor):
    """The functional executor, recording SRAM buffer use per instruction for the scoreboard."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.recorder: _RegionRecorder = _RegionRecorder(self.table, self.program.sram_regions)

    def sram_read(self, address: int, size_bytes: int) -> np.ndarray:
        if size_bytes:
            self.recorder.touch(address, size_bytes, False)
        return super().sram_read(address, size_bytes)

    def sram_write(self, address: int, raw: np.ndarray) -> None:
        if raw.size:
            self.recorder.touch(address, raw.size, True)
        super().sram_write(address, raw)

    def sram_write_f32(self, address: int, values: np.ndarray | None, count: int) -> None:
        if values is None and count:
            self.recorder.touch(address, 4 * count, True)
        super().sram_write_f32(address, values, count)

    def high_water_bytes(self) -> int:
        written = np.flatnonzero(self.sram.written)
        return int(written[-1]) + 1 if written.size else 0


@dataclass(frozen=True)
class UnitWork:
    """One unit's share of the problem, as the timing model needs it."""

    unit: int
    assignment: UnitAssignment
    program: Program
    trace: ProgramTrace
    sram_reads: tuple[tuple[int, ...], ...]  # per executed instruction: indices into region_names
    sram_writes: tuple[tuple[int, ...], ...]
    region_names: tuple[str, ...]
    sram_high_water_bytes: int
    domain: int  # the DRAM image the unit shares with others (its head group when channel_local)


@dataclass(frozen=True)
class Workload:
    shape: Shape
    kernel: Path
    units: tuple[UnitWork, ...]
    groups: int
    splits: int
    placements: tuple[Placement, ...]
    address_space: str


def split_factors(kv_heads: int, units: int) -> tuple[int, int]:
    """(head groups, splits per group) using every unit with equal work."""
    groups = math.gcd(kv_heads, units)
    return groups, units // groups


def _place(shape: Shape, capacity_bytes: int, where: str) -> Placement:
    try:
        return place_decode_attention(shape.spec, tile_tokens=shape.tile_tokens, dram_capacity_bytes=capacity_bytes)
    except ValueError as exc:
        raise ConfigError(f"the KV cache does not fit {where} ({capacity_bytes} bytes): {exc}",
                          where="--shape") from None


def build_workload(shape: Shape, kernel: Path, *, units: int, address_space: str, unit_capacity_bytes: int,
                   sram_capacity_bytes: int, defines: dict[str, object] | None = None) -> Workload:
    """Assemble and run every unit's program in access-trace mode (no arithmetic; DMA still moves bytes)."""
    spec = shape.spec
    groups, splits = split_factors(spec.kv_heads, units)
    assignments = partition_kv_heads(spec.kv_heads, units, splits)
    # every unit's functional scratchpad is alive at once: its bytes and a written-map byte per SRAM byte
    check_fits_memory(len(assignments), 2 * sram_capacity_bytes, "PNM units' functional scratchpads",
                      where="pnm.sram.capacity")
    config = UnitConfig(sram_size_bytes=sram_capacity_bytes, dram_capacity_bytes=unit_capacity_bytes)
    extra = dict(defines or {})
    placements: list[Placement] = []
    domains: list[list[tuple[UnitAssignment, _TimingExecutor]]] = []
    if address_space == "channel_local":
        local = replace(shape, spec=replace(spec, kv_heads=spec.kv_heads // groups))
        for g in range(groups):
            placement = _place(local, unit_capacity_bytes, "one unit's channel group")
            placements.append(placement)
            members = [a for a in assignments if a.unit // splits == g]
            domains.append([(a, _executor(kernel, placement, replace(a, head0=0), extra, config))
                            for a in members])
    else:
        placement = _place(shape, unit_capacity_bytes, "the device")
        placements.append(placement)
        domains.append([(a, _executor(kernel, placement, a, extra, config)) for a in assignments])
    works: list[UnitWork] = []
    for d, members in enumerate(domains):
        run_lockstep([ex for _, ex in members], [a.unit for a, _ in members], str(kernel))
        for assignment, ex in members:
            trace = ex.trace()
            works.append(UnitWork(assignment.unit, assignment, ex.program, trace, tuple(ex.recorder.reads),
                                  tuple(ex.recorder.writes), ex.recorder.region_names, ex.high_water_bytes(), d))
    works.sort(key=lambda w: w.unit)
    return Workload(shape, kernel, tuple(works), groups, splits, tuple(placements), address_space)


def _executor(kernel: Path, placement: Placement, assignment: UnitAssignment, extra: dict[str, object],
              config: UnitConfig) -> _TimingExecutor:
    defines = unit_defines(placement, assignment)
    defines.update(extra)
    program = assemble_file(kernel, defines=defines)
    return _TimingExecutor(program, dram=placement.dram, host_input=None, config=config, compute=False)

