"""Disassembler: `Program` (or raw words) -> canonical assembly text.

The output reassembles to the same words and SRAM footprint: loop ends become labels `L<pc>`,
f32 operands print as exact decimal (NaN payloads as `f32bits(0x...)`), enums by name.
"""

from __future__ import annotations

import math

import numpy as np

from archsim.isa.encoding import Instruction
from archsim.isa.program import Program, is_loop, loop_end
from archsim.isa.table import IsaTable, OperandSpec, load_table


def format_f32(bits: int) -> str:
    value = float(np.array(bits, dtype=np.uint32).view(np.float32))
    if math.isnan(value):
        return f"f32bits(0x{bits:08x})"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)  # float64 repr of a float32 value is exact, so it parses back bit-for-bit


def format_operand(spec: OperandSpec, value: int) -> str:
    if spec.kind == "reg":
        return f"r{value}"
    if spec.kind == "label":
        return f"L{value}"
    if spec.kind == "f32":
        return format_f32(value)
    if spec.kind == "enum":
        return spec.enum_values[value]
    return str(value)


def format_instruction(instruction: Instruction, table: IsaTable | None = None) -> str:
    """One instruction as assembly text (label operands print as `L<pc>`)."""
    table = table or load_table()
    spec = table.by_mnemonic[instruction.mnemonic]
    fields = zip(spec.operands, instruction.operands, strict=True)
    operands = ", ".join(format_operand(op, value) for op, value in fields)
    return f"{spec.mnemonic} {operands}".rstrip()


def disassemble(program: Program, table: IsaTable | None = None) -> str:
    """Canonical text of `program`; assemble_text(disassemble(p)) encodes to the same binary."""
    table = table or load_table()
    targets = {loop_end(i, table) for i in program.instructions if is_loop(i.mnemonic, table)}
    lines = [f"; {len(program)} instructions, {program.sram_size_bytes} bytes of SRAM",
             f".sram_size {program.sram_size_bytes}"]
    for pc, instruction in enumerate(program.instructions):
        if pc in targets:
            lines.append(f"L{pc}:")
        lines.append(f"    {format_instruction(instruction, table)}")
    if len(program) in targets:
        lines.append(f"L{len(program)}:")
    return "\n".join(lines) + "\n"
