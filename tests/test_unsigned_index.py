"""The kernel's compile-time rewrite of array indices to unsigned integers (archsim.controller.unsigned_index)."""

from __future__ import annotations

import ast
import inspect
import textwrap

import numpy as np
import pytest
from numba import njit

from archsim.controller import bank_timing, request_lists
from archsim.controller.unsigned_index import kernel_helper, unsigned_index_code, with_unsigned_indices

ROW = 1  # a module constant: left as it is, like the kernel's codes


def _gather(table, rows, first, last):
    total = 0
    for k in range(rows.shape[0]):
        total += table[rows[k], ROW] * 1000 + table[rows[k] + 1, 0]
    return total + table[0, first:last].sum()


def test_the_rewrite_casts_computed_indices_only():
    rewritten = with_unsigned_indices(_gather)
    table = np.arange(40, dtype=np.int64).reshape(10, 4)
    rows = np.array([0, 3, 7], dtype=np.int64)
    # literal indices, module constants and slices stay as they are: same result in plain Python
    assert rewritten(table, rows, 1, 3) == _gather(table, rows, 1, 3)
    # a computed index is cast to uint64, which refuses a negative value in plain Python
    with pytest.raises(OverflowError):
        rewritten(table, np.array([-2], dtype=np.int64), 1, 3)
    assert "uint64" in unsigned_index_code(_gather).co_names
    assert "uint64" not in _gather.__code__.co_names


def test_compiled_with_unsigned_indices_it_computes_the_same():
    table = np.arange(40, dtype=np.int64).reshape(10, 4)
    rows = np.array([0, 3, 7, 8], dtype=np.int64)
    compiled = njit(with_unsigned_indices(_gather, "_gather_unsigned"))
    assert compiled(table, rows, 0, 4) == _gather(table, rows, 0, 4)


def test_the_rewrite_keeps_the_source_lines_and_the_variant_constants():
    code = unsigned_index_code(bank_timing.earliest.py_func)
    source_lines, first_line = inspect.getsourcelines(bank_timing.earliest.py_func)
    assert code.co_filename == bank_timing.__file__
    assert code.co_firstlineno == first_line
    assert source_lines[0].startswith("def earliest(")
    with open(bank_timing.__file__) as source:
        assert source.read().splitlines()[first_line - 1] == source_lines[0].rstrip("\n")

    def constant_reader():
        return GENERAL_VALUE  # noqa: F821 - supplied by the variant's constants

    rebuilt = with_unsigned_indices(constant_reader, "reader_variant", {"GENERAL_VALUE": 7})
    assert rebuilt() == 7 and rebuilt.__name__ == "reader_variant"


def _computes_an_index(fn) -> bool:
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if any(isinstance(p, (ast.Name, ast.BinOp, ast.Subscript)) and not getattr(p, "id", "a").isupper()
                   for p in parts):
                return True
    return False


def test_every_kernel_helper_is_compiled_with_unsigned_indices():
    helpers = [f for module in (bank_timing, request_lists) for f in vars(module).values()
               if hasattr(f, "py_func") and f.py_func.__module__ == module.__name__]
    assert len(helpers) >= 20
    indexing = [f for f in helpers if _computes_an_index(f.py_func)]
    assert len(indexing) >= 15
    for helper in indexing:
        assert "uint64" in helper.py_func.__code__.co_names, helper.py_func.__qualname__


def test_a_helper_module_must_import_numpy_as_np():
    def no_numpy(a, i):
        return a[i]

    without_numpy = type(no_numpy)(no_numpy.__code__, {}, "no_numpy")
    with pytest.raises(TypeError, match="numpy as np"):
        kernel_helper(without_numpy)
