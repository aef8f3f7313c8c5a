"""numba's `njit`, with numba's CPU target made ready once, without the SciPy BLAS probe.

When numba's CPU target first loads (at the first compile or cache load of a process) it imports
`scipy.linalg.cython_blas`, if SciPy is installed, to learn whether `np.correlate` and `np.convolve` may call BLAS.
That import takes 0.23 s of the 0.42 s numba needs before its first cached call on the 2-core machine, a third of a
warm `archsim replay` process. archsim's compiled code calls no BLAS routine, so the probe is answered "no BLAS"
while the target loads; SciPy stays importable afterwards, and `np.dot` in compiled code would still import it
when it is typed. Every module of archsim that compiles with numba takes `njit` from here.
"""

from __future__ import annotations

import importlib.abc
import sys

import numba
from numba import njit
from numba.core.registry import cpu_target

# modules numba's CPU target imports only to support what archsim's compiled code never uses
_SKIPPED = ("scipy.linalg",)


class _SkipOptionalSupport(importlib.abc.MetaPathFinder):
    """Refuses the `_SKIPPED` packages and their submodules, as if they were not installed."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if any(name == skipped or name.startswith(skipped + ".") for skipped in _SKIPPED):
            raise ImportError(f"{name}: not loaded while numba's CPU target starts (archsim.jit)")
        return None


def _ready_cpu_target() -> None:
    finder = _SkipOptionalSupport()
    sys.meta_path.insert(0, finder)
    try:
        cpu_target.target_context.refresh()
    finally:
        sys.meta_path.remove(finder)


_ready_cpu_target()

__all__ = ["njit", "numba"]
