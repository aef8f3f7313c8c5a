"""`archsim sweep`: the spec and its bad inputs, the store (resume, refusals, reuse), points.csv against the
command's own results, and a sweep killed with SIGKILL at random instants then resumed."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from archsim.cli import main
from archsim.sweep.spec import load_spec
from tests.conftest import REPO

pytestmark = pytest.mark.system

# gpu-hbm needs no DRAM replay: a point takes about 0.1 s
SPEC = {"sweep": {
    "name": "tiny", "command": "simulate",
    "inputs": {"system": "gpu-hbm", "workload": "llama3-8b-b1", "set": ["workload.instances=1"]},
    "axes": {"workload.batch": [1, 4], "contexts": ["4K", "16K"]},
    "zip": [{"system.gpus.count": [1, 2], "workload.tensor_parallel": [1, 2]}],
    "objectives": [{"key": "decode_step_ns", "goal": "minimize", "select": {"context": "4K"}}],
}}


def _write(path: Path, spec: dict) -> Path:
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _spec(tmp: Path, edit=None, name: str = "spec.yaml") -> Path:
    spec = json.loads(json.dumps(SPEC))
    if edit:
        edit(spec["sweep"])
    return _write(tmp / name, spec)


def _sweep(*args: str):
    return CliRunner().invoke(main, ["sweep", *args, "--quiet"])


def _error_line(result) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("archsim: error: "), result.output
    return lines[0]


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return [{k: v for k, v in row.items() if k not in ("wall_s", "host")} for row in csv.DictReader(handle)]


def _tree_digest(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


# -- the spec --------------------------------------------------------------------------------------------------

def test_grid_is_the_product_of_axes_and_zipped_groups(tmp_path):
    spec = load_spec(_spec(tmp_path))
    points = spec.points()
    assert spec.grid_size == 8 and len(points) == 8
    assert points[0] == {"workload.batch": 1, "contexts": "4K", "system.gpus.count": 1, "workload.tensor_parallel": 1}
    assert points[-1] == {"workload.batch": 4, "contexts": "16K", "system.gpus.count": 2,
                          "workload.tensor_parallel": 2}
    assert len({json.dumps(p, sort_keys=True) for p in points}) == 8


@pytest.mark.parametrize("name", sorted(p.stem for p in (REPO / "configs" / "sweeps").glob("*.yaml")))
def test_every_shipped_spec_loads(name):
    spec = load_spec(name)
    assert spec.name == name and spec.grid_size >= 20 and spec.objectives


def test_ranges_log_ranges_and_random_search(tmp_path):
    def edit(s):
        s["axes"] = {"workload.batch": {"log_range": [1, 64, 7]}, "workload.decode_steps": {"range": [1, 9, 4]}}
        s["zip"] = []
        s["search"] = {"method": "random", "count": 5, "seed": 7}
    spec = load_spec(_spec(tmp_path, edit))
    assert spec.axes[0].values == tuple((v,) for v in (1, 2, 4, 8, 16, 32, 64))
    assert spec.axes[1].values == ((1,), (5,), (9,))
    five = spec.points()
    assert len(five) == 5 and len({json.dumps(p) for p in five}) == 5

    def more(s):
        edit(s)
        s["search"]["count"] = 9
    assert load_spec(_spec(tmp_path, more, "more.yaml")).points()[:5] == five  # a larger budget keeps every point


@pytest.mark.parametrize(("edit", "where", "words"), [
    (lambda s: s["axes"].update({"workload.batch": []}), "sweep.axes.workload.batch", "empty axis"),
    (lambda s: s["axes"].update({"system.gpus.cuont": [1]}), "sweep.axes.system.gpus.cuont", "no such key"),
    (lambda s: s["axes"].update({"system.pool.pnm.sram": ["1MiB"]}), "sweep.axes.system.pool.pnm.sram",
     "no such key"),
    (lambda s: s["axes"].update({"scenario.x": [1]}), "sweep.axes.scenario.x", "starting with system."),
    (lambda s: s.update({"inputs": {"system": "g25", "workload": "llama3-8b-b1"}}) or s["axes"].update(
        {"system.pool.memory.timing.tFAWx": ["40ns"]}), "sweep.axes.system.pool.memory.timing.tFAWx", "no such key"),
    (lambda s: s["objectives"][0].update({"key": "ttft_ms.p99"}), "sweep.objectives[0].key", "no key 'ttft_ms.p99'"),
    (lambda s: s.update({"command": "nope"}), "sweep.command", "unknown command"),
    (lambda s: s["objectives"][0].update({"key": "decode_step_ns.p99"}), "sweep.objectives[0].key",
     "nothing lies below it"),
    (lambda s: s["objectives"][0].update({"key": "breakdown_ns"}), "sweep.objectives[0].key",
     "a group of values"),
    (lambda s: s["objectives"][0]["select"].update({"system": "g99"}), "sweep.objectives[0].select.system",
     "selects system 'g99', which the sweep does not run (it runs gpu-hbm)"),
    (lambda s: s["zip"][0].update({"workload.tensor_parallel": [1]}), "sweep.zip[0]", "equal lengths"),
    (lambda s: s["axes"].update({"contexts": ["4K", "4K"]}), "sweep.axes.contexts", "'4K' is given twice"),
    (lambda s: s["axes"].update({"workload.batch": {"range": [1, float("inf"), 1]}}),
     "sweep.axes.workload.batch.range", "finite"),
    (lambda s: s["axes"].update({"workload.batch": [1, 0]}), "sweep.axes.workload.batch",
     "the value 0 fails at every point"),
    (lambda s: s["inputs"].update(workload="nowl"), "sweep.inputs", "no point of the sweep can run"),
    (lambda s: s.update(name="a/b"), "sweep.name", "path separators"),
    (lambda s: s.update(name=" "), "sweep.name", "not blank"),
    (lambda s: s.update(timeout_s=float("nan")), "sweep.timeout_s", "finite"),
])
def test_bad_spec_is_one_line_naming_the_file_and_key(tmp_path, edit, where, words):
    path = _spec(tmp_path, edit)
    line = _error_line(_sweep(str(path), "--out", str(tmp_path / "out")))
    assert f"{path}: {where}:" in line and words in line, line
    assert not (tmp_path / "out").exists()


def test_a_value_infeasible_in_some_combinations_stays_a_points_failure(tmp_path):
    """3 servers do not split 8 GPUs, but they split 6: the spec loads and that point alone fails; with no
    gpus.count axis, 3 fails at every point and the spec is refused before anything runs."""
    def axes(values):
        return lambda s: (s.pop("zip"), s.update(axes=values))

    spec = load_spec(_spec(tmp_path, axes({"system.gpus.count": [8, 6], "system.servers": [1, 3]})))
    assert spec.grid_size == 4
    line = _error_line(_sweep(str(_spec(tmp_path, axes({"system.servers": [1, 3]}), "b.yaml")), "--out",
                              str(tmp_path / "out")))
    assert "sweep.axes.system.servers: the value 3 fails at every point" in line, line
    assert "8 GPUs do not split evenly over 3 servers" in line and not (tmp_path / "out").exists()


# -- results and the store -------------------------------------------------------------------------------------

@pytest.mark.slow
def test_points_csv_holds_the_commands_own_results(tmp_path):
    result = _sweep(_spec(tmp_path).as_posix(), "--workers", "1", "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    rows = _rows(tmp_path / "out" / "points.csv")
    assert len(rows) == 8 and all(r["status"] == "ok" for r in rows)
    from archsim.system import load_system_config, load_workload, simulate_step

    system = load_system_config("gpu-hbm", ["system.gpus.count=2"])
    workload = load_workload("llama3-8b-b1", ["workload.instances=1", "workload.batch=4",
                                              "workload.tensor_parallel=2"])
    direct = simulate_step(system, workload, 16384).as_dict()
    row = rows[-1]
    assert row["workload.batch"] == "4" and row["contexts"] == "16K"
    assert float(row["gpu-hbm.16384.decode_step_ns"]) == direct["decode_step_ns"]
    assert float(row["gpu-hbm.16384.energy_pJ_per_token"]) == direct["energy_pJ_per_token"]
    assert row["gpu-hbm.16384.status"] == "ok"


@pytest.mark.slow
def test_resume_refusals_and_reuse(tmp_path):
    out = tmp_path / "out"
    path = _spec(tmp_path)
    assert _sweep(str(path), "--workers", "1", "--out", str(out)).exit_code == 0
    first = _rows(out / "points.csv")
    line = _error_line(_sweep(str(path), "--out", str(out)))
    assert f"{out}: --out:" in line and "--resume" in line
    before = _tree_digest(out)
    other = _spec(tmp_path, lambda s: s["inputs"].update({"workload": "llama3-8b-b64"}), "other.yaml")
    line = _error_line(_sweep(str(other), "--out", str(out), "--resume"))
    assert f"{other}: sweep.inputs:" in line and "another spec" in line
    assert _tree_digest(out) == before  # the store untouched
    result = CliRunner().invoke(main, ["sweep", str(path), "--out", str(out), "--resume", "--workers", "1"])
    assert result.exit_code == 0 and "(0 computed now" in result.output, result.output
    grown = _spec(tmp_path, lambda s: s["axes"].update({"workload.batch": [1, 4, 8]}), "grown.yaml")
    result = CliRunner().invoke(main, ["sweep", str(grown), "--out", str(out), "--resume", "--workers", "1"])
    assert result.exit_code == 0 and "12 points (4 computed now" in result.output, result.output
    rows = _rows(out / "points.csv")
    assert [r for r in rows if r["workload.batch"] != "8"] == first


def _store_keys(out: Path) -> list[str]:
    import sqlite3

    conn = sqlite3.connect(out / "points.sqlite")
    try:
        return [row[0] for row in conn.execute("SELECT key FROM points")]
    finally:
        conn.close()


def _stored_count(out: Path) -> int:
    import sqlite3

    if not (out / "points.sqlite").exists():
        return 0
    try:
        conn = sqlite3.connect(f"file:{out / 'points.sqlite'}?mode=ro", uri=True, timeout=0.05)
        try:
            return conn.execute("SELECT count(*) FROM points").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.OperationalError:  # not created yet, or busy for a moment
        return -1


def _wait_for_kill_instant(proc: subprocess.Popen, out: Path, rng: random.Random) -> None:
    """A random instant that does not depend on the machine's speed: a third of the kills land during start-up
    and planning, the rest a few milliseconds after the store has grown by 1 to 3 points, i.e. among the
    commits, some of them mid-write."""
    start_up = rng.random() < 0.3
    before = _stored_count(out)
    if start_up:  # at most until the first point lands: a fast machine would otherwise finish the sweep
        deadline = time.monotonic() + rng.uniform(0.05, 1.5)
        while proc.poll() is None and _stored_count(out) == before and time.monotonic() < deadline:
            time.sleep(0.002)
        return
    target = max(before, 0) + rng.randint(1, 3)
    deadline = time.monotonic() + 120
    while proc.poll() is None and _stored_count(out) < target and time.monotonic() < deadline:
        time.sleep(0.002)
    time.sleep(rng.uniform(0.0, 0.02))


@pytest.mark.slow
def test_sigkill_at_random_instants_then_resume_loses_and_duplicates_nothing(tmp_path):
    def edit(s):  # 180 points: a point takes ~10 ms and a task holds the 3 contexts of one workload, so 20 kills
        s["axes"]["workload.batch"] = {"range": [1, 30, 1]}  # that each let 1-3 more points in leave most undone
        s["axes"]["contexts"] = ["1K", "4K", "16K"]
    path = _spec(tmp_path, edit)
    reference = tmp_path / "ref"
    assert _sweep(str(path), "--workers", "1", "--out", str(reference)).exit_code == 0
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "archsim", "sweep", str(path), "--workers", "2", "--quiet"]
    out = tmp_path / "out"
    rng = random.Random(23)
    kills = 0
    for attempt in range(20):
        proc = subprocess.Popen([*cmd, "--out", str(out), *(["--resume"] if attempt else [])], env=env,
                                start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _wait_for_kill_instant(proc, out, rng)
        if proc.poll() is not None:
            assert proc.returncode == 0, proc.stderr.read().decode()
            break
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        kills += 1
        keys = _store_keys(out) if (out / "points.sqlite").exists() else []
        assert len(keys) == len(set(keys))
    assert kills == 20, kills
    result = subprocess.run([*cmd, "--out", str(out), "--resume"], env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    keys = _store_keys(out)
    assert len(keys) == 180 == len(set(keys))
    assert _rows(out / "points.csv") == _rows(reference / "points.csv")


# -- how points reach the workers ------------------------------------------------------------------------------

def test_batches_keep_an_affinity_on_one_worker_and_run_the_largest_first():
    from archsim.sweep.runner import BATCH_MAX, PlannedPoint, batches

    def points(groups: dict[str, int]) -> list[PlannedPoint]:
        out = []
        for affinity, n in groups.items():
            out += [PlannedPoint(len(out), {}, {}, [], f"{affinity}{i}", affinity) for i in range(n)]
        return out

    tasks = batches(points({"a": 3, "b": 20, "c": 20, "": 2}), workers=2)  # "": no affinity, a task each
    assert [len(t) for t in tasks] == [5] * 8 + [3, 1, 1]  # at most 45 / (4 x 2) -> 6 a task, split evenly
    assert all(len({p.affinity for p in t}) == 1 for t in tasks)
    assert sorted(p.key for t in tasks for p in t) == sorted(p.key for p in points({"a": 3, "b": 20, "c": 20,
                                                                                     "": 2}))
    assert [p.key for p in tasks[0]] == [f"b{i}" for i in range(5)]  # plan order inside a task
    big = batches(points({"a": 1000}), workers=1)
    assert max(len(t) for t in big) == BATCH_MAX and sum(len(t) for t in big) == 1000
    assert [len(t) for t in batches(points({"a": 4}), workers=2)] == [1, 1, 1, 1]  # a search's small batch


def test_bench_points_group_by_their_pool_not_their_links_or_system():
    from archsim.sweep.runner import batches, plan

    planned = plan(load_spec(REPO / "configs" / "sweeps" / "bench-200.yaml"))
    tasks = batches(planned, workers=2)
    # the 10 PNM designs (lanes x SRAM) of the shared pool: each task holds one, over g25 and g15, every link
    # scale and both contexts, so one worker runs its timed PNM kernels once
    assert [len(t) for t in tasks] == [20] * 10
    for task in tasks:
        keys = {(p.point["system.pool.pnm.macs_per_cycle"], p.point["system.pool.pnm.sram"]) for p in task}
        assert len(keys) == 1 and {p.point["system"] for p in task} == {"g25", "g15"}


def test_best_so_far_is_what_the_whole_rows_give_after_every_row(tmp_path):
    import random as random_

    from archsim.sweep.runner import BestSoFar, best_text, pareto

    def edit(s):
        s["objectives"] = [{"key": "decode_step_ns", "goal": "minimize", "select": {"context": "4K"}},
                           {"key": "tokens_per_s", "goal": "maximize", "select": {"context": "4K"}}]
    rng = random_.Random(3)
    for objectives in (1, 2):
        spec = load_spec(_spec(tmp_path, edit if objectives == 2 else None, f"s{objectives}.yaml"))
        rows, best = [], BestSoFar(spec)
        for _ in range(300):
            step, tps = rng.choice([1.0, 2.0, 3.0]) * rng.randint(1, 9), float(rng.randint(1, 9))
            status = rng.choice(["ok"] * 5 + ["failed: x"])
            entry = {"system": "gpu-hbm", "context": 4096, "status": "ok", "decode_step_ns": step,
                     "tokens_per_s": tps}
            rows.append({"status": status, "result": {"results": [entry]}})
            assert best.add(rows[-1]) == best_text(spec, rows)
            if objectives == 2:
                assert best.text() == f"pareto {len(pareto(spec, rows))}"
        assert best.text() != "best -"


def test_a_point_breaking_a_constraint_is_neither_best_nor_on_the_front(tmp_path):
    from archsim.sweep.runner import best_text, feasible, objective_values, pareto

    def edit(s):
        s["objectives"] = [{"key": "decode_step_ns", "goal": "minimize", "select": {"context": "4K"}},
                           {"key": "tokens_per_s", "goal": "maximize", "select": {"context": "4K"}}]
        s["constraints"] = [{"key": "tokens_per_s", "min": 100, "select": {"context": "4K"}},
                            {"key": "energy_pJ_per_token", "max": 5, "select": {"context": "4K"}}]
    spec = load_spec(_spec(tmp_path, edit))

    def row(step, tps, energy=1.0):
        entry = {"system": "gpu-hbm", "context": 4096, "status": "ok", "decode_step_ns": step, "tokens_per_s": tps}
        if energy is not None:
            entry["energy_pJ_per_token"] = energy
        return {"status": "ok", "result": {"results": [entry]}}
    rows = [row(10.0, 200.0), row(1.0, 99.0), row(2.0, 500.0, energy=6.0), row(3.0, 900.0, energy=None),
            row(12.0, 300.0)]
    assert [feasible(spec, r) for r in rows] == [True, False, False, False, True]  # below min, above max, missing
    assert objective_values(spec, rows[1]) is None
    assert pareto(spec, rows) == [0, 4]  # the three that would dominate both break a constraint
    single = load_spec(_spec(tmp_path, lambda s: edit(s) or s["objectives"].pop(), "single.yaml"))
    assert best_text(single, rows) == "best decode_step_ns 10"


@pytest.mark.component
def test_local_workers_are_forked_warm_from_a_single_threaded_process():
    """The CLI's process has one thread: its workers are forked after it loaded the spec, so they hold what it
    parsed and imported (spawned workers would not hold the spec, which only the main process reads)."""
    script = """
import os, sys
from archsim.sweep.runner import _local_pool
from archsim.sweep.spec import load_spec

def probe():
    from archsim.config import yaml_files
    return (os.getppid(), any("name: bench-200" in text for text in yaml_files._PARSED),
            "archsim.memory" in sys.modules)

if __name__ == "__main__":
    load_spec("bench-200")
    pool = _local_pool(2)
    print(pool.submit(probe).result() == (os.getpid(), True, True))
    pool.shutdown()
"""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert result.stdout.strip() == ("True" if sys.platform == "linux" else "False"), result.stderr


def test_a_worker_reads_no_config_file_again_for_its_next_points(monkeypatch):
    from archsim.config import yaml_files
    from archsim.sweep.runner import plan, run_points

    planned = plan(load_spec(REPO / "configs" / "sweeps" / "bench-200.yaml"))
    items = [(p.inputs, p.overrides) for p in planned[:2] + planned[100:102]]  # g25 and g15
    run_points("simulate", [items[0], items[2]], None)  # one point of each system
    parsed = []
    real = yaml_files._parse
    monkeypatch.setattr(yaml_files, "_parse", lambda text, file: parsed.append(file) or real(text, file))
    outs = run_points("simulate", items, None)
    assert [o["status"] for o in outs] == ["ok"] * 4
    assert parsed == []  # every system, memory, PNM, GPU, energy and link file parsed at the first point only


# -- Optuna searches -------------------------------------------------------------------------------------------

def _search(method: str, count: int, objectives: list[dict]):
    def edit(s):
        s["axes"] = {"workload.batch": [1, 2, 4, 8, 16, 32], "contexts": ["1K", "4K", "16K"]}
        s["search"] = {"method": method, "count": count, "seed": 5, "batch": 2}
        s["objectives"] = objectives
    return edit


@pytest.mark.slow
def test_tpe_search_is_reproducible_and_resumes_from_the_store(tmp_path):
    objectives = [{"key": "decode_step_ns", "goal": "minimize", "select": {}}]
    path = _spec(tmp_path, _search("tpe", 8, objectives))
    a = _sweep(str(path), "--workers", "2", "--out", str(tmp_path / "a"))
    b = _sweep(str(path), "--workers", "1", "--out", str(tmp_path / "b"))
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    rows = _rows(tmp_path / "a" / "points.csv")
    assert rows == _rows(tmp_path / "b" / "points.csv") and 1 <= len(rows) <= 8
    result = CliRunner().invoke(main, ["sweep", str(path), "--out", str(tmp_path / "a"), "--resume"])
    assert result.exit_code == 0 and "(0 computed now" in result.output, result.output


@pytest.mark.slow
def test_nsga2_writes_the_pareto_front(tmp_path):
    objectives = [{"key": "decode_step_ns", "goal": "minimize"}, {"key": "tokens_per_s", "goal": "maximize"}]
    path = _spec(tmp_path, _search("nsga2", 12, objectives))
    result = _sweep(str(path), "--workers", "2", "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    points = _rows(tmp_path / "out" / "points.csv")
    front = _rows(tmp_path / "out" / "pareto.csv")
    by_axes = {(r["workload.batch"], r["contexts"]): r for r in points}
    assert front and all(by_axes[(r["workload.batch"], r["contexts"])].items() >= r.items() for r in front)

    def values(row):
        (step,) = [float(v) for k, v in row.items() if k.endswith(".decode_step_ns") and v]
        (tps,) = [float(v) for k, v in row.items() if k.endswith(".tokens_per_s") and v]
        return step, tps
    for row in front:  # nothing in the sweep dominates a front point
        s, t = values(row)
        assert not any(s2 <= s and t2 >= t and (s2, t2) != (s, t) for s2, t2 in map(values, points))
    assert (tmp_path / "out" / "pareto.png").stat().st_size > 5000


# -- the keys sweeps added -------------------------------------------------------------------------------------

def test_bandwidth_scale_multiplies_every_links_raw_rate_and_workload_overrides_apply():
    from archsim.errors import ConfigError
    from archsim.system import load_system_config, load_workload

    base = load_system_config("g25").topology
    scaled = load_system_config("g25", ["system.interconnect.bandwidth_scale=2.5"]).topology
    assert [link.bandwidth_GBps * 2.5 for link in base.links] == [link.bandwidth_GBps for link in scaled.links]
    assert [link.reverse_bandwidth_GBps * 2.5 for link in base.links] == \
        [link.reverse_bandwidth_GBps for link in scaled.links]
    with pytest.raises(ConfigError, match="must be positive") as err:
        load_system_config("g25", ["system.interconnect.bandwidth_scale=0"])
    assert err.value.where == "system.interconnect.bandwidth_scale"
    assert load_workload("llama3-8b-b1", ["workload.batch=3"]).batch == 3
    pool = load_system_config("g25", ["system.pool.memory.timing.tFAW=40ns"]).pool
    assert pool.memory.timing.tFAW != load_system_config("g25").pool.memory.timing.tFAW
    assert pool.memory.timing.tFAW == load_system_config("g25", ["system.pool.memory_set={timing.tFAW: 40ns}"]) \
        .pool.memory.timing.tFAW
    with pytest.raises(ConfigError, match="unknown key"):
        load_workload("llama3-8b-b1", ["workload.batchx=3"])


def test_simulate_set_takes_workload_keys(tmp_path):
    out = tmp_path / "s.json"
    result = CliRunner().invoke(main, ["simulate", "gpu-hbm", "--workload", "llama3-8b-b1", "--contexts", "4K",
                                       "--set", "workload.instances=1", "--set", "workload.batch=4", "--quiet",
                                       "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["workload"]["batch"] == 4
    line = _error_line(CliRunner().invoke(main, ["simulate", "gpu-hbm", "--workload", "llama3-8b-b1",
                                                 "--set", "scenario.x=1"]))
    assert "--set: 'scenario.x=1': a --set key starts with system. or workload." in line


@pytest.mark.slow
def test_sensitivity_plots_per_axis_from_the_store(tmp_path):
    out = tmp_path / "out"
    assert _sweep(str(_spec(tmp_path)), "--workers", "1", "--out", str(out)).exit_code == 0
    pngs = sorted(p.name for p in (out / "sensitivity").iterdir())
    assert pngs == ["00-workload.batch.png", "01-contexts.png", "02-system.gpus.count.png",
                    "03-workload.tensor_parallel.png"]
    assert all((out / "sensitivity" / name).stat().st_size > 5000 for name in pngs)
    from archsim.sweep.runner import plan, sensitivity
    from archsim.sweep.store import Store

    spec = load_spec(tmp_path / "spec.yaml")
    store = Store(out / "points.sqlite")
    try:
        rows = store.rows()
    finally:
        store.close()
    by_batch = sensitivity(spec, plan(spec), rows, "workload.batch")
    csv_rows = _rows(out / "points.csv")
    for value, best, _median, worst in by_batch:  # the 4K entry's decode step over the points with this batch
        steps = [float(r["gpu-hbm.4096.decode_step_ns"]) for r in csv_rows if r["workload.batch"] == str(value)
                 and r["gpu-hbm.4096.decode_step_ns"]]
        assert (best, worst) == (min(steps), max(steps))
    assert [v for v, *_ in by_batch] == [1, 4]


# -- serve points ----------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_serve_points_with_seed_replicas_match_the_serve_command(tmp_path):
    spec = {"sweep": {"name": "serve", "command": "serve",
                      "inputs": {"systems": ["gpu-hbm"], "scenario": "multiturn", "requests": 50},
                      "axes": {"scenario.arrivals.rate_per_s": [1.0, 4.0], "seed": [0, 1]},
                      "objectives": [{"key": "ttft_ms.p99", "goal": "minimize", "select": {"system": "gpu-hbm"}}],
                      "constraints": [{"key": "throughput_tokens_per_s", "min": 1.0}]}}
    path = _write(tmp_path / "serve.yaml", spec)
    result = _sweep(str(path), "--workers", "1", "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    rows = _rows(tmp_path / "out" / "points.csv")
    assert [(r["scenario.arrivals.rate_per_s"], r["seed"]) for r in rows] == [("1.0", "0"), ("1.0", "1"),
                                                                             ("4.0", "0"), ("4.0", "1")]
    out = tmp_path / "direct.json"
    direct = CliRunner().invoke(main, ["serve", "gpu-hbm", "--scenario", "multiturn", "--requests", "50", "--seed",
                                       "1", "--set", "scenario.arrivals.rate_per_s=4.0", "--quiet", "--json",
                                       str(out)])
    assert direct.exit_code == 0, direct.output
    entry = json.loads(out.read_text())["results"][0]
    from archsim.sweep.commands import SERVE_RESULT_KEYS

    assert set(entry) == SERVE_RESULT_KEYS
    assert float(rows[3]["gpu-hbm.ttft_ms.p99"]) == entry["ttft_ms"]["p99"]
    assert float(rows[3]["gpu-hbm.energy_J_per_token"]) == entry["energy_J_per_token"]
    assert rows[0]["gpu-hbm.ttft_ms.p99"] != rows[1]["gpu-hbm.ttft_ms.p99"]  # replicas differ by seed
    groups = _rows(tmp_path / "out" / "replicas.csv")
    assert [(g["scenario.arrivals.rate_per_s"], g["replicas"]) for g in groups] == [("1.0", "2"), ("4.0", "2")]
    p99 = [float(r["gpu-hbm.ttft_ms.p99"]) for r in rows[2:]]
    assert float(groups[1]["gpu-hbm.ttft_ms.p99.mean"]) == pytest.approx(sum(p99) / 2, rel=1e-12)
    assert float(groups[1]["gpu-hbm.ttft_ms.p99.ci95"]) == pytest.approx(12.706 * abs(p99[0] - p99[1]) / 2, rel=1e-9)


@pytest.mark.slow
def test_timeout_and_memory_cap_fail_a_point_and_the_sweep_goes_on(tmp_path):
    from archsim.sweep.runner import run_point

    inputs = {"system": "gpu-hbm", "workload": "llama3-8b-b1", "contexts": "4K"}
    ok = run_point("simulate", inputs, ["workload.instances=1"], 60.0, 64 * 2**30)
    assert ok["status"] == "ok" and ok["result"]["results"][0]["decode_step_ns"] > 0
    serve = {"systems": ["gpu-hbm"], "scenario": "multiturn", "requests": 400_000}
    capped = run_point("serve", serve, [], None, 64 * 2**20)  # below the process's own size: any mmap fails
    assert capped["status"] == f"failed: memory cap of {64 * 2**20:,} bytes exceeded" and capped["result"] is None
    late = run_point("serve", serve, [], 0.5, None)
    assert late["status"] == "failed: timeout after 0.5 s" and late["wall_s"] < 5
    assert run_point("simulate", inputs, ["workload.instances=1"], None, None)["result"] == ok["result"]


def test_an_infeasible_status_names_shipped_files_as_every_checkout_does():
    from archsim.resources import SOURCE_ROOT
    from archsim.sweep.runner import run_point

    inputs = {"system": "g25", "workload": "llama3-70b-b16", "contexts": "32K"}
    point = run_point("simulate", inputs, ["system.pool.memory.timing.tRCDRD=200ns"], None, None)
    assert point["status"].startswith("infeasible: configs/systems/g25.yaml: system.pool.memory: memory config "
                                      "configs/memory/hbm3e.yaml: "), point["status"]
    assert str(SOURCE_ROOT) not in point["status"]


def test_a_selected_system_may_come_from_an_axis_or_a_path(tmp_path):
    def on_axis(s):
        s["inputs"].pop("system")
        s["axes"]["system"] = ["gpu-hbm", "g25"]
        s["objectives"][0]["select"]["system"] = "g25"
    assert load_spec(_spec(tmp_path, on_axis)).objectives[0].select == (("system", "g25"), ("context", 4096))

    def by_path(s):  # named inside its YAML: not checked before the points run
        s["inputs"]["system"] = str(REPO / "configs/systems/gpu-hbm.yaml")
        s["objectives"][0]["select"]["system"] = "anything"
    assert load_spec(_spec(tmp_path, by_path, "p.yaml")).objectives[0].select[0] == ("system", "anything")


def test_replicas_are_their_mean_and_95_percent_interval():
    from archsim.sweep.replicas import mean_ci95, replicas_text

    mean, half = mean_ci95([1.0, 2.0, 6.0])
    assert mean == 3.0 and half == pytest.approx(4.303 * math.sqrt(7.0) / math.sqrt(3.0))
    assert mean_ci95([5.0]) == (5.0, None)
    points = [{"rate": r, "seed": s} for r in (1, 2) for s in (0, 1, 2)]
    flats = [{"system": "g25", "ttft_ms.p99": float(i), "note": "x"} for i in range(6)]
    statuses = ["ok"] * 5 + ["failed: timeout after 1 s"]
    text = replicas_text(("rate", "seed"), points, flats, statuses)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == ["rate", "replicas", "ttft_ms.p99.mean", "ttft_ms.p99.ci95"]
    assert (rows[0]["rate"], rows[0]["replicas"], float(rows[0]["ttft_ms.p99.mean"])) == ("1", "3", 1.0)
    assert float(rows[0]["ttft_ms.p99.ci95"]) == pytest.approx(4.303 * 1.0 / math.sqrt(3.0))
    assert (rows[1]["replicas"], float(rows[1]["ttft_ms.p99.mean"])) == ("2", 3.5)  # the failed replica left out
    assert replicas_text(("rate",), points[:1], flats[:1], statuses[:1]) is None


def test_a_serve_objective_may_read_a_key_only_some_scenarios_have(tmp_path):
    """speculative.* and verifier.* exist only for such scenarios: a spec may still optimize them."""
    spec = {"sweep": {"name": "spec", "command": "serve",
                      "inputs": {"systems": ["gpu-hbm"], "scenario": "speculative", "requests": 4},
                      "axes": {"scenario.speculative.k": [2, 4]},
                      "objectives": [{"key": "speculative.tokens_per_step", "goal": "maximize",
                                      "select": {"system": "gpu-hbm"}}]}}
    assert load_spec(_write(tmp_path / "s.yaml", spec)).objectives[0].key == "speculative.tokens_per_step"
    spec["sweep"]["objectives"][0]["key"] = "speculation.tokens_per_step"
    from archsim.errors import ConfigError

    with pytest.raises(ConfigError, match="speculation"):
        load_spec(_write(tmp_path / "t.yaml", spec))


def test_a_points_key_hashes_the_files_its_inputs_name(tmp_path):
    """A scenario naming an empirical length table: editing the table makes another point; an untouched copy of
    the same files in another directory is the same point."""
    import shutil

    from archsim.sweep.commands import commands
    from archsim.sweep.store import point_key

    serve = commands()["serve"]

    def key(directory: Path) -> str:
        return point_key("serve", serve.resolve({"systems": ["gpu-hbm"], "scenario": str(directory / "mix.yaml")},
                                                []))

    scenarios = REPO / "configs" / "scenarios"
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        shutil.copy(scenarios / "long-short-mix.yaml", tmp_path / name / "mix.yaml")
        shutil.copy(scenarios / "long-short-mix.csv", tmp_path / name / "long-short-mix.csv")
    assert key(tmp_path / "a") == key(tmp_path / "b")
    table = tmp_path / "b" / "long-short-mix.csv"
    table.write_text(table.read_text() + "\n")
    assert key(tmp_path / "a") != key(tmp_path / "b")


# -- pnm points --------------------------------------------------------------------------------------------------

PNM_SPEC = {"sweep": {"name": "pnm", "command": "pnm",
                      "inputs": {"kernel": "isa/kernels/gqa_decode.s", "units": 2,
                                 "shape": "heads=32,kv_heads=2,head_dim=128,context=1024,batch=1"},
                      "axes": {"pnm.compute.macs_per_cycle": [64, 512], "define.TILE": [64], "shape.context": [2048]},
                      "objectives": [{"key": "pnm.cycles", "goal": "minimize"}]}}


def test_pnm_points_are_the_pnm_run_command(tmp_path):
    """Each point is `archsim pnm run` with its --set, -D and --shape: the same cycles and DRAM bytes."""
    result = _sweep(str(_write(tmp_path / "pnm.yaml", PNM_SPEC)), "--workers", "1", "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    rows = _rows(tmp_path / "out" / "points.csv")
    assert [r["pnm.compute.macs_per_cycle"] for r in rows] == ["64", "512"]
    for row in rows:
        out = tmp_path / f"direct-{row['pnm.compute.macs_per_cycle']}.json"
        direct = CliRunner().invoke(main, ["pnm", "run", "--kernel", str(REPO / "isa/kernels/gqa_decode.s"),
                                           "--shape", "heads=32,kv_heads=2,head_dim=128,context=2048,batch=1",
                                           "--units", "2", "-D", "TILE=64", "--set",
                                           f"pnm.compute.macs_per_cycle={row['pnm.compute.macs_per_cycle']}",
                                           "--reproducible", "--quiet", "--json", str(out)])
        assert direct.exit_code == 0, direct.output
        stats = json.loads(out.read_text())
        assert int(row["pnm.pnm.cycles"]) == stats["pnm"]["cycles"]
        assert int(row["pnm.memory.bytes_read"]) == stats["memory"]["bytes_read"]
    assert int(rows[0]["pnm.pnm.cycles"]) > int(rows[1]["pnm.pnm.cycles"])  # 64 MACs: compute-bound


@pytest.mark.parametrize(("edit", "where", "words"), [
    (lambda s: s["axes"].update({"pnm.compute.macs": [64]}), "sweep.axes.pnm.compute.macs", "no such key"),
    (lambda s: s["axes"].update({"memory.timing.tFAWx": ["40ns"]}), "sweep.axes.memory.timing.tFAWx", "no such key"),
    (lambda s: s["axes"].update({"system.gpus.count": [1]}), "sweep.axes.system.gpus.count", "starting with pnm."),
    (lambda s: s["objectives"][0].update({"key": "cycles"}), "sweep.objectives[0].key", "no key 'cycles'"),
])
def test_bad_pnm_specs_are_one_line(tmp_path, edit, where, words):
    spec = json.loads(json.dumps(PNM_SPEC))
    edit(spec["sweep"])
    path = _write(tmp_path / "bad.yaml", spec)
    line = _error_line(_sweep(str(path), "--out", str(tmp_path / "out")))
    assert f"{path}: {where}:" in line and words in line, line
    assert not (tmp_path / "out").exists()


# -- replay points -----------------------------------------------------------------------------------------------

REPLAY_SPEC = {"sweep": {"name": "replay", "command": "replay",
                         "inputs": {"trace": "traces/kv_decode_hbm3.npz", "memory": "configs/memory/hbm3.yaml"},
                         "axes": {"memory.timing.tFAW": ["16ns", "60ns"]},
                         "objectives": [{"key": "memory.bandwidth_GBps", "goal": "maximize"}]}}


def test_replay_points_are_the_replay_command(tmp_path):
    """Each point is `archsim replay` with its --set: the same stats; memory.* axes reach the memory config."""
    result = _sweep(str(_write(tmp_path / "r.yaml", REPLAY_SPEC)), "--workers", "1", "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    rows = _rows(tmp_path / "out" / "points.csv")
    for row in rows:
        out = tmp_path / f"direct-{row['memory.timing.tFAW']}.json"
        direct = CliRunner().invoke(main, ["replay", str(REPO / "traces/kv_decode_hbm3.npz"), "--memory",
                                           str(REPO / "configs/memory/hbm3.yaml"), "--set",
                                           f"memory.timing.tFAW={row['memory.timing.tFAW']}", "--reproducible",
                                           "--quiet", "--json", str(out)])
        assert direct.exit_code == 0, direct.output
        memory = json.loads(out.read_text())["memory"]
        assert float(row["replay.memory.bandwidth_GBps"]) == memory["bandwidth_GBps"]
        assert int(row["replay.memory.row_hits"]) == memory["row_hits"]
    bad = json.loads(json.dumps(REPLAY_SPEC))
    bad["sweep"]["axes"] = {"memory.timing.tFAWx": ["16ns"]}
    line = _error_line(_sweep(str(_write(tmp_path / "bad.yaml", bad)), "--out", str(tmp_path / "bad")))
    assert "sweep.axes.memory.timing.tFAWx" in line and "no such key" in line, line
