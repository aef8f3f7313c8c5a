"""Opcode table, binary encoding and the asm/disasm round trip (property tests)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsim.errors import ConfigError, ProgramError
from archsim.isa import Instruction, assemble_text, decode_word, disassemble, encode_instruction, load_table
from archsim.isa.program import Program, program_from_bytes, program_to_bytes, read_program, write_program
from archsim.isa.table import OpcodeSpec

pytestmark = pytest.mark.unit

TABLE = load_table()
NON_LOOP_OPS = [op for op in TABLE.opcodes if not any(o.kind == "label" for o in op.operands)]
LOOP_OPS = [op for op in TABLE.opcodes if any(o.kind == "label" for o in op.operands)]


def test_table_has_every_instruction_class_with_unit_and_latency() -> None:
    groups = {op.group for op in TABLE.opcodes}
    assert groups == {"control", "configuration", "scalar", "data_movement", "compute"}
    for op in TABLE.opcodes:
        assert op.unit in TABLE.units and op.latency in TABLE.latency_classes
        assert TABLE.latency_classes[op.latency].unit in TABLE.units
    for mnemonic in ("QK", "PV", "VMAX", "VEXP", "VSUM", "VRESC", "MERGE", "VNORM", "LD", "ST", "LDG",
                     "RECV", "SEND", "LOOP", "BARRIER", "WAIT", "HALT", "CFG.SHAPE", "CFG.KV", "CFG.PAGE",
                     "CFG.SCALE", "CFG.WIN"):
        assert mnemonic in TABLE.by_mnemonic


def test_fields_are_disjoint_and_below_the_opcode() -> None:
    for op in TABLE.opcodes:
        used = 0
        for operand in op.operands:
            mask = ((1 << operand.bits) - 1) << operand.lsb
            assert used & mask == 0
            used |= mask
        assert used < 1 << TABLE.operand_bits


def test_known_encodings() -> None:
    # LI: opcode 0x20 in [63:56], rd in [55:50], 48-bit two's-complement value in [49:2].
    word = encode_instruction(Instruction("LI", (1, -1)))
    assert word == (0x20 << 56) | (1 << 50) | (((1 << 48) - 1) << 2)
    assert decode_word(word) == Instruction("LI", (1, -1))
    halt = encode_instruction(Instruction("HALT"))
    assert halt == 0x02 << 56
    cfg = encode_instruction(Instruction("CFG.KV", (TABLE.enums["kv_dtype"].index("int8"), 32)))
    assert cfg == (0x11 << 56) | (3 << 52) | (32 << 36)


@pytest.mark.parametrize(("word", "message"), [
    (0xFF << 56, "word 7: unknown opcode 0xff in word 0xff00000000000000"),
    ((0x02 << 56) | 1, "word 7: HALT word 0x0200000000000001 has non-zero unused bits 0x1"),
    ((0x11 << 56) | (9 << 52), "word 7: CFG.KV operand dtype = 9 is out of range [0, 3]"),
    ((0x10 << 56), "word 7: CFG.SHAPE operand qk_dim = 0 is out of range [1, 16383]"),
])
def test_decode_errors(word: int, message: str) -> None:
    with pytest.raises(ProgramError) as info:
        decode_word(word, index=7, file="prog.bin")
    assert str(info.value) == f"prog.bin: {message}"


def test_encode_rejects_out_of_range_operands() -> None:
    with pytest.raises(ProgramError, match=r"ADDI operand imm = 2147483648 is out of range"):
        encode_instruction(Instruction("ADDI", (1, 2, 1 << 31)))
    with pytest.raises(ProgramError, match="unknown instruction 'FOO'"):
        encode_instruction(Instruction("FOO"))


def test_table_validation_names_the_path(tmp_path) -> None:
    text = TABLE.path.read_text().replace("latency: mac\n", "latency: macc\n", 1)
    bad = tmp_path / "opcodes.yaml"
    bad.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_table(bad)
    assert str(info.value) == f"{bad}: opcodes.QK.latency: unknown latency 'macc'"


# ------------------------------------------------------------------ property tests
def operand_values(op: OpcodeSpec) -> st.SearchStrategy[tuple[int, ...]]:
    return st.tuples(*(st.integers(o.minimum, o.maximum) for o in op.operands))


plain_instruction = st.sampled_from(NON_LOOP_OPS).flatmap(
    lambda op: operand_values(op).map(lambda values: Instruction(op.mnemonic, values)))


@pytest.mark.slow
@given(st.sampled_from(TABLE.opcodes).flatmap(
    lambda op: operand_values(op).map(lambda values: Instruction(op.mnemonic, values))))
@settings(max_examples=400, deadline=None)
def test_decode_inverts_encode(instruction: Instruction) -> None:
    word = encode_instruction(instruction)
    assert 0 <= word < 1 << 64
    assert decode_word(word) == instruction
    assert encode_instruction(decode_word(word)) == word


@st.composite
def programs(draw: st.DrawFn) -> list[Instruction]:
    """Random valid programs: straight-line code with properly nested loops, ending in HALT."""

    def block(depth: int) -> list:
        items = []
        for _ in range(draw(st.integers(1, 4))):
            if depth < TABLE.loop_stack_depth and draw(st.integers(0, 4)) == 0:
                op = draw(st.sampled_from(LOOP_OPS))
                count = draw(st.integers(op.operands[0].minimum, op.operands[0].maximum))
                items.append((op.mnemonic, count, block(depth + 1)))
            else:
                items.append(draw(plain_instruction))
        return items

    out: list[Instruction] = []

    def flatten(items: list) -> None:
        for item in items:
            if isinstance(item, Instruction):
                out.append(item)
                continue
            mnemonic, count, body = item
            at = len(out)
            out.append(Instruction(mnemonic, (count, 0)))
            flatten(body)
            out[at] = Instruction(mnemonic, (count, len(out)))

    flatten(block(0))
    out.append(Instruction("HALT"))
    return out


@given(programs(), st.integers(0, 1 << 20))
@settings(max_examples=150, deadline=None)
def test_assemble_inverts_disassemble(instructions: list[Instruction], sram_bytes: int) -> None:
    program = Program(tuple(instructions), sram_bytes)
    binary = program_to_bytes(program)
    text = disassemble(program)
    again = assemble_text(text)
    assert program_to_bytes(again) == binary
    assert again.instructions == program.instructions
    assert disassemble(again) == text
    assert program_from_bytes(binary).instructions == program.instructions


def test_binary_file_round_trip_and_errors(tmp_path) -> None:
    program = assemble_text("LI r1, 5\nLOOPI 3, done\nADDI r1, r1, -1\ndone:\nHALT\n")
    path = tmp_path / "p.bin"
    write_program(path, program)
    loaded = read_program(path)
    assert loaded.instructions == program.instructions
    assert np.array_equal(loaded.words(), program.words())
    assert list(tmp_path.iterdir()) == [path]  # no temporary left behind

    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"NOPE" + bytes(12))
    with pytest.raises(ProgramError, match=r"bad.bin: not a PNM program \(magic b'NOPE'"):
        read_program(bad)
    bad.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(ProgramError, match="header says 4 instructions but the file holds 29 bytes"):
        read_program(bad)


def test_binary_loader_rejects_unterminated_loop(tmp_path) -> None:
    words = [encode_instruction(Instruction("LOOPI", (2, 2))), encode_instruction(Instruction("NOP"))]
    header = program_to_bytes(Program((), 0))[:16]
    data = bytearray(header)
    data[8:12] = (2).to_bytes(4, "little")
    data += np.array(words, dtype="<u8").tobytes()
    with pytest.raises(ProgramError) as info:
        program_from_bytes(bytes(data), source="loop.bin")
    assert str(info.value) == ("loop.bin: pc 0: unterminated loop: its end (instruction 2) leaves no "
                               "instruction after the body (the program has 2)")
