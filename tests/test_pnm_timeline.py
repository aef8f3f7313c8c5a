"""`archsim pnm run --timeline`: a valid Chrome trace whose stalls add up to the run's stall stats per cause,
whose compute slices add up to each execution unit's busy cycles, whose DMA lanes hold every transfer without
overlap, bounded by a window or an instruction count; the same run gives the same bytes."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from click.testing import CliRunner

from archsim.cli import main
from archsim.pnm.timed.timing import EXEC_UNITS, STALL_CAUSES
from tests.conftest import REPO
from tests.timeline_check import slices_overlap, validate

pytestmark = pytest.mark.system

ARGS = ["pnm", "run", "--kernel", str(REPO / "isa/kernels/gqa_decode.s"), "--memory",
        str(REPO / "configs/memory/hbm3.yaml"), "--shape", "heads=32,kv_heads=8,head_dim=128,context=1024,batch=1",
        "--units", "2", "--quiet"]


def _run(tmp_path, name: str, *extra: str) -> tuple[dict, dict]:
    timeline, stats = tmp_path / f"{name}.json", tmp_path / f"{name}-stats.json"
    result = CliRunner().invoke(main, [*ARGS, "--reproducible", "--json", str(stats), "--timeline", str(timeline),
                                       *extra])
    assert result.exit_code == 0, result.output
    return json.loads(timeline.read_text()), json.loads(stats.read_text())


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("pnm"), "whole")


def _dram_base(tree: dict) -> float:
    """The first DRAM process id, or infinity when the timeline has no DRAM commands."""
    dram = tree["metadata"]["dram"]
    return dram["pid_base"] if isinstance(dram, dict) else float("inf")


def _cycles(e: dict, period_ns: float) -> int:
    return round(e["dur"] * 1000 / period_ns)


def _unit_stats(stats: dict) -> dict:
    return {int(unit): u for unit, u in stats["pnm"]["per_unit"].items()}


def test_the_timeline_is_valid_and_no_thread_holds_overlapping_slices(whole):
    tree, _ = whole
    assert validate(tree) == []
    assert slices_overlap(tree) == []
    names = {e["args"]["name"] for e in tree["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert set(EXEC_UNITS) | {"stalls", "DMA lane 0"} <= names


def test_stall_slices_add_up_to_the_stall_stats_per_unit_and_cause(whole):
    tree, stats = whole
    period = tree["metadata"]["unit_period_ns"]
    seen: dict[tuple[int, str], int] = defaultdict(int)
    for e in tree["traceEvents"]:
        if e["ph"] == "X" and e["name"].startswith("stall: "):
            seen[(e["pid"] - 1, e["name"].removeprefix("stall: "))] += _cycles(e, period)
    units = _unit_stats(stats)
    assert sum(seen.values()) > 0
    for unit, u in units.items():
        for cause in STALL_CAUSES:
            assert seen[(unit, cause)] == u["stalls"][cause], (unit, cause)


def test_compute_slices_add_up_to_each_execution_units_utilization(whole):
    tree, stats = whole
    period = tree["metadata"]["unit_period_ns"]
    busy: dict[str, int] = defaultdict(int)
    base = _dram_base(tree)
    for e in tree["traceEvents"]:
        if e["ph"] == "X" and e["pid"] < base and e["tid"] < len(EXEC_UNITS):
            busy[EXEC_UNITS[e["tid"]]] += _cycles(e, period)
    p = stats["pnm"]
    unit_cycles = p["units"] * p["cycles"]
    for eu in ("mac", "vec", "sfu", "dma"):
        assert busy[eu] > 0
        assert busy[eu] / unit_cycles == pytest.approx(p["utilization"][eu], abs=1e-6), eu


def test_every_load_is_on_one_lane_from_issue_to_completion(whole):
    tree, stats = whole
    transfers = [e for e in tree["traceEvents"] if e["ph"] == "X" and "transfer" in e.get("args", {})]
    per_unit: dict[int, set] = defaultdict(set)
    for e in transfers:
        per_unit[e["pid"] - 1].add(e["args"]["transfer"])
    loads = {e["args"]["instruction"] for e in tree["traceEvents"] if e["ph"] == "X" and e["name"] == "LD"
             and e["tid"] == EXEC_UNITS.index("dma") and e["pid"] == 1}
    assert per_unit[0] == set(range(len(per_unit[0]))) and len(per_unit[0]) == len(loads)
    assert set(per_unit) == {0, 1}


def test_a_window_and_an_instruction_bound_keep_less_and_count_the_rest(tmp_path, whole):
    tree, _ = whole
    windowed, _ = _run(tmp_path, "windowed", "--timeline-window", "1us:3us")
    assert validate(windowed) == []
    slices = [e for e in windowed["traceEvents"] if e["ph"] == "X"]
    assert slices and all(e["ts"] >= 1.0 - 1e-9 and e["ts"] + e["dur"] <= 3.0 + 1e-9 for e in slices)
    assert windowed["metadata"]["omitted_events"]["commands"] > 0
    assert sum(windowed["metadata"]["omitted_events"].values()) > 0
    first, _ = _run(tmp_path, "first", "--timeline-requests", "100")
    base = _dram_base(first)
    kept = {e["args"]["instruction"] for e in first["traceEvents"] if e["ph"] == "X" and e["pid"] < base
            and e["tid"] < len(EXEC_UNITS)}
    assert max(kept) == 99
    assert first["metadata"]["omitted_events"]["instructions"] > 0
    units = [e for e in first["traceEvents"] if e["ph"] == "X" and e["pid"] < base]
    assert len(units) < len([e for e in tree["traceEvents"] if e["ph"] == "X"])


@pytest.mark.slow
def test_a_bounded_timeline_draws_every_command_the_memory_issued(whole, tmp_path):
    assert "not drawn" in whole[0]["metadata"]["dram"]  # unbounded: the units only (a run's commands are millions)
    tree, stats = _run(tmp_path, "dram", "--timeline-window", "0:1s")
    assert validate(tree) == [] and slices_overlap(tree) == []
    base = tree["metadata"]["dram"]["pid_base"]
    counts: dict[str, int] = defaultdict(int)
    for e in tree["traceEvents"]:
        if e["ph"] == "X" and e["pid"] >= base:
            counts[e["name"]] += 1
    # every bank command the stats count is a slice (refresh: the stats count a channel's, the log each
    # pseudo-channel's)
    issued = {name: n for name, n in stats["memory"]["commands"].items() if n and not name.startswith("REF")}
    assert {name: n for name, n in counts.items() if not name.startswith("REF")} == issued
    assert issued["RD"] > 1000 and counts["REF"] > 0
    names = {e["args"]["name"] for e in tree["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert {"pseudo-channel 0", "PNM unit 0", "PNM unit 1"} <= names


def test_the_same_run_gives_the_same_bytes(tmp_path):
    for name in ("a", "b"):
        _run(tmp_path, name)
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_a_window_without_a_timeline_is_one_line(tmp_path):
    result = CliRunner().invoke(main, [*ARGS, "--timeline-window", "0:1us"])
    assert result.exit_code == 2
    assert "--timeline-window: bounds a timeline: give --timeline OUT.json too" in result.output
