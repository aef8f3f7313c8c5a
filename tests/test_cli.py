"""The command line end to end: summary, JSON contract, determinism, errors as one line with exit code 2."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from archsim.cli import main
from archsim.trace.native import save_physical_trace
from archsim.trace.text_formats import write_dramsim3
from tests.conftest import REPO

CONTRACT = ["sim.requests", "sim.cycles", "sim.wall_s", "sim.requests_per_s", "memory.bandwidth_GBps",
            "memory.peak_bandwidth_GBps", "memory.read_latency_cycles.mean", "memory.read_latency_cycles.p50",
            "memory.read_latency_cycles.p99", "memory.read_latency_ns.mean", "memory.read_latency_ns.p50",
            "memory.read_latency_ns.p99", "memory.row_hits", "memory.row_misses", "memory.row_conflicts",
            "memory.row_hit_rate", "memory.bank_conflicts", "memory.commands.ACT", "memory.commands.PRE",
            "memory.commands.RD", "memory.commands.WR", "memory.commands.REF"]


def _get(tree, dotted):
    for key in dotted.split("."):
        tree = tree[key]
    return tree


@pytest.fixture()
def trace(tmp_path):
    rng = np.random.default_rng(5)
    n = 3000
    path = tmp_path / "mix.npz"
    save_physical_trace(path, np.sort(rng.integers(0, 4000, n)), rng.integers(0, 2**22, n).astype(np.uint64) * 32,
                        (rng.random(n) < 0.25).astype(np.uint8), (rng.random(n) < 0.5).astype(np.uint8))
    return path


def test_replay_writes_the_contract_and_is_deterministic(tmp_path, trace):
    runner = CliRunner()
    outs = []
    for i in range(2):
        out = tmp_path / f"s{i}.json"
        result = runner.invoke(main, ["replay", str(trace), "--memory", str(REPO / "configs/memory/hbm3.yaml"),
                                      "--json", str(out), "--reproducible"])
        assert result.exit_code == 0, result.output
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    stats = json.loads(outs[0])
    assert stats["schema"] == "archsim.stats/1"
    for key in CONTRACT:
        assert isinstance(_get(stats, key), int | float), key
    assert stats["sim"]["requests"] == 3000
    mem = stats["memory"]
    assert mem["row_hits"] + mem["row_misses"] + mem["row_conflicts"] + mem["forwarded"] == 3000
    assert 0 < mem["bandwidth_GBps"] <= mem["peak_bandwidth_GBps"]
    assert set(mem["sources"]) == {"host", "pnm"}
    assert sum(s["requests"] for s in mem["sources"].values()) == 3000
    assert len(mem["channels"]) == 16
    assert "bandwidth" in result.output and "read latency" in result.output


def test_replay_with_protocol_check(tmp_path, trace):
    result = CliRunner().invoke(main, ["replay", str(trace), "--memory", str(REPO / "configs/memory/hbm3.yaml"),
                                       "--check", "--quiet", "--json", str(tmp_path / "s.json")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "s.json").read_text())["checker"]["violations"] == 0


def test_help_lists_every_command():
    result = CliRunner().invoke(main, ["--help"])
    for command in ("replay", "config", "gpu"):
        assert command in result.output


@pytest.mark.parametrize("setting,where", [
    ("memory.timing.tRAS=10", "memory.timing.tRAS"),
    ("memory.timing.tRC=20", "memory.timing.tRC"),
    ("memory.timing.tRP=14parsecs", "memory.timing.tRP"),
    ("memory.controller.bogus=1", "memory.controller.bogus"),
    ("memory.organization.rows=1000", "memory.organization.capacity"),
    ("memory.address_mapping.scheme=rorabgbach", "memory.address_mapping.scheme"),
    ("memory.nothere.x=1", "memory.nothere"),
])
def test_bad_config_is_one_line_exit_2_no_output(tmp_path, trace, setting, where):
    out = tmp_path / "s.json"
    result = CliRunner().invoke(main, ["replay", str(trace), "--memory", str(REPO / "configs/memory/hbm3.yaml"),
                                       "--set", setting, "--json", str(out)])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and where in lines[0] and "hbm3.yaml" in lines[0]
    assert not out.exists()


def test_addresses_beyond_capacity(tmp_path):
    path = tmp_path / "far.trace"
    write_dramsim3(path, np.array([0, 1]), np.array([64, 2**40], dtype=np.uint64), np.array([0, 0]))
    runner = CliRunner()
    args = ["replay", str(path), "--memory", str(REPO / "configs/memory/hbm2.yaml"), "--quiet"]
    result = runner.invoke(main, args)
    assert result.exit_code == 2 and "beyond the memory's capacity" in result.output and "far.trace" in result.output
    assert "request 1: address 0x10000000000 is beyond" in result.output and result.output.count("request") == 1
    assert runner.invoke(main, args + ["--wrap"]).exit_code == 0


def test_missing_key_in_file(tmp_path, trace):
    cfg = tmp_path / "m.yaml"
    cfg.write_text("memory:\n  organization: {channels: 8}\n")
    result = CliRunner().invoke(main, ["replay", str(trace), "--memory", str(cfg)])
    assert result.exit_code == 2 and "memory.organization" in result.output and "m.yaml" in result.output


def test_config_show_resolved():
    result = CliRunner().invoke(main, ["config", "show", str(REPO / "configs/memory/hbm3.yaml"), "--resolved"])
    assert result.exit_code == 0
    assert "tFAW: 30ns" in result.output and "peak bandwidth: 819.2 GB/s" in result.output
    # controller and front-end defaults are spelled out, not left implicit
    assert "write_high_watermark=24" in result.output and "max_injections_per_cycle=0" in result.output
