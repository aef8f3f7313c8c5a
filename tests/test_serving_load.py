"""`archsim serve --rates`: each system at each offered load, every entry equal to a plain serve at that rate;
the load figure read through its artists; bad rates as one line naming the option or the scenario's key."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from click.testing import CliRunner  # noqa: E402

from archsim.cli import main  # noqa: E402
from archsim.serving.load import parse_rates  # noqa: E402
from archsim.serving.load_plot import NONE_SERVED, load_figure  # noqa: E402

pytestmark = pytest.mark.system

SYSTEMS = ["gpu-hbm", "host-dram"]
BASE = ["--scenario", "multiturn", "--duration", "10s", "--quiet"]


def _serve(*args: str):
    return CliRunner().invoke(main, ["serve", *args])


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("load")
    result = _serve(*SYSTEMS, *BASE, "--rates", "2,16", "--json", str(out / "load.json"),
                    "--requests-out", str(out / "requests.jsonl"), "--plot", str(out / "load.png"))
    assert result.exit_code == 0, result.output
    return json.loads((out / "load.json").read_text()), out


@pytest.mark.slow
def test_every_entry_equals_a_plain_serve_at_its_rate(swept, tmp_path):
    tree, _ = swept
    assert tree["rates_per_s"] == [2.0, 16.0]
    assert [(e["rate_per_s"], e["system"]) for e in tree["results"]] == [
        (2.0, "gpu-hbm"), (2.0, "host-dram"), (16.0, "gpu-hbm"), (16.0, "host-dram")]
    plain = tmp_path / "plain.json"
    result = _serve(*SYSTEMS, *BASE, "--set", "scenario.arrivals.rate_per_s=16", "--json", str(plain))
    assert result.exit_code == 0, result.output
    alone = json.loads(plain.read_text())["results"]
    assert [{k: v for k, v in e.items() if k != "rate_per_s"} for e in tree["results"][2:]] == alone


def test_a_higher_rate_brings_more_requests_and_more_throughput(swept):
    tree, _ = swept
    by = {(e["rate_per_s"], e["system"]): e for e in tree["results"]}
    for system in SYSTEMS:
        low, high = by[(2.0, system)], by[(16.0, system)]
        assert high["requests_completed"] > 4 * low["requests_completed"]
        # not 8x: a session's later turns come 30 s of think time apart, so the span grows with the turns
        assert high["throughput_tokens_per_s"] > 1.3 * low["throughput_tokens_per_s"]


def test_request_lines_carry_their_rate(swept):
    tree, out = swept
    lines = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    counts = {(r, s): 0 for r in tree["rates_per_s"] for s in SYSTEMS}
    for line in lines:
        counts[(line["rate_per_s"], line["system"])] += 1
    assert all(n > 0 for n in counts.values())
    assert (out / "load.png").stat().st_size > 10_000


def test_the_figure_draws_each_systems_json_values_in_its_own_style_with_the_legend_outside(swept):
    tree, _ = swept
    fig = load_figure(tree["results"], tree["rates_per_s"])
    throughput_ax = fig.axes[0]
    lines = {line.get_gid(): line for line in throughput_ax.get_lines()}
    styles = set()
    for system in SYSTEMS:
        line = lines[f"throughput_tokens_per_s:{system}"]
        expected = [e["throughput_tokens_per_s"] for e in tree["results"] if e["system"] == system]
        assert list(line.get_xdata()) == tree["rates_per_s"] and list(line.get_ydata()) == expected
        styles.add((line.get_marker(), line.get_linestyle()))
    assert len(styles) == len(SYSTEMS)
    assert [t.get_text() for t in throughput_ax.get_xticklabels()] == ["2", "16"]
    fig.canvas.draw()
    legend = fig.legends[0].get_window_extent()
    assert all(legend.x0 >= ax.get_window_extent().x1 for ax in fig.axes)


def test_an_infeasible_rate_is_marked_and_named_and_all_infeasible_says_so(swept):
    tree, _ = swept
    entries = [dict(e) for e in tree["results"]]
    entries[3].update(status="infeasible: the KV store is full (test)")
    fig = load_figure(entries, tree["rates_per_s"])
    gids = {a.get_gid() for a in fig.axes[0].get_children()}
    assert "infeasible:host-dram:16" in gids
    reasons = [t.get_text() for t in fig.axes[0].texts if (t.get_gid() or "").startswith("reason:")]
    assert reasons == ["host-dram: infeasible: the KV store is full (test)"]
    for e in entries:
        e["status"] = "infeasible: nothing fits (test)"
    fig = load_figure(entries, tree["rates_per_s"])
    assert all(any(t.get_text() == NONE_SERVED for t in ax.texts) for ax in fig.axes)


@pytest.mark.parametrize(("args", "words"), [
    (["--rates", ""], "Invalid value for '--rates': must not be empty"),
    (["--rates", "1,,2"], "--rates: '1,,2': give comma-separated"),
    (["--rates", "1,fast"], "--rates: 'fast' is not a number"),
    (["--rates", "0"], "--rates: '0': an arrival rate must be positive"),
    (["--rates", "inf"], "--rates: 'inf': an arrival rate must be positive and finite"),
    (["--rates", "2,2"], "--rates: '2' is given twice"),
    (["--rates", "1,2", "--timeline", "TIMELINE"], "--timeline: a timeline shows one offered load"),
])
def test_bad_rates_are_one_line_and_nothing_is_written(tmp_path, args, words):
    out = tmp_path / "out.json"
    args = [str(tmp_path / "t.json") if a == "TIMELINE" else a for a in args]
    result = _serve("gpu-hbm", *BASE, *args, "--json", str(out))
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], result.output
    assert not out.exists() and not (tmp_path / "t.json").exists()


def test_a_scenario_without_a_rate_is_named_with_its_file_and_key(tmp_path):
    result = _serve("gpu-hbm", "--scenario", "fixed-input", "--requests", "5", "--rates", "1,2",
                    "--json", str(tmp_path / "out.json"))
    assert result.exit_code == 2, result.output
    assert "fixed-input.yaml: scenario.arrivals.process: --rates sets the session arrival rate" in result.output
    assert "closed_loop" in result.output and not (tmp_path / "out.json").exists()


def test_rates_keep_their_order_and_value():
    assert parse_rates(" 0.5, 4,1e1 ") == [0.5, 4.0, 10.0]
