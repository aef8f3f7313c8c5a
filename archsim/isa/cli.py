"""`archsim isa ...` commands: assemble and disassemble PNM programs.

Errors are raised as ProgramError; the top-level CLI prints them as one line and exits 2.
Outputs are written atomically (temporary file, then rename).
"""

from __future__ import annotations

from pathlib import Path

import click

from archsim.errors import ProgramError
from archsim.isa.assembler import assemble_file
from archsim.isa.disasm import disassemble
from archsim.isa.program import read_program, write_program
from archsim.isa.syntax import AsmSyntaxError, parse_defines
from archsim.outputs import OutputPlan


def _defines(values: tuple[str, ...]) -> dict[str, object]:
    try:
        return parse_defines(values)
    except AsmSyntaxError as exc:
        raise ProgramError(str(exc)) from None


@click.group("isa")
def isa() -> None:
    """Assemble and disassemble PNM programs (the ISA is isa/opcodes.yaml)."""


@isa.command("asm")
@click.argument("source", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Binary program to write.")
@click.option("-D", "--define", "defines", multiple=True, metavar="NAME=VALUE",
              help="Set a program constant (repeatable), e.g. -D HEAD_DIM=128 -D KV_DTYPE=int8.")
def asm_command(source: Path, output: Path, defines: tuple[str, ...]) -> None:
    """Assemble SOURCE (.s) into a binary program."""
    outputs = OutputPlan(inputs=[source])
    outputs.add(output, "--output")
    program = assemble_file(source, defines=_defines(defines))
    outputs.add_inputs(program.included)  # its .include files are inputs too
    outputs.write(output, lambda tmp: write_program(tmp, program))
    outputs.commit()
    click.echo(f"{output}: {len(program)} instructions, {program.sram_size_bytes} bytes of SRAM")


@isa.command("disasm")
@click.argument("binary", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the text here instead of standard output.")
def disasm_command(binary: Path, output: Path | None) -> None:
    """Disassemble BINARY into canonical assembly text."""
    outputs = OutputPlan(inputs=[binary])
    outputs.add(output, "--output")
    text = disassemble(read_program(binary))
    if output is None:
        click.echo(text, nl=False)
        return
    outputs.write(output, lambda tmp: tmp.write_text(text))
    outputs.commit()
