"""`archsim serve --rates`: the same systems at several offered loads, the scenario's session arrival rate
(`scenario.arrivals.rate_per_s`) set to each rate in turn, everything else (seed, lengths, sessions) kept."""

from __future__ import annotations

import math
from collections.abc import Sequence

from archsim.errors import ConfigError
from archsim.serving.scenario import Scenario, load_scenario

RATE_KEY = "scenario.arrivals.rate_per_s"


def parse_rates(text: str) -> list[float]:
    """`0.5,1,2,4` -> [0.5, 1.0, 2.0, 4.0]: positive, finite, each once, in the order given."""
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise ConfigError(f"{text!r}: give comma-separated arrival rates per second, e.g. 0.5,1,2", where="--rates")
    rates = []
    for part in parts:
        try:
            rate = float(part)
        except ValueError:
            raise ConfigError(f"{part!r} is not a number (arrival rates per second, e.g. 0.5,1,2)",
                              where="--rates") from None
        if not math.isfinite(rate) or rate <= 0:
            raise ConfigError(f"{part!r}: an arrival rate must be positive and finite", where="--rates")
        if rate in rates:
            raise ConfigError(f"{part!r} is given twice", where="--rates")
        rates.append(rate)
    return rates


def scenarios_at_rates(scenario_path: str, overrides: Sequence[str], base: Scenario,
                       rates: Sequence[float]) -> list[Scenario]:
    """The scenario (loaded with `overrides`) once per rate. Only open-loop arrivals (poisson, gamma) have a
    rate; a closed loop or a trace's own timestamps are named as the reason."""
    if base.arrivals is None or base.arrivals.rate_per_s is None:
        how, key = ((base.arrivals.process, "scenario.arrivals.process") if base.arrivals is not None else
                    ("a trace's timestamps", "scenario.requests.trace"))
        raise ConfigError(f"--rates sets the session arrival rate, and this scenario's arrivals are {how} (no "
                          f"rate_per_s)", file=base.file, where=key)
    kept = [o for o in overrides if not o.strip().startswith(RATE_KEY + "=")]
    return [load_scenario(scenario_path, [*kept, f"{RATE_KEY}={rate!r}"]) for rate in rates]


def rate_label(rate: float) -> str:
    return f"{rate:g} sessions/s"


__all__ = ["parse_rates", "scenarios_at_rates", "rate_label", "RATE_KEY"]
