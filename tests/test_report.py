"""`archsim report`: one self-contained HTML page (no URL, no src), every plot an inline <svg> in an element with
an id, the plots' boxes as JSON inside; bad input is one line and exit 2. The pixel test renders the page in
headless Chromium and checks each plot's box holds >= 2 % non-background pixels and >= 3 colours (skipped
without Chromium only when CI is unset)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from archsim.cli import main
from archsim.report.html import plot_boxes
from tests.conftest import REPO

pytestmark = pytest.mark.system

STATS = str(REPO / "tests" / "data" / "report_stats.json")


def _run(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("report-inputs")
    system, serving = d / "compare.json", d / "serve.json"
    r = _run("compare", "gpu-hbm", "--workload", "llama3-8b-b1", "--contexts", "4K,32K", "--quiet",
             "--json", str(system))
    assert r.exit_code == 0, r.output
    r = _run("serve", "gpu-hbm", "host-dram", "--scenario", "multiturn", "--requests", "30", "--quiet",
             "--json", str(serving))
    assert r.exit_code == 0, r.output
    return [str(system), str(serving), STATS]


@pytest.fixture(scope="module")
def page(inputs, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "report.html"
    r = _run("report", *inputs, "-o", str(out))
    assert r.exit_code == 0, r.output
    return out


@pytest.mark.slow
def test_the_report_is_self_contained_with_an_svg_per_plot(page):
    text = page.read_text()
    assert not re.search(r"https?://", text)
    assert not re.search(r"\ssrc\s*=", text)
    divs = re.findall(r'<div class="plot" id="([^"]+)"[^>]*><svg', text)
    # compare (comparison, breakdown), serve, replay (commands and channels, bank heat map)
    assert divs == [f"plot-{k}" for k in range(1, 6)]
    assert text.count("<svg") == 5 and text.count("</svg>") == 5
    boxes = plot_boxes(text)
    assert [b["id"] for b in boxes["plots"]] == divs
    for b in boxes["plots"]:
        style = re.search(rf'id="{b["id"]}" style="([^"]+)"', text).group(1)
        assert f'left:{b["x"]}px;top:{b["y"]}px;width:{b["width"]}px;height:{b["height"]}px' in style
        assert b["x"] >= 0 and b["x"] + b["width"] <= boxes["page"]["width"]
        assert b["y"] + b["height"] <= boxes["page"]["height"]
    ys = [(b["y"], b["y"] + b["height"]) for b in boxes["plots"]]
    assert all(a[1] <= b[0] for a, b in zip(ys, ys[1:], strict=False))  # stacked, no overlap


@pytest.mark.slow
def test_the_same_inputs_give_the_same_page(inputs, page, tmp_path):
    again = tmp_path / "again.html"
    assert _run("report", *inputs, "-o", str(again)).exit_code == 0
    assert again.read_bytes() == page.read_bytes()


@pytest.mark.slow
def test_a_directory_input_reads_its_json_files(inputs, tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    for f in inputs:
        shutil.copy(f, sweep)
    (sweep / "notes.json").write_text('{"schema": "something/1"}')
    out = tmp_path / "r.html"
    r = _run("report", str(sweep), "-o", str(out))
    assert r.exit_code == 0, r.output
    assert len(plot_boxes(out.read_text())["plots"]) == 5


@pytest.mark.parametrize(("content", "needle"), [('{"schema": "archsim.timeline/1"}', "schema"),
                                                   ('{"schema": "archsim.gpu/1"}', "results: missing key"),
                                                   ('{"schema": "archsim.plan/1", "candidates": 3}',
                                                    "candidates: expected a non-empty list, got 3"),
                                                   ("{not json", "line 1: not JSON")])
def test_bad_input_is_one_line_and_exit_2(tmp_path, content, needle):
    bad, out = tmp_path / "bad.json", tmp_path / "r.html"
    bad.write_text(content)
    r = _run("report", str(bad), "-o", str(out))
    assert r.exit_code == 2, r.output
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and str(bad) in lines[0] and needle in lines[0]
    assert not out.exists()


@pytest.fixture(scope="module")
def more_inputs(tmp_path_factory):
    """A plan (candidates and a validation), a gpu predict and a sweep's --out."""
    d = tmp_path_factory.mktemp("more-inputs")
    runs = [("plan", "g25", "--workload", "llama3-70b-b16", "--contexts", "4K,32K", "--quiet", "--json",
             str(d / "plan.json")),
            ("plan", "g25", "--workload", "llama3-70b-b16", "--validate", "--grid",
             "contexts=1K,8K;batches=1,16;links=1", "--quiet", "--json", str(d / "validate.json")),
            ("gpu", "predict", "--shape", "hidden=4096,heads=32,kv_heads=8,ffn=14336", "--tokens", "1,16,256", "--tp",
             "1,2", "--json", str(d / "gpu.json"))]
    spec = d / "sweep.yaml"
    spec.write_text("sweep:\n  name: tiny\n  command: simulate\n  inputs: {workload: llama3-70b-b16, contexts: 4K}\n"
                    "  axes:\n    system: [g25]\n    system.interconnect.bandwidth_scale: [0.5, 1.0, 2.0]\n")
    runs.append(("sweep", str(spec), "--out", str(d / "sweep-out"), "--workers", "1"))
    for args in runs:
        r = _run(*args)
        assert r.exit_code == 0, r.output
    return d


@pytest.mark.slow
def test_plan_gpu_and_sweep_inputs_draw_their_values(more_inputs, tmp_path):
    from archsim.gpu.figure import gpu_figure
    from archsim.plan.figure import plan_figure
    from archsim.sweep.figure import read_points, sweep_figures

    d = more_inputs
    out = tmp_path / "r.html"
    r = _run("report", str(d / "plan.json"), str(d / "validate.json"), str(d / "gpu.json"), str(d / "sweep-out"),
             "-o", str(out))
    assert r.exit_code == 0, r.output
    assert len(plot_boxes(out.read_text())["plots"]) == 4  # plan, validation, gpu, one sweep axis
    plan = json.loads((d / "plan.json").read_text())
    bars = {p.get_gid(): p.get_width() for p in plan_figure(plan).axes[0].patches if p.get_gid()}
    first = min(plan["candidates"], key=lambda c: (c["context"], c["rank"]))
    assert bars["predicted:0.0"] == pytest.approx(first["predicted"]["cost"] / 1e6)
    assert bars["simulated:0.0"] == pytest.approx(first["simulated"]["cost"] / 1e6)
    gpu = json.loads((d / "gpu.json").read_text())
    line = next(ln for ln in gpu_figure(gpu).axes[0].get_lines() if ln.get_gid() == "layer:tp1")
    assert list(line.get_ydata()) == [x["layer_ns"] / 1e3 for x in gpu["results"] if x["tp"] == 1]
    (title, fig), = sweep_figures(d / "sweep-out")
    series = next(ln for ln in fig.axes[0].get_lines() if ln.get_gid() == "series:g25 @ 4K: decode step")
    points = sorted(read_points(d / "sweep-out"), key=lambda p: p["point"]["system.interconnect.bandwidth_scale"])
    assert list(series.get_ydata()) == [p["result"]["results"][0]["decode_step_ns"] / 1e6 for p in points]
    assert "3 of 3 points ok" in fig._suptitle.get_text() and title.endswith("bandwidth_scale")


def test_the_bank_heat_map_shows_the_per_bank_counts_that_add_up_to_the_totals():
    import numpy as np

    from archsim.report.html import bank_heat_figure

    tree = json.loads(Path(STATS).read_text())
    mem = tree["memory"]
    banks = mem["banks"]
    for key in ("row_misses", "row_conflicts", "bank_conflicts"):
        grid = np.asarray(banks[key])
        assert grid.shape == (8, 16) and grid.sum() == mem[key]  # HBM2: 8 pseudo-channels of 16 banks
    fig = bank_heat_figure(tree)
    opened, conflicts = (ax.get_images()[0].get_array() for ax in fig.axes[:2])
    assert np.array_equal(opened, np.asarray(banks["row_misses"]) + np.asarray(banks["row_conflicts"]))
    assert np.array_equal(conflicts, np.asarray(banks["bank_conflicts"]))
    assert fig.axes[0].get_xlabel() == "bank in the pseudo-channel"


def _chromium() -> str | None:
    return next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser")) if p), None)


@pytest.mark.slow
def test_every_plot_is_drawn_in_headless_chromium(page, tmp_path):
    _drawn_in_chromium(page, tmp_path)


@pytest.mark.slow
def test_plan_gpu_sweep_and_load_plots_are_drawn_in_headless_chromium(more_inputs, tmp_path):
    d = more_inputs
    load = d / "load.json"
    r = _run("serve", "gpu-hbm", "--scenario", "multiturn", "--duration", "5s", "--rates", "1,8", "--quiet",
             "--json", str(load))
    assert r.exit_code == 0, r.output
    out = tmp_path / "more.html"
    r = _run("report", str(d / "plan.json"), str(d / "validate.json"), str(d / "gpu.json"), str(d / "sweep-out"),
             str(load), "-o", str(out))
    assert r.exit_code == 0, r.output
    assert len(plot_boxes(out.read_text())["plots"]) == 5
    _drawn_in_chromium(out, tmp_path)


def _drawn_in_chromium(page, tmp_path) -> None:
    browser = _chromium()
    if browser is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but Debian's chromium is not installed")
        pytest.skip("no chromium (CI unset)")
    import matplotlib.image
    import numpy as np

    boxes = plot_boxes(page.read_text())
    shot = tmp_path / "shot.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size={boxes['page']['width']},{boxes['page']['height']}",
                    f"--screenshot={shot}", page.as_uri()], check=True, capture_output=True, timeout=120)
    pixels = (matplotlib.image.imread(shot)[..., :3] * 255).round().astype(np.uint8)
    for b in boxes["plots"]:
        region = pixels[b["y"]:b["y"] + b["height"], b["x"]:b["x"] + b["width"]]
        assert region.shape[:2] == (b["height"], b["width"]), b
        ink = np.any(region != 255, axis=-1).mean()
        colours = len(np.unique(region.reshape(-1, 3), axis=0))
        assert ink >= 0.02 and colours >= 3, (b["id"], ink, colours)
