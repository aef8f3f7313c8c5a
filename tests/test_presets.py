"""Every preset builds, and its derived figures match the public numbers."""

import pytest

from archsim.dram.spec import peak_bandwidth_per_stack_GBps
from tests.conftest import PRESETS, config

pytestmark = pytest.mark.unit

EXPECTED = {
    # preset: (capacity per stack GiB, peak GB/s per stack, tCK ns, access bytes, tFAW cycles, tRFC cycles)
    "HBM2": (8, 256.0, 1.0, 64, 30, 260),
    "HBM3": (16, 819.2, 0.625, 32, 48, 560),
    "HBM3E": (24, 1228.8, 0.41667, 32, 72, 984),
}


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_derived_figures(preset):
    cfg = config(preset)
    gib, peak, tck, access, tfaw, trfc = EXPECTED[preset]
    org, t = cfg.organization, cfg.timing
    assert org.capacity_per_stack_bytes == gib * 2**30
    assert peak_bandwidth_per_stack_GBps(org, t) == pytest.approx(peak, rel=1e-4)
    assert t.tCK_ns == pytest.approx(tck)
    assert org.access_bytes == access
    assert t.tFAW == tfaw
    assert t.tRFC == trfc
    assert t.tRC >= t.tRAS + t.tRP
    assert cfg.mapping.capacity_bytes == org.capacity_bytes


def test_hbm3_matches_reference_table():
    t = config("HBM3").timing
    assert (t.CL, t.tRCDRD, t.tRP, t.tCCD_S, t.tCCD_L, t.tRRD_S, t.tRRD_L, t.tWR) == (23, 23, 23, 2, 4, 2, 4, 26)
    assert t.tREFI == 6240 and t.tRFCpb == 320 and t.tBURST == 2


def test_hbm3e_requantizes_ns_timings_with_ceil():
    t = config("HBM3E").timing
    assert t.tRCDRD == 35  # 14.4 ns / 0.41667 ns = 34.56 -> 35
    assert t.tRC == 116 and t.tRAS + t.tRP <= t.tRC


def test_override_changes_one_value():
    assert config("HBM3", "memory.timing.tFAW=12ns").timing.tFAW == 20
    assert config("HBM3", "memory.controller.read_queue_depth=64").controller.read_queue_depth == 64
