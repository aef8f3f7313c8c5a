"""Shared helpers: configs from presets, small request streams, and running the CLI in-process."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from _pytest.mark.structures import ParameterSet

from archsim.config.memory import MemoryConfig, memory_config_from_preset
from archsim.memory import ReplayResult, Requests, replay

REPO = Path(__file__).resolve().parent.parent
# decode-step results stored for this session only (archsim.step_store): tests neither read nor fill the user's
os.environ["ARCHSIM_CACHE_DIR"] = _STORE = tempfile.mkdtemp(prefix="archsim-test-store-")
atexit.register(shutil.rmtree, _STORE, True)
PRESETS = ("HBM2", "HBM3", "HBM3E")
# DRAMSim3's HBM2 .ini, shipped with its MIT licence (tests/data/dramsim3/LICENSE)
DRAMSIM3_INI = REPO / "tests" / "data" / "dramsim3" / "HBM2_8Gb_x128.ini"


def config(preset: str, *overrides: str) -> MemoryConfig:
    return memory_config_from_preset(preset, list(overrides))


def run(cfg: MemoryConfig, timestamp_cycles, address, is_write=None, **kwargs) -> ReplayResult:
    address = np.asarray(address, dtype=np.uint64)
    writes = np.zeros(len(address), dtype=np.uint8) if is_write is None else np.asarray(is_write, dtype=np.uint8)
    return replay(cfg, Requests.build(np.asarray(timestamp_cycles, dtype=np.int64), address, writes), **kwargs)


@pytest.fixture(scope="session")
def dramsim3_ini() -> Path:
    if not DRAMSIM3_INI.exists():
        pytest.fail(f"reference config missing: {DRAMSIM3_INI}")
    return DRAMSIM3_INI


def tiered(values: Sequence, fast: int) -> list:
    """Parameters of a large matrix: the first `fast` run in every tier, the others carry the slow mark, so
    `pytest -m "not slow"` checks each rule on a few cases and the full run (CI) on all of them."""
    out = []
    for i, value in enumerate(values):
        if i < fast:
            out.append(value)
        elif isinstance(value, ParameterSet):
            out.append(pytest.param(*value.values, marks=(*value.marks, pytest.mark.slow), id=value.id))
        else:
            out.append(pytest.param(value, marks=pytest.mark.slow))
    return out
