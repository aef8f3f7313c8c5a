"""The `archsim serve --plot` figure read through its artists: TTFT/TPOT CDFs per system built from the
per-request arrays, the stacked request-time and energy breakdowns equal to the JSON's figures, one (marker,
line style) per system, legends outside the axes, an infeasible system named with its reason."""

from __future__ import annotations

import warnings

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from archsim.serving import plots  # noqa: E402
from archsim.serving.run import (  # noqa: E402
    SystemRun,
    requests_source,  # noqa: E402
    result_entry,
    run_system,
)
from archsim.serving.scenario import load_scenario  # noqa: E402
from archsim.system.config import load_system_config  # noqa: E402

pytestmark = pytest.mark.component

SYSTEMS = ("gpu-hbm", "host-dram")


@pytest.fixture(scope="module")
def served():
    scenario = load_scenario("multiturn", [])
    requests_for = requests_source(scenario, 120, None, 0)
    runs = [run_system(load_system_config(s, []), scenario, requests_for, warmup=10) for s in SYSTEMS]
    blocked = SystemRun(load_system_config("nvme", []), "infeasible: the KV store is full (test)")
    runs.append(blocked)
    return runs, [result_entry(r, scenario) for r in runs]


def _figure(runs, entries, warmup=10):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = plots.serving_figure(runs, entries, "t", warmup)
        fig.canvas.draw()
    return fig


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


@pytest.mark.slow
def test_cdfs_are_the_measured_requests_latencies(served):
    runs, entries = served
    fig = _figure(runs, entries)
    ttft_ax, tpot_ax = fig.axes[0], fig.axes[1]
    for ax, key in ((ttft_ax, "ttft_ms"), (tpot_ax, "tpot_ms")):
        lines = {ln.get_gid().split(":", 1)[1]: ln for ln in ax.get_lines() if (ln.get_gid() or "").startswith("cdf:")}
        assert set(lines) == set(SYSTEMS)  # the infeasible system has no requests to draw
        for e in entries[:2]:
            x, y = np.asarray(lines[e["system"]].get_xdata()), np.asarray(lines[e["system"]].get_ydata())
            assert len(x) == e["requests_measured"] if key == "ttft_ms" else 0 < len(x) <= e["requests_measured"]
            assert np.all(np.diff(x) >= 0) and y[-1] == pytest.approx(1.0) and y[0] > 0
            assert np.mean(x) == pytest.approx(e[key]["mean"], rel=1e-6)
            assert np.percentile(x, 99) == pytest.approx(e[key]["p99"], rel=1e-6)
        assert "(ms)" in ax.get_xlabel() and ax.get_ylabel() == "fraction of measured requests"
    styles = {(ln.get_marker(), ln.get_linestyle()) for ln in fig.legends[0].get_lines()}
    assert len(styles) == 3
    plt.close(fig)


def test_request_time_bars_stack_the_json_breakdown(served):
    runs, entries = served
    fig = _figure(runs, entries)
    ax = fig.axes[2]
    assert [t.get_text() for t in ax.get_yticklabels()] == [*SYSTEMS, "nvme"]
    ends = np.zeros(3)
    for phase in plots.PHASES:
        (bars,) = [c for c in ax.containers if c.get_label() == plots.PHASE_LABELS[phase]]
        for i, patch in enumerate(bars.patches[:2]):
            assert patch.get_x() == pytest.approx(ends[i])
            assert patch.get_width() == pytest.approx(entries[i]["breakdown_ms"][phase])
        ends += [p.get_width() for p in bars.patches]
    assert ends[2] == 0
    notes = [t.get_text() for t in ax.texts]
    assert "infeasible: the KV store is full (test)" in notes
    assert "ms" in ax.get_xlabel()
    plt.close(fig)


def test_energy_bars_sum_to_the_json_energy(served):
    runs, entries = served
    fig = _figure(runs, entries)
    ax = fig.axes[3]
    for i, e in enumerate(entries[:2]):
        total = sum(c.patches[i].get_width() for c in ax.containers)
        assert total == pytest.approx(e["energy_J_per_token"] * 1e3, rel=1e-4)
    labels = {c.get_label() for c in ax.containers}
    assert "gpu" in labels and "host_dram" in labels
    assert ax.get_xlabel() == "energy per output token (mJ/token)"
    plt.close(fig)


def test_legends_sit_outside_every_axes(served):
    runs, entries = served
    fig = _figure(runs, entries)
    renderer = fig.canvas.get_renderer()
    boxes = [ax.get_window_extent(renderer) for ax in fig.axes]
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    assert len(legends) == 3
    for legend in legends:
        box = legend.get_window_extent(renderer)
        assert not any(_overlaps(box, b) for b in boxes)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["gpu-hbm", "host-dram", "nvme (infeasible)"]
    plt.close(fig)


def test_a_run_where_nothing_was_served_says_so(served):
    runs, entries = served
    fig = _figure(runs[2:], entries[2:])
    for ax in fig.axes:
        assert [t.get_text() for t in ax.texts if t.get_gid() == "none-served"] == [plots.NONE_SERVED]
    plt.close(fig)
