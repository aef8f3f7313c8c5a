"""`archsim simulate` / `archsim compare` end to end: the JSON contract, determinism, the plot, and bad input as
one line naming the config path with exit code 2."""

from __future__ import annotations

import json

import click
import pytest
import yaml
from click.testing import CliRunner

from archsim.cli import _Group
from archsim.system.cli import compare, simulate
from archsim.system.report import CONTRACT
from tests.conftest import REPO

pytestmark = pytest.mark.system


@click.group(cls=_Group)
def cli() -> None:
    """The commands as archsim/cli.py registers them (same error handling)."""


cli.add_command(simulate)
cli.add_command(compare)


def _run(*args: str):
    return CliRunner().invoke(cli, list(args))


def _error_line(result) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("archsim: error: ")
    return lines[0]


def _system_file(tmp_path, name: str = "g25", edit=None) -> str:
    tree = yaml.safe_load((REPO / f"configs/systems/{name}.yaml").read_text())
    if edit:
        edit(tree["system"])
    path = tmp_path / f"{name}-edited.yaml"
    path.write_text(yaml.safe_dump(tree))
    return str(path)


@pytest.mark.slow
def test_compare_writes_the_contract_deterministically_and_a_plot(tmp_path):
    outs = []
    for i in range(2):
        out = tmp_path / f"cmp{i}.json"
        result = _run("compare", "g25", "g15-nopnm", "gpu-hbm", "--workload", "llama3-70b-b16",
                      "--contexts", "4K,128K", "--json", str(out), "--plot", str(tmp_path / "cmp.png"))
        assert result.exit_code == 0, result.output
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    tree = json.loads(outs[0])
    assert tree["schema"] == "archsim.system/2"
    assert [(r["system"], r["context"]) for r in tree["results"]] == [
        ("g25", 4096), ("g25", 131072), ("g15-nopnm", 4096), ("g15-nopnm", 131072), ("gpu-hbm", 4096),
        ("gpu-hbm", 131072)]
    for r in tree["results"]:
        assert set(CONTRACT) <= set(r)
    ok = tree["results"][0]
    assert ok["decode_step_ns"] > ok["attention_ns"] > 0 and ok["bank_conflicts"] > 0 and 0 < ok["row_hit_rate"] < 1
    assert ok["energy_pJ_per_token"] > 0 and ok["link_bytes"]["pool_link:cxl_switch->pool"] > 0
    g1 = tree["results"][-1]
    assert g1["status"].startswith("infeasible") and g1["decode_step_ns"] is None
    assert (tmp_path / "cmp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "g15-nopnm" in result.output and "infeasible" in result.output


def test_compare_takes_the_same_set_as_simulate(tmp_path):
    sets = ("--set", "workload.batch=2", "--set", "system.gpus.count=8")
    trees = []
    for command, systems in (("compare", ("gpu-hbm", "g25-nopnm")), ("simulate", ("gpu-hbm",)),
                             ("simulate", ("g25-nopnm",))):
        out = tmp_path / f"{command}-{len(trees)}.json"
        result = _run(command, *systems, "--workload", "llama3-8b-b1", "--contexts", "4K", *sets, "--json", str(out),
                      "--quiet")
        assert result.exit_code == 0, result.output
        trees.append(json.loads(out.read_text()))
    both, alone = trees[0]["results"], [trees[1]["results"][0], trees[2]["results"][0]]
    assert [r["decode_step_ns"] for r in both] == [r["decode_step_ns"] for r in alone]
    assert trees[0]["workload"]["batch"] == 2
    line = _error_line(_run("compare", "gpu-hbm", "--workload", "llama3-8b-b1", "--set", "workload.bacth=2"))
    assert "workload.bacth" in line


def test_simulate_takes_its_workload_from_a_logical_trace(tmp_path):
    out = tmp_path / "trace.json"
    result = _run("simulate", "g25", "--trace", str(REPO / "traces/qwen2.5-0.5b_2l_decode.npz"), "--json", str(out))
    assert result.exit_code == 0, result.output
    tree = json.loads(out.read_text())
    assert tree["workload"]["model"] == "qwen2.5-0.5b" and tree["workload"]["batch"] == 4
    (r,) = tree["results"]
    assert r["context"] == 64 and r["kv_bytes"] == 2 * 4 * 2 * 2 * 65 * 64 * 2  # layers, batch, heads, K+V


def test_an_unreachable_pool_names_its_endpoint(tmp_path):
    link = {"protocol": "cxl", "bandwidth": "64GB/s", "efficiency": 0.9, "latency": "50ns", "energy_pJ_per_bit": 5.5}

    def edit(s):
        s["gpus"]["count"] = 2
        s["interconnect"] = {"inline": {
            "endpoints": {"gpu": {"count": 2}, "pool": {}}, "switches": {"sw": {"ports": 4, "latency": "100ns"}},
            "links": {"up": {"from": "gpu", "to": "sw", **link},
                      "pool_link": {"from": "pool", "to": "gpu0", **link}}}}  # an endpoint does not forward

    line = _error_line(_run("simulate", _system_file(tmp_path, edit=edit), "--workload", "llama3-70b-b1"))
    assert "system.interconnect.inline.endpoints.pool" in line and "unreachable" in line


@pytest.mark.parametrize(("system", "args", "where"), [
    ("gpu-hbm", ("--contexts", "128K"), "system.gpus.hbm_capacity"),
    ("g25", ("--contexts", "128K", "--set", "system.pool.devices=1"), "system.pool.devices"),
    ("host-dram", ("--contexts", "128K", "--set", "system.kv.capacity=512GiB"), "system.kv.capacity"),
])
def test_kv_that_fits_nowhere_is_an_infeasible_point_not_an_abort(tmp_path, system, args, where):
    out = tmp_path / "one.json"
    result = _run("simulate", system, "--workload", "llama3-70b-b16", "--contexts", "4K,128K", *args[2:],
                  "--json", str(out))
    assert result.exit_code == 0, result.output
    ok, full = json.loads(out.read_text())["results"]
    assert ok["status"] == "ok" and ok["decode_step_ns"] > 0
    assert full["context"] == 131072 and full["status"].startswith("infeasible: KV 640.0 GiB")
    assert full["decode_step_ns"] is None and f"{system} @ 131072 tokens: infeasible: KV 640.0 GiB" in result.output


def test_a_context_beyond_the_model_is_infeasible(tmp_path):
    out = tmp_path / "ctx.json"
    result = _run("compare", "g25", "gpu-hbm", "--workload", "llama3-70b-b1", "--contexts", "4K,256K",
                  "--json", str(out))
    assert result.exit_code == 0, result.output
    rows = {(r["system"], r["context"]): r for r in json.loads(out.read_text())["results"]}
    assert rows[("g25", 4096)]["status"] == "ok"
    for name in ("g25", "gpu-hbm"):
        assert rows[(name, 262144)]["status"] == ("infeasible: context 262144 tokens exceeds llama-3.1-70b's "
                                                  "maximum of 131072 (max_position_embeddings)")


def test_a_qos_reservation_above_100_percent_is_rejected(tmp_path):
    def edit(s):
        s["qos"]["reservation"] = {"host": 0.5, "pnm": 0.6}

    line = _error_line(_run("simulate", _system_file(tmp_path, "g25-qos", edit), "--workload", "llama3-70b-b1"))
    assert "system.qos.reservation" in line and "110 %" in line


def test_an_energy_table_missing_a_counted_action_is_rejected(tmp_path):
    table = yaml.safe_load((REPO / "configs/energy/default.yaml").read_text())
    del table["energy"]["actions"]["pnm.exp"]
    (tmp_path / "energy.yaml").write_text(yaml.safe_dump(table))

    def edit(s):
        s["energy"] = "energy.yaml"  # relative to the system file

    line = _error_line(_run("simulate", _system_file(tmp_path, edit=edit), "--workload", "llama3-70b-b1",
                            "--contexts", "4K"))
    assert "energy.yaml: energy.actions.pnm.exp" in line and "no entry" in line


@pytest.mark.parametrize(("edit", "where"), [
    (lambda s: s["pool"]["pnm"].update(lanes=4), "system.pool.pnm.lanes"),
    (lambda s: s.update(attention="pnm") or s["pool"].pop("pnm"), "system.pool.pnm"),
    (lambda s: s["sampling"].update(window_requests=5000), "system.sampling.window_requests"),
    (lambda s: s["pool"].update(memory="hbm9"), "system.pool.memory"),
    (lambda s: s["gpus"].update(hbm_bandwidth="3.35TB"), "system.gpus.hbm_bandwidth"),
    (lambda s: s["pool"]["pnm"].update(sram="4KiB"), "system.pool.pnm.sram"),
])
def test_bad_system_values_name_their_dotted_path(tmp_path, edit, where):
    line = _error_line(_run("simulate", _system_file(tmp_path, "g25", edit), "--workload", "llama3-70b-b1",
                            "--contexts", "4K"))
    assert f": {where}: " in line


def test_workload_and_trace_are_exclusive():
    result = _run("simulate", "g25")
    assert result.exit_code == 2 and "exactly one of --workload and --trace" in result.output
