"""Functional executor of PNM programs: runs a program on numpy data and records what it did.

State: 32 scalar registers, datapath configuration, a zero-overhead loop stack, an SRAM
scratchpad, a FIFO of outstanding DMA transfers (they complete in issue order at WAIT), the
host port streams, and a (shared) sparse DRAM image. Every executed instruction appends one
row to the run's `ProgramTrace`: its pc, per-instruction op counts (MACs, exps, SRAM/DRAM/host
bytes) and the DRAM accesses it made, in program order. That is what a timing model replays.

Semantics of each opcode are in archsim/pnm/machine/semantics.py (control, scalar, DMA, host) and
archsim/pnm/machine/compute_ops.py (attention arithmetic); the records they share with the executor are in
archsim/pnm/machine/state.py; the opcode table itself is isa/opcodes.yaml.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np

from archsim.errors import ProgramError
from archsim.isa.disasm import format_instruction
from archsim.isa.program import Program
from archsim.isa.table import IsaTable, load_table
from archsim.pnm.machine.memimage import DramImage, MemoryAccessError, Scratchpad
from archsim.pnm.machine.semantics import HANDLERS
from archsim.pnm.machine.state import DatapathConfig, ExecutionError, Transfer, UnitConfig
from archsim.pnm.machine.trace import ProgramTrace, TraceRecorder

__all__ = ["DatapathConfig", "ExecutionError", "Executor", "Transfer", "UnitConfig", "check_program",
           "run_program", "trace_program"]


class Executor:
    """Runs one program on one unit. `run()` returns "halted" or "barrier"."""

    def __init__(self, program: Program, *, dram: DramImage, host_input: np.ndarray | None = None,
                 config: UnitConfig | None = None, compute: bool = True,
                 table: IsaTable | None = None) -> None:
        self.program = program
        self.table = table or load_table()
        self.config = config or UnitConfig()
        check_program(program, self.config, self.table)
        self.compute = compute  # False: only addresses, counts and DMA data; no arithmetic
        self.dram = dram
        if dram.capacity_bytes > self.config.dram_capacity_bytes:
            raise ValueError("the DRAM image is larger than the configured DRAM capacity")
        self.sram = Scratchpad(self.config.sram_size_bytes)
        self.regs = [0] * self.table.register_count
        self.cfg = DatapathConfig()
        self.loops: list[list[int]] = []  # [body start, end, iterations left]
        self.transfers: deque[Transfer] = deque()
        self.host_input = None if host_input is None else np.asarray(host_input, dtype=np.float32).ravel()
        self.host_cursor = 0
        self.host_output: list[np.ndarray] = []
        self.pc = 0
        self.jump: int | None = None
        self.stop: str | None = None
        self.barrier_id: int | None = None  # id of the BARRIER the unit waits at
        self.executed = 0
        self.recorder = TraceRecorder(self.table)
        self._decoded: list[tuple[Callable, tuple[int, ...], int]] = []
        for instruction in program.instructions:
            handler = HANDLERS.get(instruction.mnemonic)
            if handler is None:
                raise ProgramError(f"no functional semantics for {instruction.mnemonic}")
            code = self.table.by_mnemonic[instruction.mnemonic].code
            self._decoded.append((handler, instruction.operands, code))

    # ---------------------------------------------------------------- running
    def run(self) -> str:
        """Execute until HALT ("halted") or BARRIER ("barrier"); resume with another run()."""
        if self.stop == "halted":
            return self.stop
        count = len(self._decoded)
        self.stop, self.barrier_id = None, None
        pc = self.pc
        while self.stop is None:
            if pc >= count:
                raise ProgramError("ran past the last instruction without HALT",
                                   file=self.program.source, where=f"pc {pc}")
            handler, operands, code = self._decoded[pc]
            self.pc, self.jump = pc, None
            self.recorder.begin(pc, code)
            try:
                handler(self, operands)
            except (ExecutionError, MemoryAccessError) as exc:
                raise self.error(str(exc)) from None
            self.executed += 1
            if self.executed > self.config.max_instructions:
                raise self.error(f"executed more than {self.config.max_instructions} instructions")
            pc = pc + 1 if self.jump is None else self.jump
            loops = self.loops
            while loops and pc == loops[-1][1]:  # zero-overhead loop back-edge
                top = loops[-1]
                top[2] -= 1
                if top[2] > 0:
                    pc = top[0]
                    break
                loops.pop()
        self.pc = pc
        return self.stop

    def error(self, message: str) -> ProgramError:
        instruction = self.program.instructions[self.pc]
        return self.program.error(self.pc, f"{format_instruction(instruction, self.table)}: {message}")

    @property
    def outputs(self) -> np.ndarray:
        """Everything sent to the host port, as fp32 values (already rounded to io_dtype)."""
        if not self.host_output:
            return np.empty(0, dtype=np.float32)
        return np.concatenate(self.host_output)

    def trace(self) -> ProgramTrace:
        return self.recorder.finish()

    # ---------------------------------------------------------------- checked SRAM access
    def _conflict(self, lo: int, hi: int, writing: bool) -> None:
        for t in self.transfers:
            if t.sram_lo < hi and lo < t.sram_hi and (t.is_load or writing):
                kind = "load into" if t.is_load else "store from"
                verb = "writes" if writing else "reads"
                raise ExecutionError(f"{verb} SRAM [0x{lo:x}, 0x{hi:x}) while a {kind} "
                                     f"[0x{t.sram_lo:x}, 0x{t.sram_hi:x}) is outstanding (missing WAIT)")

    def sram_read(self, address: int, size_bytes: int) -> np.ndarray:
        if size_bytes:
            self._conflict(address, address + size_bytes, writing=False)
        self.recorder.add("sram_read_bytes", size_bytes)
        return self.sram.read(address, size_bytes)

    def sram_write(self, address: int, raw: np.ndarray) -> None:
        if raw.size:
            self._conflict(address, address + raw.size, writing=True)
        self.recorder.add("sram_write_bytes", raw.size)
        self.sram.write(address, raw)

    def sram_read_f32(self, address: int, count: int) -> np.ndarray:
        if address % 4:
            raise ExecutionError(f"fp32 operand at SRAM 0x{address:x} is not 4-byte aligned")
        return self.sram_read(address, 4 * count).view(np.float32)

    def sram_write_f32(self, address: int, values: np.ndarray | None, count: int) -> None:
        """Write `count` fp32 values; in access-trace mode (values None) only mark them written."""
        if address % 4:
            raise ExecutionError(f"fp32 operand at SRAM 0x{address:x} is not 4-byte aligned")
        if values is None:
            if count:
                self._conflict(address, address + 4 * count, writing=True)
            self.recorder.add("sram_write_bytes", 4 * count)
            self.sram.mark_written(address, 4 * count)
            return
        self.sram_write(address, np.ascontiguousarray(values, dtype=np.float32).reshape(-1).view(np.uint8))

    def reg(self, number: int, what: str, minimum: int | None = 0) -> int:
        value = self.regs[number]
        if minimum is not None and value < minimum:
            raise ExecutionError(f"{what} (r{number}) is {value}, must be >= {minimum}")
        return value


def check_program(program: Program, config: UnitConfig, table: IsaTable | None = None) -> None:
    """Static checks before simulation: SRAM footprint and constant configuration operands."""
    table = table or load_table()
    if program.sram_size_bytes > config.sram_size_bytes:
        for region in program.sram_regions:
            if region.end > config.sram_size_bytes:
                pc = region.first_use_pc
                message = (f"SRAM region {region.name} [0x{region.address:x}, 0x{region.end:x}) "
                           f"(declared at {region.loc.file}:{region.loc.line}) does not fit the "
                           f"{config.sram_size_bytes}-byte scratchpad; the program needs "
                           f"{program.sram_size_bytes} bytes")
                if pc is not None:
                    instruction = format_instruction(program.instructions[pc], table)
                    raise program.error(pc, f"{instruction}: {message}")
                loc = region.loc
                raise ProgramError(message, file=loc.file, where=f"line {loc.line}")
        raise ProgramError(f"the program needs {program.sram_size_bytes} bytes of SRAM; the unit has "
                           f"{config.sram_size_bytes}", file=program.source)
    for pc, instruction in enumerate(program.instructions):
        problem = None
        if instruction.mnemonic == "CFG.SHAPE":
            _, v_dim, v_pitch, _ = instruction.operands
            problem = f"v_dim {v_dim} exceeds v_pitch {v_pitch}" if v_dim > v_pitch else None
        elif instruction.mnemonic == "CFG.KV":
            dtype = table.enums["kv_dtype"][instruction.operands[0]]
            unscaled_int8 = dtype == "int8" and not instruction.operands[1]
            problem = "int8 KV needs scale_group > 0" if unscaled_int8 else None
        if problem:
            raise program.error(pc, f"{format_instruction(instruction, table)}: {problem}")


def run_program(program: Program, *, dram: DramImage, host_input: np.ndarray | None = None,
                config: UnitConfig | None = None, compute: bool = True) -> tuple[np.ndarray, ProgramTrace]:
    """Run a single-unit program to HALT (barriers only drain). Returns (host outputs, trace)."""
    executor = Executor(program, dram=dram, host_input=host_input, config=config, compute=compute)
    while executor.run() != "halted":
        pass
    return executor.outputs, executor.trace()


def trace_program(program: Program, *, dram: DramImage, host_input: np.ndarray | None = None,
                  config: UnitConfig | None = None) -> ProgramTrace:
    """Access trace and op counts of a run without the arithmetic (fast; values are not computed).

    DMA still moves real bytes, so block tables and sequence lengths placed in `dram` steer the
    run; K/V caches may be `DramImage.reserve`d instead of placed.
    """
    return run_program(program, dram=dram, host_input=host_input, config=config, compute=False)[1]
