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
from numba.core import types as numba_types
from numba.core.registry import CPUDispatcher

from archsim.controller.codes import FLAT_ARRAYS
from archsim.jit import njit


def _constant(node: ast.expr) -> bool:
    """A literal, a module constant (the kernel's CAPITALIZED codes) or arithmetic of them: LLVM folds it, and its
    negative-index test with it."""
    if isinstance(node, ast.Constant) or (isinstance(node, ast.Name) and node.id.isupper()):
        return True
    return isinstance(node, ast.BinOp) and _constant(node.left) and _constant(node.right)


def _as_unsigned(index: ast.expr) -> ast.expr:
    """`index` cast to uint64, unless numba already folds it: a slice or a constant (`_constant`); a cast is a
    call numba types and lowers at every site (the generated `apply_command` indexes its gap table with constants
    at a hundred)."""
    if isinstance(index, ast.Slice) or _constant(index):
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

    def visit_Call(self, node: ast.Call) -> ast.expr:
        self.generic_visit(node)
        if (isinstance(node.func, ast.Name) and node.func.id in _SCALAR_CALLS and len(node.args) == 2
                and not node.keywords):
            node.func = ast.copy_location(ast.Name(id=_SCALAR_CALLS[node.func.id], ctx=ast.Load()), node.func)
        return node


# max(a, b) and min(a, b) of two scalars compile as calls of these (defined below): numba types a call of its
# builtin max through its overload machinery at every call site and every round of type inference, 2,000 times
# in the plain kernel; a plain function of two arguments types from its dispatcher's signatures
_SCALAR_CALLS = {"max": "_kernel_max2", "min": "_kernel_min2"}


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
    for scalar_call in _SCALAR_CALLS.values():  # the lowered code calls them by name in the function's module
        fn.__globals__.setdefault(scalar_call, globals()[scalar_call])
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


def _plain_type(arg: numba_types.Type) -> numba_types.Type:
    """A constant's type without its value, a narrow signed integer widened to int64 (a pseudo-channel read from
    an int32 array, say): a value-preserving widening that arithmetic with int64 does anyway."""
    arg = numba_types.unliteral(arg)
    if isinstance(arg, numba_types.Integer) and arg.signed and arg.bitwidth < 64:
        return numba_types.int64
    return arg


class _InlinedDispatcher(CPUDispatcher):
    """The dispatcher of a function compiled only to be inlined into the kernel, for its arguments' plain types
    (`_plain_type`), never for a constant's literal type. LLVM folds a constant argument into the inlined body
    anyway, so a version per literal (`earliest(ACT, ...)`, `earliest(RD, ...)`) or per integer width would only
    add compile time (23 of the plain kernel's 95 compiles were such versions)."""

    def get_call_template(self, args, kws):
        return super().get_call_template(tuple(_plain_type(a) for a in args),
                                         {k: _plain_type(v) for k, v in kws.items()})

    def __call__(self, *args, **kwargs):
        """A call from Python (tests call helpers so): through a twin compiled with the wrapper this one lacks."""
        if self._python_twin is None:
            self._python_twin = njit(error_model="numpy")(self.py_func)
        return self._python_twin(*args, **kwargs)


def _inlined(fn: Callable) -> _InlinedDispatcher:
    """`fn` compiled to be inlined into the kernel (LLVM's alwaysinline), with no wrapper to call it from Python:
    the wrappers took a third of the kernel's compile and nothing calls a stage or helper from Python. Never
    cached by itself (`kernel_helper`)."""
    dispatcher = _InlinedDispatcher(py_func=fn, locals={}, targetoptions={
        "nopython": True, "boundscheck": None, "forceinline": True, "error_model": "numpy",
        "no_cpython_wrapper": True, "no_cfunc_wrapper": True})
    dispatcher._python_twin = None
    return dispatcher


def kernel_helper(fn: Callable):
    """Decorator of the kernel's helpers: `fn` with its indexing lowered, compiled to be inlined into the kernel.
    Not cached by itself, as a stage: numba keys a function's cache entry to its own file's time stamp and its
    bytecode without the constants, so a helper whose lowering changed with a constant of `codes` (a table's row
    length) would load stale from its own entry into a new kernel; the kernel's entry holds it, under a name keyed
    on every source and constant it reaches (`source_digest`)."""
    _check_numpy(fn)
    return _inlined(deferred_lowering(fn))


def kernel_stage(fn: Callable, name: str | None = None, global_values: dict | None = None,
                 frozen: dict[str, int] | None = None):
    """Decorator of the kernel's stages: `fn` with its indexing lowered (under `name`, with `global_values` laid
    over its globals: a kernel variant's choice of stage), compiled as a function of its own. Not inlined by numba:
    type inference of one function that held every stage took 90 s cold; LLVM still inlines a stage into the loop
    after linking. Not cached by itself: the kernel's cache entry holds it, under a name keyed on every source it
    reaches (`source_digest`)."""
    _check_numpy(fn)
    return _inlined(deferred_lowering(fn, name, global_values, frozen))


def _max2(a, b):
    return b if b > a else a  # Python's max(a, b): the first of equals


def _min2(a, b):
    return b if b < a else a  # Python's min(a, b): the first of equals


_kernel_max2 = _inlined(_max2)
_kernel_min2 = _inlined(_min2)
