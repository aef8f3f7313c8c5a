"""Two-pass assembler: PNM assembly text -> `Program`.

Pass 1 walks the source in order: it expands `.include` and macros, evaluates `.if`, defines
constants (`.const`, `.default`, `-D`), register aliases (`.reg`), SRAM regions (`.sram`) and
labels, and collects instructions with their operand text. Pass 2 evaluates operands (labels
may be forward references), encodes-checks them and validates loop structure. Every error is a
ProgramError naming `file` and `line N` of the offending source line (for code produced by a
macro: the body line, plus the chain of expansion sites).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import numpy as np

from archsim.errors import ProgramError
from archsim.inputs import read_text_input
from archsim.isa.encoding import Instruction, check_operands
from archsim.isa.expr import BASE_FUNCTIONS, ExprError, F32Bits, align_up, evaluate
from archsim.isa.program import MAX_SRAM_BYTES, Program, SourceLoc, SramRegion, check_loops
from archsim.isa.syntax import (
    IDENTIFIER,
    AsmSyntaxError,
    parse_register,
    parse_string,
    split_head,
    split_label,
    split_operands,
    strip_comment,
)
from archsim.isa.table import IsaTable, OperandSpec, load_table

DEFAULT_SRAM_ALIGN_BYTES = 64  # one SRAM line; keeps tiles aligned for the vector datapath
_MAX_EXPANSION_DEPTH = 32
_MACRO_PARAM = re.compile(r"\\(@|[A-Za-z_][A-Za-z0-9_]*)")
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*=(?!=)\s*(.+)$")
_F32_MAX = float(np.finfo(np.float32).max)


@dataclass
class _Line:
    text: str
    loc: SourceLoc


@dataclass
class _Symbol:
    kind: str  # "const" | "reg" | "label"
    value: object
    origin: str  # "file:line" or "-D"


@dataclass
class _Macro:
    params: tuple[str, ...]
    body: list[_Line]
    loc: SourceLoc


@dataclass
class _Cond:
    active: bool  # this branch is being assembled
    taken: bool  # some branch of this .if has been taken
    parent_active: bool
    loc: SourceLoc


@dataclass
class _Pending:
    mnemonic: str
    operands: list[str]
    loc: SourceLoc


@dataclass
class _State:
    table: IsaTable
    symbols: dict[str, _Symbol] = field(default_factory=dict)
    declared: set[str] = field(default_factory=set)  # names a program declares or reads
    defines: set[str] = field(default_factory=set)
    macros: dict[str, _Macro] = field(default_factory=dict)
    conds: list[_Cond] = field(default_factory=list)
    pending: list[_Pending] = field(default_factory=list)
    regions: list[SramRegion] = field(default_factory=list)
    sram_next: int = 0
    sram_min: int = 0
    expansions: int = 0
    included: list[str] = field(default_factory=list)  # every .include file read, in order


def _error(loc: SourceLoc, message: str) -> ProgramError:
    return ProgramError(message + loc.context(), file=loc.file, where=f"line {loc.line}")


def _origin(loc: SourceLoc) -> str:
    return f"{loc.file}:{loc.line}"


class _Assembler:
    def __init__(self, table: IsaTable, defines: Mapping[str, object], include_dirs: tuple[Path, ...]):
        self.s = _State(table)
        self.include_dirs = include_dirs
        for name, value in defines.items():
            if not IDENTIFIER.match(name):
                raise ProgramError(f"-D name {name!r} is not an identifier")
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                raise ProgramError(f"-D {name} must be a number or a word, got {value!r}")
            self.s.symbols[name] = _Symbol("const", value, "-D")
            self.s.defines.add(name)

    # ------------------------------------------------------------------ symbols and expressions
    def _lookup(self, name: str) -> object:
        symbol = self.s.symbols.get(name)
        if symbol is None:
            for values in self.s.table.enums.values():
                if name in values:
                    return name  # enum members evaluate to their own name: `KV_DTYPE == int8`
            raise KeyError(name)
        if symbol.kind == "reg":
            raise ExprError(f"{name!r} is a register alias, not a value")
        self.s.declared.add(name)
        return symbol.value

    def _functions(self) -> dict[str, object]:
        element_bytes = self.s.table.element_bytes

        def esize(dtype: object) -> int:
            if dtype not in element_bytes:
                raise ValueError(f"esize({dtype!r}): unknown data type (one of {', '.join(element_bytes)})")
            return element_bytes[dtype]

        return {**BASE_FUNCTIONS, "esize": esize}

    def _eval(self, text: str, loc: SourceLoc, used: set[str] | None = None) -> object:
        try:
            return evaluate(text, self._lookup, self._functions(), used)
        except ExprError as exc:
            raise _error(loc, str(exc)) from None

    def _eval_int(self, text: str, loc: SourceLoc, what: str) -> int:
        value = self._eval(text, loc)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise _error(loc, f"{what} must be an integer, got {value!r}")
        return value

    def _define(self, name: str, kind: str, value: object, loc: SourceLoc) -> None:
        if not IDENTIFIER.match(name):
            raise _error(loc, f"{name!r} is not a valid name")
        if parse_register(name, 1 << 30) is not None:
            raise _error(loc, f"{name!r} is a register name")
        if name.upper() in self.s.table.by_mnemonic or name in self.s.macros:
            raise _error(loc, f"{name!r} is already an instruction or macro name")
        previous = self.s.symbols.get(name)
        if previous is not None:
            raise _error(loc, f"{name!r} is already defined ({previous.origin})")
        self.s.symbols[name] = _Symbol(kind, value, _origin(loc))

    # ------------------------------------------------------------------ pass 1
    def run_lines(self, lines: Iterator[_Line], depth: int) -> None:
        base = len(self.s.conds)
        for line in lines:
            try:
                self._statement(line, lines, depth)
            except AsmSyntaxError as exc:
                raise _error(line.loc, str(exc)) from None
        if len(self.s.conds) > base:
            raise _error(self.s.conds[-1].loc, "unterminated .if (no matching .endif)")

    def _active(self) -> bool:
        return not self.s.conds or self.s.conds[-1].active

    def _statement(self, line: _Line, lines: Iterator[_Line], depth: int) -> None:
        text = strip_comment(line.text).strip()
        if not text:
            return
        head, rest = split_head(text)
        if head.lower() in (".if", ".elif", ".else", ".endif"):
            self._conditional(head.lower(), rest, line.loc)
            return
        if not self._active():
            if head.lower() == ".macro":
                self._collect_macro_body(lines, line.loc)  # skip a whole definition
            return
        label, text = split_label(text)
        if label is not None:
            self._define(label, "label", len(self.s.pending), line.loc)
            if not text:
                return
            head, rest = split_head(text)
        if head.startswith("."):
            self._directive(head.lower(), rest, line, lines, depth)
        elif head in self.s.macros:
            self._expand(head, rest, line.loc, depth)
        else:
            mnemonic = head.upper()
            if mnemonic not in self.s.table.by_mnemonic:
                raise _error(line.loc, f"unknown instruction {head!r}")
            self.s.pending.append(_Pending(mnemonic, split_operands(rest), line.loc))

    def _conditional(self, head: str, rest: str, loc: SourceLoc) -> None:
        conds = self.s.conds
        if head == ".if":
            parent = self._active()
            value = bool(self._eval(rest, loc)) if parent else False
            conds.append(_Cond(parent and value, parent and value, parent, loc))
            return
        if not conds:
            raise _error(loc, f"{head} without .if")
        top = conds[-1]
        if head == ".endif":
            conds.pop()
        elif head == ".else":
            top.active = top.parent_active and not top.taken
            top.taken = True
        else:  # .elif
            take = top.parent_active and not top.taken and bool(self._eval(rest, loc))
            top.active, top.taken = take, top.taken or take

    def _directive(self, head: str, rest: str, line: _Line, lines: Iterator[_Line], depth: int) -> None:
        loc = line.loc
        if head in (".const", ".default"):
            match = _ASSIGNMENT.match(rest)
            if not match:
                raise _error(loc, f"{head} expects NAME = expression")
            name, expression = match.groups()
            self.s.declared.add(name)
            if head == ".default" and name in self.s.symbols:
                return
            self._define(name, "const", self._eval(expression, loc), loc)
        elif head == ".reg":
            match = _ASSIGNMENT.match(rest)
            number = parse_register(match.group(2), self.s.table.register_count) if match else None
            if number is None:
                raise _error(loc, ".reg expects NAME = rN")
            self._define(match.group(1), "reg", number, loc)
        elif head == ".sram":
            self._sram(rest, loc)
        elif head == ".sram_size":
            size = self._eval_int(rest, loc, ".sram_size")
            if not 0 <= size <= MAX_SRAM_BYTES:
                raise _error(loc, f".sram_size must lie in [0, {MAX_SRAM_BYTES:,}] (a program's header holds it in "
                                  f"32 bits), got {size:,}")
            self.s.sram_min = max(self.s.sram_min, size)
        elif head == ".assert":
            parts = split_operands(rest)
            if len(parts) != 2:
                raise _error(loc, '.assert expects EXPRESSION, "message"')
            if not self._eval(parts[0], loc):
                raise _error(loc, f"assertion failed: {parse_string(parts[1])}")
        elif head == ".include":
            self._include(parse_string(rest), loc, depth)
        elif head == ".macro":
            name, params_text = split_head(rest)
            params = tuple(split_operands(params_text))
            if not IDENTIFIER.match(name) or not all(IDENTIFIER.match(p) for p in params):
                raise _error(loc, ".macro expects NAME [param, ...]")
            if name.upper() in self.s.table.by_mnemonic or name in self.s.macros or name in self.s.symbols:
                raise _error(loc, f"macro name {name!r} is already in use")
            self.s.macros[name] = _Macro(params, self._collect_macro_body(lines, loc), loc)
        elif head == ".endm":
            raise _error(loc, ".endm without .macro")
        else:
            raise _error(loc, f"unknown directive {head!r}")

    def _sram(self, rest: str, loc: SourceLoc) -> None:
        parts = split_operands(rest)
        if len(parts) not in (2, 3) or not IDENTIFIER.match(parts[0]):
            raise _error(loc, ".sram expects NAME, size_bytes [, align_bytes]")
        size = self._eval_int(parts[1], loc, "SRAM region size")
        align = self._eval_int(parts[2], loc, "alignment") if len(parts) == 3 else DEFAULT_SRAM_ALIGN_BYTES
        if size < 0 or align <= 0:
            raise _error(loc, f"SRAM region {parts[0]} needs size >= 0 and alignment > 0")
        address = align_up(self.s.sram_next, align)
        if address + size > MAX_SRAM_BYTES:
            raise _error(loc, f"SRAM region {parts[0]} ends at byte {address + size:,}, beyond the "
                              f"{MAX_SRAM_BYTES:,} bytes a program's header holds")
        self._define(parts[0], "const", address, loc)
        self.s.sram_next = address + size
        self.s.regions.append(SramRegion(parts[0], address, size, loc))

    def _collect_macro_body(self, lines: Iterator[_Line], loc: SourceLoc) -> list[_Line]:
        body: list[_Line] = []
        for line in lines:
            head, _ = split_head(strip_comment(line.text))
            if head.lower() == ".endm":
                return body
            if head.lower() == ".macro":
                raise _error(line.loc, "macro definitions cannot nest")
            body.append(line)
        raise _error(loc, "unterminated .macro (no matching .endm)")

    def _expand(self, name: str, rest: str, loc: SourceLoc, depth: int) -> None:
        if depth >= _MAX_EXPANSION_DEPTH:
            raise _error(loc, f"macro {name} nests more than {_MAX_EXPANSION_DEPTH} deep (recursion?)")
        macro = self.s.macros[name]
        args = split_operands(rest)
        if len(args) != len(macro.params):
            raise _error(loc, f"macro {name} takes {len(macro.params)} argument(s), got {len(args)}")
        values = dict(zip(macro.params, args, strict=True))
        self.s.expansions += 1
        values["@"] = str(self.s.expansions)  # `\@` makes labels unique per expansion

        def substitute(line: _Line) -> _Line:
            def replace(match: re.Match[str]) -> str:
                key = match.group(1)
                if key not in values:
                    raise _error(line.loc, f"macro {name} has no parameter {key!r}")
                return values[key]

            body_loc = SourceLoc(line.loc.file, line.loc.line, loc.expansion + ((name, loc.file, loc.line),))
            return _Line(_MACRO_PARAM.sub(replace, line.text), body_loc)

        self.run_lines((substitute(line) for line in macro.body), depth + 1)

    def _include(self, name: str, loc: SourceLoc, depth: int) -> None:
        if depth >= _MAX_EXPANSION_DEPTH:
            raise _error(loc, f"includes nest more than {_MAX_EXPANSION_DEPTH} deep (recursion?)")
        here = Path(loc.file).parent if not loc.file.startswith("<") else Path.cwd()
        for directory in (here, *self.include_dirs):
            candidate = directory / name
            if candidate.is_file():
                self.s.included.append(str(candidate))
                self.run_lines(iter(read_lines(candidate)), depth + 1)
                return
        raise _error(loc, f"cannot find include file {name!r}")

    # ------------------------------------------------------------------ pass 2
    def _operand(self, spec: OperandSpec, text: str, loc: SourceLoc, mnemonic: str, used: set[str]) -> int:
        what = f"{mnemonic} operand {spec.name}"
        if spec.kind == "reg":
            number = parse_register(text, self.s.table.register_count)
            if number is None:
                symbol = self.s.symbols.get(text.strip())
                if symbol is None or symbol.kind != "reg":
                    raise _error(loc, f"{what} must be a register (r0..r{self.s.table.register_count - 1}), "
                                      f"got {text!r}")
                number = int(symbol.value)
            return number
        if spec.kind == "label":
            symbol = self.s.symbols.get(text.strip())
            if symbol is None:
                raise _error(loc, f"{what}: undefined label {text.strip()!r}")
            if symbol.kind != "label":
                raise _error(loc, f"{what}: {text.strip()!r} is not a label")
            return int(symbol.value)
        value = self._eval(text, loc, used)
        if spec.kind == "f32":
            return self._f32_bits(value, loc, what)
        if spec.kind == "enum" and isinstance(value, str):
            if value not in spec.enum_values:
                raise _error(loc, f"{what}: unknown {spec.kind_text} {value!r} "
                                  f"(one of {', '.join(spec.enum_values)})")
            return spec.enum_values.index(value)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise _error(loc, f"{what} must be an integer, got {value!r}")
        if not spec.minimum <= value <= spec.maximum:
            raise _error(loc, f"{what} = {value} is out of range for {spec.kind_text} "
                              f"({spec.minimum}..{spec.maximum})")
        return value

    @staticmethod
    def _f32_bits(value: object, loc: SourceLoc, what: str) -> int:
        if isinstance(value, F32Bits):
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _error(loc, f"{what} must be a number, got {value!r}")
        value = float(value)
        if np.isfinite(value) and abs(value) > _F32_MAX:
            raise _error(loc, f"{what} = {value} overflows fp32")
        return int(np.array(value, dtype=np.float32).view(np.uint32))

    def finish(self, source: str) -> Program:
        table = self.s.table
        if not self.s.pending:  # a PNM unit given no instruction would never halt
            raise ProgramError("the program holds no instructions (an empty or comment-only source)", file=source)
        unused = sorted(self.s.defines - self.s.declared)
        if unused:
            raise ProgramError(f"-D {', '.join(unused)}: not a parameter of this program "
                               f"(declare it with .default or use it)", file=source)
        limit = (1 << table.label_bits) - 1
        if len(self.s.pending) > limit:
            raise ProgramError(f"program has {len(self.s.pending)} instructions; at most {limit} fit",
                               file=source)
        region_names = {region.name: i for i, region in enumerate(self.s.regions)}
        first_use: dict[str, int] = {}
        instructions: list[Instruction] = []
        for pc, pending in enumerate(self.s.pending):
            spec = table.by_mnemonic[pending.mnemonic]
            if len(pending.operands) != len(spec.operands):
                names = ", ".join(op.name for op in spec.operands) or "no operands"
                raise _error(pending.loc, f"{spec.mnemonic} takes {len(spec.operands)} operand(s) "
                                          f"({names}), got {len(pending.operands)}")
            used: set[str] = set()
            try:
                values = tuple(self._operand(op, text, pending.loc, spec.mnemonic, used)
                               for op, text in zip(spec.operands, pending.operands, strict=True))
            except AsmSyntaxError as exc:
                raise _error(pending.loc, str(exc)) from None
            problem = check_operands(spec, values)
            if problem:  # defensive: _operand already range-checks
                raise _error(pending.loc, problem)
            for name in used & region_names.keys():
                first_use.setdefault(name, pc)
            instructions.append(Instruction(spec.mnemonic, values))
        locations = tuple(p.loc for p in self.s.pending)
        regions = tuple(SramRegion(r.name, r.address, r.size_bytes, r.loc, first_use.get(r.name))
                        for r in self.s.regions)
        constants = {k: v.value for k, v in self.s.symbols.items() if v.kind == "const"}
        program = Program(tuple(instructions), max(self.s.sram_next, self.s.sram_min), source=source,
                          locations=locations, sram_regions=regions, symbols=MappingProxyType(constants),
                          included=tuple(dict.fromkeys(self.s.included)))
        check_loops(program.instructions, table, program.error)
        return program


def read_lines(path: Path) -> list[_Line]:
    text = read_text_input(path, ProgramError, what="assembly source")
    return [_Line(line, SourceLoc(str(path), number)) for number, line in enumerate(text.splitlines(), 1)]


def assemble_text(text: str, *, filename: str = "<string>", defines: Mapping[str, object] | None = None,
                  include_dirs: tuple[Path | str, ...] = (), table: IsaTable | None = None) -> Program:
    """Assemble source text. `defines` are constants as if given with -D (int, float or word)."""
    assembler = _Assembler(table or load_table(), dict(defines or {}), tuple(Path(d) for d in include_dirs))
    lines = [_Line(line, SourceLoc(filename, number)) for number, line in enumerate(text.splitlines(), 1)]
    assembler.run_lines(iter(lines), 0)
    return assembler.finish(filename)


def assemble_file(path: Path | str, *, defines: Mapping[str, object] | None = None,
                  include_dirs: tuple[Path | str, ...] = (), table: IsaTable | None = None) -> Program:
    """Assemble a `.s` file; includes resolve relative to the including file, then include_dirs."""
    path = Path(path)
    assembler = _Assembler(table or load_table(), dict(defines or {}), tuple(Path(d) for d in include_dirs))
    assembler.run_lines(iter(read_lines(path)), 0)
    return assembler.finish(str(path))
