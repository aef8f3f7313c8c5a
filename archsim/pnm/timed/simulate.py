"""A timed PNM run end to end: shape -> placement and functional traces -> timed units on the simulated
memory -> roofline -> `archsim.stats/1` tree. The CLI (`archsim pnm run`) and scripts call `run_pnm`."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

from archsim.config.memory import MemoryConfig
from archsim.errors import ConfigError, ProgramError, TraceError
from archsim.isa.table import load_table
from archsim.pnm.problem.shape import Shape, parse_shape
from archsim.pnm.timed.address_space import UnitRequests, unit_requests
from archsim.pnm.timed.roofline import Roofline, roofline
from archsim.pnm.timed.timing import TimingRun, simulate
from archsim.pnm.timed.unit_config import DeviceLayout, PnmConfig, device_layout
from archsim.pnm.timed.workload import Workload, build_workload


@dataclass(frozen=True)
class PnmRun:
    kernel: Path
    shape: Shape
    memory: MemoryConfig
    pnm: PnmConfig
    layout: DeviceLayout
    workload: Workload
    requests: list[UnitRequests]
    timing: TimingRun
    roofline: Roofline
    functional_wall_s: float


def run_pnm(kernel: str | Path, shape: str | Shape, memory: MemoryConfig, pnm: PnmConfig, *,
            defines: dict[str, object] | None = None, units: int | None = None, progress: bool = False,
            record: bool = False, record_dram: bool = False) -> PnmRun:
    """Time one decode-attention step of `shape` with `kernel` on every PNM unit of the memory device.

    `units` restricts the run to the first `units` of the device's units (channel groups); the default
    is all of them. `progress` shows a bar of the timed units' instructions (a terminal only, after 2 s);
    `record` keeps what a timeline of the run needs (archsim/pnm/timed/timeline.py), `record_dram` the memory's command
    log for it too.
    """
    kernel = Path(kernel)
    if not kernel.is_file():
        raise ConfigError("no such kernel file", file=str(kernel))
    layout = device_layout(pnm, memory)
    if units is not None:
        if not 1 <= units <= layout.units:
            raise ConfigError(f"{units} units requested; the device has {layout.units} "
                              f"({layout.channels_per_unit} channel(s) each)", where="--units")
        layout = replace(layout, units=units)
    if isinstance(shape, str):
        shape = parse_shape(shape, kernel, memory.organization.capacity_bytes)
    start = time.perf_counter()
    try:
        workload = build_workload(shape, kernel, units=layout.units, address_space=layout.address_space,
                                  unit_capacity_bytes=layout.unit_capacity_bytes,
                                  sram_capacity_bytes=pnm.sram.capacity_bytes, defines=defines)
    except ProgramError as exc:  # the kernel's line, and the shape, defines and scratchpad it was assembled for
        given = f"--shape {shape.text}" + "".join(f" -D {k}={v}" for k, v in (defines or {}).items())
        raise ProgramError(f"{exc.detail} (assembled for {given} and a {pnm.sram.capacity_bytes:,}-byte scratchpad, "
                           "pnm.sram.capacity)", file=exc.file, where=exc.where) from None
    requests = unit_requests(workload.units, layout, memory.mapping, memory.organization.access_bytes)
    functional_s = time.perf_counter() - start
    capacity = memory.organization.capacity_bytes
    for work, reqs in zip(workload.units, requests, strict=True):
        if reqs.address.size and int(reqs.address.max()) >= capacity:
            raise TraceError(f"unit {work.unit} loads beyond the memory's capacity of {capacity:#x} bytes",
                             file=str(kernel))
    timing = simulate(workload, requests, memory, pnm, layout, load_table(), progress=progress, record=record,
                      record_dram=record_dram)
    bound = roofline(timing.domains, workload.units, memory, pnm, layout)
    return PnmRun(kernel, shape, memory, pnm, layout, workload, requests, timing, bound, functional_s)
