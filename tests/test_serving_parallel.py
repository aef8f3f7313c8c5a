"""`archsim serve --jobs`: systems served in worker processes give the serial run's results byte for byte, in
the systems' order; a worker's bad-input error reaches the parent whole; the kernel compile lock."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from archsim.cli import main
from archsim.errors import ConfigError, TraceError
from archsim.kernel_cache import compile_lock
from archsim.serving import parallel
from archsim.serving.scenario import load_scenario
from archsim.system.config import load_system_configs

pytestmark = pytest.mark.system

CHEAP = ["gpu-hbm", "host-dram", "nvme"]


def _serve(tmp_path: Path, jobs: int, name: str) -> bytes:
    out = tmp_path / f"{name}.json"
    result = CliRunner().invoke(main, ["serve", *CHEAP, "--scenario", "multiturn", "--requests", "60",
                                       "--jobs", str(jobs), "--json", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    return out.read_bytes()


@pytest.mark.slow
def test_two_workers_give_the_serial_json_byte_for_byte(tmp_path):
    serial = _serve(tmp_path, 1, "serial")
    forked = _serve(tmp_path, 2, "forked")
    assert forked == serial
    assert b'"system": "nvme"' in forked


def test_runs_come_back_in_the_systems_order_whatever_order_they_finish_in():
    systems = load_system_configs(CHEAP, [])
    scenario = load_scenario("multiturn", [])
    seen: list[int] = []

    def requests_for(block_tokens: int):
        return scenario.requests(n_requests=40, duration_ns=None, seed=0, block_tokens=block_tokens)

    tasks = [(system, scenario, requests_for) for system in systems]
    runs = parallel.run_systems(tasks, warmup=0, jobs=2, on_done=lambda k, run, seconds: seen.append(k))
    assert seen == [0, 1, 2]
    assert [run.system.name for run in runs] == CHEAP
    assert all(run.status == "ok" for run in runs)


def test_a_bad_input_error_in_a_worker_reaches_the_parent_with_its_file_and_key(monkeypatch):
    systems = load_system_configs(CHEAP[:2], [])

    def failing(system, scenario, requests_for, *, warmup, record=False):
        if system.name == "host-dram":
            raise ConfigError("not a size", file="configs/systems/host-dram.yaml", where="system.kv.capacity")
        return parallel.SystemRun(system, "ok")

    monkeypatch.setattr(parallel, "run_system", failing)  # forked workers inherit the patch
    with pytest.raises(ConfigError) as caught:
        parallel.run_systems([(s, None, None) for s in systems], warmup=0, jobs=2, on_done=lambda *a: None)
    assert (caught.value.file, caught.value.where, caught.value.detail) == (
        "configs/systems/host-dram.yaml", "system.kv.capacity", "not a size")


def test_archsim_errors_pickle_with_their_location():
    for error in (ConfigError("bad", file="a.yaml", where="x.y"), TraceError("short", where="line 3")):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error)
        assert (again.file, again.where, again.detail) == (error.file, error.where, error.detail)


@pytest.mark.slow
def test_kernel_systems_go_first_when_cached_and_around_the_others_when_they_compile():
    systems = load_system_configs(["gpu-hbm", "g25", "nvme", "g15", "g25-nopnm"], [])
    assert [parallel.uses_memory_kernel(s) for s in systems] == [False, True, False, True, False]
    # g25 and g15 together would be more than half the estimated work: one worker each, longest first
    assert parallel.hand_out_order(systems, cached=lambda s: True) == [[1], [3], [0], [2], [4]]
    assert parallel.hand_out_order(systems, cached=lambda s: False) == [[1], [0], [2], [4], [3]]
    # the README main job: g25 and g15 (equal pools) in turn on one worker, the six others on the other
    main_job = load_system_configs(["g25", "g15", "g25-nopnm", "g15-nopnm", "gpu-hbm", "host-dram", "nvme",
                                    "rdma-pool"], [])
    assert parallel.hand_out_order(main_job, cached=lambda s: True) == [[0, 1], [2], [3], [4], [5], [6], [7]]
    # cold, g25 carries the compile: g15 comes last, to the worker that served the six others meanwhile
    assert parallel.hand_out_order(main_job, cached=lambda s: False) == [[0], [2], [3], [4], [5], [6], [7], [1]]
    # different pools never share a group
    other_pool = load_system_configs(["g25"], ["system.pool.devices=4"])
    mixed = [*other_pool, *main_job[1:]]
    assert [0, 1] not in parallel.hand_out_order(mixed, cached=lambda s: True)


def test_a_compile_lock_held_keeps_another_process_waiting(tmp_path):
    index = tmp_path / "cache" / "kernel.nbi"
    dispatcher = SimpleNamespace(_cache=SimpleNamespace(_cache_file=SimpleNamespace(_index_path=str(index))))
    probe = ("import fcntl, sys\n"
             "f = open(sys.argv[1], 'a')\n"
             "try:\n    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n    print('free')\n"
             "except BlockingIOError:\n    print('held')\n")

    def other_process_sees() -> str:
        run = subprocess.run([sys.executable, "-c", probe, str(index) + ".lock"], capture_output=True, text=True,
                             check=True)
        return run.stdout.strip()

    with compile_lock(dispatcher, "a test"):
        assert other_process_sees() == "held"
    assert other_process_sees() == "free"


def test_without_numba_cache_internals_the_compile_runs_unlocked():
    with compile_lock(object(), "a test"):
        pass
