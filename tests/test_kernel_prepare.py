"""A run compiles (or loads) only the kernel variant it needs, timed apart from the simulation."""

import json
import subprocess
import sys

import numpy as np
import pytest

from archsim.config.memory import memory_config_from_preset
from archsim.memory import Requests, kernel_params, kernel_variant, replay
from archsim.report.memory_stats import memory_stats
from tests.conftest import REPO

pytestmark = pytest.mark.component


@pytest.mark.slow
def test_a_replay_prepares_only_its_own_variant_and_reports_how():
    """Before, every process compiled the HBM2 preset's variant first, whatever it ran."""
    code = ("import json, numpy as np\n"
            "from archsim.config.memory import memory_config_from_preset\n"
            "from archsim.memory import Requests, replay, _PREPARED\n"
            "r = replay(memory_config_from_preset('HBM3'), Requests.build(np.array([0, 1]), np.array([0, 64]), "
            "np.array([0, 1])))\n"
            "print(json.dumps({'variants': [list(v) for v in _PREPARED], 'cache': r.kernel_cache, "
            "'compile_s': r.compile_s}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    hbm3 = kernel_variant(kernel_params(memory_config_from_preset("HBM3"), 0))
    assert report["variants"] == [list(hbm3)]
    assert report["cache"] in ("hit", "miss") and report["compile_s"] > 0


def test_a_second_run_in_the_process_reports_the_variant_as_loaded_and_stats_say_so():
    cfg = memory_config_from_preset("HBM2")
    requests = Requests.build(np.arange(200), np.arange(200, dtype=np.uint64) * 64, np.zeros(200))
    replay(cfg, requests)
    again = replay(cfg, requests)
    assert again.kernel_cache is None and again.compile_s == 0.0
    stats = memory_stats(again)
    assert stats["sim"]["kernel_cache"] == "loaded"
    assert memory_stats(again, reproducible=True)["sim"]["kernel_cache"] is None
    assert stats["sim"]["wall_s"] < 5.0  # the loop alone: no compile inside it
