"""`archsim serve` end to end: bad input as one line naming the file and key (exit code 2, no traceback, no
output written), the archsim.serving/1 JSON contract and --requests-out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from archsim.cli import main
from archsim.serving.scenario import SCENARIOS_DIR
from tests.conftest import REPO

pytestmark = pytest.mark.system

MOONCAKE = REPO / "traces" / "mooncake_sample.jsonl"


def _serve(*args: str):
    return CliRunner().invoke(main, ["serve", *args])


def _error_line(result) -> str:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("archsim: error: "), lines[0]
    return lines[0]


def _scenario(tmp_path: Path, name: str = "multiturn", **changes) -> Path:
    """A copy of a shipped scenario with `changes` (dotted keys under `scenario`) applied, beside its CSVs."""
    tree = yaml.safe_load((SCENARIOS_DIR / f"{name}.yaml").read_text())
    for dotted, value in changes.items():
        node = tree["scenario"]
        *parents, leaf = dotted.split("__")
        for key in parents:
            node = node[key]
        if value is None:
            del node[leaf]
        else:
            node[leaf] = value
    for csv in SCENARIOS_DIR.glob("*.csv"):
        (tmp_path / csv.name).write_text(csv.read_text())
    path = tmp_path / f"{name}-test.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def _trace_scenario(tmp_path: Path, lines: list[str]) -> Path:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(line + "\n" for line in lines))
    tree = yaml.safe_load((SCENARIOS_DIR / "mooncake-sample.yaml").read_text())
    tree["scenario"]["requests"]["trace"] = str(trace)
    path = tmp_path / "trace-scenario.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def _bad(tmp_path: Path, *args: str) -> str:
    out = tmp_path / "out.json"
    line = _error_line(_serve(*args, "--json", str(out), "--requests-out", str(tmp_path / "r.jsonl")))
    assert not out.exists() and not (tmp_path / "r.jsonl").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(("out", "r.jsonl", ".out", ".r"))]
    return line


GOOD = json.dumps({"timestamp": 0, "input_length": 600, "output_length": 20, "hash_ids": [0, 1]})


@pytest.mark.parametrize(("change", "words"), [
    ({"colour": "blue"}, ["scenario.colour"]),
    ({"arrivals__burstiness": 3}, ["scenario.arrivals.burstiness"]),
    ({"arrivals__rate_per_s": 0}, ["scenario.arrivals.rate_per_s", "positive"]),
    ({"arrivals__rate_per_s": -1.5}, ["scenario.arrivals.rate_per_s", "positive"]),
    ({"input__value": 0}, ["scenario.input.value", "positive"]),
    ({"output__value": -4}, ["scenario.output.value", "positive"]),
    ({"slo__ttft": 2}, ["scenario.slo.ttft", "duration"]),
    ({"slo__tpot": "fast"}, ["scenario.slo.tpot"]),
    ({"slo__ttft": "-2s"}, ["scenario.slo.ttft", "-2s"]),
])
def test_a_bad_scenario_is_one_line_naming_file_and_key(tmp_path, change, words):
    path = _scenario(tmp_path, **change)
    line = _bad(tmp_path, "gpu-hbm", "--scenario", str(path), "--requests", "5")
    assert str(path) in line
    for word in words:
        assert word in line


@pytest.mark.slow
@pytest.mark.parametrize(("bad", "words"), [
    ("{not json", ["line 2"]),
    (json.dumps({"timestamp": 5, "input_length": 0, "output_length": 3, "hash_ids": [0]}), ["line 2", "input_length"]),
    (json.dumps({"timestamp": 5, "input_length": 600, "hash_ids": [0, 1]}), ["line 2", "output_length"]),
])
def test_a_trace_line_that_does_not_parse_is_named_by_number(tmp_path, bad, words):
    path = _trace_scenario(tmp_path, [GOOD, bad, GOOD])
    line = _bad(tmp_path, "gpu-hbm", "--scenario", str(path), "--requests", "3")
    assert "trace.jsonl" in line
    for word in words:
        assert word in line


def test_a_trace_given_as_the_scenario_shows_the_scenario_form(tmp_path):
    line = _bad(tmp_path, "gpu-hbm", "--scenario", str(MOONCAKE), "--requests", "3")
    assert "mooncake_sample.jsonl" in line
    assert "requests: {trace: PATH" in line


@pytest.mark.parametrize(("args", "words"), [
    (["--set", "model.layers=4"], ["--set", "scenario. or system."]),
    (["--set", "scenario.arrivals.rate_per_s=0"], ["multiturn.yaml", "scenario.arrivals.rate_per_s"]),
    (["--set", "scenario.nonsense.key=1"], ["multiturn.yaml", "scenario.nonsense"]),
    (["--set", "system.gpus.colour=red"], ["gpu-hbm.yaml", "system.gpus.colour"]),
    (["--requests", "5", "--duration", "60s"], ["--requests", "--duration"]),
    (["--duration", "0s"], ["--duration", "positive"]),
    (["--duration", "ten"], ["--duration"]),
    (["--duration", "60"], ["--duration", "'60': give the unit"]),          # not 60 ns
    (["--requests", "3", "--timeline", "{t}/out.timeline.json", "--timeline-window", "0:10"],
     ["--timeline-window", "'10': give the unit"]),
    (["--requests", "5", "--warmup-requests", "5"], ["--warmup-requests", "none of the 5 requests"]),
    (["--duration", "1s", "--warmup-requests", "1000"], ["--warmup-requests", "none of the"]),
    (["--set", "system.serving.router"], ["--set", "'system.serving.router'", "dotted.key=value"]),
    (["--set", "scenario.arrivals.rate_per_s"], ["--set", "dotted.key=value"]),
    (["--set", "system.pool.memory.tCL"], ["--set", "dotted.key=value"]),
    # nothing below HBM to swap into: an error, not a silent recompute
    (["--requests", "3", "--set", "system.serving.preemption=swap"],
     ["gpu-hbm.yaml", "system.serving.preemption", "swap", "has none"]),
])
def test_bad_options_are_one_line(tmp_path, args, words):
    line = _bad(tmp_path, "gpu-hbm", "--scenario", "multiturn", *[a.replace("{t}", str(tmp_path)) for a in args])
    for word in words:
        assert word in line
    if "--set" in args and "=" not in args[args.index("--set") + 1]:
        assert ".yaml" not in line                  # the option is to blame, not the file it would change


def test_unknown_system_and_scenario_names(tmp_path):
    assert "no-such-system" in _bad(tmp_path, "no-such-system", "--scenario", "multiturn", "--requests", "3")
    assert "no-such-scenario" in _bad(tmp_path, "gpu-hbm", "--scenario", "no-such-scenario", "--requests", "3")


def test_the_help_s_serving_override_reaches_a_shipped_system(tmp_path):
    out = tmp_path / "out.json"
    result = _serve("gpu-hbm", "--scenario", "multiturn", "--requests", "5", "--set", "system.serving.router=prefix",
                    "--json", str(out), "--quiet")
    assert result.exit_code == 0, result.output


# -- the contract --------------------------------------------------------------------------------------------

DISTRIBUTION = {"mean", "p50", "p90", "p99"}
ISSUE_KEYS = ("system", "tier", "scenario", "requests_completed", "requests_rejected", "ttft_ms", "tpot_ms",
              "e2e_ms", "throughput_tokens_per_s", "goodput_requests_per_s", "prefix_hit_rate",
              "prefix_hit_rate_by_tier", "energy_J_per_token", "link_bytes", "breakdown_ms", "status", "cost_model")


def test_json_has_the_schema_every_issue_key_and_one_request_line_each(tmp_path):
    out, lines_path = tmp_path / "serve.json", tmp_path / "requests.jsonl"
    result = _serve("gpu-hbm", "host-dram", "--scenario", "multiturn", "--requests", "40", "--json", str(out),
                    "--requests-out", str(lines_path))
    assert result.exit_code == 0, result.output
    tree = json.loads(out.read_text())
    assert tree["schema"] == "archsim.serving/1"
    assert [e["system"] for e in tree["results"]] == ["gpu-hbm", "host-dram"]
    for entry in tree["results"]:
        missing = [k for k in ISSUE_KEYS if k not in entry]
        assert not missing, missing
        assert entry["status"] == "ok" and entry["scenario"] == "multiturn"
        assert entry["requests_completed"] == 40 and entry["requests_rejected"] == 0
        for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
            assert set(entry[key]) == DISTRIBUTION and all(v > 0 for v in entry[key].values())
        assert set(entry["breakdown_ms"]) == {"queueing", "kv_load", "prefill", "decode"}
        assert set(entry["cost_model"]) >= {"grid_points", "max_rel_error_measured", "method"}
        assert entry["throughput_tokens_per_s"] > 0 and entry["energy_J_per_token"] > 0
        assert entry["goodput_requests_per_s"] is not None          # multiturn has SLO targets
        assert 0 <= entry["prefix_hit_rate"] <= 1
    assert tree["results"][0]["tier"] == "G1" and tree["results"][1]["tier"] == "G2"
    assert set(tree["results"][1]["link_bytes"]) and tree["results"][0]["link_bytes"] == {}
    records = [json.loads(line) for line in lines_path.read_text().splitlines()]
    assert len(records) == 2 * 40
    assert [r["system"] for r in records] == ["gpu-hbm"] * 40 + ["host-dram"] * 40
    for r in records:
        assert {"arrival_ms", "ttft_ms", "tpot_ms", "e2e_ms", "hit_blocks"} <= set(r)
        assert r["completed"] and r["e2e_ms"] >= r["ttft_ms"] > 0


def _unchunked_system(tmp_path: Path) -> Path:
    """gpu-hbm without chunked prefill and a 2,048-token budget: a 15K-token prompt can never be scheduled."""
    tree = yaml.safe_load((REPO / "configs" / "systems" / "gpu-hbm.yaml").read_text())
    tree["system"]["name"] = "gpu-hbm-unchunked"
    tree["system"]["serving"] = {"chunked_prefill": False, "max_batch_tokens": 2048}
    path = tmp_path / "gpu-hbm-unchunked.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def test_a_system_that_cannot_progress_is_infeasible_naming_the_blocking_request(tmp_path):
    out = tmp_path / "serve.json"
    result = _serve("gpu-hbm", str(_unchunked_system(tmp_path)), "--scenario", "fixed-input", "--requests", "3",
                    "--json", str(out), "--quiet")
    assert result.exit_code == 0, result.output                 # one system ran
    ok, stuck = json.loads(out.read_text())["results"]
    assert ok["status"] == "ok" and ok["requests_completed"] == 3
    assert stuck["status"].startswith("infeasible: the run cannot make progress: request 0 ")
    assert "max_batch_tokens 2048" in stuck["status"]
    assert all(stuck[k] is None for k in ("ttft_ms", "tpot_ms", "e2e_ms", "requests_completed", "cost_model"))


def test_serve_fails_when_no_system_ran(tmp_path):
    result = _serve(str(_unchunked_system(tmp_path)), "--scenario", "fixed-input", "--requests", "3", "--quiet")
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code != 0
