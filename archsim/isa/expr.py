"""Constant expressions of the assembler: a whitelisted subset of Python expression syntax.

Allowed: int/float/str literals, names (constants, labels, enum members), + - * / // % **
<< >> & | ^ ~, comparisons, and/or/not, `a if c else b`, and calls of the functions the
assembler provides (min, max, cdiv, sqrt, ...). Evaluation never runs arbitrary code.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping

_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
    ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_, ast.BitXor: operator.xor,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert, ast.Not: operator.not_}
_COMPARE = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}
_BUILTIN_NAMES = {"inf": math.inf, "nan": math.nan, "True": True, "False": False}
_MAX_SHIFT_OR_POWER = 256  # keeps `2 ** 10**9` from hanging the assembler


class ExprError(Exception):
    """An expression does not parse, names an undefined symbol, or does not evaluate."""


class F32Bits(int):
    """An exact IEEE binary32 bit pattern (from `f32bits(0x...)`); f32 operands take it verbatim."""


def cdiv(a: int, b: int) -> int:
    """Ceiling division of integers."""
    return -(-a // b)


def align_up(value: int, alignment: int) -> int:
    return cdiv(value, alignment) * alignment


def ilog2(value: int) -> int:
    """Exact log2 of a power of two."""
    if value <= 0 or value & (value - 1):
        raise ValueError(f"ilog2({value}): not a power of two")
    return value.bit_length() - 1


def f32bits(bits: int) -> F32Bits:
    if not 0 <= bits < 1 << 32:
        raise ValueError("f32bits needs a 32-bit pattern")
    return F32Bits(bits)


BASE_FUNCTIONS: Mapping[str, Callable[..., object]] = {
    "min": min, "max": max, "abs": abs, "int": int, "float": float, "cdiv": cdiv,
    "align": align_up, "sqrt": math.sqrt, "log2": math.log2, "ilog2": ilog2, "f32bits": f32bits,
}


def evaluate(text: str, lookup: Callable[[str], object], functions: Mapping[str, Callable[..., object]],
             used: set[str] | None = None) -> object:
    """Value of `text`. `lookup(name)` raises KeyError for undefined names; names looked up are
    added to `used` (the assembler uses that to know which instructions touch an SRAM region)."""
    source = text.strip()
    if not source:
        raise ExprError("empty expression")
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"cannot parse expression {source!r}") from exc

    def is_defined(node: ast.AST) -> bool:
        if not isinstance(node, ast.Name):
            raise ExprError("defined() takes a bare name")
        try:
            lookup(node.id)
        except KeyError:
            return False
        return True

    def ev(node: ast.AST) -> object:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float | str):
            return node.value
        if isinstance(node, ast.Name):
            if used is not None:
                used.add(node.id)
            try:
                return lookup(node.id)
            except KeyError:
                if node.id in _BUILTIN_NAMES:
                    return _BUILTIN_NAMES[node.id]
                raise ExprError(f"undefined symbol {node.id!r}") from None
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = ev(node.left), ev(node.right)
            too_big = isinstance(right, int) and right > _MAX_SHIFT_OR_POWER
            if isinstance(node.op, ast.Pow | ast.LShift) and too_big:
                raise ExprError(f"exponent or shift {right} is too large")
            return _BINARY[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](ev(node.operand))
        if isinstance(node, ast.BoolOp):
            values = node.values
            if isinstance(node.op, ast.And):
                result = ev(values[0])
                for value in values[1:]:
                    result = result and ev(value)
                return result
            result = ev(values[0])
            for value in values[1:]:
                result = result or ev(value)
            return result
        if isinstance(node, ast.Compare):
            left = ev(node.left)
            for op, comparator in zip(node.ops, node.comparators, strict=True):
                if type(op) not in _COMPARE:
                    raise ExprError(f"operator {type(op).__name__} is not allowed")
                right = ev(comparator)
                if not _COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.IfExp):
            return ev(node.body) if ev(node.test) else ev(node.orelse)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            if node.func.id == "defined" and len(node.args) == 1:
                return is_defined(node.args[0])
            function = functions.get(node.func.id)
            if function is None:
                raise ExprError(f"unknown function {node.func.id!r}")
            return function(*(ev(arg) for arg in node.args))
        raise ExprError(f"{type(node).__name__} is not allowed in an expression")

    try:
        return ev(tree.body)
    except ExprError:
        raise
    except (ArithmeticError, ValueError, TypeError, OverflowError) as exc:
        raise ExprError(f"cannot evaluate {source!r}: {exc}") from exc
