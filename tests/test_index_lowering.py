"""The kernel's compile-time lowering of array indexing (archsim.controller.index_lowering)."""

from __future__ import annotations

import ast
import inspect
import math
import textwrap

import numpy as np
import pytest
from numba import njit

from archsim.config.memory import memory_config_from_preset
from archsim.controller import bank_timing, kernel, request_lists
from archsim.controller.codes import BANK_COLUMNS, FLAT_ARRAYS, NCMD
from archsim.controller.index_lowering import (
    kernel_helper,
    kernel_stage,
    lower_pending,
    lowered_code,
    with_lowered_indexing,
)
from archsim.controller.records import KernelState
from archsim.memory import MemorySession, _kernel_state, mask_words

pytestmark = pytest.mark.unit

ROW = 1  # a module constant: left as it is, like the kernel's codes


def _gather(table, rows, first, last):
    total = 0
    for k in range(rows.shape[0]):
        total += table[rows[k], ROW] * 1000 + table[rows[k] + 1, 0]
    return total + table[0, first:last].sum()


def _bank_sum(bstate, banks, column):
    total = 0
    for k in range(banks.shape[0]):
        total += bstate[banks[k], column]
    bstate[banks[0], column] = -total
    return total


def test_the_rewrite_casts_computed_indices_only():
    rewritten = with_lowered_indexing(_gather)
    table = np.arange(40, dtype=np.int64).reshape(10, 4)
    rows = np.array([0, 3, 7], dtype=np.int64)
    # literal indices, module constants and slices stay as they are: same result in plain Python
    assert rewritten(table, rows, 1, 3) == _gather(table, rows, 1, 3)
    # a computed index is cast to uint64, which refuses a negative value in plain Python
    with pytest.raises(OverflowError):
        rewritten(table, np.array([-2], dtype=np.int64), 1, 3)
    assert "uint64" in lowered_code(_gather).co_names
    assert "uint64" not in _gather.__code__.co_names


@pytest.mark.slow
def test_compiled_with_lowered_indexing_it_computes_the_same():
    table = np.arange(40, dtype=np.int64).reshape(10, 4)
    rows = np.array([0, 3, 7, 8], dtype=np.int64)
    compiled = njit(with_lowered_indexing(_gather, "_gather_lowered"))
    assert compiled(table, rows, 0, 4) == _gather(table, rows, 0, 4)


@pytest.mark.parametrize("compile_it", [False, True])
def test_an_array_of_flat_rows_is_indexed_row_times_length_plus_column(compile_it):
    (row_length,) = FLAT_ARRAYS["bstate"]
    table = np.arange(6 * row_length, dtype=np.int64).reshape(6, row_length)
    banks = np.array([4, 1, 5], dtype=np.int64)
    lowered = with_lowered_indexing(_bank_sum, "_bank_sum_lowered")
    flat = table.copy().reshape(-1)
    expected = _bank_sum(table, banks, 3)
    assert (njit(lowered) if compile_it else lowered)(flat, banks, 3) == expected
    assert np.array_equal(flat.reshape(6, row_length), table)  # the store went to the same cell


def _gap_sum(gaps, level, cmds):
    total = 0
    for k in range(cmds.shape[0]):
        total += gaps[level, cmds[k], NCMD - 1] * 100 + gaps[level + 1, cmds[k], k]
    return total


def test_a_flat_array_of_three_dimensions_is_indexed_in_row_major_order():
    table = np.arange(5 * NCMD * NCMD, dtype=np.int64).reshape(5, NCMD, NCMD)
    cmds = np.array([0, 3, 8, 2], dtype=np.int64)
    lowered = njit(with_lowered_indexing(_gap_sum, "_gap_sum_lowered"))
    assert lowered(table.reshape(-1), 2, cmds) == _gap_sum(table, 2, cmds)


def _hit_words(hmask, pcs, kind, words):
    total = np.uint64(0)
    for k in range(pcs.shape[0]):
        for word in range(words):
            total ^= hmask[pcs[k], kind, word] << np.uint64(k)
    return total


@pytest.mark.parametrize("words", [1, 3])
def test_a_row_length_given_by_name_is_the_variable_of_that_name(words):
    assert FLAT_ARRAYS["hmask"] == (2, "words")
    masks = np.random.default_rng(words).integers(0, 2**63, (4, 2, words)).astype(np.uint64)
    pcs = np.array([3, 0, 2], dtype=np.int64)
    lowered = njit(with_lowered_indexing(_hit_words, "_hit_words_lowered"))
    for kind in range(2):
        assert lowered(masks.reshape(-1), pcs, kind, words) == _hit_words(masks, pcs, kind, words)


def _one_bank_row(bstate, gb):
    return bstate[gb]


def test_an_array_passed_flat_must_be_indexed_with_all_its_indices():
    with pytest.raises(TypeError, match=r"_one_bank_row, line \d+: bstate is passed flat .* 2 indices"):
        lowered_code(_one_bank_row)
    lowered_code(kernel._kernel)  # the kernel itself indexes every flat array in full


def _one_pc_row(st, pc):
    return st.pstate[pc]


def test_a_record_field_passed_flat_is_lowered_like_a_name():
    with pytest.raises(TypeError, match=r"_one_pc_row, line \d+: pstate is passed flat"):
        lowered_code(_one_pc_row)


def test_every_stage_is_compiled_with_lowered_indexing():
    """Each stage module's compiled functions come from their lowered source (unsigned indices)."""
    import importlib
    import pkgutil

    import archsim.controller as package

    stages = []
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        stages += [f for f in vars(module).values() if hasattr(f, "py_func") and f.py_func.__module__ == info.name
                   and info.name.split(".")[2] in ("stages", "schedulers", "row_policies", "arbiters")]
    assert len(stages) >= 40
    lower_pending()  # what numba's first compile does (a run that loads the kernel from its cache never lowers)
    for stage in stages:
        if _computes_an_index(stage.py_func):
            assert "uint64" in stage.py_func.__code__.co_names, stage.py_func.__qualname__


def test_the_rewrite_keeps_the_source_lines_and_the_variant_constants():
    lower_pending()
    code = lowered_code(bank_timing.act_bound.py_func)
    source_lines, first_line = inspect.getsourcelines(bank_timing.act_bound.py_func)
    assert code.co_filename == bank_timing.__file__
    assert code.co_firstlineno == first_line
    assert source_lines[0].startswith("def act_bound(")
    with open(bank_timing.__file__) as source:
        assert source.read().splitlines()[first_line - 1] == source_lines[0].rstrip("\n")
    # a generated helper keeps its own pseudo-file, whose lines are its generated source
    generated = bank_timing.earliest.py_func
    assert "generated earliest" in generated.__code__.co_filename
    assert inspect.getsource(generated) == bank_timing.earliest_source()

    def constant_reader():
        return GENERAL_VALUE  # noqa: F821 - supplied by the variant's constants

    rebuilt = with_lowered_indexing(constant_reader, "reader_variant", {"GENERAL_VALUE": 7})
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


def test_every_kernel_helper_is_compiled_with_lowered_indexing():
    helpers = [f for module in (bank_timing, request_lists) for f in vars(module).values()
               if hasattr(f, "py_func") and f.py_func.__module__ == module.__name__]
    assert len(helpers) >= 20
    indexing = [f for f in helpers if _computes_an_index(f.py_func)]
    assert len(indexing) >= 15
    lower_pending()
    for helper in indexing:
        assert "uint64" in helper.py_func.__code__.co_names, helper.py_func.__qualname__


@pytest.mark.parametrize("preset", ["HBM2", "HBM3"])
def test_the_kernel_gets_the_arrays_of_flat_rows_flat_and_the_others_as_built(preset):
    state, _ = _kernel_state(memory_config_from_preset(preset), 100)
    assert isinstance(state, KernelState)  # the stages read the arrays by field name (`st.bstate`)
    arrays = state._asdict()
    assert set(FLAT_ARRAYS) - {"gaps", "bank_mask"} <= set(arrays)
    cfg = memory_config_from_preset(preset)
    words = mask_words(cfg.organization.banks_per_pseudo_channel)
    for name, inner in FLAT_ARRAYS.items():
        if name not in ("gaps", "bank_mask"):  # an argument of its own; a helper's name for any bank mask
            row = math.prod({"words": words, "ports": 2}.get(length, length) for length in inner)
            assert arrays[name].ndim == 1 and arrays[name].size % row == 0, name
    assert arrays["bstate"].size == BANK_COLUMNS * cfg.organization.n_banks
    assert arrays["hmask"].size == cfg.organization.n_pseudo_channels * 2 * words
    assert arrays["rq"].ndim == 2  # rows of run-time length not named in FLAT_ARRAYS stay as they are
    session = MemorySession(cfg, np.zeros(1, dtype=np.uint64), np.zeros(1, dtype=np.uint8))
    assert session._gaps.shape == (5 * NCMD * NCMD,)


def test_a_helper_module_must_import_numpy_as_np():
    def no_numpy(a, i):
        return a[i]

    without_numpy = type(no_numpy)(no_numpy.__code__, {}, "no_numpy")
    with pytest.raises(TypeError, match="numpy as np"):
        kernel_helper(without_numpy)


def _halve(a, i):
    return a[i] // 2


def test_a_stage_keeps_its_source_code_until_numba_compiles_and_is_lowered_then():
    """Lowering waits for a compile (a run whose kernel numba's cache holds never lowers): the stage's code is
    its source's until a compile starts, and what compiles is the lowered code."""
    lower_pending()
    stage = kernel_stage(_halve, "_halve_stage")
    assert "uint64" not in stage.py_func.__code__.co_names  # not lowered yet

    @njit
    def caller(a):
        return stage(a, 3)

    assert caller(np.arange(8, dtype=np.int64)) == 1
    assert "uint64" in stage.py_func.__code__.co_names  # the compile lowered it first


def test_the_kernel_digest_is_the_same_before_and_after_lowering():
    from archsim.controller.source_digest import source_digest

    constants = kernel.variant_globals(kernel.KernelVariant())
    before = source_digest(kernel._kernel, constants)
    lower_pending()
    assert source_digest(kernel._kernel, constants) == before


def test_no_kernel_helper_or_stage_has_a_cache_entry_of_its_own():
    """Only the kernel is cached, under a name keyed on every source and constant it reaches: a helper cached by
    itself is keyed on its own file and bytecode, which do not change when a constant of `codes` changes its
    lowered indexing (a table's row length), and would load stale into a new kernel."""
    from numba.core.caching import NullCache

    functions = [f for module in (bank_timing, request_lists) for f in vars(module).values()
                 if hasattr(f, "py_func") and f.py_func.__module__ == module.__name__]
    functions += list(kernel.variant_globals(kernel.KernelVariant()).values())
    assert len(functions) >= 20
    for function in functions:
        assert isinstance(function._cache, NullCache), function.py_func.__qualname__
