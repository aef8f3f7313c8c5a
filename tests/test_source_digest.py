"""The kernel's cache name carries a digest of every source it inlines: an edited helper must change it."""

import importlib
import sys
import textwrap

import pytest

from archsim.controller import index_lowering, kernel
from archsim.controller.source_digest import inlined_sources, source_digest

pytestmark = pytest.mark.unit


def _write_modules(tmp_path, helper_body: str, limit: int) -> None:
    (tmp_path / "golden_helpers_mod.py").write_text(textwrap.dedent(f"""
        from numba import njit

        LIMIT = {limit}

        @njit(inline="always")
        def helper(x):
            {helper_body}
        """))
    (tmp_path / "golden_kernel_mod.py").write_text(textwrap.dedent("""
        from numba import njit
        from golden_helpers_mod import LIMIT, helper

        def kernel(x):
            return min(helper(x), LIMIT)
        """))


def _digest_of_fresh_modules(tmp_path, monkeypatch, helper_body: str, limit: int) -> str:
    # no bytecode: a rewrite within the same second and of the same size would load the stale .pyc
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    _write_modules(tmp_path, helper_body, limit)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("golden_kernel_mod", "golden_helpers_mod"):
        sys.modules.pop(name, None)
    importlib.invalidate_caches()
    return source_digest(importlib.import_module("golden_kernel_mod").kernel)


def test_an_edit_to_an_inlined_helper_or_constant_in_another_module_changes_the_digest(tmp_path, monkeypatch):
    base = _digest_of_fresh_modules(tmp_path, monkeypatch, "return x + 1", 10)
    assert _digest_of_fresh_modules(tmp_path, monkeypatch, "return x + 1", 10) == base
    assert _digest_of_fresh_modules(tmp_path, monkeypatch, "return x + 2", 10) != base
    assert _digest_of_fresh_modules(tmp_path, monkeypatch, "return x + 1", 11) != base


def test_the_kernel_digest_covers_every_stage_and_helper_module_and_the_generated_helpers():
    sources = inlined_sources(kernel._kernel, kernel.variant_globals(kernel.KernelVariant()))
    modules = {key.rsplit(".", 1)[0] for key in sources if ":" not in key}
    reached = {"archsim.controller.kernel", "archsim.controller.bank_timing", "archsim.controller.request_lists",
               "archsim.controller.stages.injection", "archsim.controller.stages.write_drain",
               "archsim.controller.stages.bank_queues", "archsim.controller.stages.refresh",
               "archsim.controller.stages.scheduling", "archsim.controller.stages.buses",
               "archsim.controller.stages.command_issue", "archsim.controller.stages.wakeup",
               "archsim.controller.schedulers", "archsim.controller.schedulers.frfcfs",
               "archsim.controller.schedulers.fcfs", "archsim.controller.schedulers.round_robin",
               "archsim.controller.schedulers.activations", "archsim.controller.arbiters",
               "archsim.controller.arbiters.wrr",
               "archsim.controller.arbiters.reservation", "archsim.controller.row_policies.closed",
               "archsim.controller.row_policies.open_cap", "archsim.controller.row_policies.timeout"}
    assert reached <= modules, reached - modules
    # the two helpers generated from the timing rules are covered by their generated source
    assert "gaps[" in sources["archsim.controller.bank_timing.apply_command"]
    assert "archsim.controller.bank_timing.earliest" in sources
    assert sources["archsim.controller.kernel:INF"] == repr(kernel.INF)  # constants by value


def test_each_variant_has_its_own_digest_and_the_lowering_counts():
    from archsim.controller.schedulers import register_scheduler
    from tests import bank_order_scheduler

    general = kernel.variant_globals(kernel.KernelVariant())
    code = register_scheduler("bank_order", bank_order_scheduler.choose)
    other = kernel.variant_globals(kernel.KernelVariant(scheduler=code))
    plain = kernel.variant_globals(kernel.KernelVariant(-1, 2, 2, 1))
    digest = source_digest(kernel._kernel, general, (index_lowering,))
    assert source_digest(kernel._kernel, other, (index_lowering,)) != digest
    assert kernel.compiled_kernel(kernel.KernelVariant(-1, 2, 2, 1)).py_func.__name__.startswith("_kernel_plain_2pc")
    assert plain["visit"].py_func.__name__ != general["visit"].py_func.__name__
    assert source_digest(kernel._kernel, general) != digest
    assert len(digest) == 12 and int(digest, 16) >= 0


def test_the_kernel_digest_covers_the_codes_module_whose_row_lengths_the_lowering_bakes_in(monkeypatch):
    """No kernel function names FLAT_ARRAYS, yet the lowering compiles its row lengths into them: a change there
    alone must compile anew, so the name's digest covers controller/codes.py whole."""
    import inspect

    from archsim.controller import codes

    constants = kernel.variant_globals(kernel.KernelVariant())
    modules = (kernel.index_lowering, codes, sys.modules[kernel.__name__])
    before = source_digest(kernel._kernel, constants, extra_modules=modules)
    real = inspect.getsource
    monkeypatch.setattr(inspect, "getsource",
                        lambda obj: real(obj).replace('"pport": ("ports", PP_COLUMNS)', '"pport": ("ports", 6)')
                        if obj is codes else real(obj))
    assert source_digest(kernel._kernel, constants, extra_modules=modules) != before
    assert kernel._variant.__wrapped__(kernel.KernelVariant())[1] != kernel._variant(kernel.KernelVariant())[1]
