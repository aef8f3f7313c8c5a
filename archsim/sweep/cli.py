"""`archsim sweep SPEC`: a design-space sweep on local processes or a Dask cluster (registered lazily)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import click


@click.command("sweep")
@click.argument("spec_path", metavar="SPEC")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Local worker processes (default: the CPU count).")
@click.option("--scheduler", help="Run on Dask instead: tcp://HOST:PORT of a running scheduler, or local:N.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="The sweep's directory: store, points.csv (default: out/sweeps/<spec name>).")
@click.option("--resume", is_flag=True, help="Continue the sweep in --out: compute only the missing points.")
@click.option("--connect-timeout", "connect_timeout_s", type=click.FloatRange(min=0, min_open=True), default=10.0,
              show_default=True, help="Seconds to wait for the Dask scheduler.")
@click.option("--quiet", is_flag=True, help="No progress bar and no summary.")
def sweep(spec_path: str, workers: int | None, scheduler: str | None, out_dir: str | None, resume: bool,
          connect_timeout_s: float, quiet: bool) -> None:
    """Sweep a design space: a command's points over axes, kept in a resumable store, written to points.csv."""
    from archsim.sweep.runner import run_sweep
    from archsim.sweep.spec import load_spec

    start = time.perf_counter()
    spec = load_spec(spec_path)
    out = Path(out_dir) if out_dir else Path("out") / "sweeps" / spec.name
    summary = run_sweep(spec, out, workers=workers or os.cpu_count() or 1, scheduler=scheduler, resume=resume,
                        connect_timeout_s=connect_timeout_s, quiet=quiet)
    if not quiet:
        best = f", {summary['best']}" if summary["best"] else ""
        click.echo(f"sweep {spec.name}: {summary['points']} points ({summary['computed']} computed now; "
                   f"{summary['ok']} ok, {summary['infeasible']} infeasible, {summary['failed']} failed){best} "
                   f"-> {out / 'points.csv'} in {time.perf_counter() - start:.1f} s")


__all__ = ["sweep"]
