"""PNM instruction-set toolchain: the opcode table (isa/opcodes.yaml), encoding, assembler,
disassembler. The functional executor lives in archsim.pnm.

The data files are found relative to the package: <repo>/isa (archsim/../isa).
"""

from archsim.isa.assembler import assemble_file, assemble_text
from archsim.isa.disasm import disassemble, format_instruction
from archsim.isa.encoding import (
    Instruction,
    decode_word,
    decode_words,
    encode_instruction,
    encode_instructions,
)
from archsim.isa.program import Program, SourceLoc, SramRegion, read_program, write_program
from archsim.isa.table import (
    ISA_DIR,
    KERNELS_DIR,
    OPCODES_PATH,
    IsaTable,
    OpcodeSpec,
    OperandSpec,
    load_table,
)

__all__ = [
    "ISA_DIR", "KERNELS_DIR", "OPCODES_PATH", "Instruction", "IsaTable", "OpcodeSpec", "OperandSpec",
    "Program", "SourceLoc", "SramRegion", "assemble_file", "assemble_text", "decode_word", "decode_words",
    "disassemble", "encode_instruction", "encode_instructions", "format_instruction", "load_table",
    "read_program", "write_program",
]
