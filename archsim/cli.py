"""The `archsim` command line: every command is a thin shell over library calls.

Bad input raises ArchsimError anywhere below; it becomes one line on stderr and exit code 2.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click
import yaml

from archsim.errors import ArchsimError


class _Group(click.Group):
    """Turns ArchsimError into one clear line and exit code 2 (no traceback)."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except ArchsimError as exc:
            click.echo(f"archsim: error: {exc}", err=True)
            sys.exit(2)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="archsim")
def main() -> None:
    """archsim: cycle-approximate simulator of near-memory-processing KV-cache pools for LLM inference."""


@main.command()
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("--memory", "memory_path", required=True, type=click.Path(dir_okay=False),
              help="Memory config YAML (e.g. configs/memory/hbm3.yaml).")
@click.option("--format", "fmt", default="auto", show_default=True,
              type=click.Choice(["auto", "npz", "dramsim3", "ramulator"]), help="Trace file format.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the stats tree here.")
@click.option("--set", "overrides", multiple=True, metavar="DOTTED.KEY=VALUE",
              help="Override a config value, e.g. memory.timing.tFAW=30ns (repeatable).")
@click.option("--wrap", is_flag=True, help="Fold addresses beyond capacity into range instead of failing.")
@click.option("--check", is_flag=True, help="Also verify the issued command log with the protocol checker.")
@click.option("--reproducible", is_flag=True, help="Zero the host-timing stats so the JSON is byte-identical.")
@click.option("--quiet", is_flag=True, help="No summary table.")
def replay(trace: str, memory_path: str, fmt: str, json_path: str | None, overrides: tuple[str, ...], wrap: bool,
           check: bool, reproducible: bool, quiet: bool) -> None:
    """Replay a memory trace through the DRAM model and report bandwidth, latency and row-buffer stats."""
    from archsim.config.memory import load_memory_config
    from archsim.memory import Requests, check_addresses
    from archsim.memory import replay as run_replay
    from archsim.report.memory_stats import memory_stats
    from archsim.report.output import memory_summary_rows, table, write_json
    from archsim.trace.text_formats import read_trace

    cfg = load_memory_config(memory_path, overrides)
    physical = read_trace(trace, fmt)
    address = check_addresses(cfg, physical.address, wrap, trace)
    requests = Requests.build(physical.timestamp_cycles, address, physical.is_write, physical.source)
    try:
        result = run_replay(cfg, requests, command_log=check, progress=not quiet)
    except ArchsimError as exc:
        exc.file = exc.file or trace
        raise ArchsimError(exc.detail, file=exc.file, where=exc.where) from None
    stats = memory_stats(result, reproducible=reproducible)
    if check:
        from archsim.dram.checker import check_command_log

        assert result.command_log is not None
        verdict = check_command_log(result.command_log, cfg.organization, cfg.timing,
                                    refresh_mode=cfg.controller.refresh)
        stats["checker"] = {"commands": verdict.checked_commands, "violations": len(verdict.violations)}
    if json_path:
        write_json(json_path, stats)
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
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--resolved", is_flag=True, help="Print the fully expanded config (preset + file + overrides).")
@click.option("--set", "overrides", multiple=True, metavar="DOTTED.KEY=VALUE", help="Override a value.")
def config_show(path: str, resolved: bool, overrides: tuple[str, ...]) -> None:
    """Print a memory config; with --resolved, every value after presets and overrides, plus derived figures."""
    from archsim.config.memory import load_memory_config
    from archsim.dram.spec import peak_bandwidth_GBps, peak_bandwidth_per_stack_GBps

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
        click.echo(f"#   {name}: " + ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(part).items()))


@config.command("import-dramsim3")
@click.argument("ini", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Memory YAML to write.")
def config_import_dramsim3(ini: str, output: str) -> None:
    """Turn a DRAMSim3 .ini into an archsim memory config; lists every key it cannot honour."""
    from archsim.config.dramsim3_import import import_dramsim3
    from archsim.config.memory import build_memory_config
    from archsim.trace.native import atomic_write_bytes

    result = import_dramsim3(ini)
    build_memory_config(result.tree, ini)  # the imported config must itself be valid
    header = [f"# Imported from {Path(ini).name} by `archsim config import-dramsim3`.",
              "# The front end injects at most one request per cycle, as DRAMSim3's trace CPU does.",
              "# Keys not honoured:"] + [f"#   {note}" for note in result.not_honoured]
    text = "\n".join(header) + "\n" + yaml.safe_dump(result.tree, sort_keys=False)
    atomic_write_bytes(output, lambda handle: handle.write(text.encode()), suffix=".yaml")
    click.echo(f"wrote {output}")
    if result.not_honoured:
        click.echo(f"{len(result.not_honoured)} keys of {ini} are not honoured:", err=True)
        for note in result.not_honoured:
            click.echo(f"  {note}", err=True)


def _register_subsystem_commands() -> None:
    """Commands that live with their subsystems (imported here so the layering stays: cli on top)."""
    from archsim.gpu.cli import gpu
    from archsim.isa.cli import isa
    from archsim.pnm.cli import pnm
    from archsim.system.cli import compare, simulate
    from archsim.trace.cli_commands import capture, trace

    for command in (compare, simulate, isa, pnm, gpu, capture, trace):
        main.add_command(command)


_register_subsystem_commands()
