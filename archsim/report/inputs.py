"""The shape of every archsim JSON tree `archsim report` plots, checked before any plot is drawn.

A tree with a supported schema may still be damaged or hand-edited: each schema below lists the keys its plots
read and what each holds, so that a wrong one is one ConfigError naming the file and the dotted key (`results[2]
.context`), never an exception inside matplotlib. Keys the plots do not read are not checked.

A spec is a type name ("str", "int", "count", "number", "bool", "grid"), `Null(spec)` (that, or null), a list
`[spec]` (a non-empty list of such items) or a mapping {key: spec}: `key?` may be absent, "*" stands for every
key (each value of that spec), "#" for every key, which must be a decimal integer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from archsim.errors import ConfigError


@dataclass(frozen=True)
class Null:
    """The inner spec, or null."""

    spec: Any


NUMBERS = {"*": "number"}
DIST = Null({"*": Null("number")})  # a latency distribution: mean, p50, p90, p99 (null: none measured)

SYSTEM = {"results": [{
    "system": "str", "tier?": "str", "context": "count", "status": "str", "decode_step_ns?": Null("number"),
    "energy_pJ_per_token?": Null("number"),
    "breakdown_ns?": Null({"critical?": Null(NUMBERS), "overlapped?": Null(NUMBERS)}),
    "energy_breakdown_pJ_per_token?": Null(NUMBERS)}]}

SERVING_ENTRY = {
    "system": "str", "status": "str", "requests_completed?": Null("count"), "ttft_ms?": DIST, "tpot_ms?": DIST,
    "breakdown_ms?": Null({"*": Null("number")}), "energy_breakdown_mJ_per_token?": Null(NUMBERS),
    "throughput_tokens_per_s?": Null("number"), "goodput_requests_per_s?": Null("number"), "rate_per_s?": "number"}
SERVING = {"results": [SERVING_ENTRY], "rates_per_s?": Null(["number"])}

STATS = {"sim": {"requests": "count"}, "memory": {
    "standard?": "str", "commands": {"*": "count"},
    "channels": {"#": {"bandwidth_GBps": "number", "row_hit_rate": Null("number")}},
    "banks?": {"row_misses": "grid", "row_conflicts": "grid", "bank_conflicts": "grid"}}}

PLAN_CANDIDATES = {"objective?": "str", "candidates": [{
    "system": "str", "context": "count", "rank": "count", "name": "str",
    "predicted": {"cost?": Null("number"), "feasible?": "bool", "reason?": Null("str")},
    "simulated": {"cost?": Null("number"), "status?": Null("str")}}]}
PLAN_VALIDATION = {"validation": {
    "agreement": "number", "contested_agreement": "number", "mean_regret": "number", "max_regret": "number",
    "points": [{"system": "str", "context": "count", "link_scale": "number", "regret?": Null("number"),
                "predicted": {"*": Null("number")}, "simulated?": {"*": Null("number")}}]}}

GPU = {"gpu?": "str", "kernels?": ["str"], "results": [{
    "tokens": "count", "tp": "count", "layer_ns": "number", "allreduce_ns": "number", "kernels_ns": NUMBERS}]}


def _describe(spec: Any) -> str:
    if isinstance(spec, Null):
        return f"{_describe(spec.spec)} or null"
    if isinstance(spec, list):
        return "a non-empty list"
    if isinstance(spec, dict):
        return "an object"
    return {"str": "a string", "int": "an integer", "count": "a non-negative integer", "number": "a number",
            "bool": "true or false", "grid": "a list of equally long lists of numbers"}[spec]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _fits(value: Any, kind: str) -> bool:
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind in ("int", "count"):
        return isinstance(value, int) and not isinstance(value, bool) and (kind == "int" or value >= 0)
    if kind == "number":
        return _number(value)
    rows = value if isinstance(value, list) else None  # grid
    return (rows is not None and all(isinstance(r, list) and all(_number(x) for x in r) for r in rows)
            and len({len(r) for r in rows}) <= 1)


def check_tree(value: Any, spec: Any, where: str, file: str) -> None:
    """Raise a ConfigError naming `file` and the dotted key of the first value that does not fit `spec`."""
    def fail(expected: str, at: str = where) -> ConfigError:
        shown = repr(value) if len(repr(value)) <= 60 else f"{type(value).__name__} {repr(value)[:50]}..."
        return ConfigError(f"expected {expected}, got {shown}", file=file, where=at or None)

    if isinstance(spec, Null):
        if value is None:
            return
        spec = spec.spec
    if isinstance(spec, str):
        if not _fits(value, spec):
            raise fail(_describe(spec))
    elif isinstance(spec, list):
        if not isinstance(value, list) or not value:
            raise fail(_describe(spec))
        for i, item in enumerate(value):
            check_tree(item, spec[0], f"{where}[{i}]", file)
    else:
        if not isinstance(value, dict):
            raise fail(_describe(spec))
        for key, sub in spec.items():
            if key in ("*", "#"):
                for name, item in value.items():
                    if key == "#" and not name.isdigit():
                        raise ConfigError(f"expected a decimal integer key, got {name!r}", file=file, where=where)
                    check_tree(item, sub, f"{where}.{name}" if where else name, file)
                continue
            name = key.rstrip("?")
            at = f"{where}.{name}" if where else name
            if name not in value:
                if key.endswith("?"):
                    continue
                raise ConfigError("missing key", file=file, where=at)
            check_tree(value[name], sub, at, file)


def check_input_tree(tree: dict[str, Any], file: str) -> None:
    """The keys the plots of `tree`'s schema read (see the module docstring)."""
    schema = str(tree.get("schema", ""))
    if schema.startswith("archsim.system/"):
        check_tree(tree, SYSTEM, "", file)
    elif schema.startswith("archsim.serving/"):
        check_tree(tree, SERVING, "", file)
        if tree.get("rates_per_s"):  # a load sweep: every entry at one of the offered loads
            for i, entry in enumerate(tree["results"]):
                if entry.get("rate_per_s") not in tree["rates_per_s"]:
                    raise ConfigError(f"expected one of rates_per_s {tree['rates_per_s']}, got "
                                      f"{entry.get('rate_per_s')!r}", file=file, where=f"results[{i}].rate_per_s")
    elif schema.startswith("archsim.stats/"):
        check_tree(tree, STATS, "", file)
    elif schema.startswith("archsim.plan/"):
        check_tree(tree, PLAN_VALIDATION if "validation" in tree else PLAN_CANDIDATES, "", file)
    elif schema.startswith("archsim.gpu/"):
        check_tree(tree, GPU, "", file)
