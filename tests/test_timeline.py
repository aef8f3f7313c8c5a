"""`--timeline` on replay and serve: valid Chrome trace-event JSON (tests/timeline_check.py), per-bank command
counts rebuilt from a replay's timeline equal to its command log's in the window, a request's slices equal to its
TTFT and E2E, omitted events counted, bad windows refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from archsim.cli import main
from archsim.config.memory import load_memory_config
from archsim.memory import Requests, replay
from archsim.report import timeline as tl
from archsim.trace.text_formats import read_trace
from tests.conftest import REPO
from tests.timeline_check import slices_overlap, validate

pytestmark = pytest.mark.system

TRACE = str(REPO / "traces" / "stream_hbm2.trace")
MEMORY = str(REPO / "configs" / "memory" / "hbm2.yaml")


@pytest.fixture(scope="module")
def replayed():
    cfg = load_memory_config(MEMORY, ())
    physical = read_trace(TRACE, "auto")
    requests = Requests.build(physical.timestamp_cycles, physical.address, physical.is_write, physical.source)
    return replay(cfg, requests, command_log=True)


def _run(*args: str):
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result


def test_a_replay_timeline_is_valid_and_holds_the_logs_commands_in_the_window(tmp_path, replayed):
    out = tmp_path / "t.json"
    _run("replay", TRACE, "--memory", MEMORY, "--quiet", "--timeline", str(out), "--timeline-window", "2us:9us")
    tree = json.loads(out.read_text())
    assert validate(tree) == []
    assert slices_overlap(tree) == []
    meta = tree["metadata"]
    start, end = meta["window_cycles"]
    assert (start, end) == (2000, 9000)  # HBM2 tCK 1 ns
    log = replayed.command_log
    want = tl.command_log_counts(log, start, end)
    assert tl.load_command_counts(tree) == want
    assert sum(want.values()) > 1000 and {k[2] for k in want} >= {"ACT", "RD", "WR"}
    assert meta["omitted_events"]["commands"] == len(log.cycle) - sum(want.values())
    xs = [e for e in tree["traceEvents"] if e["ph"] == "X"]
    tck = meta["tCK_ns"]
    for e in xs:  # ts in microseconds: each slice starts on a command-clock edge inside the window
        cycle = e["ts"] * 1000 / tck
        assert abs(cycle - round(cycle)) < 1e-6 and start <= round(cycle) < end
        assert e["ts"] + e["dur"] <= end * tck / 1000 + 1e-9
    rd = next(e for e in xs if e["name"] == "RD")
    timing = replayed.config.timing
    assert rd["dur"] <= (timing.CL + timing.tBURST) * tck / 1000 + 1e-9
    counters = {e["name"] for e in tree["traceEvents"] if e["ph"] == "C"}
    assert counters == {"requests in flight", "bandwidth GB/s"}


@pytest.mark.slow
def test_the_bandwidth_counter_adds_up_to_the_requests_done_in_the_window(replayed):
    tree = json.loads(_text(tl.replay_timeline(replayed, tl.Window())))
    bins = [e for e in tree["traceEvents"] if e["ph"] == "C" and e["name"] == "bandwidth GB/s"]
    bin_ns = (bins[1]["ts"] - bins[0]["ts"]) * 1000
    moved = sum(e["args"]["GB/s"] * bin_ns for e in bins)
    total = len(replayed.done_cycle) * replayed.config.organization.access_bytes
    assert moved == pytest.approx(total, rel=1e-4)
    assert tl.load_command_counts(tree) == tl.command_log_counts(replayed.command_log, 0, 1 << 62)


def _text(timeline: tl.Timeline) -> str:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="archsim-tl") as d:
        path = Path(d) / "t.json"
        timeline.write(path)
        return path.read_text()


def test_timeline_requests_closes_the_window_at_the_nth_completion(replayed):
    t = tl.replay_timeline(replayed, tl.Window(requests=500))
    tree = json.loads(_text(t))
    start, end = tree["metadata"]["window_cycles"]
    assert start == 0 and end == int(replayed.done_cycle[:500].max()) + 1
    assert tl.load_command_counts(tree) == tl.command_log_counts(replayed.command_log, start, end)
    assert tree["metadata"]["omitted_events"]["commands"] > 0


def test_the_same_replay_gives_the_same_timeline_bytes(replayed):
    assert _text(tl.replay_timeline(replayed, tl.Window(0, 3000))) == _text(tl.replay_timeline(replayed,
                                                                                            tl.Window(0, 3000)))


def test_a_serve_timeline_draws_each_requests_life(tmp_path):
    out, lines = tmp_path / "s.json", tmp_path / "r.jsonl"
    _run("serve", "gpu-hbm", "host-dram", "--scenario", "multiturn", "--requests", "60", "--quiet",
         "--timeline", str(out), "--timeline-requests", "40", "--requests-out", str(lines))
    tree = json.loads(out.read_text())
    assert validate(tree) == [] and slices_overlap(tree) == []
    names = {e["pid"]: e["args"]["name"] for e in tree["traceEvents"] if e["name"] == "process_name"}
    assert names == {1: "gpu-hbm (ok)", 2: "host-dram (ok)"}
    records = {(r["system"], r["request"]): r for r in map(json.loads, lines.read_text().splitlines())}
    per: dict[tuple[int, int], dict[str, float]] = {}
    for e in tree["traceEvents"]:
        if e["ph"] == "X" and e["tid"] < 60:  # a request's thread (iterations and links come after them)
            per.setdefault((e["pid"], e["tid"]), {})[e["name"]] = e["dur"]
            assert e["name"] in tl.SERVE_PHASES
    assert {tid for _pid, tid in per} == set(range(40))  # the first 40 requests, every one completed
    for (pid, tid), parts in per.items():
        r = records[(names[pid].split()[0], tid)]
        ttft_us = sum(parts.get(p, 0.0) for p in ("queued", "KV load", "prefill"))
        assert ttft_us / 1000 == pytest.approx(r["ttft_ms"], abs=1e-5)
        assert sum(parts.values()) / 1000 == pytest.approx(r["e2e_ms"], abs=1e-5)
    assert tree["metadata"]["omitted_events"]["requests"] == 2 * 20
    assert tree["metadata"]["not_in_timeline"] == ["decode appends and demotions (counted in bytes, not timed)"]


@pytest.mark.slow
def test_a_serve_timeline_draws_every_iteration_and_every_timed_transfer(tmp_path):
    out, res = tmp_path / "s.json", tmp_path / "s-result.json"
    _run("serve", "host-dram", "--scenario", "shared-prefix", "--requests", "300", "--quiet", "--timeline", str(out),
         "--json", str(res))
    tree = json.loads(out.read_text())
    assert validate(tree) == [] and slices_overlap(tree) == []
    threads = {e["tid"]: e["args"]["name"] for e in tree["traceEvents"] if e["ph"] == "M"
               and e["name"] == "thread_name"}
    iterations = [e for e in tree["traceEvents"] if e["ph"] == "X" and e["name"].startswith("iteration")]
    assert {threads[e["tid"]] for e in iterations} == {"instance 0: iterations"}
    entry = json.loads(res.read_text())["results"][0]
    tokens = sum(e["args"]["tokens"] for e in iterations)
    assert tokens >= entry["requests_completed"] and all(e["args"]["sequences"] >= 1 for e in iterations)
    moved = [e for e in tree["traceEvents"] if e["ph"] == "X" and threads.get(e["tid"], "").startswith("link ")]
    loads = [e for e in moved if e["args"]["link"] == "host_dram->gpu"]
    writes = [e for e in moved if e["args"]["link"] == "gpu->host_dram"]
    assert loads and writes and len(loads) + len(writes) == len(moved)
    assert {e["name"] for e in loads} == {"KV load"}
    assert "prefill write" in {e["name"] for e in writes} <= {"prefill write", "write-through", "demotion"}
    # every load out of host DRAM and every write into it (a prefill's KV as it is computed, an answer's blocks
    # for the next turn, HBM's demotions) is a timed transfer on its direction
    assert sum(e["args"]["bytes"] for e in loads) == pytest.approx(entry["tier_bytes"]["host_dram"]["read"], rel=1e-9)
    written = entry["tier_bytes"]["host_dram"]["written"]
    assert sum(e["args"]["bytes"] for e in writes) == pytest.approx(written, rel=1e-9)
    # the link's bandwidth counter integrates to the same bytes
    counter = [e for e in tree["traceEvents"] if e["ph"] == "C" and e["name"] == "link host_dram->gpu GB/s"]
    bin_ns = (counter[1]["ts"] - counter[0]["ts"]) * 1000
    delivered = sum(e["args"]["GB/s"] for e in counter) * bin_ns
    assert delivered == pytest.approx(entry["tier_bytes"]["host_dram"]["read"], rel=1e-4)


def test_a_serve_window_cuts_slices_and_counts_what_it_leaves_out(tmp_path):
    out = tmp_path / "s.json"
    _run("serve", "gpu-hbm", "--scenario", "multiturn", "--requests", "60", "--quiet", "--timeline", str(out),
         "--timeline-window", "1s:3s")
    tree = json.loads(out.read_text())
    assert validate(tree) == []
    xs = [e for e in tree["traceEvents"] if e["ph"] == "X"]
    assert xs and all(e["ts"] >= 1e6 - 1e-6 and e["ts"] + e["dur"] <= 3e6 + 1e-6 for e in xs)
    assert tree["metadata"]["omitted_events"]["slices_outside_window"] > 0


@pytest.mark.parametrize("window", ["5us", "9us:2us", "abc:1us", ":-1us"])
def test_a_bad_window_is_one_line_and_exit_2(tmp_path, window):
    out = tmp_path / "t.json"
    result = CliRunner().invoke(main, ["replay", TRACE, "--memory", MEMORY, "--quiet", "--timeline", str(out),
                                       "--timeline-window", window])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--timeline-window" in lines[0]
    assert not out.exists()


def test_a_window_without_a_timeline_is_refused(tmp_path):
    result = CliRunner().invoke(main, ["replay", TRACE, "--memory", MEMORY, "--quiet", "--timeline-requests", "5"])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--timeline-requests" in lines[0] and "--timeline OUT.json" in lines[0]


def test_a_window_parses_with_units():
    w = tl.parse_window("1.5us:2ms", 10)
    assert (w.start_ns, w.end_ns, w.requests) == (1500.0, 2e6, 10)
    assert tl.parse_window(":5us").start_ns == 0 and tl.parse_window("5us:").end_ns == float("inf")
    assert np.isinf(tl.parse_window(None).end_ns)
