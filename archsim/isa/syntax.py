"""Lexical helpers of the assembly language: comments, labels, operand lists, registers.

Syntax summary (see isa/README.md):  `label:`  `MNEMONIC op, op, ...`  `.directive args`;
comments start with `;` or `#` outside quotes; operands are separated by top-level commas.
"""

from __future__ import annotations

import math
import re

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LABEL = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*:(?!=)(.*)$")
_REGISTER = re.compile(r"^[rR](\d+)$")
_HEAD = re.compile(r"^(\S+)\s*(.*)$")


class AsmSyntaxError(Exception):
    """A line is malformed; the assembler adds file and line."""


def strip_comment(text: str) -> str:
    """`text` without its comment (`;` or `#` outside single or double quotes)."""
    quote = ""
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in ";#":
            return text[:i].rstrip()
    if quote:
        raise AsmSyntaxError("unterminated string")
    return text.rstrip()


def split_label(text: str) -> tuple[str | None, str]:
    """(label, rest) if the line starts with `name:`, else (None, text)."""
    match = _LABEL.match(text)
    if match:
        return match.group(1), match.group(2).strip()
    return None, text


def split_head(text: str) -> tuple[str, str]:
    """The first word (mnemonic, directive or macro name) and the rest of the line."""
    match = _HEAD.match(text.strip())
    if not match:
        return "", ""
    return match.group(1), match.group(2).strip()


def split_operands(text: str) -> list[str]:
    """Split on commas outside parentheses and quotes; an empty text has no operands."""
    if not text.strip():
        return []
    parts: list[str] = []
    depth, quote, start = 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise AsmSyntaxError(f"unbalanced ')' in {text.strip()!r}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if depth:
        raise AsmSyntaxError(f"unbalanced '(' in {text.strip()!r}")
    parts.append(text[start:].strip())
    if any(not part for part in parts):
        raise AsmSyntaxError(f"empty operand in {text.strip()!r}")
    return parts


def parse_register(text: str, register_count: int) -> int | None:
    """Register number of `rN`, None if `text` is not register syntax; out-of-range is an error."""
    match = _REGISTER.match(text.strip())
    if not match:
        return None
    number = int(match.group(1))
    if number >= register_count:
        raise AsmSyntaxError(f"register {text.strip()} does not exist (r0..r{register_count - 1})")
    return number


def parse_string(text: str) -> str:
    """The contents of a double- or single-quoted string literal."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    raise AsmSyntaxError(f"expected a quoted string, got {text!r}")


def parse_define(text: str) -> tuple[str, object]:
    """`NAME=VALUE` from the command line: VALUE is an int (0x.. ok), a float, or a bare word."""
    name, sep, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not IDENTIFIER.match(name) or not value:
        raise AsmSyntaxError(f"-D expects NAME=VALUE, got {text!r}")
    try:
        return name, parse_value(value)
    except AsmSyntaxError as exc:
        raise AsmSyntaxError(f"-D {name}: {exc}") from None


def parse_defines(values: tuple[str, ...]) -> dict[str, object]:
    """Every `-D NAME=VALUE` of a command line; a name given twice is an error."""
    defines: dict[str, object] = {}
    for text in values:
        name, value = parse_define(text)
        if name in defines:
            raise AsmSyntaxError(f"-D {name} is given twice")
        defines[name] = value
    return defines


def parse_value(value: str) -> object:
    try:
        return int(value, 0)
    except ValueError:
        pass
    try:
        number = float(value)
    except ValueError:
        pass
    else:
        if not math.isfinite(number):
            raise AsmSyntaxError(f"define value {value!r} is not a finite number")
        return number
    if IDENTIFIER.match(value):
        return value
    raise AsmSyntaxError(f"cannot read define value {value!r} (a number or a bare word)")
