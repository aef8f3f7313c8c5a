"""`archsim sweep` on Dask: a LocalCluster (`--scheduler local:2`) and a real `dask scheduler` with two
`dask worker` processes on localhost (`tcp://127.0.0.1:PORT`) give the same rows as local processes, for a grid
and for a random search; a scheduler that does not answer is one line within --connect-timeout."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import time

import pytest
from click.testing import CliRunner

from archsim.cli import main
from tests.conftest import REPO
from tests.test_sweep import _error_line, _rows, _spec

# found, not imported (about 0.4 s): the sweep imports distributed itself when it runs on Dask
if not os.environ.get("CI") and importlib.util.find_spec("distributed") is None:
    pytest.skip("the dse extra (pip install '.[dse]')", allow_module_level=True)

pytestmark = pytest.mark.system


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(*args: str):
    return CliRunner().invoke(main, ["sweep", *args, "--quiet"])


def _random(s: dict) -> None:  # 5 of the 8 grid points, drawn by a seeded permutation
    s["search"] = {"method": "random", "count": 5, "seed": 3}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A grid and a random search on local processes: (spec path, rows) of each."""
    tmp = tmp_path_factory.mktemp("ref")
    out = {}
    for name, edit in (("grid", None), ("random", _random)):
        path = _spec(tmp, edit, f"{name}.yaml")
        assert _run(str(path), "--workers", "2", "--out", str(tmp / name)).exit_code == 0
        out[name] = path, _rows(tmp / name / "points.csv")
    assert len(out["grid"][1]) == 8 and len(out["random"][1]) == 5
    return out


@pytest.mark.slow
def test_local_cluster_gives_the_rows_of_local_processes(tmp_path, reference):
    for name, (path, rows) in reference.items():
        result = _run(str(path), "--scheduler", "local:2", "--out", str(tmp_path / name))
        assert result.exit_code == 0, result.output
        assert _rows(tmp_path / name / "points.csv") == rows, name


@pytest.mark.slow
def test_tcp_scheduler_and_workers_on_localhost(tmp_path, reference):
    port = _free_port()
    dask = shutil.which("dask") or pytest.fail("the dask command is missing (pip install '.[dse]')")
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    procs = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        procs.append(subprocess.Popen([dask, "worker", f"tcp://127.0.0.1:{port}", "--host", "127.0.0.1",
                                       "--nworkers", "2", "--nthreads", "1", "--no-dashboard"],
                                      env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for name, (path, rows) in reference.items():
            result = _run(str(path), "--scheduler", f"tcp://127.0.0.1:{port}", "--connect-timeout", "30",
                          "--out", str(tmp_path / name))
            assert result.exit_code == 0, result.output
            assert _rows(tmp_path / name / "points.csv") == rows, name
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in reversed(procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.mark.slow
def test_a_scheduler_that_does_not_answer_is_one_line_within_the_timeout(tmp_path):
    start = time.perf_counter()
    line = _error_line(_run(str(_spec(tmp_path)), "--scheduler", f"tcp://127.0.0.1:{_free_port()}",
                            "--connect-timeout", "2", "--out", str(tmp_path / "out")))
    assert time.perf_counter() - start < 15
    assert "--scheduler: no Dask scheduler answered at tcp://127.0.0.1:" in line and "within 2 s" in line, line
    assert not (tmp_path / "out").exists()


def test_a_bad_scheduler_address_is_one_line(tmp_path):
    line = _error_line(_run(str(_spec(tmp_path)), "--scheduler", "udp://x", "--out", str(tmp_path / "out")))
    assert "--scheduler: expected tcp://HOST:PORT or local:N" in line




@pytest.mark.slow
@pytest.mark.parametrize("reply", [b"", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" * 64],
                         ids=["silent", "other-protocol"])
def test_a_peer_that_is_no_scheduler_is_one_line_within_the_timeout(tmp_path, reply):
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    held = []

    def serve() -> None:  # accept, say something else or nothing, and keep the connection open
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            if reply:
                conn.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()
    try:
        start = time.perf_counter()
        result = _run(str(_spec(tmp_path)), "--scheduler", f"tcp://127.0.0.1:{server.getsockname()[1]}",
                      "--connect-timeout", "2", "--out", str(tmp_path / "out"))
        assert time.perf_counter() - start < 15
        line = _error_line(result)
        assert "--scheduler: no Dask scheduler answered at tcp://127.0.0.1:" in line and "within 2 s" in line, line
        assert not (tmp_path / "out").exists()
    finally:
        server.close()
        for conn in held:
            conn.close()


@pytest.mark.slow
def test_timeout_and_memory_cap_hold_on_dask_workers(tmp_path):
    """A Dask worker runs a point with a deadline or a cap in a forked child, which enforces both: a point past
    its timeout and one past its cap fail as they do on local processes, and the sweep goes on."""
    import yaml

    spec = {"sweep": {"name": "limits", "command": "serve",
                      "inputs": {"systems": ["gpu-hbm"], "scenario": "multiturn"},
                      "axes": {"requests": [20, 400_000]}, "timeout_s": 3}}
    path = tmp_path / "limits.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = _run(str(path), "--scheduler", "local:1", "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    rows = _rows(tmp_path / "out" / "points.csv")
    assert [r["status"] for r in rows] == ["ok", "failed: timeout after 3 s"]
    spec["sweep"].pop("timeout_s")
    spec["sweep"]["memory_cap"] = "64MiB"  # below a worker's own size: the child's first mapping fails
    path.write_text(yaml.safe_dump(spec))
    result = _run(str(path), "--scheduler", "local:1", "--out", str(tmp_path / "capped"))
    assert result.exit_code == 0, result.output
    statuses = [r["status"] for r in _rows(tmp_path / "capped" / "points.csv")]
    assert len(statuses) == 2  # (a native abort under the cap is named as the cap too, with its signal)
    assert all(s.startswith(f"failed: memory cap of {64 * 2**20:,} bytes exceeded") for s in statuses), statuses
