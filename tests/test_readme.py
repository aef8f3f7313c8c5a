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


def test_quick_start_main_job_runs_on_shipped_defaults(tmp_path, monkeypatch):
    main_job = _quick_start()[0]
    args = shlex.split(main_job.split("&&", 1)[1])
    assert args[0] == "archsim"
    monkeypatch.chdir(tmp_path)  # outputs land here; the shipped configs are found by name
    result = CliRunner().invoke(main, args[1:])
    assert result.exit_code == 0, result.output
    stats = json.loads((tmp_path / "out" / "compare.json").read_text())
    systems = {r["system"] for r in stats["results"]}
    assert {"g25", "g15", "g25-nopnm", "g15-nopnm", "gpu-hbm", "host-dram"} <= systems
    assert (tmp_path / "out" / "compare.png").stat().st_size > 10_000
