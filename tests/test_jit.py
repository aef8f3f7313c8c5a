"""archsim.jit: numba's CPU target readied without SciPy's BLAS probe (SciPy stays importable), and a cache load of
archsim's code that starts only numba's runtime."""

import os
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


_LOAD = """
import sys
import numpy as np
import archsim.jit
from archsim.trace.text_formats import read_trace
trace = read_trace(sys.argv[1], "dramsim3", sort=False)
from archsim.trace.text_scan import scan
loaded = sum(scan.stats.cache_hits.values())
ready_after_load = archsim.jit._target_ready

from archsim.jit import njit

@njit(cache=False)
def total(a):
    return a.sum()

assert total(np.arange(5)) == 10  # a compile after a lean load readies the whole target
print(loaded, ready_after_load, archsim.jit._target_ready, int(trace.address.sum()), int(trace.timestamp_cycles[-1]),
      "scipy.linalg" in sys.modules)
"""


@pytest.mark.slow
def test_a_cache_load_starts_only_numbas_runtime_and_a_later_compile_readies_the_whole_target(tmp_path):
    trace = tmp_path / "t.trace"
    trace.write_text("".join(f"0x{64 * i:x} {'WRITE' if i % 3 == 0 else 'READ'} {2 * i}\n" for i in range(50)))
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    runs = [subprocess.run([sys.executable, "-c", _LOAD, str(trace)], capture_output=True, text=True, timeout=300,
                           env=env) for _ in range(2)]
    for done in runs:
        assert done.returncode == 0, done.stderr
    compiled, loaded = (done.stdout.split() for done in runs)
    address_sum, last_cycle = str(sum(64 * i for i in range(50))), "98"
    # the first process compiles (the whole target readied first), the second loads with the runtime alone
    assert compiled == ["0", "True", "True", address_sum, last_cycle, "False"]
    assert loaded == ["1", "False", "True", address_sum, last_cycle, "False"]
