"""The `archsim` command line: every command is a thin shell over library calls.

Bad input raises ArchsimError anywhere below; it becomes one line on stderr and exit code 2, as does a
usage error (an option's bad value). Any other exception is a bug: one line "archsim: internal error: ..."
and exit code 3 (ARCHSIM_DEBUG=1 shows the traceback).
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from archsim.errors import ArchsimError

if TYPE_CHECKING:  # the CLI imports its subsystems lazily (archsim --help stays fast)
    from archsim.config.memory import MemoryConfig
    from archsim.report.memory_stats import MemoryStatsAccumulator

DEBUG_ENV = "ARCHSIM_DEBUG"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


INT64_MAX = 2**63 - 1


def _items(value: object) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _refuse_empty_values(command: click.Command) -> None:
    """Make every option and argument of `command` (and of its subcommands) refuse an empty or blank string
    (`--contexts ''` or `--set ''` is a mistake, never a request for the default), an integer beyond int64 (what
    numpy and the kernels hold: `--requests 2**70` would otherwise overflow deep inside a run) and a float that
    is not finite (`--connect-timeout nan`)."""
    if getattr(command, "_archsim_guarded", False):
        return
    command._archsim_guarded = True  # type: ignore[attr-defined]
    for sub in getattr(command, "commands", {}).values():
        _refuse_empty_values(sub)
    for param in command.params:
        cast = param.type_cast_value

        def type_cast_value(ctx: click.Context, value: object, cast=cast, param=param) -> object:  # noqa: B008
            for item in _items(value):
                if isinstance(item, str) and not item.strip():
                    raise click.BadParameter("must not be empty", ctx=ctx, param=param)
            result = cast(ctx, value)
            for item in _items(result):
                if isinstance(item, int) and not isinstance(item, bool) and not -INT64_MAX - 1 <= item <= INT64_MAX:
                    raise click.BadParameter(f"{item:,} is beyond the largest integer archsim holds "
                                             f"({INT64_MAX:,})", ctx=ctx, param=param)
                if isinstance(item, float) and not math.isfinite(item):
                    raise click.BadParameter(f"must be a finite number, got {item}", ctx=ctx, param=param)
            return result

        param.type_cast_value = type_cast_value  # type: ignore[method-assign]


# Commands that live with their subsystems: name -> (module, attribute, one-line help). They are imported only
# when run or asked for their own help, so that `archsim --help` and the start of every command import neither
# numba nor the system model (`archsim --help`: a median 0.19 s of wall time instead of 1.36 s); the layering
# stays: cli on top.
# tests/test_cli.py checks each help line against the command's own docstring.
LAZY_COMMANDS: dict[str, tuple[str, str, str]] = {
    "capture": ("archsim.trace.cli_commands", "capture",
                "Run a model on a request scenario and write its logical (tensor-level) trace."),
    "compare": ("archsim.system.cli", "compare",
                "Several systems side by side on one workload: a table, JSON and a plot per system and context."),
    "gpu": ("archsim.gpu.cli", "gpu", "The calibrated GPU kernel model (see docs/gpu.md)."),
    "isa": ("archsim.isa.cli", "isa", "Assemble and disassemble PNM programs (the ISA is isa/opcodes.yaml)."),
    "plan": ("archsim.plan.cli", "plan_command",
             "Where attention runs and where the KV lives: the closed-form planner, checked against simulation."),
    "pnm": ("archsim.pnm.cli", "pnm", "Timed runs of PNM kernels on the simulated memory (see docs/pnm.md)."),
    "report": ("archsim.report.cli", "report",
               "One self-contained HTML page of the plots of archsim JSON outputs (inline SVG)."),
    "serve": ("archsim.serving.cli", "serve",
              "Serve a scenario's requests on each system: TTFT, TPOT, end-to-end latency, throughput, KV reuse."),
    "simulate": ("archsim.system.cli", "simulate",
                 "Decode-step latency, attention time, link bytes, DRAM behaviour and energy of one system."),
    "sweep": ("archsim.sweep.cli", "sweep",
              "Sweep a design space: a command's points over axes, kept in a resumable store, written to points.csv."),
    "trace": ("archsim.trace.cli_commands", "trace", "Inspect, convert and generate traces."),
}


def _lazy_command(name: str) -> click.Command:
    import importlib

    module, attribute, _help = LAZY_COMMANDS[name]
    return getattr(importlib.import_module(module), attribute)


class _LazyStub(click.Command):
    """Stands in for a lazily imported command in `archsim --help`: its name and one-line help only."""

    def __init__(self, name: str) -> None:
        super().__init__(name, help=LAZY_COMMANDS[name][2])


class _Group(click.Group):
    """Turns ArchsimError and usage errors into one clear line and exit code 2, any other exception into
    "internal error" and exit code 3 (no traceback unless ARCHSIM_DEBUG is set)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(LAZY_COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in LAZY_COMMANDS:
            if ctx.resilient_parsing or getattr(ctx, "_archsim_listing", False):
                return _LazyStub(cmd_name)  # the listing needs names and help lines only: no imports
            self.commands[cmd_name] = _lazy_command(cmd_name)
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _refuse_empty_values(command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        ctx._archsim_listing = True  # type: ignore[attr-defined]
        try:
            super().format_commands(ctx, formatter)
        finally:
            ctx._archsim_listing = False  # type: ignore[attr-defined]

    def invoke(self, ctx: click.Context) -> object:
        from archsim.inputs import recording_reads

        try:
            with recording_reads():  # what the command reads, no output may overwrite (archsim.outputs)
                return super().invoke(ctx)
        except ArchsimError as exc:
            click.echo(f"archsim: error: {_one_line(str(exc))}", err=True)
            sys.exit(2)
        except click.UsageError as exc:
            command = exc.ctx.command_path if exc.ctx else ctx.command_path
            click.echo(f"archsim: error: {command}: {_one_line(exc.format_message())} (see {command} --help)",
                       err=True)
            sys.exit(2)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as exc:
            if os.environ.get(DEBUG_ENV):
                raise
            click.echo(f"archsim: internal error: {type(exc).__name__}: {_one_line(str(exc))} "
                       f"(a bug; {DEBUG_ENV}=1 shows the traceback)", err=True)
            sys.exit(3)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="archsim")
def main() -> None:
    """archsim: cycle-approximate simulator of near-memory-processing KV-cache pools for LLM inference."""


def _ports_alone(cfg: MemoryConfig, trace: str, fmt: str, shared: MemoryStatsAccumulator, sort: bool, wrap: bool,
                 quiet: bool) -> dict[str, float]:
    """Each port's requests replayed alone (`replay --alone`): the mean of its reads' latency from their trace
    timestamps, by port name."""
    from archsim.replay_stream import replay_file
    from archsim.report.memory_stats import MemoryStatsAccumulator

    means = {}
    for port, name in enumerate(shared.sources):
        if not shared.by("port")[port].sum():
            continue
        acc = MemoryStatsAccumulator(cfg, shared.sources, per_port=True)
        replay_file(cfg, trace, fmt, [acc], sort=sort, wrap=wrap, progress=not quiet, port=port)
        means[name] = acc.source_total_latency[port].mean() if acc.source_total_latency[port].n else 0.0
    return means


@main.command()
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("--memory", "memory_path", required=True, type=click.Path(dir_okay=False),
              help="Memory config YAML (e.g. configs/memory/hbm3.yaml).")
@click.option("--format", "fmt", default="auto", show_default=True,
              type=click.Choice(["auto", "npz", "dramsim3", "ramulator"]), help="Trace file format.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the stats tree here.")
@click.option("--set", "overrides", multiple=True, metavar="DOTTED.KEY=VALUE",
              help="Override a config value, e.g. memory.timing.tFAW=30ns (repeatable).")
@click.option("--sort", is_flag=True, help="Sort requests stably by timestamp instead of refusing a decreasing one "
              "(reads the whole trace first: about 18 bytes a request in memory).")
@click.option("--wrap", is_flag=True, help="Fold addresses beyond capacity into range instead of failing.")
@click.option("--check", is_flag=True, help="Also verify the issued command log with the protocol checker.")
@click.option("--reproducible", is_flag=True, help="Zero the host-timing stats so the JSON is byte-identical.")
@click.option("--quiet", is_flag=True, help="No summary table.")
@click.option("--timeline", "timeline_path", type=click.Path(dir_okay=False),
              help="Write the DRAM commands per bank, queue and bandwidth counters as a Chrome trace (Perfetto).")
@click.option("--timeline-window", metavar="START:END", help="Only this part of the run in the timeline (e.g. 0:20us).")
@click.option("--timeline-requests", type=int, metavar="N",
              help="Timeline up to the completion of the first N requests.")
@click.option("--alone", is_flag=True, help="Also replay each port's requests alone: its slowdown sharing the "
              "memory and Jain's fairness over the ports (memory.qos; one more replay per port).")
def replay(trace: str, memory_path: str, fmt: str, json_path: str | None, overrides: tuple[str, ...], sort: bool,
           wrap: bool, check: bool, reproducible: bool, quiet: bool, timeline_path: str | None,
           timeline_window: str | None, timeline_requests: int | None, alone: bool) -> None:
    """Replay a memory trace through the DRAM model and report bandwidth, latency and row-buffer stats.

    The trace streams through the simulation in chunks: memory stays bounded whatever its length. --sort reads
    it whole to sort it (about 18 bytes a request), and a --timeline without an end keeps the run's commands."""
    from archsim.config.memory import load_memory_config
    from archsim.outputs import OutputPlan
    from archsim.replay_stream import replay_file
    from archsim.report.memory_stats import MemoryStatsAccumulator, RunFigures, port_qos, stats_tree
    from archsim.report.output import memory_summary_rows, table, write_json

    outputs = OutputPlan(inputs=[trace, memory_path])
    outputs.add(json_path, "--json", kind="json")
    outputs.add(timeline_path, "--timeline", kind="json")
    timed = (timeline_path, timeline_window, timeline_requests) != (None, None, None)
    if timed:  # the checker's and the timeline's modules only when asked for: 10 ms of a short replay's process
        from archsim.report.timeline import ReplayWindowCollector, parse_window

        window = parse_window(timeline_window, timeline_requests, timeline=timeline_path)
    cfg = load_memory_config(memory_path, overrides)
    acc = MemoryStatsAccumulator(cfg, per_port=alone or bool(cfg.controller.qos_targets))
    checker = None
    if check:
        from archsim.dram.checker_stream import StreamingChecker

        checker = StreamingChecker(cfg.organization, cfg.timing, cfg.controller.refresh.impl)
    timeline = ReplayWindowCollector(cfg, window) if timeline_path is not None else None
    sinks = [sink for sink in (acc, checker, timeline) if sink is not None]

    def say_sorted(moved: int, n: int) -> None:
        if moved:
            click.echo(f"archsim: sorted by timestamp: {moved:,} of {n:,} requests moved", err=True)

    try:
        done = replay_file(cfg, trace, fmt, sinks, sort=sort, wrap=wrap, progress=not quiet, on_sorted=say_sorted)
        alone_means = _ports_alone(cfg, trace, fmt, acc, sort, wrap, quiet) if alone else None
    except ArchsimError as exc:
        exc.file = exc.file or trace
        raise ArchsimError(exc.detail, file=exc.file, where=exc.where) from None
    run = done.run
    figures = RunFigures(run.total_cycles, run.command_counts, run.qos_counts, run.wall_s, run.compile_s,
                         run.kernel_cache)
    stats = stats_tree(acc, figures, reproducible=reproducible)
    if acc.per_port:
        stats["memory"]["qos"].update(port_qos(acc, alone_means))
    if checker is not None:
        verdict = checker.result()
        stats["checker"] = {"commands": verdict.checked_commands, "violations": len(verdict.violations)}
    outputs.write(json_path, lambda tmp: write_json(tmp, stats))
    if timeline is not None:
        outputs.write(timeline_path, timeline.timeline(run.total_cycles, source=trace).write)
    outputs.commit()
    if not quiet:
        click.echo(table(memory_summary_rows(stats), title=f"archsim replay: {trace} on {memory_path}"))
        if check:
            click.echo(f"  protocol checker  {stats['checker']['commands']:,} commands, "
                       f"{stats['checker']['violations']} violations")
    if check and stats["checker"]["violations"]:
        sys.exit(1)


@main.group()
def config() -> None:
    """Inspect memory configs and import DRAMSim3 configurations."""


@config.command("show")
@click.argument("path", type=click.Path(dir_okay=False), required=False)
@click.option("--resolved", is_flag=True, help="Print the fully expanded config (preset + file + overrides).")
@click.option("--set", "overrides", multiple=True, metavar="DOTTED.KEY=VALUE", help="Override a value.")
@click.option("--system", "system_name", metavar="NAME|PATH", help="A system instead of a memory config.")
@click.option("--address-map", is_flag=True, help="With --system: its pool's address map (windows, interleave, "
              "device address to DRAM).")
def config_show(path: str | None, resolved: bool, overrides: tuple[str, ...], system_name: str | None,
                address_map: bool) -> None:
    """Print a memory config; with --resolved, every value after presets and overrides, plus derived figures.
    With --system NAME --address-map, the system's pool address map."""
    import yaml

    from archsim.config.memory import load_memory_config
    from archsim.dram.spec import peak_bandwidth_GBps, peak_bandwidth_per_stack_GBps

    if system_name is not None or address_map:
        if system_name is None or not address_map or path is not None or resolved:
            raise click.UsageError("give --system NAME|PATH with --address-map, and no memory config PATH")
        from archsim.system import load_system_config
        from archsim.system.address_map import describe

        system = load_system_config(system_name, overrides)
        if system.pool is None or system.pool.address_map is None:
            raise ArchsimError("has no memory pool to map", file=system.file, where="system.pool")
        click.echo("\n".join(describe(system.pool.address_map)))
        return
    if path is None:
        raise click.UsageError("give a memory config PATH, or --system NAME --address-map")

    cfg = load_memory_config(path, overrides)
    if not resolved:
        click.echo(Path(path).read_text(), nl=False)
        return
    click.echo(yaml.safe_dump(cfg.resolved_tree, sort_keys=False), nl=False)
    org, timing = cfg.organization, cfg.timing
    click.echo("# derived")
    click.echo(f"#   capacity: {org.capacity_bytes / 2**30:g} GiB ({org.capacity_per_stack_bytes / 2**30:g} GiB "
               f"per stack)")
    click.echo(f"#   access: {org.access_bytes} B, row: {org.row_bytes} B, banks: {org.n_banks}")
    click.echo(f"#   peak bandwidth: {peak_bandwidth_GBps(org, timing):g} GB/s "
               f"({peak_bandwidth_per_stack_GBps(org, timing):g} GB/s per stack)")
    click.echo("#   timing (cycles): " + ", ".join(f"{k}={v}" for k, v in timing.as_dict().items()))
    for name, part in (("controller", cfg.controller), ("frontend", cfg.frontend)):  # defaults filled in
        items = part.summary_items() if name == "controller" else dataclasses.asdict(part).items()
        click.echo(f"#   {name}: " + ", ".join(f"{k}={v}" for k, v in items))


@config.command("import-dramsim3")
@click.argument("ini", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Memory YAML to write.")
def config_import_dramsim3(ini: str, output: str) -> None:
    """Turn a DRAMSim3 .ini into an archsim memory config; lists every key it cannot honour."""
    import yaml

    from archsim.config.dramsim3_import import import_dramsim3
    from archsim.config.memory import build_memory_config
    from archsim.outputs import OutputPlan

    outputs = OutputPlan(inputs=[ini])
    outputs.add(output, "--output", kind="yaml")
    result = import_dramsim3(ini)
    build_memory_config(result.tree, ini)  # the imported config must itself be valid
    header = [f"# Imported from {Path(ini).name} by `archsim config import-dramsim3`.",
              "# The front end injects at most one request per cycle, as DRAMSim3's trace CPU does.",
              "# Keys not honoured:"] + [f"#   {note}" for note in result.not_honoured]
    text = "\n".join(header) + "\n" + yaml.safe_dump(result.tree, sort_keys=False)
    outputs.write(output, lambda tmp: tmp.write_text(text))
    outputs.commit()
    click.echo(f"wrote {output}")
    if result.not_honoured:
        click.echo(f"{len(result.not_honoured)} keys of {ini} are not honoured:", err=True)
        for note in result.not_honoured:
            click.echo(f"  {note}", err=True)
