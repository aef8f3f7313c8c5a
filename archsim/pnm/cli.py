"""`archsim pnm run`: time a decode-attention kernel on every PNM unit of a memory device.

Errors are ArchsimError subclasses (ConfigError, ProgramError, TraceError) naming the file and the
line or dotted path; the top-level CLI prints them as one line and exits with code 2.
"""

from __future__ import annotations

from pathlib import Path

import click

from archsim.errors import ConfigError, ProgramError


def _defines(values: tuple[str, ...]) -> dict[str, object]:
    from archsim.isa.syntax import AsmSyntaxError, parse_defines

    try:
        return parse_defines(values)
    except AsmSyntaxError as exc:
        raise ProgramError(str(exc), where="-D") from None


def _split_overrides(values: tuple[str, ...]) -> tuple[list[str], list[str]]:
    memory, pnm = [], []
    for text in values:
        key = text.split("=", 1)[0].strip()
        if key.startswith("memory."):
            memory.append(text)
        elif key.startswith("pnm."):
            pnm.append(text)
        else:
            raise ConfigError(f"override {text!r} must start with memory. or pnm.", where="--set")
    return memory, pnm


@click.group("pnm")
def pnm() -> None:
    """Timed runs of PNM kernels on the simulated memory (see docs/pnm.md)."""


@pnm.command("run")
@click.option("--kernel", "kernel", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Kernel source, e.g. isa/kernels/gqa_decode.s.")
@click.option("--memory", "memory_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Memory config YAML (default: the one the PNM config names).")
@click.option("--pnm", "pnm_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="PNM config YAML (default: configs/pnm/default.yaml).")
@click.option("--shape", required=True, metavar="KEY=VALUE,...",
              help="Problem, e.g. heads=32,kv_heads=8,head_dim=128,context=8192,batch=1 (docs/pnm.md lists "
                   "every key).")
@click.option("-D", "--define", "defines", multiple=True, metavar="NAME=VALUE",
              help="Override a kernel constant (repeatable), e.g. -D TILE=128.")
@click.option("--set", "overrides", multiple=True, metavar="DOTTED.KEY=VALUE",
              help="Override a config value: memory.timing.tFAW=30ns or pnm.compute.vector_lanes=8 (repeatable).")
@click.option("--units", type=int, default=None, help="Use only the first N units of the device.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the stats tree here.")
@click.option("--reproducible", is_flag=True, help="Zero the host-timing stats so the JSON is byte-identical.")
@click.option("--quiet", is_flag=True, help="No report.")
@click.option("--timeline", "timeline_path", type=click.Path(dir_okay=False),
              help="Write each unit's instructions per execution unit, stalls and DMA transfers as a Chrome trace.")
@click.option("--timeline-window", metavar="START:END", help="Only this part of the run in the timeline (e.g. 0:5us).")
@click.option("--timeline-requests", type=int, metavar="N", help="Only each unit's first N instructions.")
def run(kernel: Path, memory_path: Path | None, pnm_path: Path | None, shape: str, defines: tuple[str, ...],
        overrides: tuple[str, ...], units: int | None, json_path: str | None, reproducible: bool,
        quiet: bool, timeline_path: str | None, timeline_window: str | None, timeline_requests: int | None) -> None:
    """Run KERNEL for SHAPE on the PNM units and print cycles, roofline, bandwidth and stalls."""
    from archsim.config.memory import load_memory_config
    from archsim.outputs import OutputPlan
    from archsim.pnm.timed.simulate import run_pnm
    from archsim.pnm.timed.stats import pnm_stats, pnm_summary_rows
    from archsim.pnm.timed.timeline import pnm_timeline
    from archsim.pnm.timed.unit_config import load_pnm_config
    from archsim.report.output import table, write_json
    from archsim.report.timeline import parse_window
    from archsim.resources import display_path

    memory_overrides, pnm_overrides = _split_overrides(overrides)
    pnm_cfg = load_pnm_config(pnm_path, pnm_overrides)
    if memory_path is None:
        if pnm_cfg.memory_path is None:
            raise ConfigError("no --memory given and the PNM config names no memory", file=pnm_cfg.source_file,
                              where="pnm.memory")
        memory_path = pnm_cfg.memory_path
    outputs = OutputPlan(inputs=[kernel, memory_path, pnm_cfg.source_file])
    outputs.add(json_path, "--json", kind="json")
    outputs.add(timeline_path, "--timeline", kind="json")
    window = parse_window(timeline_window, timeline_requests, timeline=timeline_path)
    memory_cfg = load_memory_config(memory_path, memory_overrides)
    result = run_pnm(kernel, shape, memory_cfg, pnm_cfg, defines=_defines(defines), units=units, progress=not quiet,
                     record=timeline_path is not None,
                     # the DRAM commands only in a bounded timeline: a whole run's are millions of slices
                     record_dram=timeline_path is not None and (timeline_window or timeline_requests) is not None)
    stats = pnm_stats(result, reproducible=reproducible)
    outputs.write(json_path, lambda tmp: write_json(tmp, stats))
    if timeline_path is not None:
        outputs.write(timeline_path, pnm_timeline(result, window, source=display_path(kernel)).write)
    outputs.commit()
    if not quiet:
        click.echo(table(pnm_summary_rows(stats), title=f"archsim pnm run: {kernel} on {memory_path}"))
