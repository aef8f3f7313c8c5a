"""Optuna searches over a spec's grid: TPE (one or more objectives) and NSGA-II (several).

Each axis (or zipped group) is one categorical parameter over its value positions, so a trial is a grid point.
Trials are asked in batches of `search.batch` and told in ask order once the whole batch is computed
(batch-synchronous ask/tell): the sequence of trials depends on the seed and the batch size only, not on the
number of workers or the order results arrive in. A trial whose point is already in the store is told its
stored result without computing it, so `--resume` replays the search to where it stopped; a point that is not
`ok`, or breaks a constraint, is a failed trial.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from archsim.errors import ConfigError
from archsim.sweep.spec import SweepSpec


def _sampler(spec: SweepSpec) -> Any:
    import optuna

    if spec.method == "tpe":
        return optuna.samplers.TPESampler(seed=spec.seed, multivariate=True)
    return optuna.samplers.NSGAIISampler(seed=spec.seed, population_size=max(4, spec.batch))


def optuna_search(spec: SweepSpec, evaluate: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> None:
    """Run `spec.count` trials; `evaluate(points)` computes (or reads back) each point's store row."""
    try:
        import optuna
    except ImportError:
        raise ConfigError("needs Optuna: pip install 'archsim[dse]'", file=spec.file, where="sweep.search.method") \
            from None
    from archsim.sweep.runner import objective_values

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=[o.goal for o in spec.objectives], sampler=_sampler(spec))
    names = [f"axis{i}" for i in range(len(spec.axes))]
    done = 0
    while done < (spec.count or 0):
        trials = [study.ask() for _ in range(min(spec.batch, spec.count - done))]
        points = []
        for trial in trials:
            point: dict[str, Any] = {}
            for name, axis in zip(names, spec.axes, strict=True):
                pos = trial.suggest_categorical(name, list(range(len(axis.values))))
                point.update(zip(axis.keys, axis.values[pos], strict=True))
            points.append({k: point[k] for k in spec.axis_keys})
        rows = evaluate(points)
        for trial, row in zip(trials, rows, strict=True):
            values = objective_values(spec, row)
            if values is None:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            else:
                study.tell(trial, list(values))
        done += len(trials)
