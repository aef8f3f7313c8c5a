"""A shipped capture end to end through the command line: logical trace -> `trace convert` -> `archsim replay`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from archsim.cli import main
from archsim.trace.logical import KIND_K, KIND_V, OP_READ, OP_WRITE, LogicalTrace
from tests.conftest import REPO

pytestmark = pytest.mark.system


def test_captured_trace_replays_through_the_dram_model(tmp_path: Path) -> None:
    """End to end: shipped capture -> mapping -> native physical trace -> `archsim replay` on HBM3."""
    repo = REPO
    memory = repo / "configs" / "memory" / "hbm3.yaml"
    logical_path = repo / "traces" / "tiny-llama_chat.npz"
    if not memory.is_file() or not logical_path.is_file():
        pytest.skip("HBM3 memory config or shipped trace missing")
    runner = CliRunner()
    physical = tmp_path / "p.npz"
    result = runner.invoke(main, ["trace", "convert", str(logical_path), "--to", "native", "-o", str(physical),
                                  "--capacity", "16GiB", "--channels", "32"])
    assert result.exit_code == 0, result.output
    stats_path = tmp_path / "stats.json"
    result = runner.invoke(main, ["replay", str(physical), "--memory", str(memory), "--quiet",
                                  "--json", str(stats_path)])
    assert result.exit_code == 0, result.output
    stats = json.loads(stats_path.read_text())["memory"]
    with LogicalTrace(logical_path) as trace:
        cols = trace.read()
    kv = (cols["kind"] == KIND_K) | (cols["kind"] == KIND_V)
    assert stats["reads"] * 32 == int(cols["bytes"][kv & (cols["op"] == OP_READ)].sum())
    assert stats["writes"] * 32 == int(cols["bytes"][kv & (cols["op"] == OP_WRITE)].sum())
