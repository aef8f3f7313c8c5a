"""The README quick start is two commands, and CI runs the second one verbatim."""

import re

from tests.conftest import REPO


def _quick_start() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = re.search(r"## Quick start\s+```sh\n(.*?)```", text, re.S)
    assert block, "README has no quick-start code block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_quick_start_is_two_commands_and_ci_runs_the_second():
    commands = _quick_start()
    assert len(commands) == 2
    assert commands[1] in (REPO / ".ci" / "run").read_text()


def test_quick_start_main_job_uses_shipped_files():
    main_job = _quick_start()[0]
    for path in re.findall(r"(?:traces|configs)/\S+", main_job):
        assert (REPO / path).exists(), path
