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

from numba.core import event as numba_event

from archsim.controller.codes import FLAT_ARRAYS
from archsim.jit import njit


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


def _check_numpy(fn: Callable) -> None:
    if "np" not in fn.__globals__:
        raise TypeError(f"{fn.__qualname__}: its module must import numpy as np for the unsigned index casts")


def lowered_code(fn: Callable, frozen: dict[str, int] | None = None) -> types.CodeType:
    """The code object of `fn` compiled from its source with its indexing lowered (decorators dropped; file name
    and line numbers kept, so errors and numba's cache point at the source)."""
    _check_numpy(fn)
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
    rebuilt = _rebuilt(fn, name, global_values)
    rebuilt.__code__ = lowered_code(fn, frozen)
    return rebuilt


def _rebuilt(fn: Callable, name: str | None, global_values: dict | None) -> types.FunctionType:
    namespace = fn.__globals__ if global_values is None else {**fn.__globals__, **global_values}
    rebuilt = types.FunctionType(fn.__code__, namespace, name or fn.__name__, fn.__defaults__)
    rebuilt.__qualname__ = name or fn.__qualname__
    rebuilt.__doc__ = fn.__doc__
    rebuilt.__module__ = fn.__module__
    return rebuilt


# Functions whose code is still their source's, each with the function its source is read from and its frozen
# slots. Lowering parses and rewrites the source, 0.3 s for the kernel's 130 functions, which a run that loads
# the kernel from numba's cache never needs: so a function is lowered when numba first compiles anything after it
# was made (`_LowerBeforeCompiling`), and a run whose kernel numba's cache holds never lowers it.
_PENDING: list[tuple[types.FunctionType, Callable, dict[str, int] | None]] = []


def deferred_lowering(fn: Callable, name: str | None = None, global_values: dict | None = None,
              frozen: dict[str, int] | None = None) -> types.FunctionType:
    """`with_lowered_indexing(fn, ...)` with its code lowered only just before numba next compiles anything
    (`lower_pending`)."""
    rebuilt = _rebuilt(fn, name, global_values)
    _PENDING.append((rebuilt, fn, frozen))
    return rebuilt


def lower_pending() -> int:
    """Lower the code of every function still waiting (see `_PENDING`); how many were."""
    count = len(_PENDING)
    while _PENDING:
        rebuilt, source_fn, frozen = _PENDING.pop()
        rebuilt.__code__ = lowered_code(source_fn, frozen)
    return count


class _LowerBeforeCompiling(numba_event.Listener):
    """Lowers the waiting functions when a numba compile starts, that is after a cache miss: the compile reads a
    function's bytecode only then (and a stage's compile starts within the kernel's)."""

    def on_start(self, event: numba_event.Event) -> None:
        if _PENDING:
            lower_pending()

    def on_end(self, event: numba_event.Event) -> None:
        pass


numba_event.register("numba:compile", _LowerBeforeCompiling())


def kernel_helper(fn: Callable, cache: bool = True):
    """Decorator of the kernel's helpers: `fn` with its indexing lowered, compiled to be inlined into the kernel."""
    _check_numpy(fn)
    return njit(cache=cache, forceinline=True, error_model="numpy")(deferred_lowering(fn))


def kernel_stage(fn: Callable, name: str | None = None, global_values: dict | None = None,
                 frozen: dict[str, int] | None = None):
    """Decorator of the kernel's stages: `fn` with its indexing lowered (under `name`, with `global_values` laid
    over its globals: a kernel variant's choice of stage), compiled as a function of its own. Not inlined by numba:
    type inference of one function that held every stage took 90 s cold; LLVM still inlines a stage into the loop
    after linking. Not cached by itself: the kernel's cache entry holds it, under a name keyed on every source it
    reaches (`source_digest`)."""
    _check_numpy(fn)
    return njit(cache=False, forceinline=True, error_model="numpy")(deferred_lowering(fn, name, global_values, frozen))
