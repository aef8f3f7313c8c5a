"""The controller kernel's functions compiled from their source with their array indexing lowered.

Two lowerings, both for the sake of the kernel's live values (the loop keeps far more than the registers hold, so
each one it drops saves reloads from the stack):

* **Unsigned indices.** Numba indexes an array with a signed integer as Python does: a negative index counts
  from the end. So each access with a computed index carries a compare and a select on the array's length, and
  the lengths stay live. No index in the kernel counts from an end (each is a bank, request, pseudo-channel or
  command number), so each computed index is cast to uint64, which numba uses as it is.
* **Flat arrays of constant row length.** A two-dimensional array's row step is its run-time width, one more
  live value and a multiply per access. The arrays named in `codes.FLAT_ARRAYS` (the bank table, the
  earliest-issue times, the gap table, ...) reach the kernel flat; `name[row, column]` in the source compiles as
  `name[row * length + column]`, the length a constant (likewise with three indices). A length given by name
  (the bank masks' `words`) is the variable of that name, a constant in a kernel compiled for its shape.

Measured on HBM2 random reads (200 k requests): unsigned indices 3,531 -> 2,816 instructions per request and
about 1.1x the speed; flat rows about 1.1x more (see docs/memory.md, speed).

The source stays plain Python indexing; the rewrite happens when a function is compiled. In these functions a
negative index would read outside the array instead of from its end, and an array of `FLAT_ARRAYS` must be
passed flat under that name and indexed with all its indices (the rewrite refuses fewer).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from collections.abc import Callable

from numba import njit

from archsim.controller.codes import FLAT_ARRAYS


def _as_unsigned(index: ast.expr) -> ast.expr:
    """`index` cast to uint64, unless numba already folds it: a slice, a literal, or a module constant (the
    kernel's CAPITALIZED codes)."""
    if isinstance(index, (ast.Slice, ast.Constant)) or (isinstance(index, ast.Name) and index.id.isupper()):
        return index
    cast = ast.Attribute(value=ast.Name(id="np", ctx=ast.Load()), attr="uint64", ctx=ast.Load())
    return ast.copy_location(ast.Call(func=cast, args=[index], keywords=[]), index)


class _LowerIndexing(ast.NodeTransformer):
    def __init__(self, function_name: str, frozen: dict[str, int] | None = None) -> None:
        self.function_name = function_name
        self.frozen = frozen or {}

    def visit_Subscript(self, node: ast.Subscript) -> ast.expr:
        self.generic_visit(node)
        if (isinstance(node.value, ast.Name) and node.value.id == "prm" and isinstance(node.slice, ast.Name)
                and node.slice.id in self.frozen):
            return ast.copy_location(ast.Constant(self.frozen[node.slice.id]), node)  # a specialized variant
        # the array by its name, or by a record's field of that name (`st.pstate`: `records.KernelState`)
        array = (node.value.id if isinstance(node.value, ast.Name) else
                 node.value.attr if isinstance(node.value, ast.Attribute) else None)
        inner = FLAT_ARRAYS.get(array) if array is not None else None
        if inner is not None:
            if not (isinstance(node.slice, ast.Tuple) and len(node.slice.elts) == len(inner) + 1):
                # a row of a flat array is no array: taken as one cell, it would read or write the wrong place
                raise TypeError(f"{self.function_name}, line {node.lineno}: {array} is passed flat "
                                f"(codes.FLAT_ARRAYS) and must be indexed with {len(inner) + 1} indices")
            flat = node.slice.elts[0]
            for length, index in zip(inner, node.slice.elts[1:], strict=True):
                step = ast.Constant(length) if isinstance(length, int) else ast.Name(id=length, ctx=ast.Load())
                flat = ast.BinOp(left=ast.BinOp(left=flat, op=ast.Mult(), right=step), op=ast.Add(), right=index)
            node.slice = _as_unsigned(ast.copy_location(flat, node.slice.elts[0]))
        elif isinstance(node.slice, ast.Tuple):
            node.slice.elts = [_as_unsigned(e) for e in node.slice.elts]
        else:
            node.slice = _as_unsigned(node.slice)
        return node


def lowered_code(fn: Callable, frozen: dict[str, int] | None = None) -> types.CodeType:
    """The code object of `fn` compiled from its source with its indexing lowered (decorators dropped; file name
    and line numbers kept, so errors and numba's cache point at the source)."""
    if "np" not in fn.__globals__:
        raise TypeError(f"{fn.__qualname__}: its module must import numpy as np for the unsigned index casts")
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    definition = tree.body[0]
    source_name = fn.__code__.co_name  # the name in the source, also for a function rebuilt under another
    assert isinstance(definition, ast.FunctionDef) and definition.name == source_name
    definition.decorator_list = []
    ast.increment_lineno(tree, fn.__code__.co_firstlineno - 1)
    _LowerIndexing(fn.__qualname__, frozen).visit(definition)
    ast.fix_missing_locations(tree)
    module_code = compile(tree, fn.__code__.co_filename, "exec")
    return next(c for c in module_code.co_consts if isinstance(c, types.CodeType) and c.co_name == source_name)


def with_lowered_indexing(fn: Callable, name: str | None = None, global_values: dict | None = None,
                          frozen: dict[str, int] | None = None) -> types.FunctionType:
    """`fn` rebuilt from `lowered_code`, under `name` and with `global_values` laid over its module's globals
    (a kernel variant's constants); `frozen` parameter slots (`prm[P_X]`, by the slot's name) read as constants."""
    namespace = fn.__globals__ if global_values is None else {**fn.__globals__, **global_values}
    rebuilt = types.FunctionType(lowered_code(fn, frozen), namespace, name or fn.__name__, fn.__defaults__)
    rebuilt.__qualname__ = name or fn.__qualname__
    rebuilt.__doc__ = fn.__doc__
    rebuilt.__module__ = fn.__module__
    return rebuilt


def kernel_helper(fn: Callable, cache: bool = True):
    """Decorator of the kernel's helpers: `fn` with its indexing lowered, compiled to be inlined into the kernel."""
    return njit(cache=cache, forceinline=True, error_model="numpy")(with_lowered_indexing(fn))


def kernel_stage(fn: Callable, name: str | None = None, global_values: dict | None = None,
                 frozen: dict[str, int] | None = None):
    """Decorator of the kernel's stages: `fn` with its indexing lowered (under `name`, with `global_values` laid
    over its globals: a kernel variant's choice of stage), compiled as a function of its own. Not inlined by numba:
    type inference of one function that held every stage took 90 s cold; LLVM still inlines a stage into the loop
    after linking. Not cached by itself: the kernel's cache entry holds it, under a name keyed on every source it
    reaches (`source_digest`)."""
    return njit(cache=False, forceinline=True, error_model="numpy")(
        with_lowered_indexing(fn, name, global_values, frozen))
