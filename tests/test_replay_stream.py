"""The streaming replay equals the whole-trace replay, request by request and command by command, with a window
small enough that it is rebuilt hundreds of times."""

from __future__ import annotations

import numpy as np
import pytest

from archsim.dram.commands import CommandLog
from archsim.memory import Requests, replay
from archsim.replay_stream import StreamingReplay, requests_source
from archsim.report.memory_stats import MemoryStatsAccumulator, RunFigures, memory_stats, stats_tree
from scripts.make_golden import GENERATORS, cases, memory_config
from tests.conftest import config, tiered

pytestmark = pytest.mark.component

LOG_FIELDS = ("cycle", "command", "pseudo_channel", "bank", "row")


class Collect:
    """A sink that puts every retired request back at its trace position, and keeps the command log."""

    wants_commands = True

    def __init__(self, n: int) -> None:
        self.fields: dict[str, np.ndarray] = {}
        self.logs: list[CommandLog] = []
        self.n = n
        self.retired = 0

    def retire(self, fields: dict[str, np.ndarray]) -> None:
        for name, values in fields.items():
            if name not in self.fields:
                self.fields[name] = np.full(self.n, -7, dtype=np.int64)
            assert (self.fields[name][fields["pos"]] == -7).all(), "a request retired twice"
            self.fields[name][fields["pos"]] = values
        self.retired += len(fields["pos"])

    def commands(self, log: CommandLog) -> None:
        self.logs.append(log)


def assert_stream_equals_replay(cfg, requests: Requests, window: int, batch: int = 97):
    reference = replay(cfg, requests, command_log=True)
    collect, stats = Collect(len(requests)), MemoryStatsAccumulator(cfg)
    result = StreamingReplay(cfg, requests_source(requests, batch), [collect, stats], window_requests=window).run()
    assert collect.retired == result.requests == len(requests)
    for name, whole in (("done", reference.done_cycle), ("accept", reference.accept_cycle),
                        ("klass", reference.request_class), ("conflict", reference.bank_conflict),
                        ("pc", reference.pseudo_channel)):
        assert np.array_equal(collect.fields[name], whole), name
    for name in LOG_FIELDS:
        streamed = np.concatenate([getattr(log, name) for log in collect.logs])
        assert np.array_equal(streamed, getattr(reference.command_log, name)), name
    assert result.total_cycles == reference.total_cycles
    assert np.array_equal(result.command_counts, reference.command_counts)
    assert np.array_equal(result.qos_counts, reference.qos_counts)
    figures = RunFigures(result.total_cycles, result.command_counts, result.qos_counts, 0.0, 0.0, None)
    assert stats_tree(stats, figures, reproducible=True) == memory_stats(reference, reproducible=True)
    return result


GOLDEN = cases()
FAST = {"HBM2-default-mixed", "HBM3-bankq4-mixed", "HBM3-drain_idle-mixed", "HBM3E-rr_bankq_drain_hold-mixed",
        "HBM2-fcfs-random", "HBM3-default-sparse", "dramsim3-mixed", "HBM3-wide-mixed", "HBM2-bankq2-one_bank_rows"}


@pytest.mark.parametrize("case", tiered(sorted(GOLDEN, key=lambda c: c.name not in FAST), len(FAST)),
                         ids=lambda case: case.name)
def test_golden_cases_stream_exactly(case):
    cfg = memory_config(case)
    ts, address, is_write, pnm = GENERATORS[case.stream](cfg.organization, case.requests, case.seed)
    requests = Requests.build(ts, np.asarray(address, dtype=np.uint64), is_write.astype(np.uint8),
                              pnm.astype(np.uint8))
    result = assert_stream_equals_replay(cfg, requests, window=64)
    if case.stream in ("mixed", "sequential", "sparse", "strided"):  # paced: the window stays small
        assert result.window_slots < case.requests / 4


def _saturated(cfg, n: int, rng, pnm_share: float) -> Requests:
    ab = cfg.organization.access_bytes
    address = (rng.integers(0, cfg.organization.capacity_bytes // ab, n) * ab).astype(np.uint64)
    return Requests.build(np.zeros(n, np.int64), address, rng.random(n) < 0.2,
                          (rng.random(n) < pnm_share).astype(np.uint8))


@pytest.mark.parametrize("preset", ["HBM2", "HBM3"])
@pytest.mark.parametrize("pnm_share", [0.0, 0.5, 0.01])
def test_a_backlogged_trace_streams_exactly_with_one_port_rare_or_both(preset, pnm_share):
    """Every timestamp 0: the calls are bounded by requests injected, not by time; a port with 1 % of the
    requests reads ahead on its own cursor."""
    cfg = config(preset)
    result = assert_stream_equals_replay(cfg, _saturated(cfg, 12_000, np.random.default_rng(1), pnm_share), 64)
    assert result.window_slots < 6_000


def test_requests_merged_in_the_write_queue_start_the_call_over_with_a_longer_lookahead():
    """Runs of 150 writes then 150 reads of one address, all due at once: every one after the first merges in
    the write queue, so a port hands over a whole run in one cycle, more than its lookahead."""
    cfg = config("HBM2")
    rng = np.random.default_rng(2)
    n = 6000
    ab = cfg.organization.access_bytes
    hot = np.repeat((rng.integers(0, cfg.organization.capacity_bytes // ab, n // 300) * ab).astype(np.uint64), 300)
    writes = (np.arange(n) % 300) < 150
    result = assert_stream_equals_replay(cfg, Requests.build(np.zeros(n, np.int64), hot, writes), 64)
    assert result.restarts > 0
    paced = Requests.build(np.arange(n) // 8, np.where(rng.random(n) < 0.5, hot, hot[::-1]), rng.random(n) < 0.5,
                           (rng.random(n) < 0.4).astype(np.uint8))
    assert_stream_equals_replay(cfg, paced, 128)


def test_the_window_stays_bounded_on_a_long_paced_trace():
    cfg = config("HBM3")
    n = 60_000
    rng = np.random.default_rng(3)
    ab = cfg.organization.access_bytes
    requests = Requests.build(np.arange(n) // 2, (rng.integers(0, 2**22, n) * ab).astype(np.uint64),
                              rng.random(n) < 0.3)
    result = StreamingReplay(cfg, requests_source(requests, 1000), [MemoryStatsAccumulator(cfg)],
                             window_requests=512).run()
    assert result.requests == n and result.window_slots < 2_000


def _whole_trace_outputs(trace: str, memory: str, window, overrides=()) -> tuple[dict, object]:
    """What `archsim replay --check --timeline` wrote before it streamed: the trace read whole, replayed whole."""
    from archsim.config.memory import load_memory_config
    from archsim.dram.checker import check_command_log
    from archsim.report.timeline import replay_timeline
    from archsim.trace.text_formats import read_trace

    cfg = load_memory_config(memory, list(overrides))
    physical = read_trace(trace)
    result = replay(cfg, Requests.build(physical.timestamp_cycles, physical.address, physical.is_write,
                                        physical.source), command_log=True)
    stats = memory_stats(result, reproducible=True)
    verdict = check_command_log(result.command_log, cfg.organization, cfg.timing,
                                refresh_mode=cfg.controller.refresh.impl)
    stats["checker"] = {"commands": verdict.checked_commands, "violations": len(verdict.violations)}
    return stats, replay_timeline(result, window, source=trace)


@pytest.mark.system
@pytest.mark.parametrize(("trace", "memory", "options"), [
    ("traces/stream_hbm2.trace", "configs/memory/hbm2.yaml", ()),
    ("traces/stream_hbm2.trace", "configs/memory/hbm2.yaml",
     ("--set", "memory.controller.refresh=per_bank", "--timeline-window", ":5us")),
    ("traces/kv_decode_hbm3.npz", "configs/memory/hbm3.yaml", ("--timeline-window", "2us:9us")),
    ("traces/kv_decode_hbm3.npz", "configs/memory/hbm3.yaml", ("--timeline-requests", "500")),
])
def test_the_replay_command_writes_what_the_whole_trace_replay_did(tmp_path, monkeypatch, trace, memory, options):
    import json

    from click.testing import CliRunner

    import archsim.replay_stream
    from archsim.cli import main
    from archsim.report.output import write_json
    from archsim.report.timeline import parse_window
    from tests.conftest import REPO

    monkeypatch.setattr(archsim.replay_stream, "WINDOW_REQUESTS", 256)
    trace_path, memory_path = str(REPO / trace), str(REPO / memory)
    args = ["replay", trace_path, "--memory", memory_path, "--reproducible", "--check", "--quiet",
            "--json", str(tmp_path / "s.json"), "--timeline", str(tmp_path / "t.json"), *options]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    option = dict(zip(options[::2], options[1::2], strict=True))
    window = parse_window(option.get("--timeline-window"), int(option.get("--timeline-requests", 0)) or None,
                          timeline="t")
    overrides = [option["--set"]] if "--set" in option else []
    stats, timeline = _whole_trace_outputs(trace_path, memory_path, window, overrides)
    write_json(tmp_path / "whole.json", stats)
    timeline.write(tmp_path / "whole_t.json")
    assert (tmp_path / "s.json").read_bytes() == (tmp_path / "whole.json").read_bytes()
    assert (tmp_path / "t.json").read_bytes() == (tmp_path / "whole_t.json").read_bytes()
    assert json.loads((tmp_path / "s.json").read_text())["checker"]["violations"] == 0
