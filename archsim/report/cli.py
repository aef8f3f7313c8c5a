"""`archsim report`: the plots of archsim JSON outputs in one self-contained HTML file (archsim/report/html.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click


@click.command("report")
@click.argument("inputs", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="The HTML file to write.")
@click.option("--title", default="archsim report", show_default=True, help="The page's title.")
def report(inputs: Sequence[str], output: str, title: str) -> None:
    """One self-contained HTML page of the plots of archsim JSON outputs (inline SVG).

    INPUTS are archsim.system, archsim.serving and archsim.stats JSON files or directories of them; the page
    has no external reference and carries the plots' boxes as JSON."""
    from archsim.outputs import OutputPlan
    from archsim.report.html import build_report, read_inputs

    read = [f for p in map(Path, inputs) for f in ([p] if not p.is_dir() else [*p.glob("*.json"), p / "points.sqlite"])]
    outputs = OutputPlan(inputs=read)
    outputs.add(output, "--output", kind="html")
    page = build_report(read_inputs(inputs), title)
    outputs.write(output, lambda tmp: Path(tmp).write_text(page, encoding="utf-8"))
    outputs.commit()
    click.echo(f"  wrote {output}", err=True)


__all__ = ["report"]
