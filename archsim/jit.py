"""numba's `njit`, with numba's CPU target made ready only as far as each process needs it.

A process that only loads compiled code from numba's cache needs numba's runtime (NRT) and nothing more, but
numba readies its whole CPU target before every cache load: it imports some forty modules of typing and lowering
support and installs their registries, 0.4 s of a warm `archsim replay` process on the 2-core machine (more than
numba's import). So a cache load of archsim's own functions starts the runtime only; the first compile of the
process (a cache miss) readies the whole target, as numba would.

When numba's CPU target readies it also imports `scipy.linalg.cython_blas`, if SciPy is installed, to learn whether
`np.correlate` and `np.convolve` may call BLAS (0.23 s). archsim's compiled code calls no BLAS routine, so the
probe is answered "no BLAS" while the target readies; SciPy stays importable afterwards, and `np.dot` in compiled
code would still import it when it is typed. Every module of archsim that compiles with numba takes `njit` from
here.
"""

from __future__ import annotations

import importlib.abc
import sys
from typing import Any

import numba
from numba import njit
from numba.core import caching
from numba.core import event as numba_event
from numba.core.registry import cpu_target
from numba.core.runtime import rtsys

# modules numba's CPU target imports only to support what archsim's compiled code never uses
_SKIPPED = ("scipy.linalg",)


class _SkipOptionalSupport(importlib.abc.MetaPathFinder):
    """Refuses the `_SKIPPED` packages and their submodules, as if they were not installed."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if any(name == skipped or name.startswith(skipped + ".") for skipped in _SKIPPED):
            raise ImportError(f"{name}: not loaded while numba's CPU target starts (archsim.jit)")
        return None


_target_ready = False


def _ready_cpu_target() -> None:
    """numba's whole CPU target, without the SciPy probe; once."""
    global _target_ready
    if _target_ready:
        return
    finder = _SkipOptionalSupport()
    sys.meta_path.insert(0, finder)
    try:
        cpu_target.target_context.refresh()
    finally:
        sys.meta_path.remove(finder)
    _target_ready = True


class _ReadyBeforeCompiling(numba_event.Listener):
    """Readies the whole target when a compile starts (numba's compiler refreshes it first thing)."""

    def on_start(self, event: numba_event.Event) -> None:
        _ready_cpu_target()

    def on_end(self, event: numba_event.Event) -> None:
        pass


_numba_load_overload = caching.Cache.load_overload


def _archsim_function(cache: Any) -> bool:
    module = getattr(getattr(cache, "_py_func", None), "__module__", "") or ""
    return module == "archsim" or module.startswith("archsim.")


def _load_overload(self: Any, sig: Any, target_context: Any) -> Any:
    """numba's `Cache.load_overload`, which refreshes the whole target first, with only the runtime started for
    archsim's functions: their cached code links against the runtime and numba's C helpers, nothing the
    registries add. Other packages' functions load as numba loads them."""
    if _target_ready or not _archsim_function(self):
        return _numba_load_overload(self, sig, target_context)
    rtsys.initialize(target_context)
    with self._guard_against_spurious_io_errors():
        return self._load_overload(sig, target_context)


# numba's cache internals this leans on; where a numba release changes them, loads refresh as numba does
if all(hasattr(caching.Cache, name) for name in ("_load_overload", "_guard_against_spurious_io_errors")):
    caching.Cache.load_overload = _load_overload
else:
    _ready_cpu_target()
numba_event.register("numba:compile", _ReadyBeforeCompiling())

__all__ = ["njit", "numba"]
