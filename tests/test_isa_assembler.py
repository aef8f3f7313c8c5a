"""Assembler features, exact error lines, kernels, and the `isa` CLI group."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from archsim.errors import ProgramError
from archsim.isa import KERNELS_DIR, Instruction, assemble_file, assemble_text, disassemble, load_table
from archsim.isa.cli import isa
from archsim.isa.program import program_to_bytes, read_program

pytestmark = pytest.mark.unit

TABLE = load_table()
KV = TABLE.enums["kv_dtype"]


def asm(text: str, **defines: object):
    return assemble_text(text, filename="t.s", defines=defines)


def error_of(text: str, **defines: object) -> str:
    with pytest.raises(ProgramError) as info:
        asm(text, **defines)
    return str(info.value)


def test_labels_constants_aliases_and_expressions() -> None:
    program = asm("""
        .const D = 128
        .default G = 4
        .const SCALE = 1 / sqrt(D)
        .reg count = r7
        CFG.SHAPE D, D, D, G
        CFG.KV int8, cdiv(D, 3)          ; enum member by name
        CFG.SCALE SCALE
        LI count, esize(bf16) * D + (1 << 40)
        LOOP count, done                 # forward label
        ADDI r1, r1, -(D // 2)
done:   HALT
    """)
    assert program.instructions == (
        Instruction("CFG.SHAPE", (128, 128, 128, 4)),
        Instruction("CFG.KV", (KV.index("int8"), 43)),
        Instruction("CFG.SCALE", (int(np.array(1 / math.sqrt(128), np.float32).view(np.uint32)),)),
        Instruction("LI", (7, 256 + (1 << 40))),
        Instruction("LOOP", (7, 6)),
        Instruction("ADDI", (1, 1, -64)),
        Instruction("HALT", ()),
    )
    assert program.symbols["G"] == 4


def test_defines_override_defaults_but_not_constants() -> None:
    text = ".default N = 3\nLI r1, N\nHALT\n"
    assert asm(text).instructions[0].operands == (1, 3)
    assert asm(text, N=9).instructions[0].operands == (1, 9)
    assert error_of(".const N = 3\nHALT\n", N=1) == "t.s: line 1: 'N' is already defined (-D)"
    assert error_of(text, N=1, NN=2) == ("t.s: -D NN: not a parameter of this program "
                                          "(declare it with .default or use it)")


def test_conditionals_and_macros_with_unique_labels() -> None:
    program = asm("""
        .default MODE = 2
        .macro REPEAT n, reg
        LOOPI \\n, over\\@
        ADDI \\reg, \\reg, 1
over\\@:
        .endm
        .if MODE == 1
        NOP
        .elif MODE == 2
        REPEAT 3, r2
        REPEAT 5, r3
        .else
        BARRIER 0
        .endif
        HALT
    """)
    assert [i.mnemonic for i in program.instructions] == ["LOOPI", "ADDI", "LOOPI", "ADDI", "HALT"]
    assert program.instructions[0].operands == (3, 2)
    assert program.instructions[2].operands == (5, 4)


def test_sram_regions_are_aligned_and_sized() -> None:
    program = asm(".sram A, 10\n.sram B, 100, 256\n.sram C, 4\nLI r1, B\nLI r2, C\nHALT\n")
    regions = {r.name: (r.address, r.size_bytes, r.first_use_pc) for r in program.sram_regions}
    assert regions == {"A": (0, 10, None), "B": (256, 100, 0), "C": (384, 4, 1)}
    assert program.sram_size_bytes == 388


def test_include_is_relative_to_the_including_file(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "defs.inc").write_text(".const X = 7\n.macro SETX r\n    LI \\r, X\n.endm\n")
    main = tmp_path / "main.s"
    main.write_text('.include "lib/defs.inc"\nSETX r4\nHALT\n')
    assert assemble_file(main).instructions[0] == Instruction("LI", (4, 7))


@pytest.mark.parametrize(("text", "message"), [
    ("NOP\nFROB r1\n", "t.s: line 2: unknown instruction 'FROB'"),
    ("ADDI r1, r2\n", "t.s: line 1: ADDI takes 3 operand(s) (rd, ra, imm), got 2"),
    ("ADDI r1, r2, 1 << 40\n", "t.s: line 1: ADDI operand imm = 1099511627776 is out of range for s32 "
                                "(-2147483648..2147483647)"),
    ("CFG.SHAPE 0, 1, 1, 1\n",
     "t.s: line 1: CFG.SHAPE operand qk_dim = 0 is out of range for u14 (1..16383)"),
    ("LI r64, 1\n", "t.s: line 1: register r64 does not exist (r0..r63)"),
    ("LI 5, 1\n", "t.s: line 1: LI operand rd must be a register (r0..r63), got '5'"),
    ("LI r1, NOPE + 1\n", "t.s: line 1: undefined symbol 'NOPE'"),
    ("LI r1, 2.5\n", "t.s: line 1: LI operand value must be an integer, got 2.5"),
    ("CFG.KV fp4, 0\n", "t.s: line 1: undefined symbol 'fp4'"),
    ("CFG.KV 'fp4', 0\n", "t.s: line 1: CFG.KV operand dtype: unknown kv_dtype 'fp4' (one of fp16, bf16, "
                           "fp8e4m3, int8)"),
    ("CFG.SCALE 1e39\n", "t.s: line 1: CFG.SCALE operand softmax_scale = 1e+39 overflows fp32"),
    ("LOOPI 2, nowhere\nNOP\nHALT\n", "t.s: line 1: LOOPI operand end: undefined label 'nowhere'"),
    ("a:\nNOP\na:\nHALT\n", "t.s: line 3: 'a' is already defined (t.s:1)"),
    ("LOOPI 2, e\nNOP\ne:\n", "t.s: line 1: unterminated loop: its end (instruction 2) leaves no "
                              "instruction after the body (the program has 2)"),
    ("e:\nLOOPI 2, e\nHALT\n", "t.s: line 2: LOOPI body is empty: its end (instruction 0) must come after "
                               "instruction 1"),
    ("LOOPI 2, a\nLOOPI 2, b\nNOP\na:\nNOP\nb:\nHALT\n",
     "t.s: line 2: loop ends at instruction 4, after the enclosing loop (instruction 0) ends at 3"),
    ("LOOPI 1, a\nLOOPI 1, a\nLOOPI 1, a\nLOOPI 1, a\nLOOPI 1, a\nNOP\na:\nHALT\n",
     "t.s: line 5: loops nest 5 deep; the loop stack holds 4"),
    (".macro M a\nNOP\n", "t.s: line 1: unterminated .macro (no matching .endm)"),
    (".if 1\nNOP\n", "t.s: line 1: unterminated .if (no matching .endif)"),
    (".endif\n", "t.s: line 1: .endif without .if"),
    (".frob 3\n", "t.s: line 1: unknown directive '.frob'"),
    (".assert 1 > 2, \"need more\"\n", "t.s: line 1: assertion failed: need more"),
    ("LI r1, (2\n", "t.s: line 1: unbalanced '(' in 'r1, (2'"),
    ("LI r1, __import__('os')\n", "t.s: line 1: unknown function '__import__'"),
    (".reg x = r1\nLI r2, x + 1\n", "t.s: line 2: 'x' is a register alias, not a value"),
])
def test_error_lines(text: str, message: str) -> None:
    assert error_of(text) == message


def test_error_inside_macro_names_body_line_and_expansion_site() -> None:
    text = ".macro BAD v\n    NOP\n    ADDI r1, r1, \\v\n.endm\nNOP\nBAD 1\nBAD 1 << 33\nHALT\n"
    assert error_of(text) == ("t.s: line 3: ADDI operand imm = 8589934592 is out of range for s32 "
                              "(-2147483648..2147483647) (in macro BAD expanded at t.s:7)")


def test_error_in_included_file_names_that_file(tmp_path: Path) -> None:
    (tmp_path / "x.inc").write_text("NOP\nLI r1, missing\n")
    (tmp_path / "m.s").write_text('NOP\n.include "x.inc"\nHALT\n')
    with pytest.raises(ProgramError) as info:
        assemble_file(tmp_path / "m.s")
    assert str(info.value) == f"{tmp_path / 'x.inc'}: line 2: undefined symbol 'missing'"


KERNEL_VARIANTS = [
    ("gqa_decode.s", {}),
    ("gqa_decode.s", {"KV_DTYPE": "int8", "SCALE_GROUP": 32, "WINDOW": 128, "SPLITS": 4, "SPLIT": 0}),
    ("paged_gqa_decode.s", {"GROUP": 8, "BLOCK_TOKENS": 32, "KV_DTYPE": "fp8e4m3", "SCALE_GROUP": 128}),
    ("mla_decode.s", {}),
    ("mla_decode.s", {"BLOCK_TOKENS": 64, "SPLITS": 2, "SPLIT": 1}),
    ("tree_decode.s", {"QTOKENS": 8, "GROUP": 4}),
    ("tree_decode.s", {"QTOKENS": 3, "KV_DTYPE": "int8", "SCALE_GROUP": 64, "SPLITS": 2, "SPLIT": 1}),
]


@pytest.mark.parametrize(("kernel", "defines"), KERNEL_VARIANTS)
def test_kernels_assemble_and_round_trip(kernel: str, defines: dict[str, object]) -> None:
    program = assemble_file(KERNELS_DIR / kernel, defines=defines)
    assert program.instructions[-1] == Instruction("HALT")
    again = assemble_text(disassemble(program))
    assert program_to_bytes(again) == program_to_bytes(program)


def test_every_kernel_file_is_covered() -> None:
    assert {p.name for p in KERNELS_DIR.glob("*.s")} == {k for k, _ in KERNEL_VARIANTS}


def test_kernel_parameter_checks() -> None:
    with pytest.raises(ProgramError, match=r"mla_decode.s: line \d+: assertion failed: MLA has a single"):
        assemble_file(KERNELS_DIR / "mla_decode.s", defines={"KV_HEADS": 2})
    with pytest.raises(ProgramError, match="-D HEADDIM: not a parameter"):
        assemble_file(KERNELS_DIR / "gqa_decode.s", defines={"HEADDIM": 64})
    with pytest.raises(ProgramError, match=r"tree_decode.s: line \d+: assertion failed: a sliding window"):
        assemble_file(KERNELS_DIR / "tree_decode.s", defines={"WINDOW": 64})


def test_cli_asm_and_disasm(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "gqa.bin"
    result = runner.invoke(isa, ["asm", str(KERNELS_DIR / "gqa_decode.s"), "-o", str(out),
                                 "-D", "HEAD_DIM=64", "-D", "GROUP=8", "-D", "KV_DTYPE=bf16"])
    assert result.exit_code == 0, result.output
    defines = {"HEAD_DIM": 64, "GROUP": 8, "KV_DTYPE": "bf16"}
    expected = assemble_file(KERNELS_DIR / "gqa_decode.s", defines=defines)
    assert read_program(out).instructions == expected.instructions
    assert result.output == f"{out}: {len(expected)} instructions, {expected.sram_size_bytes} bytes of SRAM\n"

    result = runner.invoke(isa, ["disasm", str(out)])
    assert result.exit_code == 0
    assert result.output == disassemble(read_program(out))
    text_out = tmp_path / "gqa.s"
    assert runner.invoke(isa, ["disasm", str(out), "-o", str(text_out)]).exit_code == 0
    assert text_out.read_text() == result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gqa.bin", "gqa.s"]


def test_cli_errors_are_program_errors(tmp_path: Path) -> None:
    source = tmp_path / "bad.s"
    source.write_text("NOP\nADDI r1, r2, 1 << 40\n")
    runner = CliRunner()
    result = runner.invoke(isa, ["asm", str(source), "-o", str(tmp_path / "bad.bin")])
    assert isinstance(result.exception, ProgramError)
    assert str(result.exception) == (f"{source}: line 2: ADDI operand imm = 1099511627776 is out of range "
                                     f"for s32 (-2147483648..2147483647)")
    assert not (tmp_path / "bad.bin").exists()
    result = runner.invoke(isa, ["asm", str(source), "-o", str(tmp_path / "x.bin"), "-D", "=3"])
    assert str(result.exception) == "-D expects NAME=VALUE, got '=3'"
