"""The commands a sweep can run, each through its own Python functions (no subprocess per point).

A command takes named base inputs (`system`, `workload`, `contexts`, ...) and `--set`-style overrides over its
dotted prefixes. `resolve` gives the fully resolved inputs that key a point in the store (the YAML trees after
overrides, so that the same design reached by two specs is one point); `run` gives the command's JSON tree.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from archsim.errors import ConfigError


@functools.lru_cache(maxsize=64)
def _yaml_tree(path: str) -> Any:
    from archsim.config.yaml_files import read_yaml

    return read_yaml(Path(path))


def _tree(path: Path, overrides: Sequence[str]) -> Any:
    from archsim.config.overrides import apply_overrides

    tree = copy.deepcopy(_yaml_tree(str(path)))
    if isinstance(tree, dict):
        apply_overrides(tree, list(overrides), str(path))
    return tree


def _prefixed(overrides: Sequence[str], prefix: str) -> list[str]:
    return [o for o in overrides if o.strip().startswith(prefix)]


def _contexts(value: Any) -> tuple[int, ...] | None:
    from archsim.system.workload import parse_tokens

    if value is None:
        return None
    items = value if isinstance(value, list | tuple) else str(value).split(",")
    return tuple(parse_tokens(item.strip() if isinstance(item, str) else item, "contexts") for item in items)


@dataclass(frozen=True)
class Command:
    name: str
    input_names: tuple[str, ...]  # base inputs a spec (or an axis) may give
    required: tuple[str, ...]
    prefixes: tuple[str, ...]  # dotted override prefixes its --set takes
    result_keys: frozenset[str]  # top-level keys of one result entry
    resolve: Callable[[dict[str, Any], list[str]], dict[str, Any]]
    check: Callable[[dict[str, Any], list[str]], None]  # builds the configs: raises ConfigError
    run: Callable[[dict[str, Any], list[str]], dict[str, Any]]


# -- simulate / compare -------------------------------------------------------------------------------------------

def _system_path(name: str) -> Path:
    from archsim.system.config import resolve_system_path

    return resolve_system_path(name)


def _workload_path(name: str) -> Path:
    from archsim.system.workload import resolve_workload_path

    return resolve_workload_path(name)


def _systems(inputs: dict[str, Any]) -> list[str]:
    value = inputs["systems"] if "systems" in inputs else [inputs["system"]]
    return [value] if isinstance(value, str) else list(value)


def _resolve_simulate(inputs: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    systems = [_tree(_system_path(s), _prefixed(overrides, "system.")) for s in _systems(inputs)]
    workload = _tree(_workload_path(inputs["workload"]), _prefixed(overrides, "workload."))
    return {"systems": systems, "workload": workload, "contexts": _contexts(inputs.get("contexts"))}


def _build_simulate(inputs: dict[str, Any], overrides: list[str]) -> tuple[list, Any, tuple[int, ...] | None]:
    from archsim.system.config import system_config_from_mapping
    from archsim.system.workload import workload_from_mapping

    configs = [system_config_from_mapping(_tree(_system_path(s), _prefixed(overrides, "system.")),
                                          file=str(_system_path(s))) for s in _systems(inputs)]
    wpath = _workload_path(inputs["workload"])
    workload = workload_from_mapping(_tree(wpath, _prefixed(overrides, "workload.")), file=str(wpath))
    return configs, workload, _contexts(inputs.get("contexts"))


def _check_simulate(inputs: dict[str, Any], overrides: list[str]) -> None:
    _build_simulate(inputs, overrides)


def _run_simulate(inputs: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    from archsim.system.report import result_tree, run_comparison

    configs, workload, contexts = _build_simulate(inputs, overrides)
    return result_tree(configs, workload, run_comparison(configs, workload, contexts))


def _step_result_keys() -> frozenset[str]:
    from archsim.system.decode import StepResult

    return frozenset(StepResult("x", "x", 1, "ok").as_dict())


# -- the registry -------------------------------------------------------------------------------------------------

@functools.cache
def commands() -> dict[str, Command]:
    keys = _step_result_keys()
    return {
        "simulate": Command("simulate", ("system", "workload", "contexts"), ("system", "workload"),
                            ("system.", "workload."), keys, _resolve_simulate, _check_simulate, _run_simulate),
        "compare": Command("compare", ("systems", "workload", "contexts"), ("systems", "workload"),
                           ("system.", "workload."), keys, _resolve_simulate, _check_simulate, _run_simulate),
    }


def command(name: str, *, file: str | None = None, where: str = "sweep.command") -> Command:
    known = commands()
    if name not in known:
        raise ConfigError(f"unknown command {name!r} (a sweep runs one of {', '.join(sorted(known))})", file=file,
                          where=where)
    return known[name]
