"""`archsim config import-dramsim3` reads the reference HBM2 .ini the way DRAMSim3 does."""

import json

import numpy as np
import yaml
from click.testing import CliRunner

from archsim.cli import main
from archsim.config.memory import load_memory_config
from archsim.dram import analytic
from archsim.trace.text_formats import write_dramsim3


def test_import_matches_dramsim3_reading(tmp_path, dramsim3_ini):
    out = tmp_path / "hbm2.yaml"
    result = CliRunner().invoke(main, ["config", "import-dramsim3", str(dramsim3_ini), "-o", str(out)])
    assert result.exit_code == 0, result.output
    for key in ("tRTP_L", "tCKSRE", "num_dies", "IDD0", "epoch_period"):  # never silently dropped
        assert key in result.output
    cfg = load_memory_config(out)
    org, t, c = cfg.organization, cfg.timing, cfg.controller
    assert (org.channels, org.pseudo_channels, org.ranks, org.bankgroups, org.banks_per_group) == (8, 1, 1, 4, 4)
    assert org.row_bytes == 2048 and org.access_bytes == 64 and org.capacity_bytes == 8 * 2**30
    assert (t.CL, t.CWL, t.tRCDRD, t.tRP, t.tRAS, t.tRC, t.tRTP, t.tRTRS, t.tBURST) == (14, 4, 14, 14, 34, 48, 5, 2, 2)
    assert t.tRTW == 14  # DRAMSim3's read_to_write: RL + burst - WL + tRTRS
    assert (c.read_queue_depth, c.bank_queue_depth, c.row_policy, c.row_policy_cap) == (32, 8, "open_cap", 4)
    assert cfg.frontend.max_injections_per_cycle == 1 and not c.refresh_stagger
    assert cfg.mapping.description == "rorabgbachco"
    # DRAMSim3's unloaded latencies for this file: 17 (row hit), 31 (closed bank), 45 (row conflict)
    assert [analytic.unloaded_read_latency_cycles(cfg, k) for k in ("hit", "miss", "conflict")] == [17, 31, 45]
    assert "max_injections_per_cycle: 1" in out.read_text() and yaml.safe_load(out.read_text())


def test_imported_config_replays_a_dramsim3_trace(tmp_path, dramsim3_ini):
    out = tmp_path / "hbm2.yaml"
    CliRunner().invoke(main, ["config", "import-dramsim3", str(dramsim3_ini), "-o", str(out)])
    trace = tmp_path / "stream.trace"
    n = 2000
    write_dramsim3(trace, np.arange(n) * 2, np.arange(n, dtype=np.uint64) * 64, np.zeros(n))
    stats_path = tmp_path / "s.json"
    result = CliRunner().invoke(main, ["replay", str(trace), "--memory", str(out), "--json", str(stats_path),
                                       "--check", "--quiet"])
    assert result.exit_code == 0, result.output
    stats = json.loads(stats_path.read_text())
    assert stats["checker"]["violations"] == 0
    # one request every 2 cycles, 64 B each: 32 GB/s offered; the run's tail (a refresh at cycle 3900,
    # the last reads' latency) keeps the average a little below
    assert 0.9 * 32.0 <= stats["memory"]["bandwidth_GBps"] <= 32.0
    assert stats["memory"]["row_hit_rate"] > 0.9
