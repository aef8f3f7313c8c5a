"""archsim.jit readies numba's CPU target without SciPy's BLAS probe, and leaves SciPy importable."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

_PROBE = """
import sys
import numpy as np
import archsim.jit
from archsim.jit import njit
assert "scipy.linalg" not in sys.modules, "the probe ran"

@njit(cache=False)
def total(a):
    return a.sum()

assert total(np.arange(5)) == 10
import scipy.linalg  # importable afterwards
assert not any(type(f).__name__ == "_SkipOptionalSupport" for f in sys.meta_path)
print("ok")
"""


@pytest.mark.slow
def test_the_cpu_target_starts_without_the_scipy_probe_and_scipy_stays_importable():
    pytest.importorskip("scipy.linalg")
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
