"""An assembled PNM program, its binary file format, and structural checks shared by the
assembler and the binary loader.

Binary format (little-endian): a 16-byte header `PNMB`, u16 format version, u16 header size,
u32 instruction count, u32 SRAM footprint in bytes; then one u64 word per instruction.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import numpy as np

from archsim import outputs
from archsim.errors import ProgramError
from archsim.inputs import read_bytes_input
from archsim.isa.encoding import Instruction, decode_words, encode_instructions
from archsim.isa.table import IsaTable, load_table

MAGIC = b"PNMB"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<4sHHII")
MAX_SRAM_BYTES = 2**32 - 1  # the header's uint32 SRAM size


@dataclass(frozen=True)
class SourceLoc:
    """Where an instruction came from; `expansion` lists (macro, file, line) outermost first."""

    file: str
    line: int
    expansion: tuple[tuple[str, str, int], ...] = ()

    def context(self) -> str:
        return "".join(f" (in macro {name} expanded at {file}:{line})"
                       for name, file, line in reversed(self.expansion))


@dataclass(frozen=True)
class SramRegion:
    """A `.sram` allocation: the assembler's static account of scratchpad use."""

    name: str
    address: int
    size_bytes: int
    loc: SourceLoc
    first_use_pc: int | None = None  # first instruction whose operands mention the region

    @property
    def end(self) -> int:
        return self.address + self.size_bytes


@dataclass(frozen=True)
class Program:
    instructions: tuple[Instruction, ...]
    sram_size_bytes: int
    source: str | None = None
    locations: tuple[SourceLoc | None, ...] = ()
    sram_regions: tuple[SramRegion, ...] = ()
    symbols: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))
    included: tuple[str, ...] = field(default=(), compare=False)  # the .include files its source read

    def __len__(self) -> int:
        return len(self.instructions)

    def location(self, pc: int) -> SourceLoc | None:
        return self.locations[pc] if pc < len(self.locations) else None

    def error(self, pc: int, message: str) -> ProgramError:
        """A ProgramError located at instruction `pc` (source line if known, else the pc)."""
        loc = self.location(pc)
        if loc is not None:
            return ProgramError(message + loc.context(), file=loc.file, where=f"line {loc.line}")
        return ProgramError(message, file=self.source, where=f"pc {pc}")

    def words(self, table: IsaTable | None = None) -> np.ndarray:
        return encode_instructions(self.instructions, table)


def is_loop(mnemonic: str, table: IsaTable) -> bool:
    """Loops are the opcodes that carry a label (the end of their body)."""
    return any(op.kind == "label" for op in table.by_mnemonic[mnemonic].operands)


def loop_end(instruction: Instruction, table: IsaTable) -> int:
    spec = table.by_mnemonic[instruction.mnemonic]
    return next(v for op, v in zip(spec.operands, instruction.operands, strict=True) if op.kind == "label")


def check_loops(instructions: Sequence[Instruction], table: IsaTable,
                error_at: Callable[[int, str], ProgramError]) -> None:
    """Loops must have a non-empty body, nest properly, not exceed the loop stack, and be
    followed by at least one instruction (a loop running off the end is unterminated)."""
    open_ends: list[tuple[int, int]] = []  # (end, pc of the LOOP)
    count = len(instructions)
    for pc, instruction in enumerate(instructions):
        while open_ends and open_ends[-1][0] <= pc:
            open_ends.pop()
        if not is_loop(instruction.mnemonic, table):
            continue
        end = loop_end(instruction, table)
        if end <= pc + 1:
            raise error_at(pc, f"{instruction.mnemonic} body is empty: its end (instruction {end}) "
                               f"must come after instruction {pc + 1}")
        if end >= count:
            raise error_at(pc, f"unterminated loop: its end (instruction {end}) leaves no instruction "
                               f"after the body (the program has {count})")
        if open_ends and end > open_ends[-1][0]:
            raise error_at(pc, f"loop ends at instruction {end}, after the enclosing loop "
                               f"(instruction {open_ends[-1][1]}) ends at {open_ends[-1][0]}")
        open_ends.append((end, pc))
        if len(open_ends) > table.loop_stack_depth:
            raise error_at(pc, f"loops nest {len(open_ends)} deep; the loop stack holds "
                               f"{table.loop_stack_depth}")


def program_to_bytes(program: Program, table: IsaTable | None = None) -> bytes:
    words = program.words(table).astype("<u8")
    header = _HEADER.pack(MAGIC, FORMAT_VERSION, _HEADER.size, len(words), program.sram_size_bytes)
    return header + words.tobytes()


def program_from_bytes(data: bytes, *, source: str | None = None,
                       table: IsaTable | None = None) -> Program:
    """Parse a binary program; malformed headers, unknown opcodes and bad loops are errors."""
    table = table or load_table()
    if len(data) < _HEADER.size:
        raise ProgramError("file is too short for a PNM program header", file=source)
    magic, version, header_bytes, count, sram_bytes = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ProgramError(f"not a PNM program (magic {magic!r}, expected {MAGIC!r})", file=source)
    if version != FORMAT_VERSION or header_bytes != _HEADER.size:
        raise ProgramError(f"unsupported program format version {version}", file=source)
    body = data[header_bytes:]
    if len(body) != 8 * count:
        raise ProgramError(f"header says {count} instructions but the file holds {len(body)} bytes "
                           f"of code", file=source)
    words = np.frombuffer(body, dtype="<u8")
    instructions = tuple(decode_words(words, table, file=source))
    program = Program(instructions, int(sram_bytes), source=source)
    check_loops(instructions, table, program.error)
    return program


def atomic_write_bytes(path: Path | str, data: bytes) -> None:
    """Write through a temporary file in the same directory, then rename over `path` (archsim.outputs)."""
    outputs.atomic_write_bytes(path, data)


def write_program(path: Path | str, program: Program, table: IsaTable | None = None) -> None:
    atomic_write_bytes(path, program_to_bytes(program, table))


def read_program(path: Path | str, table: IsaTable | None = None) -> Program:
    data = read_bytes_input(path, ProgramError)
    return program_from_bytes(data, source=str(path), table=table)
