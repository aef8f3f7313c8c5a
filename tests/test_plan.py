"""The offload planner (archsim.plan): closed forms without numba or the simulator's code, its agreement with
simulate_step on a 30-point grid, the archsim.plan/1 JSON, and bad input as one line with exit code 2."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import time
from dataclasses import replace

import click
import pytest
from click.testing import CliRunner

from archsim.cli import _Group
from archsim.plan.cli import plan_command
from archsim.plan.inputs import candidate_system, plan_inputs
from archsim.plan.model import allreduce_stretch, busiest_channel, overlapped_layer, plan, predict
from archsim.plan.validate import Evaluator, Grid, validate
from archsim.system.config import load_system_config
from archsim.system.workload import load_workload
from tests.conftest import REPO

pytestmark = pytest.mark.system

FORBIDDEN = ("archsim.controller", "archsim.dram", "archsim.memory", "archsim.pnm.timed.timing", "archsim.system")


@click.group(cls=_Group)
def cli() -> None:
    """The command as archsim/cli.py registers it (same error handling)."""


cli.add_command(plan_command, "plan")


def _run(*args: str):
    return CliRunner().invoke(cli, list(args))


def _error_line(result) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("archsim: error: ")
    return lines[0]


@pytest.fixture(scope="module")
def g25_inputs():
    return plan_inputs(load_system_config("g25"), load_workload("llama3-70b-b16"))


def test_model_runs_without_numba_or_the_simulator(tmp_path, g25_inputs):
    """The planner's model, unpickled in a process where numba cannot be imported, gives the same predictions
    and loads none of the memory core, DRAM, timed PNM, pool replay or step-model modules."""
    blob = tmp_path / "inputs.pkl"
    blob.write_bytes(pickle.dumps(g25_inputs))
    script = f"""
import sys, pickle, json
sys.modules['numba'] = None
from archsim.plan.model import plan
inp = pickle.loads(open({str(blob)!r}, 'rb').read())
preds = plan(inp, 32768, 16)
bad = sorted(k for k in sys.modules if k.startswith({FORBIDDEN!r}))
print(json.dumps({{'bad': bad, 'preds': [[p.candidate, p.step_ns, p.energy_pJ_per_token] for p in preds]}}))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=True,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    got = json.loads(out.stdout)
    assert got["bad"] == []
    here = [[p.candidate, p.step_ns, p.energy_pJ_per_token] for p in plan(g25_inputs, 32768, 16)]
    assert [g[0] for g in got["preds"]] == [h[0] for h in here]
    for g, h in zip(got["preds"], here, strict=True):
        assert g[1] == pytest.approx(h[1], rel=1e-12) and g[2] == pytest.approx(h[2], rel=1e-12)


def test_candidates_follow_the_declared_tiers(g25_inputs):
    assert [c.name for c in g25_inputs.candidates] == ["hbm/gpu", "pool/gpu", "pool/pnm"]
    nopnm = plan_inputs(load_system_config("g25-nopnm"), load_workload("llama3-70b-b16"))
    assert [c.name for c in nopnm.candidates] == ["hbm/gpu", "pool/gpu"]
    hbm = plan_inputs(load_system_config("gpu-hbm"), load_workload("llama3-70b-b16"))
    assert [c.name for c in hbm.candidates] == ["hbm/gpu"]


def test_prediction_tracks_simulation(g25_inputs):
    """Every candidate's predicted step within 15 % of the simulated one at 32K (batch 16)."""
    from archsim.system.decode import simulate_step

    system, wl = load_system_config("g25"), load_workload("llama3-70b-b16")
    for cand in g25_inputs.candidates:
        pred = predict(g25_inputs, cand, 32768, 16)
        sim = simulate_step(candidate_system(system, cand), wl, 32768)
        assert pred.feasible == sim.ok
        if sim.ok:
            assert pred.step_ns == pytest.approx(sim.decode_step_ns, rel=0.15), cand.name
            assert pred.energy_pJ_per_token == pytest.approx(sim.energy_pJ_per_token, rel=0.05), cand.name


def test_hbm_infeasible_at_128k_and_pnm_wins(g25_inputs):
    preds = plan(g25_inputs, 131072, 16)
    assert preds[0].candidate == "pool/pnm"
    hbm = next(p for p in preds if p.candidate == "hbm/gpu")
    assert not hbm.feasible and "HBM" in hbm.reason


def test_planning_one_request_under_1ms(g25_inputs):
    plan(g25_inputs, 4096, 16)  # the GPU kernel table is built once per inputs
    t = time.perf_counter()
    for i in range(50):
        plan(g25_inputs, 4096 + 997 * i, 1 + i % 64)
    assert (time.perf_counter() - t) / 50 < 1e-3


def test_closed_form_pieces():
    # 16 x 8 head contexts of 4097 tokens over 512 channels: whole ranges of 1025 tokens, two chunks at most
    assert busiest_channel(128, 4097, 512)[0] == 1025
    per, chunks, splits = busiest_channel(8, 131073, 512)
    assert per == 2049 and splits >= 64
    # max-min sharing: a background flow as large as the ring on the same link halves the ring's rate
    assert allreduce_stretch(1e6, 1e7, 1e9, 100.0) == pytest.approx(2.0)
    assert allreduce_stretch(1e6, 0.0, 100.0, 100.0) == 1.0
    # sub-batches: N = 1 is serial; N = 2 is bound by the busier resource, or one sub-batch's own chain
    assert overlapped_layer(10.0, 6.0, 1) == (16.0, 0.0)
    assert overlapped_layer(10.0, 6.0, 2) == (20.0, 6.0)
    assert overlapped_layer(5.0, 3.0, 2) == (10.0, 3.0)


@pytest.mark.slow
def test_validation_30_points_agree():
    """30 points (2 systems x 5 contexts x 3 batches): the planner picks the simulated best almost everywhere
    and its regret stays small."""
    systems = [load_system_config("g25"), load_system_config("g15")]
    ev = Evaluator(systems, load_workload("llama3-70b-b16"))
    out = validate(ev, Grid((1024, 8192, 32768, 65536, 131072), (1, 16, 64), (1.0,)))
    assert out["feasible_points"] == len(out["points"]) >= 24  # 128K at batch 64 fits nowhere
    assert out["agreement"] >= 0.9
    assert out["mean_regret"] <= 0.03 and out["max_regret"] <= 0.10
    for p in out["points"]:
        assert set(p) >= {"context", "batch", "link_scale", "system", "planner_choice", "simulated_best", "regret",
                          "agree", "contested"}


def test_cli_json_contract_and_determinism(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for path in (a, b):
        r = _run("plan", "g25", "--workload", "llama3-70b-b16", "--contexts", "4K,128K", "--json", str(path),
                 "--quiet")
        assert r.exit_code == 0, r.output
    assert a.read_bytes() == b.read_bytes()
    tree = json.loads(a.read_text())
    assert tree["schema"] == "archsim.plan/1"
    entries = tree["candidates"]
    assert len(entries) == 6
    for e in entries:
        assert set(e) >= {"name", "attention", "kv_tier", "predicted", "simulated", "rank", "reason"}
    top128 = [e for e in entries if e["context"] == 131072 and e["rank"] == 1][0]
    assert top128["name"] == "pool/pnm" and top128["simulated"]["cost"] > 0


def test_cli_validate_json(tmp_path):
    out = tmp_path / "v.json"
    r = _run("plan", "g25", "--workload", "llama3-70b-b16", "--validate", "--grid",
             "contexts=4K,128K;batches=16;links=0.5,2", "--json", str(out), "--quiet")
    assert r.exit_code == 0, r.output
    v = json.loads(out.read_text())["validation"]
    assert len(v["points"]) == 4 and 0 <= v["agreement"] <= 1
    assert {p["link_scale"] for p in v["points"]} == {0.5, 2.0}


@pytest.mark.slow
def test_decision_maps(tmp_path):
    """400 points per panel from predictions only, well inside the 30 s budget; the maps show both
    placements and HBM losing at long contexts."""
    from archsim.plan.maps import MAP_SIDE, decision_maps

    ev = Evaluator([load_system_config("g15")], load_workload("llama3-70b-b16"))
    t = time.perf_counter()
    maps = decision_maps(ev, "step_latency")["g15"]
    assert time.perf_counter() - t < 30
    assert len(maps["contexts"]) == MAP_SIDE and len(maps["link_scales"]) == MAP_SIDE
    cells = [w for row in maps["by_batch"] for w in row]
    assert {"hbm/gpu", "pool/pnm"} <= set(cells)
    assert maps["by_link"][0][-1] == "pool/pnm" and maps["by_batch"][0][0] == "hbm/gpu"
    out = tmp_path / "m.png"
    r = _run("plan", "g15", "--workload", "llama3-70b-b16", "--contexts", "4K", "--plot", str(out), "--quiet")
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_link_scale_changes_the_fetch():
    ev = Evaluator([load_system_config("g25")], load_workload("llama3-70b-b16"))
    slow = ev.simulate("g25", 0.5, "pool/gpu", 8192, 16).decode_step_ns
    fast = ev.simulate("g25", 2.0, "pool/gpu", 8192, 16).decode_step_ns
    assert slow > 3 * fast  # the fetch is link-bound: 4x the bandwidth, close to 4x less time
    assert ev.simulate("g25", 0.5, "hbm/gpu", 8192, 16) is ev.simulate("g25", 2.0, "hbm/gpu", 8192, 16)


@pytest.mark.parametrize("args, where", [
    (("plan", "gpu-hbm", "--workload", "llama3-70b-b16", "--candidates", "pool/pnm"), "system.kv.tiers"),
    (("plan", "g25", "--workload", "llama3-70b-b16", "--candidates", "bogus"), "--candidates"),
    (("plan", "g25", "--workload", "llama3-70b-b16", "--validate", "--grid", "batches="), "--grid"),
])
def test_bad_input_one_line_nothing_written(tmp_path, args, where):
    out = tmp_path / "x.json"
    line = _error_line(_run(*args, "--json", str(out)))
    assert where in line
    assert not out.exists()
    if where == "system.kv.tiers":
        assert "gpu-hbm.yaml" in line


def test_sub_batches_one_is_todays_step_and_two_overlap():
    """schedule.sub_batches: 1 (the default) gives exactly today's step. 2 overlaps one sub-batch's GPU work with
    another's attention, but decode on the GPUs is weight-bound: each sub-batch streams the weights again, so
    on Llama-3.1-70B the step gets longer (the pipeline's cycle is 2 x one sub-batch's GPU work); the planner
    predicts it within 5 %."""
    from archsim.system.decode import simulate_step

    wl = replace(load_workload("llama3-70b-b16"), batch=64)
    base = load_system_config("g25")
    one = load_system_config("g25", ["system.schedule.sub_batches=1"])
    two = load_system_config("g25", ["system.schedule.sub_batches=2"])
    a, b = simulate_step(base, wl, 16384), simulate_step(one, wl, 16384)
    assert a.as_dict() == b.as_dict()
    c = simulate_step(two, wl, 16384)
    assert c.decode_step_ns > a.decode_step_ns
    half = simulate_step(base, replace(wl, batch=32), 16384).breakdown_ns["critical"]
    assert crit_pipeline(c) == pytest.approx(2 * (half["gpu_weights"] + half["allreduce"]), rel=1e-9)
    crit = c.breakdown_ns["critical"]
    assert sum(crit.values()) == pytest.approx(c.decode_step_ns, abs=1.0)
    assert c.analytic_decode_step_ns <= c.decode_step_ns * 1.01
    assert c.energy_pJ_per_token > a.energy_pJ_per_token  # the weights' second read
    inp = plan_inputs(two, wl)
    pred = predict(inp, next(x for x in inp.candidates if x.name == "pool/pnm"), 16384, 64)
    assert pred.step_ns == pytest.approx(c.decode_step_ns, rel=0.05)


def crit_pipeline(result) -> float:
    return result.breakdown_ns["critical"]["sub_batch_pipeline"]
