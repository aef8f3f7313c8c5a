"""The plots read through their matplotlib artists: tick labels, one (marker, line style) per system, infeasible
points marked and annotated with their reason, the legend outside every axes, units on every axis, and an
all-infeasible figure that says so (without a matplotlib warning)."""

from __future__ import annotations

import warnings

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from archsim.system import report  # noqa: E402
from archsim.system.decode import StepResult  # noqa: E402

pytestmark = pytest.mark.unit

CONTEXTS = (4096, 32768, 131072)
REASON = "KV 80.0 GiB needs 10.0 GiB per GPU, 3.1 GiB of HBM left after the weights"


def _results(names=("g25", "g15-nopnm", "gpu-hbm")) -> list[StepResult]:
    out = []
    for i, name in enumerate(names):
        for c in CONTEXTS:
            if name == "gpu-hbm" and c == 131072:
                out.append(StepResult(name, "t", c, f"infeasible: {REASON}"))
            else:  # g25 and g15-nopnm nearly equal: the case where one line used to hide the other
                out.append(StepResult(name, "t", c, "ok", decode_step_ns=1e6 * (1 + c / 4096) * (1 + 1e-3 * i),
                                      energy_pJ_per_token=1e9 * (1 + i)))
    return out


def _figure(results, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a matplotlib warning fails the test
        fig = report.comparison_figure(results, **kw)
        fig.canvas.draw()
    return fig


def _data_lines(ax):
    return [ln for ln in ax.get_lines() if not (ln.get_gid() or "").startswith("infeasible:")]


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_context_axis_is_log_and_labelled_in_K():
    fig = _figure(_results())
    for ax in fig.axes:
        assert ax.get_xscale() == "log"
        assert [t.get_text() for t in ax.get_xticklabels()] == ["4K", "32K", "128K"]
        assert list(ax.get_xticks()) == list(CONTEXTS)
    plt.close(fig)


def test_each_system_has_its_own_marker_and_line_style():
    fig = _figure(_results())
    for ax in fig.axes:
        styles = {ln.get_label(): (ln.get_marker(), ln.get_linestyle()) for ln in _data_lines(ax)}
        assert set(styles) == {"g25", "g15-nopnm", "gpu-hbm"}
        assert len(set(styles.values())) == 3
    assert len({report.system_style(i) for i in range(32)}) == 32
    plt.close(fig)


def test_infeasible_points_are_marked_and_annotated_with_their_reason():
    fig = _figure(_results())
    latency, energy = fig.axes
    for ax in (latency, energy):
        marks = [ln for ln in ax.get_lines() if (ln.get_gid() or "").startswith("infeasible:")]
        assert [ln.get_gid() for ln in marks] == ["infeasible:gpu-hbm:131072"]
        assert list(marks[0].get_xdata()) == [131072]
        assert marks[0].get_markerfacecolor() in ("white", (1.0, 1.0, 1.0, 1.0))
    notes = [a for a in latency.texts if isinstance(a, matplotlib.text.Annotation)]
    assert len(notes) == 1
    assert notes[0].get_text().replace("\n", " ") == f"gpu-hbm infeasible: {REASON}"
    assert notes[0].xy[0] == 131072
    # the annotation stays inside the latency axes
    renderer = fig.canvas.get_renderer()
    box, axbox = notes[0].get_window_extent(renderer), latency.get_window_extent(renderer)
    assert axbox.x0 <= box.x0 and box.x1 <= axbox.x1
    # the feasible points of gpu-hbm stop at 32K
    line = next(ln for ln in _data_lines(latency) if ln.get_label() == "gpu-hbm")
    assert list(line.get_xdata()) == [4096, 32768]
    plt.close(fig)


def test_legend_is_outside_every_axes_and_names_each_system():
    fig = _figure(_results())
    renderer = fig.canvas.get_renderer()
    (legend,) = fig.legends
    box = legend.get_window_extent(renderer)
    for ax in fig.axes:
        assert not _overlaps(box, ax.get_window_extent(renderer))
        assert ax.get_legend() is None
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels[:3] == ["g25", "g15-nopnm", "gpu-hbm"] and labels[3].startswith("infeasible")
    plt.close(fig)


def test_every_axis_has_units():
    fig = _figure(_results())
    assert [ax.get_ylabel() for ax in fig.axes] == ["decode step latency (ms)", "energy per token (mJ/token)"]
    assert all(ax.get_xlabel() == "context (tokens per sequence)" for ax in fig.axes)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels() if t.get_text()]
    assert "10" in labels and not any("$" in t or "^" in t for t in labels)  # 10, not 10^1
    plt.close(fig)


def test_an_all_infeasible_run_says_so_in_the_figure_without_a_warning():
    results = [StepResult("a", "t", 4096, "infeasible: x too big"), StepResult("b", "t", 131072, "infeasible: y")]
    fig = _figure(results)
    for ax in fig.axes:
        said = [t for t in ax.texts if t.get_gid() == "all-infeasible"]
        assert len(said) == 1 and "every point is infeasible" in said[0].get_text().replace("\n", " ")
        assert not _data_lines(ax)
    notes = [a.get_text() for a in fig.axes[0].texts if isinstance(a, matplotlib.text.Annotation)]
    assert notes == ["a infeasible: x too big", "b infeasible: y"]
    plt.close(fig)


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_plot_writes_the_same_bytes_twice(tmp_path, suffix):
    paths = [tmp_path / f"a{suffix}", tmp_path / f"b{suffix}"]
    for p in paths:
        report.plot(_results(), p, "title")
    assert paths[0].read_bytes() == paths[1].read_bytes()


def test_the_breakdown_figure_stacks_the_critical_terms_to_the_step_and_names_infeasible_points():
    import numpy as np

    rows = [{"system": "a", "context": 4096, "status": "ok", "decode_step_ns": 3e6,
             "breakdown_ns": {"critical": {"gpu_weights": 2e6, "pnm": 1e6}, "overlapped": {"pool_dram": 9e5}},
             "energy_breakdown_pJ_per_token": {"gpu.flop": 1e9, "gpu.hbm_bit": 2e9, "dram.act": 5e8}},
            {"system": "b", "context": 131072, "status": f"infeasible: {REASON}", "breakdown_ns": {}}]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = report.breakdown_figure(rows)
        fig.canvas.draw()
    step_ax, energy_ax = fig.axes
    assert [t.get_text() for t in step_ax.get_yticklabels()] == ["a @ 4K", "b @ 128K"]
    widths = np.array([[p.get_width() for p in c.patches] for c in step_ax.containers])
    assert widths.sum(axis=0).tolist() == [3.0, 0.0]  # ms: the critical terms add up to the step
    assert {c.get_label() for c in step_ax.containers} == {"gpu_weights", "pnm"}  # overlapped work is not stacked
    energy = {c.get_label(): c.patches[0].get_width() for c in energy_ax.containers}
    assert energy == {"dram": pytest.approx(0.5), "gpu": pytest.approx(3.0)}
    assert f"infeasible: {REASON}" in [t.get_text() for t in step_ax.texts]
    assert step_ax.get_xlabel().endswith("(ms)") and energy_ax.get_xlabel() == "energy per token (mJ/token)"
    plt.close(fig)
