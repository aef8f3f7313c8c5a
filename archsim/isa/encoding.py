"""Fixed-width binary encoding: one 64-bit word per instruction, layout from the opcode table.

An `Instruction` holds raw field values (register numbers, integers, f32 bit patterns, enum
indices, label targets as absolute instruction indices), so encode(decode(w)) == w holds for
every valid word and decode(encode(i)) == i for every valid instruction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from archsim.errors import ProgramError
from archsim.isa.table import IsaTable, OpcodeSpec, OperandSpec, load_table


@dataclass(frozen=True)
class Instruction:
    """A decoded instruction: a mnemonic and its raw operand field values, in table order."""

    mnemonic: str
    operands: tuple[int, ...] = ()


def check_operands(spec: OpcodeSpec, operands: Sequence[int]) -> str | None:
    """Why `operands` cannot be encoded for `spec`, or None if they can."""
    if len(operands) != len(spec.operands):
        return f"{spec.mnemonic} takes {len(spec.operands)} operand(s), got {len(operands)}"
    for field, value in zip(spec.operands, operands, strict=True):
        if not isinstance(value, int | np.integer) or isinstance(value, bool):
            return f"{spec.mnemonic} operand {field.name} must be an integer field value, got {value!r}"
        if not field.minimum <= value <= field.maximum:
            return (f"{spec.mnemonic} operand {field.name} = {value} is out of range "
                    f"[{field.minimum}, {field.maximum}] for {field.kind_text}")
    return None


def _field_bits(field: OperandSpec, value: int) -> int:
    return int(value) & ((1 << field.bits) - 1)


def encode_instruction(instruction: Instruction, table: IsaTable | None = None) -> int:
    """The 64-bit word of `instruction`; ProgramError if it is not encodable."""
    table = table or load_table()
    spec = table.by_mnemonic.get(instruction.mnemonic)
    if spec is None:
        raise ProgramError(f"unknown instruction {instruction.mnemonic!r}")
    problem = check_operands(spec, instruction.operands)
    if problem:
        raise ProgramError(problem)
    word = spec.code << table.operand_bits
    for field, value in zip(spec.operands, instruction.operands, strict=True):
        word |= _field_bits(field, value) << field.lsb
    return word


def decode_word(word: int, table: IsaTable | None = None, *, index: int = 0,
                file: str | None = None) -> Instruction:
    """Decode one word; unknown opcodes, bad enum codes and non-zero unused bits are errors."""
    table = table or load_table()
    word = int(word)
    where = f"word {index}"
    if not 0 <= word < (1 << table.word_bits):
        raise ProgramError(f"0x{word:x} is not a {table.word_bits}-bit word", file=file, where=where)
    code = word >> table.operand_bits
    spec = table.by_code.get(code)
    if spec is None:
        raise ProgramError(f"unknown opcode 0x{code:02x} in word 0x{word:016x}", file=file, where=where)
    used = 0
    operands: list[int] = []
    for field in spec.operands:
        mask = (1 << field.bits) - 1
        raw = (word >> field.lsb) & mask
        used |= mask << field.lsb
        value = raw - (1 << field.bits) if field.kind == "sint" and raw >> (field.bits - 1) else raw
        if not field.minimum <= value <= field.maximum:
            raise ProgramError(f"{spec.mnemonic} operand {field.name} = {value} is out of range "
                               f"[{field.minimum}, {field.maximum}]", file=file, where=where)
        operands.append(value)
    stray = word & ((1 << table.operand_bits) - 1) & ~used
    if stray:
        raise ProgramError(f"{spec.mnemonic} word 0x{word:016x} has non-zero unused bits 0x{stray:x}",
                           file=file, where=where)
    return Instruction(spec.mnemonic, tuple(operands))


def encode_instructions(instructions: Iterable[Instruction], table: IsaTable | None = None) -> np.ndarray:
    """Words of a sequence of instructions as a uint64 array."""
    table = table or load_table()
    return np.array([encode_instruction(i, table) for i in instructions], dtype=np.uint64)


def decode_words(words: Iterable[int], table: IsaTable | None = None, *,
                 file: str | None = None) -> list[Instruction]:
    table = table or load_table()
    return [decode_word(int(w), table, index=i, file=file) for i, w in enumerate(words)]
