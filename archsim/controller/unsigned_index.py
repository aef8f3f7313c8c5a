"""The controller kernel's functions compiled with their array indices taken as unsigned integers.

Numba indexes an array with a signed integer as Python does: a negative index counts from the end. So every
access with a computed index carries a compare and a select on the array's length in that dimension, and the
lengths of the arrays stay live values of the loop. The kernel never counts from the end (each index is a bank,
request, pseudo-channel or command number), so its functions are compiled from their source with each computed
index cast to uint64, which numba uses as it is. On HBM2 random reads that is 20 % fewer instructions per
request (3,531 -> 2,816) and about 1.1x the speed.

The source stays plain Python indexing; the rewrite happens when the function is compiled. A negative index in
these functions would read outside the array instead of from its end.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from collections.abc import Callable

from numba import njit


def _as_unsigned(index: ast.expr) -> ast.expr:
    """`index` cast to uint64, unless numba already folds it: a slice, a literal, or a module constant (the
    kernel's CAPITALIZED codes)."""
    if isinstance(index, (ast.Slice, ast.Constant)) or (isinstance(index, ast.Name) and index.id.isupper()):
        return index
    cast = ast.Attribute(value=ast.Name(id="np", ctx=ast.Load()), attr="uint64", ctx=ast.Load())
    return ast.copy_location(ast.Call(func=cast, args=[index], keywords=[]), index)


class _UnsignedIndices(ast.NodeTransformer):
    def visit_Subscript(self, node: ast.Subscript) -> ast.Subscript:
        self.generic_visit(node)
        if isinstance(node.slice, ast.Tuple):
            node.slice.elts = [_as_unsigned(e) for e in node.slice.elts]
        else:
            node.slice = _as_unsigned(node.slice)
        return node


def unsigned_index_code(fn: Callable) -> types.CodeType:
    """The code object of `fn` compiled from its source with every computed array index cast to uint64
    (decorators dropped; file name and line numbers kept, so errors and numba's cache point at the source)."""
    if "np" not in fn.__globals__:
        raise TypeError(f"{fn.__qualname__}: its module must import numpy as np for the unsigned index casts")
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    definition = tree.body[0]
    assert isinstance(definition, ast.FunctionDef) and definition.name == fn.__name__
    definition.decorator_list = []
    _UnsignedIndices().visit(definition)
    ast.fix_missing_locations(tree)
    ast.increment_lineno(tree, fn.__code__.co_firstlineno - 1)
    module_code = compile(tree, fn.__code__.co_filename, "exec")
    return next(c for c in module_code.co_consts if isinstance(c, types.CodeType) and c.co_name == fn.__name__)


def with_unsigned_indices(fn: Callable, name: str | None = None,
                          global_values: dict | None = None) -> types.FunctionType:
    """`fn` rebuilt from `unsigned_index_code`, under `name` and with `global_values` laid over its module's
    globals (a kernel variant's constants)."""
    namespace = fn.__globals__ if global_values is None else {**fn.__globals__, **global_values}
    rebuilt = types.FunctionType(unsigned_index_code(fn), namespace, name or fn.__name__, fn.__defaults__)
    rebuilt.__qualname__ = name or fn.__qualname__
    rebuilt.__doc__ = fn.__doc__
    rebuilt.__module__ = fn.__module__
    return rebuilt


def kernel_helper(fn: Callable):
    """Decorator of the kernel's helpers: `fn` with unsigned indices, compiled to be inlined into the kernel."""
    return njit(cache=True, inline="always", error_model="numpy")(with_unsigned_indices(fn))
