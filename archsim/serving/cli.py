"""`archsim serve`: several systems on the same requests of a scenario, side by side (docs/serving.md)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from archsim.errors import ConfigError

HEADER = ("system", "tier", "done", "rej", "TTFT ms", "p99", "TPOT ms", "p99", "E2E ms", "tok/s", "req/s",
          "goodput/s", "hit %", "status")


def _fmt(value: Any, spec: str = ",.1f") -> str:
    return "-" if value is None else format(value, spec)


def table_rows(entries: Sequence[dict]) -> list[tuple[str, ...]]:
    rows = []
    for e in entries:
        ttft, tpot, e2e = e.get("ttft_ms") or {}, e.get("tpot_ms") or {}, e.get("e2e_ms") or {}
        hit = e.get("prefix_hit_rate")
        tier = e["tier"] + (" (stream)" if e.get("kv_decode") == "stream" else "")  # per-step KV streaming
        rows.append((e["system"], tier, _fmt(e["requests_completed"], ","), _fmt(e["requests_rejected"], ","),
                     _fmt(ttft.get("mean")), _fmt(ttft.get("p99")), _fmt(tpot.get("mean"), ",.2f"),
                     _fmt(tpot.get("p99"), ",.2f"), _fmt(e2e.get("mean")),
                     _fmt(e["throughput_tokens_per_s"], ",.0f"), _fmt(e["throughput_requests_per_s"], ",.2f"),
                     _fmt(e["goodput_requests_per_s"], ",.2f"), _fmt(None if hit is None else 100 * hit),
                     e["status"]))
    return rows


def render_table(entries: Sequence[dict], title: str) -> str:
    rows = [HEADER, *table_rows(entries)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines = [title]
    for r in rows:
        cells = [r[0].ljust(widths[0]), r[1].ljust(widths[1])]
        cells += [c.rjust(w) for c, w in zip(r[2:-1], widths[2:-1], strict=True)]
        lines.append("  ".join([*cells, r[-1]]))
    return "\n".join(lines)


def fabric_ratios(entries: Sequence[dict]) -> dict[str, float | None]:
    """G1.5 over G2.5 mean TTFT, with and without PNM, where both ran (the fabric's effect on TTFT)."""
    out: dict[str, float | None] = {}
    by_name = {e["system"]: e for e in entries}
    for g15, g25 in (("g15", "g25"), ("g15-nopnm", "g25-nopnm")):
        a, b = by_name.get(g15), by_name.get(g25)
        if a and b:
            ta, tb = (a.get("ttft_ms") or {}).get("mean"), (b.get("ttft_ms") or {}).get("mean")
            out[f"{g15}/{g25}"] = round(ta / tb, 6) if ta and tb else None
    return out


@click.command("serve")
@click.argument("systems", nargs=-1, required=True)
@click.option("--scenario", "scenario_path", required=True,
              help="Scenario YAML or shipped name (configs/scenarios/); a trace is named inside a scenario.")
@click.option("--requests", "n_requests", type=click.IntRange(min=1), help="Requests to serve (default 1000).")
@click.option("--duration", help="Instead of --requests: sessions starting within this time (e.g. 600s).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of every random draw.")
@click.option("--warmup-requests", type=click.IntRange(min=0), default=0, show_default=True,
              help="Completed requests (by arrival) left out of every metric.")
@click.option("--set", "overrides", multiple=True, metavar="DOTTED.KEY=VALUE",
              help="Override a scenario (scenario.arrivals.rate_per_s=2) or system (system.serving.router=prefix) "
                   "key; repeatable.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the archsim.serving/1 tree here.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
              help="Write the TTFT/TPOT CDFs, request-time and energy breakdowns (PNG, SVG, PDF).")
@click.option("--requests-out", "requests_path", type=click.Path(dir_okay=False),
              help="Write one JSON line per request and system (arrival, TTFT, TPOT, E2E, hits).")
@click.option("--quiet", is_flag=True, help="No table.")
@click.option("--timeline", "timeline_path", type=click.Path(dir_okay=False),
              help="Write each request's life (queued, KV load, prefill, decode) per system as a Chrome trace.")
@click.option("--timeline-window", metavar="START:END", help="Only this part of the run in the timeline (e.g. 0:10s).")
@click.option("--timeline-requests", type=int, metavar="N", help="Only the first N requests in the timeline.")
@click.option("--rates", "rates_text", metavar="R1,R2,...",
              help="Serve every system at each of these session arrival rates per second (the scenario's "
                   "arrivals.rate_per_s); --plot then draws throughput and latency against the offered load.")
@click.option("--jobs", type=click.IntRange(min=1),
              help="Systems served at once, each in its own process (default: one per core, up to the systems); "
                   "the results are the same for any value.")
def serve(systems: Sequence[str], scenario_path: str, n_requests: int | None, duration: str | None, seed: int,
          warmup_requests: int, overrides: Sequence[str], json_path: str | None, plot_path: str | None,
          requests_path: str | None, quiet: bool, timeline_path: str | None, timeline_window: str | None,
          timeline_requests: int | None, rates_text: str | None, jobs: int | None) -> None:
    """Serve a scenario's requests on each system: TTFT, TPOT, end-to-end latency, throughput, KV reuse."""
    from archsim.outputs import OutputPlan
    from archsim.progress import progress_bar
    from archsim.report.output import write_json
    from archsim.report.timeline import parse_window, serving_timeline
    from archsim.resources import display_path
    from archsim.serving.load import parse_rates, rate_label, scenarios_at_rates
    from archsim.serving.load_plot import plot_load
    from archsim.serving.parallel import default_jobs, run_systems
    from archsim.serving.plots import plot
    from archsim.serving.run import SCHEMA, SystemRun, requests_lines, requests_source, result_entry
    from archsim.serving.scenario import load_scenario
    from archsim.system.config import load_system_configs
    from archsim.units import parse_time_option_ns

    start = time.perf_counter()
    if n_requests is not None and duration is not None:
        raise click.UsageError("give at most one of --requests and --duration")
    duration_ns = parse_time_option_ns(duration, "--duration") if duration is not None else None
    if duration_ns is not None and duration_ns <= 0:
        raise ConfigError(f"must be positive, got {duration!r}", where="--duration")
    unknown = [o for o in overrides if not o.strip().startswith(("scenario.", "system."))]
    if unknown:
        raise ConfigError(f"{unknown[0]!r}: a --set key starts with scenario. or system.", where="--set")
    scenario_sets = [o for o in overrides if o.strip().startswith("scenario.")]
    scenario = load_scenario(scenario_path, scenario_sets)
    rates = parse_rates(rates_text) if rates_text is not None else None
    if rates is not None and timeline_path is not None:
        raise ConfigError("a timeline shows one offered load: give it without --rates", where="--timeline")
    loads = scenarios_at_rates(scenario_path, scenario_sets, scenario, rates) if rates else [scenario]
    configs = load_system_configs(systems, [o for o in overrides if o.strip().startswith("system.")])
    inputs = [c.file for c in configs if c.file] + scenario.input_files()
    outputs = OutputPlan(inputs=[f for f in inputs if f])
    outputs.add(json_path, "--json", kind="json")
    outputs.add(plot_path, "--plot", kind="plot")
    outputs.add(requests_path, "--requests-out", kind="jsonl")
    outputs.add(timeline_path, "--timeline", kind="json")
    window = parse_window(timeline_window, timeline_requests, timeline=timeline_path)
    count = n_requests if n_requests or duration_ns else 1000
    tasks = [(config, load, requests_source(load, count, duration_ns, seed)) for load in loads for config in configs]
    _check_warmup(warmup_requests, tasks)
    rate_of = [rates[k // len(configs)] if rates else None for k in range(len(tasks))]
    entries = []
    with progress_bar(len(tasks), "system", "serve", quiet) as bar:

        def done(k: int, run: SystemRun, seconds: float) -> None:
            entry = result_entry(run, tasks[k][1])
            if rate_of[k] is not None:
                entry["rate_per_s"] = rate_of[k]
            entries.append(entry)
            events = run.result.events if run.result is not None else 0
            bar.update(1)
            if not quiet:
                at = f" at {rate_label(rate_of[k])}" if rate_of[k] is not None else ""
                click.echo(f"  {tasks[k][0].name}{at}: {events:,} events in {seconds:.1f} s", err=True)

        jobs = jobs if jobs is not None else default_jobs(len(tasks))
        runs = run_systems(tasks, warmup=warmup_requests, jobs=jobs, on_done=done, record=timeline_path is not None)
    per_load = [entries[k * len(configs):(k + 1) * len(configs)] for k in range(len(loads))]
    tree = {"schema": SCHEMA, "scenario": scenario.name,
            "scenario_file": display_path(scenario.file) if scenario.file else None, "seed": seed,
            "requests": n_requests, "duration_ns": duration_ns, "warmup_requests": warmup_requests}
    if rates:  # keys only a load sweep has: the JSON of one load stays as it was
        tree["rates_per_s"] = rates
        tree["fabric_ttft_ratio"] = {f"{r:g}": fabric_ratios(group) for r, group in zip(rates, per_load, strict=True)}
    else:
        tree["fabric_ttft_ratio"] = fabric_ratios(entries)
    tree["results"] = entries
    title = f"archsim serve: scenario {scenario.name} ({scenario.model}), seed {seed}"
    outputs.write(json_path, lambda tmp: write_json(tmp, tree))
    if rates:
        outputs.write(plot_path, lambda tmp: plot_load(entries, rates, tmp, title))
    else:
        outputs.write(plot_path, lambda tmp: plot(runs, entries, tmp, title, warmup_requests))
    outputs.write(requests_path, lambda tmp: _write_lines(tmp, [{**line, "rate_per_s": rate_of[k]} if rates else line
                                                                for k, run in enumerate(runs)
                                                                for line in requests_lines(run)]))
    if timeline_path is not None:
        outputs.write(timeline_path, serving_timeline(runs, window, source=scenario.name).write)
    outputs.commit()
    if not quiet:
        for k, group in enumerate(per_load):
            click.echo(render_table(group, title + (f", {rate_label(rates[k])}" if rates else "")))
            ratios = tree["fabric_ttft_ratio"][f"{rates[k]:g}"] if rates else tree["fabric_ttft_ratio"]
            for key, ratio in ratios.items():
                click.echo(f"  TTFT {key}: {_fmt(ratio, '.3f')}")
    click.echo(f"  wall time {time.perf_counter() - start:.1f} s", err=True)
    if not any(e["status"] == "ok" for e in entries):  # exit 0 only when some system served the requests
        click.echo("archsim: no system could serve the scenario: every result is infeasible", err=True)
        raise SystemExit(1)


def _check_warmup(warmup_requests: int, tasks: Sequence[tuple[Any, Any, Any]]) -> None:
    """A warm-up of as many requests as a run serves would leave nothing to measure. (Each load's requests are
    drawn here, before any worker starts: the runs then serve these tables.)"""
    if not warmup_requests:
        return
    for config, _, source in tasks:
        assert config.serving is not None
        count = len(source(config.serving.block_tokens))
        if warmup_requests >= count:
            raise ConfigError(f"{warmup_requests} leaves none of the {count:,} requests to measure (give fewer than "
                              f"{count:,})", where="--warmup-requests")


def _write_lines(path: Path, lines: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(json.dumps(line, sort_keys=True) + "\n")


__all__ = ["serve"]
