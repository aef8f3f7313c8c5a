"""`archsim simulate` and `archsim compare`: thin shells over archsim.system (registered by archsim/cli.py).

Bad input raises ArchsimError; the top-level group turns it into one line and exit code 2. A point that cannot
run (KV beyond a capacity, a context beyond the model's maximum) is an `infeasible: <reason>` row and the
command still exits 0 with every other point kept.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import click

from archsim.errors import ConfigError


def _contexts(text: str | None) -> tuple[int, ...] | None:
    from archsim.system.workload import parse_tokens

    if text is None:
        return None
    parts = [part.strip() for part in text.split(",")]
    if not all(parts):
        raise ConfigError(f"an empty context in {text!r} (give e.g. 4K,32K)", where="--contexts")
    return tuple(parse_tokens(part, "--contexts") for part in parts)


def split_overrides(overrides: Sequence[str]) -> tuple[list[str], list[str]]:
    """`--set` assignments split into the system's (`system.*`) and the workload's (`workload.*`)."""
    unknown = [o for o in overrides if not o.strip().startswith(("system.", "workload."))]
    if unknown:
        raise ConfigError(f"{unknown[0]!r}: a --set key starts with system. or workload.", where="--set")
    return ([o for o in overrides if o.strip().startswith("system.")],
            [o for o in overrides if o.strip().startswith("workload.")])


def _workload(workload_path: str | None, trace_path: str | None,  # noqa: ANN202 - Workload, imported lazily
              overrides: Sequence[str] = ()):
    from archsim.system.workload import load_workload, workload_from_trace

    if bool(workload_path) == bool(trace_path):
        raise click.UsageError("give exactly one of --workload and --trace")
    if trace_path and overrides:
        raise ConfigError("workload.* overrides need --workload (a trace's workload is read from the trace)",
                          where="--set")
    return load_workload(workload_path, list(overrides)) if workload_path else workload_from_trace(trace_path)


def _inputs(configs: Sequence, workload) -> list[str]:  # noqa: ANN001 - SystemConfig, Workload: lazy imports
    """The files a run reads that an output must not overwrite: system, memory and workload files."""
    files = [c.file for c in configs] + [workload.source]
    files += [c.pool.memory.source_file for c in configs if c.pool is not None]
    return [f for f in files if f and f != "<mapping>"]


def _breakdown(result: dict) -> str:
    crit = result["breakdown_ns"].get("critical", {})
    hidden = result["breakdown_ns"].get("overlapped", {})
    parts = ", ".join(f"{k} {v / 1e6:.3f} ms" for k, v in crit.items() if v)
    if any(hidden.values()):
        parts += "; overlapped: " + ", ".join(f"{k} {v / 1e6:.3f} ms" for k, v in hidden.items() if v)
    energy = sorted(result["energy_breakdown_pJ_per_token"].items(), key=lambda kv: -kv[1])[:6]
    joules = ", ".join(f"{k} {v / 1e9:.2f} mJ" for k, v in energy)
    lines = [f"  {result['system']} @ {result['context']} tokens: {parts}", f"    energy/token: {joules}"]
    if result["pnm_model"]:
        note = f" ({result['pnm_note']})" if result["pnm_note"] else ""
        lines.append(f"    pnm model: {result['pnm_model']}{note}")
    if result["qos"]:
        q = result["qos"]
        lines.append(f"    qos: slowdown {q['slowdown']}, Jain {q['jain_fairness']:.3f}, "
                     f"violations: {'; '.join(q['violations']) or 'none'}")
    return "\n".join(lines)


@click.command("simulate")
@click.argument("system")
@click.option("--workload", "workload_path", help="Workload YAML or preset name (configs/workloads/).")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False),
              help="A logical trace to take the workload from.")
@click.option("--contexts", help="Comma-separated contexts (4K,32K) instead of the workload's.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the archsim.system/2 tree here.")
@click.option("--set", "overrides", multiple=True, metavar="DOTTED.KEY=VALUE",
              help="Override a system or workload value, e.g. system.pool.devices=4, workload.batch=8 (repeatable).")
@click.option("--timeline", "timeline_path", type=click.Path(dir_okay=False),
              help="Write each decode step, layer by layer, critical and overlapped terms, as a Chrome trace.")
@click.option("--timeline-window", metavar="START:END", help="Only this part of the step in the timeline (e.g. 0:2ms).")
@click.option("--quiet", is_flag=True, help="No table.")
def simulate(system: str, workload_path: str | None, trace_path: str | None, contexts: str | None,
             json_path: str | None, overrides: tuple[str, ...], quiet: bool, timeline_path: str | None,
             timeline_window: str | None) -> None:
    """Decode-step latency, attention time, link bytes, DRAM behaviour and energy of one system."""
    from archsim.outputs import OutputPlan
    from archsim.report.output import write_json
    from archsim.report.timeline import parse_window
    from archsim.system.config import load_system_config
    from archsim.system.report import render_table, result_tree, run_comparison

    start = time.perf_counter()
    system_sets, workload_sets = split_overrides(overrides)
    cfg = load_system_config(system, system_sets)
    workload = _workload(workload_path, trace_path, workload_sets)
    outputs = OutputPlan(inputs=_inputs([cfg], workload))
    outputs.add(json_path, "--json", kind="json")
    outputs.add(timeline_path, "--timeline", kind="json")
    window = parse_window(timeline_window, None, timeline=timeline_path)
    results = run_comparison([cfg], workload, _contexts(contexts), quiet=quiet)
    tree = result_tree([cfg], workload, results)
    outputs.write(json_path, lambda tmp: write_json(tmp, tree))
    _write_timeline(outputs, timeline_path, results, workload, window)
    outputs.commit()
    if not quiet:
        click.echo(render_table(results, f"archsim simulate: {cfg.name} ({cfg.tier}), workload {workload.name}"))
        for entry in tree["results"]:
            if entry["status"] == "ok":
                click.echo(_breakdown(entry))
            else:
                click.echo(f"  {entry['system']} @ {entry['context']} tokens: {entry['status']}")
        click.echo(f"  wall time {time.perf_counter() - start:.1f} s", err=True)


@click.command("compare")
@click.argument("systems", nargs=-1, required=True)
@click.option("--workload", "workload_path", required=True, help="Workload YAML or preset name.")
@click.option("--contexts", help="Comma-separated contexts, e.g. 4K,32K,128K (default: the workload's).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the archsim.system/2 tree here.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Write a latency/energy plot (PNG).")
@click.option("--set", "overrides", multiple=True, metavar="DOTTED.KEY=VALUE",
              help="Override a value of every system or of the workload, e.g. system.pool.devices=4, "
              "workload.batch=8 (repeatable).")
@click.option("--timeline", "timeline_path", type=click.Path(dir_okay=False),
              help="Write each decode step, layer by layer, critical and overlapped terms, as a Chrome trace.")
@click.option("--timeline-window", metavar="START:END", help="Only this part of the step in the timeline (e.g. 0:2ms).")
@click.option("--quiet", is_flag=True, help="No table.")
def compare(systems: Sequence[str], workload_path: str, contexts: str | None, json_path: str | None,
            plot_path: str | None, overrides: tuple[str, ...], quiet: bool, timeline_path: str | None,
            timeline_window: str | None) -> None:
    """Several systems side by side on one workload: a table, JSON and a plot per system and context."""
    from archsim.outputs import OutputPlan
    from archsim.report.output import write_json
    from archsim.report.timeline import parse_window
    from archsim.system.config import load_system_configs
    from archsim.system.report import plot, render_table, result_tree, run_comparison
    from archsim.system.workload import load_workload

    start = time.perf_counter()
    system_sets, workload_sets = split_overrides(overrides)
    configs = load_system_configs(systems, system_sets)
    workload = load_workload(workload_path, workload_sets)
    outputs = OutputPlan(inputs=_inputs(configs, workload))
    outputs.add(json_path, "--json", kind="json")
    outputs.add(plot_path, "--plot", kind="plot")
    outputs.add(timeline_path, "--timeline", kind="json")
    window = parse_window(timeline_window, None, timeline=timeline_path)
    results = run_comparison(configs, workload, _contexts(contexts), quiet=quiet)
    tree = result_tree(configs, workload, results)
    title = f"archsim compare: workload {workload.name} ({workload.shape.name}, batch {workload.batch})"
    outputs.write(json_path, lambda tmp: write_json(tmp, tree))
    outputs.write(plot_path, lambda tmp: plot(results, tmp, title))
    _write_timeline(outputs, timeline_path, results, workload, window)
    outputs.commit()
    if not quiet:
        click.echo(render_table(results, title))
    click.echo(f"  wall time {time.perf_counter() - start:.1f} s", err=True)


def _write_timeline(outputs: Any, path: str | None, results: Sequence[Any], workload: Any, window: Any) -> None:
    if path is not None:
        from archsim.system.step_timeline import step_timeline

        timeline = step_timeline(results, workload.shape.num_layers, window, source=workload.name)
        outputs.write(path, timeline.write)


__all__ = ["compare", "simulate"]
