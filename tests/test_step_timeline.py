"""`archsim compare/simulate --timeline`: each decode step layer by layer, its critical slices adding up to the
step's time, overlapped terms on their own threads, a window cutting them, an infeasible point named."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from click.testing import CliRunner

from archsim.cli import main
from archsim.report.timeline import Window
from archsim.system.decode import StepResult
from archsim.system.step_timeline import step_timeline
from tests.timeline_check import slices_overlap, validate

pytestmark = pytest.mark.system

SYSTEMS = ["g25", "gpu-hbm", "host-dram"]


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    out = tmp_path_factory.mktemp("step")
    result = CliRunner().invoke(main, ["compare", *SYSTEMS, "--workload", "llama3-70b-b16", "--contexts", "4K,32K",
                                       "--json", str(out / "c.json"), "--timeline", str(out / "t.json"), "--quiet"])
    assert result.exit_code == 0, result.output
    return json.loads((out / "c.json").read_text()), json.loads((out / "t.json").read_text()), out


def _sums(tree: dict) -> dict[tuple[int, int], float]:
    sums: dict[tuple[int, int], float] = defaultdict(float)
    for e in tree["traceEvents"]:
        if e["ph"] == "X":
            sums[(e["pid"], e["tid"])] += e["dur"]
    return sums


def test_valid_without_overlaps_and_the_critical_path_adds_up_to_the_step(compared):
    results, tree, _ = compared
    assert validate(tree) == [] and slices_overlap(tree) == []
    sums = _sums(tree)
    for k, entry in enumerate(results["results"]):
        pid, tid = SYSTEMS.index(entry["system"]) + 1, 100 * (k % 2)
        assert sums[(pid, tid)] * 1000 == pytest.approx(entry["decode_step_ns"], rel=1e-6), entry["system"]
    layers = [e for e in tree["traceEvents"] if e["ph"] == "X" and e["pid"] == 1 and e["tid"] == 0]
    assert max(e["args"]["layer"] for e in layers) == tree["metadata"]["layers"] - 1 == 79


def test_overlapped_terms_are_hidden_under_each_layer(compared):
    results, tree, _ = compared
    sums = _sums(tree)
    host = results["results"][4]  # host-dram at 4K: the GPUs' work runs under the KV fetch
    assert host["system"] == "host-dram" and host["context"] == 4096
    names = {e["tid"]: e["args"]["name"] for e in tree["traceEvents"] if e["ph"] == "M" and e["pid"] == 3
             and e["name"] == "thread_name"}
    hidden = {name.split("overlapped ")[1]: tid for tid, name in names.items() if "overlapped" in name and tid < 100}
    assert hidden["gpu_weights"] and sums[(3, hidden["gpu_weights"])] * 1000 == pytest.approx(
        host["breakdown_ns"]["overlapped"]["gpu_weights"], rel=1e-6)
    # a term longer than the layer it hides under is cut where the next layer starts
    assert sums[(3, hidden["link_fetch"])] * 1000 <= host["breakdown_ns"]["overlapped"]["link_fetch"]


def test_a_window_cuts_the_steps_and_counts_what_it_leaves_out(compared, tmp_path):
    result = CliRunner().invoke(main, ["simulate", "g25", "--workload", "llama3-70b-b16", "--contexts", "4K",
                                       "--timeline", str(tmp_path / "w.json"), "--timeline-window", "1ms:2ms",
                                       "--quiet"])
    assert result.exit_code == 0, result.output
    tree = json.loads((tmp_path / "w.json").read_text())
    assert validate(tree) == []
    slices = [e for e in tree["traceEvents"] if e["ph"] == "X"]
    assert slices and all(e["ts"] >= 1000 - 1e-6 and e["ts"] + e["dur"] <= 2000 + 1e-6 for e in slices)
    assert sum(e["dur"] for e in slices if e["tid"] == 0) == pytest.approx(1000, rel=1e-6)
    assert tree["metadata"]["omitted_events"]["slices_outside_window"] > 0


def test_an_infeasible_point_is_a_named_thread_without_slices():
    bad = StepResult("gpu-hbm", "G1", 131072, "infeasible: the KV cache does not fit in HBM")
    timeline = step_timeline([bad], 80, Window())
    assert not any('"ph":"X"' in e for e in timeline.events)
    assert any("128K: infeasible: the KV cache does not fit in HBM" in e for e in timeline.events)
