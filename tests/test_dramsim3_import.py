"""`archsim config import-dramsim3` reads the reference HBM2 .ini the way DRAMSim3 does."""

import json

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from archsim import analytic
from archsim.cli import main
from archsim.config.memory import load_memory_config
from archsim.controller.kernel import KernelVariant
from archsim.dram.commands import COMMAND_CODES
from archsim.memory import MemorySession, Requests, kernel_params, kernel_variant, replay
from archsim.trace.text_formats import write_dramsim3
from tests.conftest import config

pytestmark = pytest.mark.component


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
    assert (c.read_queue_depth, c.bank_queue_depth, c.row_policy.impl, c.row_policy.cap) == (32, 8, "open_cap", 4)
    assert cfg.frontend.max_injections_per_cycle == 1 and not c.refresh.stagger
    assert (c.write_drain.high_watermark, c.write_drain.idle_threshold) == (32, 8)  # DRAMSim3's write-drain trigger
    assert c.scheduler == "round_robin" and c.refresh.holds_columns  # its command-queue service
    assert cfg.mapping.description == "rorabgbachco"
    # DRAMSim3's unloaded latencies for this file: 17 (row hit), 31 (closed bank), 45 (row conflict)
    assert [analytic.unloaded_read_latency_cycles(cfg, k) for k in ("hit", "miss", "conflict")] == [17, 31, 45]
    assert "max_injections_per_cycle: 1" in out.read_text() and yaml.safe_load(out.read_text())
    # every comparison with DRAMSim3 runs this controller: it has a kernel of its own (`kernel.DRAMSIM3`)
    assert kernel_variant(kernel_params(cfg, 0)) == KernelVariant(-1, 1, 1, 1, controller="dramsim3")


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


BATCH = "memory.controller.write_drain={high_watermark: 32, low_watermark: 0, idle_threshold: 8}"


def _one_bank_writes(cfg, n: int, gap_cycles: int):
    """`n` writes to distinct columns of one bank, `gap_cycles` apart (low rate: the queues are otherwise empty)."""
    ab = cfg.organization.access_bytes
    n_channels = cfg.organization.n_pseudo_channels
    address = (np.arange(n, dtype=np.uint64) * ab * n_channels).astype(np.uint64)  # channel bits lowest
    return Requests.build(np.arange(n, dtype=np.int64) * gap_cycles, address, np.ones(n, dtype=np.uint8))


def test_batch_drain_holds_writes_until_more_than_the_threshold():
    """DRAMSim3's rule: with no command queued, writes wait until more than 8 are buffered, then drain together."""

    eager, batch = config("HBM2"), config("HBM2", BATCH)
    requests = _one_bank_writes(eager, 12, 100)
    first_wr = {}
    for name, cfg in (("eager", eager), ("batch", batch)):
        log = replay(cfg, requests, command_log=True).command_log
        writes = log.cycle[log.command == COMMAND_CODES["WR"]]
        assert len(writes) == 12
        first_wr[name] = int(writes.min())
    assert first_wr["eager"] < 100  # served as soon as no read waits
    assert 800 <= first_wr["batch"] < 900  # the 9th write arrives at cycle 800 and starts the drain


def test_batch_drain_forwards_reads_of_held_writes():
    """A read of a write still held in the buffer is served from it (DRAMSim3 counts latency 1)."""

    stamps = np.array([0, 300], dtype=np.int64)
    address = np.array([4096, 4096], dtype=np.uint64)
    requests = Requests.build(stamps, address, np.array([1, 0], dtype=np.uint8))
    eager_cfg = config("HBM2")
    eager = replay(eager_cfg, requests)
    batch = replay(config("HBM2", BATCH), requests)
    assert batch.done_cycle[1] - batch.accept_cycle[1] == 1
    # the write was long written: a DRAM read, no faster than an unloaded row hit
    hit_cycles = analytic.unloaded_read_latency_cycles(eager_cfg, "hit")
    assert eager.done_cycle[1] - eager.accept_cycle[1] >= hit_cycles


def test_bank_queues_forward_reads_of_moved_and_waiting_writes():
    """With bank queues a queued write is in its bank's queue or still waiting for room there: a read of its
    address is served from it in either case."""
    cfg = config("HBM2", "memory.controller.bank_queue_depth=1")
    # two writes to one bank, different rows (the second waits: the bank queue holds one), then a read of each
    row_stride = cfg.organization.capacity_bytes // cfg.organization.rows
    address = np.array([0, row_stride, 0, row_stride], dtype=np.uint64)
    requests = Requests.build(np.array([0, 0, 1, 1]), address, np.array([1, 1, 0, 0], dtype=np.uint8))
    session = MemorySession(cfg, requests.address, requests.is_write, requests.source)
    session.release(0, 4, requests.timestamp_cycles)
    session.run_until(2)
    assert session.done_cycle[2:].tolist() == [2, 2]  # both reads forwarded: latency 1 from acceptance at 1
    result = replay(cfg, requests, command_log=True)
    assert result.done_cycle[2:].tolist() == [2, 2]
    issued = result.command_log.command.tolist()
    assert issued.count(COMMAND_CODES["WR"]) == 2 and COMMAND_CODES["RD"] not in issued


def test_batch_drain_ends_when_a_drain_starts_behind_moved_writes(tmp_path, dramsim3_ini):
    """A drain counts the writes it can still move to a bank queue: counting the moved ones too kept it open
    forever and starved the reads (saturating random reads with 30 % writes hung on the imported config)."""

    out = tmp_path / "hbm2.yaml"
    CliRunner().invoke(main, ["config", "import-dramsim3", str(dramsim3_ini), "-o", str(out)])
    cfg = load_memory_config(out)
    n = 3000
    rng = np.random.default_rng(11)
    address = (rng.integers(0, cfg.organization.capacity_bytes // 64, n) * 64).astype(np.uint64)
    is_write = (rng.random(n) < 0.3).astype(np.uint8)
    session = MemorySession(cfg, address, is_write, np.zeros(n, dtype=np.uint8))
    session.release(0, n, np.zeros(n, dtype=np.int64))
    session.run_until(100_000)  # about 4,000 cycles of work; a stuck drain would run to this horizon
    assert session.finished
    assert (session.done_cycle >= session.accept_cycle).all()
