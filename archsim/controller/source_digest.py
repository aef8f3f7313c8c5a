"""A digest of every source a compiled kernel is built from, for the name its numba cache files carry.

numba invalidates a cached function when the file that defines it changes, not when a function it inlines does:
with the controller's helpers in other modules (and two of them generated from the timing rules), an edit to a
helper would silently load the old kernel from the cache. `compiled_kernel` therefore names each variant with
this digest: a changed helper, constant or generated source gives a new name, and so a compile instead of a
stale cache hit. It covers, transitively from the kernel: the source of every function it calls (numba
dispatchers, intrinsics, plain functions; generated ones through `linecache`), the value of every module-level
constant it reads, and the index lowering that rewrites them all before compiling.
"""

from __future__ import annotations

import hashlib
import inspect
import linecache
import types
from collections.abc import Callable

import numpy as np

_CONSTANT_TYPES = (bool, int, float, str, bytes, tuple, frozenset, np.generic)


def _names(code: types.CodeType) -> set[str]:
    """Global names read by `code` and the code objects nested in it (comprehensions, inner functions)."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _last_line(code: types.CodeType) -> int:
    """The last source line of `code` and the code objects nested in it."""
    last = max((end for _, end, _, _ in code.co_positions() if end is not None), default=code.co_firstlineno)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            last = max(last, _last_line(const))
    return last


def function_source(fn: Callable) -> str:
    """The source lines of `fn` from its `def` to the last line its code spans (its decorators left out: the
    index lowering drops them, and what they do is in `extra_modules`). Read through `linecache` by line number,
    which a generated function's pseudo-file has too: `inspect.getsource` tokenizes the file to find the end,
    1.5 ms a function, a fifth of a warm replay process for the kernel's 90."""
    code = fn.__code__
    linecache.checkcache(code.co_filename)  # a file edited since this process read it (a generated one is kept)
    lines = linecache.getlines(code.co_filename, fn.__globals__)
    first = code.co_firstlineno - 1
    while first < len(lines) and not lines[first].lstrip().startswith("def "):
        first += 1  # a decorator's line
    return "".join(lines[first:_last_line(code)])


def _python_function(value: object) -> Callable | None:
    """The Python function behind a numba dispatcher or intrinsic, or the value itself if it is a function."""
    for attribute in ("py_func", "_defn"):
        inner = getattr(value, attribute, None)
        if isinstance(inner, types.FunctionType):
            return inner
    return value if isinstance(value, types.FunctionType) else None


def inlined_sources(fn: Callable, global_values: dict | None = None) -> dict[str, str]:
    """Each function (by qualified name: its source) and module constant (by name: its repr) that compiling
    `fn` reads, transitively; `global_values` are laid over `fn`'s globals, as a kernel variant's constants."""
    found: dict[str, str] = {}
    pending: list[tuple[Callable, dict]] = [(fn, {**fn.__globals__, **(global_values or {})})]
    seen: set[int] = set()
    while pending:
        func, namespace = pending.pop()
        if id(func) in seen:
            continue
        seen.add(id(func))
        found[f"{func.__module__}.{func.__qualname__}"] = function_source(func)
        for name in sorted(_names(func.__code__)):
            if name not in namespace:
                continue  # a builtin
            value = namespace[name]
            inner = _python_function(value)
            if inner is not None:
                pending.append((inner, inner.__globals__))
            elif isinstance(value, np.ndarray):  # repr elides the middle of a large array: hash its bytes
                found[f"{func.__module__}:{name}"] = value.dtype.str + hashlib.sha256(value.tobytes()).hexdigest()
            elif isinstance(value, _CONSTANT_TYPES):
                found[f"{func.__module__}:{name}"] = repr(value)
    return found


def source_digest(fn: Callable, global_values: dict | None = None, extra_modules: tuple = ()) -> str:
    """12 hex digits of SHA-256 over `inlined_sources` and the whole source of `extra_modules` (those that
    transform the functions before they compile, such as the index lowering)."""
    h = hashlib.sha256()
    parts = inlined_sources(fn, global_values)
    for module in extra_modules:
        parts[f"module {module.__name__}"] = inspect.getsource(module)
    for key in sorted(parts):
        h.update(key.encode())
        h.update(b"\0")
        h.update(parts[key].encode())
        h.update(b"\0")
    return h.hexdigest()[:12]
