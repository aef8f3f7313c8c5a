"""`archsim plan`: rank where attention runs and where the KV lives, predicted by the closed-form planner and
simulated by the step model; `--validate` scores the planner over a grid (registered by archsim/cli.py)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import click

from archsim.errors import ConfigError

SCHEMA = "archsim.plan/1"


def _names(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    names = tuple(n.strip() for n in text.split(","))
    if not all(names):
        raise ConfigError(f"an empty candidate name in {text!r} (give e.g. pool/pnm,hbm/gpu)", where="--candidates")
    return names


def _fmt(v: float | None, scale: float = 1e3) -> str:
    return "-" if v is None else f"{v / scale:10.3f}"


@click.command("plan")
@click.argument("systems", nargs=-1, required=True)
@click.option("--workload", "workload_path", help="Workload YAML or preset name (decode-step objectives).")
@click.option("--scenario", "scenario_path",
              help="Scenario YAML or shipped name: rank by a request's end to end (objective request_e2e).")
@click.option("--objective", type=click.Choice(["step_latency", "energy_per_token", "request_e2e"]),
              help="What to rank by: decode-step time per output token, energy per token (with --workload; "
                   "default step_latency), or a request's end to end (with --scenario, its default).")
@click.option("--requests", "n_requests", type=click.IntRange(min=1), default=200, show_default=True,
              help="With --scenario: the requests each candidate is served on to simulate its end to end.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="With --scenario: the requests' seed.")
@click.option("--candidates", help="Comma-separated candidates to consider (e.g. pool/pnm,hbm/gpu; default all).")
@click.option("--contexts", help="Comma-separated contexts (default: the workload's).")
@click.option("--batch", type=click.IntRange(min=1), help="Sequences per model instance (default: the workload's).")
@click.option("--validate", is_flag=True, help="Score the planner against simulate_step over a grid.")
@click.option("--grid", "grid_spec", help="Validation grid: contexts=1K,8K;batches=1,16;links=0.5,1,2.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the archsim.plan/1 tree here.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
              help="Decision maps (PNG): the planner's choice over context x batch and context x link bandwidth.")
@click.option("--quiet", is_flag=True, help="No table.")
def plan_command(systems: Sequence[str], workload_path: str | None, scenario_path: str | None, objective: str | None,
                 n_requests: int, seed: int, candidates: str | None, contexts: str | None, batch: int | None,
                 validate: bool, grid_spec: str | None, json_path: str | None, plot_path: str | None,
                 quiet: bool) -> None:
    """Where attention runs and where the KV lives: the closed-form planner, checked against simulation.

    Ranks the candidates each system declares (its KV tiers, attention on the GPUs or in the pool's PNM units)
    by the planner's prediction and shows each one's simulated cost (simulate_step); --validate scores the
    planner's choice over a grid (docs/planner.md)."""
    from archsim.outputs import OutputPlan
    from archsim.plan.inputs import check_candidates
    from archsim.plan.validate import Evaluator, parse_grid
    from archsim.plan.validate import validate as run_validation
    from archsim.report.output import write_json
    from archsim.system.cli import _contexts, _inputs
    from archsim.system.config import load_system_configs
    from archsim.system.workload import load_workload

    start = time.perf_counter()
    objective = _check_mode(workload_path, scenario_path, objective, validate, grid_spec, plot_path, contexts, batch)
    if scenario_path is not None:
        _plan_requests(systems, scenario_path, n_requests, seed, _names(candidates), json_path, quiet)
        click.echo(f"  wall time {time.perf_counter() - start:.1f} s", err=True)
        return
    assert workload_path is not None
    configs = load_system_configs(systems)
    workload = load_workload(workload_path)
    wanted = _names(candidates)
    grid = parse_grid(grid_spec or "", workload) if validate or grid_spec else None
    ev = Evaluator(configs, workload, objective)
    for cfg in configs:
        check_candidates(ev.inputs(cfg.name, 1.0, batch or workload.batch), wanted or ())
    outputs = OutputPlan(inputs=_inputs(configs, workload))
    outputs.add(json_path, "--json", kind="json")
    outputs.add(plot_path, "--plot", kind="plot")
    tree: dict = {"schema": SCHEMA, "workload": workload.name, "model": workload.shape.name,
                  "objective": objective, "systems": [c.name for c in configs]}
    if validate:
        assert grid is not None
        tree["grid"] = {"contexts": list(grid.contexts), "batches": list(grid.batches),
                        "link_scales": list(grid.link_scales)}
        tree["validation"] = run_validation(ev, grid, wanted)
    else:
        tree["candidates"] = _ranked(ev, configs, workload, _contexts(contexts) or workload.contexts,
                                     batch or workload.batch, wanted, objective)
    if plot_path:
        from archsim.plan.maps import decision_maps, plot_maps

        maps = decision_maps(ev, objective)
        title = f"archsim plan: {workload.name} ({workload.shape.name}), objective {objective}"
        outputs.write(plot_path, lambda tmp: plot_maps(maps, tmp, title))
    outputs.write(json_path, lambda tmp: write_json(tmp, tree))
    outputs.commit()
    if not quiet:
        click.echo(_render(tree))
    click.echo(f"  wall time {time.perf_counter() - start:.1f} s", err=True)


def _check_mode(workload: str | None, scenario: str | None, objective: str | None, validate: bool,
                grid: str | None, plot: str | None, contexts: str | None, batch: int | None) -> str:
    """The objective, once the options agree on a decode-step (--workload) or a request (--scenario) plan."""
    if (workload is None) == (scenario is None):
        raise ConfigError("give one of --workload (a decode step) and --scenario (a request's end to end)",
                          where="--scenario" if scenario else "--workload")
    if scenario is None:
        if objective == "request_e2e":
            raise ConfigError("request_e2e ranks a request of a scenario: give --scenario instead of --workload",
                              where="--objective")
        return objective or "step_latency"
    if objective not in (None, "request_e2e"):
        raise ConfigError(f"{objective} is a decode-step objective: give --workload, or --objective request_e2e",
                          where="--objective")
    for given, option in ((validate, "--validate"), (grid, "--grid"), (plot, "--plot"), (contexts, "--contexts"),
                          (batch, "--batch")):
        if given:
            raise ConfigError("a decode-step option: the request plan takes its lengths and batch from the "
                              "scenario", where=option)
    return "request_e2e"


def _plan_requests(systems: Sequence[str], scenario_path: str, n_requests: int, seed: int,
                   wanted: tuple[str, ...] | None, json_path: str | None, quiet: bool) -> None:
    from archsim.outputs import OutputPlan
    from archsim.plan.inputs import check_candidates, plan_inputs
    from archsim.plan.request import rank_requests
    from archsim.report.output import write_json
    from archsim.serving.build import serving_spec, serving_workload
    from archsim.serving.run import model_limits, requests_source, run_system
    from archsim.serving.scenario import load_scenario
    from archsim.system.config import load_system_configs

    scenario = load_scenario(scenario_path, [])
    configs = load_system_configs(systems)
    outputs = OutputPlan(inputs=[*scenario.input_files(), *(c.file for c in configs if c.file)])
    outputs.add(json_path, "--json", kind="json")
    shape, dtype, max_context = model_limits(scenario)
    requests_for = requests_source(scenario, n_requests, None, seed)
    rows = []
    for cfg in configs:
        workload = serving_workload(cfg, shape, dtype, max_context, scenario.name)
        check_candidates(plan_inputs(cfg, workload), wanted or ())
        spec = serving_spec(cfg, workload, max_context)
        rows += rank_requests(cfg, workload, requests_for(spec.block_tokens), scenario, wanted,
                              lambda system: run_system(system, scenario, requests_for, warmup=0), spec.max_batch_seqs)
    agree = {c.name: bool(next((r["simulated_best"] for r in rows if r["system"] == c.name and r["rank"] == 1),
                               False)) for c in configs}
    tree = {"schema": SCHEMA, "scenario": scenario.name, "model": scenario.model, "objective": "request_e2e",
            "requests": n_requests, "seed": seed, "systems": [c.name for c in configs], "candidates": rows,
            "agreement": agree}
    outputs.write(json_path, lambda tmp: write_json(tmp, tree))
    outputs.commit()
    if not quiet:
        click.echo(f"archsim plan: scenario {scenario.name} ({scenario.model}), objective request_e2e")
        click.echo(f"  {'system':8} {'rank':>4} {'candidate':14} {'batch':>5} {'predicted ms':>13} "
                   f"{'simulated p50 ms':>17}  reason")
        for r in rows:
            sim = r["simulated"]["request_e2e_p50_ns"]
            click.echo(f"  {r['system']:8} {r['rank']:>4} {r['name']:14} {r['batch']:>5} "
                       f"{_fmt(r['predicted']['request_e2e_ns'], 1e6):>13} {_fmt(sim, 1e6):>17}  {r['reason']}")


def _ranked(ev, configs, workload, contexts, batch, wanted, objective) -> list[dict]:  # noqa: ANN001
    from archsim.plan.model import objective_value, reason
    from archsim.plan.validate import sim_cost

    out = []
    for cfg in configs:
        for context in contexts:
            preds = ev.predictions(cfg.name, 1.0, context, batch, wanted)
            for rank, p in enumerate(preds, start=1):
                sim = ev.simulate(cfg.name, 1.0, p.candidate, context, batch)
                other = preds[1] if rank == 1 and len(preds) > 1 else preds[0] if rank > 1 else None
                cost = sim_cost(sim, objective)
                out.append({
                    "system": cfg.name, "context": context, "batch": batch, "name": p.candidate,
                    "attention": p.attention, "kv_tier": p.kv_tier, "rank": rank,
                    "predicted": {"cost": _round(objective_value(p, objective)), "feasible": p.feasible,
                                  **p.as_dict()},
                    "simulated": {"cost": _round(cost), "status": sim.status,
                                  "decode_step_ns": sim.decode_step_ns and round(sim.decode_step_ns, 3),
                                  "energy_pJ_per_token": sim.energy_pJ_per_token
                                  and round(sim.energy_pJ_per_token, 3)},
                    "reason": reason(p, other, objective),
                })
    return out


def _round(v: float) -> float | None:
    import math

    return round(float(v), 3) if math.isfinite(v) else None


def _render(tree: dict) -> str:
    unit = "pJ/token" if tree["objective"] == "energy_per_token" else "us/token"
    lines = [f"archsim plan: workload {tree['workload']} ({tree['model']}), objective {tree['objective']}"]
    if "validation" in tree:
        v = tree["validation"]
        lines.append(f"  feasible points {v['feasible_points']}, contested {v['contested_points']}")
        lines.append(f"  agreement {_pct(v['agreement'])}, contested agreement {_pct(v['contested_agreement'])}, "
                     f"mean regret {_pct(v['mean_regret'])}, max regret {_pct(v['max_regret'])}")
        for p in v["disagreements"][:20]:
            lines.append(f"    {p['system']} ctx {p['context']} batch {p['batch']} links x{p['link_scale']}: "
                         f"planner {p['planner_choice']}, simulated best {p['simulated_best']}, "
                         f"regret {_pct(p['regret'])}")
        return "\n".join(lines)
    lines.append(f"  {'system':8} {'context':>8} {'batch':>5} {'rank':>4} {'candidate':14} "
                 f"{'predicted ' + unit:>20} {'simulated':>12}  reason")
    for c in tree["candidates"]:
        scale = 1.0 if tree["objective"] == "energy_per_token" else 1e3
        lines.append(f"  {c['system']:8} {c['context']:>8} {c['batch']:>5} {c['rank']:>4} {c['name']:14} "
                     f"{_fmt(c['predicted']['cost'], scale):>20} {_fmt(c['simulated']['cost'], scale):>12}  "
                     f"{c['reason']}")
    return "\n".join(lines)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.1f} %"


__all__ = ["plan_command"]
