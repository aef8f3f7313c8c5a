"""The README quick start is two commands, and CI runs the second one verbatim."""

import json
import re
import shlex

import pytest
from click.testing import CliRunner

from archsim.cli import main
from tests.conftest import REPO

pytestmark = pytest.mark.system


def _quick_start() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = re.search(r"## Quick start\s+```sh\n(.*?)```", text, re.S)
    assert block, "README has no quick-start code block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_quick_start_is_two_commands_and_ci_runs_the_second():
    commands = _quick_start()
    assert len(commands) == 2
    assert commands[1] in (REPO / ".ci" / "run").read_text()


@pytest.mark.slow  # the README main job: about 17 s warm
def test_quick_start_main_job_runs_on_shipped_defaults(tmp_path, monkeypatch):
    main_job = _quick_start()[0]
    args = shlex.split(main_job.split("&&", 1)[1])
    assert args[0] == "archsim"
    monkeypatch.chdir(tmp_path)  # outputs land here; the shipped configs are found by name
    result = CliRunner().invoke(main, args[1:])
    assert result.exit_code == 0, result.output
    stats = json.loads((tmp_path / "out" / "serve.json").read_text())
    assert stats["schema"] == "archsim.serving/1"
    results = {r["system"]: r for r in stats["results"]}
    assert {"g25", "g15", "g25-nopnm", "g15-nopnm", "gpu-hbm", "host-dram", "nvme", "rdma-pool"} <= set(results)
    for r in results.values():
        assert r["status"] == "ok" and r["requests_completed"] == 2000
        assert 0 < r["ttft_ms"]["mean"] <= r["ttft_ms"]["p99"]
    assert results["g25"]["cost_model"]["max_rel_error_measured"] <= 0.03
    assert (tmp_path / "out" / "serve.png").stat().st_size > 10_000
