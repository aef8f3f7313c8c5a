"""archsim against DRAMSim3's own results on the suite of scripts/compare_dramsim3.py (imported HBM2 config).

tests/data/dramsim3_hbm2_reference.json holds what a DRAMSim3 master build reported for each trace (written by
`scripts/compare_dramsim3.py --dramsim3 ... --json`); DRAMSim3 itself is not needed to run this test. Issue 2's
bar: bandwidth within 15 %, mean read latency within 25 %.
"""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from archsim.cli import main
from archsim.config.memory import load_memory_config
from archsim.memory import Requests, replay
from archsim.report.memory_stats import memory_stats
from scripts.compare_dramsim3 import BANDWIDTH_TOLERANCE, LATENCY_TOLERANCE, suite

pytestmark = pytest.mark.component

REFERENCE = json.loads((Path(__file__).parent / "data" / "dramsim3_hbm2_reference.json").read_text())


@pytest.fixture(scope="module")
def imported(tmp_path_factory, dramsim3_ini):
    out = tmp_path_factory.mktemp("dramsim3") / "hbm2.yaml"
    result = CliRunner().invoke(main, ["config", "import-dramsim3", str(dramsim3_ini), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return load_memory_config(out)


@pytest.fixture(scope="module")
def traces(imported):
    org = imported.organization
    return suite(REFERENCE["requests_per_trace"], org.capacity_bytes, org.access_bytes)


@pytest.mark.parametrize("name", sorted(REFERENCE["traces"]))
def test_within_issue_bounds_of_dramsim3(imported, traces, name):
    cycle, address, is_write = traces[name]
    stats = memory_stats(replay(imported, Requests.build(cycle, address, is_write.astype("uint8"))))["memory"]
    theirs = REFERENCE["traces"][name]["dramsim3"]
    assert stats["bandwidth_GBps"] == pytest.approx(theirs["bandwidth_GBps"], rel=BANDWIDTH_TOLERANCE)
    if not is_write.all():  # DRAMSim3's one read there is its trace reader's end-of-file repeat
        assert stats["read_latency_cycles"]["mean"] == pytest.approx(theirs["read_latency"], rel=LATENCY_TOLERANCE)
