"""The commands a sweep can run, each through its own Python functions (no subprocess per point).

A command takes named base inputs (`system`, `workload`, `contexts`, ...) and `--set`-style overrides over its
dotted prefixes. `resolve` gives the fully resolved inputs that key a point in the store (the YAML trees after
overrides, so that the same design reached by two specs is one point); `run` gives the command's JSON tree.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from archsim.config.yaml_files import read_yaml
from archsim.errors import ConfigError


def _tree(path: Path, overrides: Sequence[str]) -> Any:
    from archsim.system.config import apply_system_overrides

    tree = read_yaml(path)
    if isinstance(tree, dict):  # the system's rules (system.pool.memory.*) apply to no other tree's keys
        apply_system_overrides(tree, list(overrides), str(path))
    return tree


@functools.lru_cache(maxsize=256)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def referenced_files(tree: Any, base: Path, seen: dict[str, str] | None = None) -> dict[str, str]:
    """SHA-256 of every file a config tree names by path (a string naming an existing file, absolute or
    relative to `base`, the tree's own directory), and of the files those YAML files name in turn, keyed by the
    path as written: the same design with an edited memory file, trace or length table is another point."""
    seen = {} if seen is None else seen
    if isinstance(tree, dict):
        for value in tree.values():
            referenced_files(value, base, seen)
    elif isinstance(tree, list):
        for value in tree:
            referenced_files(value, base, seen)
    elif isinstance(tree, str) and ("/" in tree or "." in tree) and tree not in seen and len(tree) < 4096:
        path = Path(tree) if Path(tree).is_absolute() else base / tree
        try:
            stat = path.stat()
        except (OSError, ValueError):
            return seen
        if path.is_file():
            seen[tree] = _file_digest(str(path), stat.st_size, stat.st_mtime_ns)
            if path.suffix in (".yaml", ".yml"):
                referenced_files(read_yaml(path), path.parent, seen)
    return seen


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
    groups: frozenset[str]  # those of them whose value is a mapping (an objective names a key inside one)
    resolve: Callable[[dict[str, Any], list[str]], dict[str, Any]]
    check: Callable[[dict[str, Any], list[str]], None]  # builds the configs: raises ConfigError
    run: Callable[[dict[str, Any], list[str]], dict[str, Any]]
    # what points sharing memoized work have in common, from their resolved inputs (archsim.sweep.runner.batches
    # runs them in one task); None: every point is a task of its own
    affinity: Callable[[dict[str, Any]], str] | None = None


def _pool_affinity(resolved: dict[str, Any]) -> str:
    """A simulate or compare point's memoized work (the PNM unit's timed kernel runs, the pool's DRAM
    replays: archsim.system.attention, archsim.system.pooldram) follows each system's pool and sampling and the
    workload, not its links or GPUs: points alike in these share it."""
    import json

    systems = [t.get("system") if isinstance(t, dict) else t for t in resolved.get("systems", [])]
    parts = [[s.get("pool"), s.get("sampling")] if isinstance(s, dict) else s for s in systems]
    return json.dumps([parts, resolved.get("workload")], sort_keys=True, default=str)


# -- simulate / compare -------------------------------------------------------------------------------------------

def _system_path(name: str) -> Path:
    from archsim.system.config import resolve_system_path

    return resolve_system_path(name)


def _workload_path(name: str) -> Path:
    from archsim.system.workload import resolve_workload_path

    return resolve_workload_path(name)


def _systems(inputs: dict[str, Any]) -> list[str]:
    if "systems" not in inputs and "system" not in inputs:
        raise ConfigError("give the input `system` or `systems` (in inputs or as an axis)", where="sweep.inputs")
    value = inputs["systems"] if "systems" in inputs else [inputs["system"]]
    return [value] if isinstance(value, str) else list(value)


def _systems_and(inputs: dict[str, Any], overrides: list[str], other: Path,
                 prefix: str) -> tuple[list[Any], Any, dict[str, str]]:
    """The systems' trees, the other input's tree (`other`, overridden by `prefix`) and the files they name."""
    paths = [_system_path(s) for s in _systems(inputs)]
    systems = [_tree(p, _prefixed(overrides, "system.")) for p in paths]
    tree = _tree(other, _prefixed(overrides, prefix))
    files: dict[str, str] = {}
    for t, path in (*zip(systems, paths, strict=True), (tree, other)):
        referenced_files(t, path.parent, files)
    return systems, tree, files


def _resolve_simulate(inputs: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    systems, workload, files = _systems_and(inputs, overrides, _workload_path(inputs["workload"]), "workload.")
    return {"systems": systems, "workload": workload, "contexts": _contexts(inputs.get("contexts")),
            "files": files}


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


# -- serve --------------------------------------------------------------------------------------------------------

# the keys of one archsim.serving/1 result entry (archsim.serving.run.result_entry; tests/test_sweep.py checks them
# against a real run's)
SERVE_RESULT_KEYS = frozenset((
    "system", "tier", "scenario", "status", "kv_decode", "cost_model", "breakdown_ms", "e2e_ms", "ttft_ms", "tpot_ms",
    "energy_J_per_request", "energy_J_per_token", "energy_breakdown_mJ_per_token", "events", "iterations",
    "goodput_requests_per_s", "throughput_requests_per_s", "throughput_tokens_per_s", "link_bytes",
    "link_utilization", "link_write_utilization", "mean_in_flight", "preemptions", "prefix_hit_rate",
    "prefix_hit_rate_by_tier", "requests_completed", "requests_measured", "requests_rejected", "requests_streamed",
    "tier_bytes", "tier_link_bytes", "utilization_over_time", "cache_reuse", "kv_read_bytes_per_token"))
# keys an entry has only for some scenarios or systems: speculative decoding, a tree's own verifier, placement auto,
# several servers
SERVE_OPTIONAL_KEYS = frozenset(("speculative", "verifier", "placement", "servers", "server_fairness"))
SERVE_GROUPS = frozenset((
    "breakdown_ms", "cache_reuse", "cost_model", "e2e_ms", "energy_breakdown_mJ_per_token", "link_bytes",
    "link_utilization", "link_write_utilization", "prefix_hit_rate_by_tier", "tier_bytes", "tier_link_bytes",
    "tpot_ms", "ttft_ms", "utilization_over_time", "speculative", "verifier", "placement", "servers"))
STEP_GROUPS = frozenset(("breakdown_ns", "link_bytes", "energy_breakdown_pJ_per_token", "qos", "sampling"))
SERVE_DEFAULTS = {"requests": 1000, "seed": 0, "warmup_requests": 0}


def _scenario_path(name: str) -> Path:
    from archsim.serving.scenario import resolve_scenario_path

    return resolve_scenario_path(name)


def _serve_options(inputs: dict[str, Any]) -> dict[str, Any]:
    from archsim.units import parse_time_ns

    out = {**SERVE_DEFAULTS, **{k: inputs[k] for k in ("requests", "seed", "warmup_requests") if k in inputs}}
    duration = inputs.get("duration")
    out["duration_ns"] = parse_time_ns(duration, "duration") if duration is not None else None
    if out["duration_ns"] is not None:
        out["requests"] = None
    return out


def _resolve_serve(inputs: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    systems, scenario, files = _systems_and(inputs, overrides, _scenario_path(inputs["scenario"]), "scenario.")
    return {"systems": systems, "scenario": scenario, **_serve_options(inputs), "files": files}


def _build_serve(inputs: dict[str, Any], overrides: list[str]) -> tuple[list, Any]:
    from archsim.serving.scenario import scenario_from_mapping
    from archsim.system.config import system_config_from_mapping

    configs = [system_config_from_mapping(_tree(_system_path(s), _prefixed(overrides, "system.")),
                                          file=str(_system_path(s))) for s in _systems(inputs)]
    spath = _scenario_path(inputs["scenario"])
    return configs, scenario_from_mapping(_tree(spath, _prefixed(overrides, "scenario.")), file=str(spath))


def _check_serve(inputs: dict[str, Any], overrides: list[str]) -> None:
    _build_serve(inputs, overrides)
    _serve_options(inputs)


def _run_serve(inputs: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    from archsim.serving.cli import fabric_ratios
    from archsim.serving.run import SCHEMA, requests_source, result_entry, run_system

    configs, scenario = _build_serve(inputs, overrides)
    opts = _serve_options(inputs)
    requests_for = requests_source(scenario, opts["requests"], opts["duration_ns"], opts["seed"])
    entries = [result_entry(run_system(c, scenario, requests_for, warmup=opts["warmup_requests"]), scenario)
               for c in configs]
    return {"schema": SCHEMA, "scenario": scenario.name, "scenario_file": scenario.file, "seed": opts["seed"],
            "requests": opts["requests"], "duration_ns": opts["duration_ns"],
            "warmup_requests": opts["warmup_requests"], "fabric_ttft_ratio": fabric_ratios(entries),
            "results": entries}


# -- pnm --------------------------------------------------------------------------------------------------------
# `archsim pnm run` as a point: a kernel for a problem shape on one device's PNM units. Overrides: pnm.* and
# memory.* (as the command's --set), define.NAME (its -D) and shape.KEY (one key of --shape).

PNM_GROUPS = frozenset(("pnm", "memory"))
PNM_RESULT_KEYS = frozenset(("system", "status")) | PNM_GROUPS


def _kernel_path(inputs: dict[str, Any]) -> Path:
    from archsim.resources import data_path

    path = Path(str(inputs["kernel"]))
    if not path.is_absolute() and not path.exists() and path.parts and path.parts[0] == "isa":
        return Path(data_path(*path.parts))  # a shipped kernel by its repository path (isa/kernels/...)
    return path


def _pnm_parts(inputs: dict[str, Any], overrides: list[str]) -> tuple[Path, Any, Path, list[str], str, list[str]]:
    """(PNM config path, its tree after pnm.*, memory path, memory.* overrides, shape text, -D strings)."""
    from archsim.config.overrides import apply_overrides
    from archsim.pnm.timed.unit_config import DEFAULT_PNM_CONFIG

    ppath = Path(str(inputs["pnm"])) if inputs.get("pnm") else DEFAULT_PNM_CONFIG
    tree = read_yaml(ppath)
    if isinstance(tree, dict):
        apply_overrides(tree, _prefixed(overrides, "pnm."), str(ppath))
    memory = inputs.get("memory")
    if memory is None:
        named = tree.get("pnm", {}).get("memory") if isinstance(tree, dict) and isinstance(tree.get("pnm"), dict) \
            else None
        if named is None:
            raise ConfigError("no memory input and the PNM config names no memory", file=str(ppath),
                              where="pnm.memory")
        memory = named if Path(named).is_absolute() else ppath.parent / named
    shape = _edited_shape(str(inputs["shape"]), _prefixed(overrides, "shape."))
    defines = [o.strip().removeprefix("define.") for o in _prefixed(overrides, "define.")]
    return ppath, tree, Path(str(memory)), _prefixed(overrides, "memory."), shape, defines


def _edited_shape(shape: str, overrides: list[str]) -> str:
    """--shape text with `shape.KEY=VALUE` overrides applied (a new key is appended)."""
    import yaml

    items = dict(part.split("=", 1) for part in shape.split(",") if "=" in part)
    for o in overrides:
        key, value = o.strip().removeprefix("shape.").split("=", 1)
        items[key.strip()] = str(yaml.safe_load(value))
    return ",".join(f"{k}={v}" for k, v in items.items())


def _resolve_pnm(inputs: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    from archsim.config.memory import resolve_memory_tree

    ppath, tree, mpath, memory_sets, shape, defines = _pnm_parts(inputs, overrides)
    kernel = _kernel_path(inputs)
    files = referenced_files(tree, ppath.parent)
    files.update(referenced_files({"kernel": str(kernel)}, Path.cwd()))
    for inc in sorted(kernel.parent.glob("*.inc")) if kernel.is_file() else ():  # what `.include` may read
        files.update(referenced_files({"include": str(inc)}, Path.cwd()))
    memory = resolve_memory_tree(read_yaml(mpath), str(mpath), memory_sets)
    return {"pnm": tree, "memory": memory, "shape": shape, "defines": sorted(defines), "units": inputs.get("units"),
            "kernel": kernel.name, "files": {Path(k).name if k == str(kernel) else k: v for k, v in files.items()}}


def _build_pnm(inputs: dict[str, Any], overrides: list[str]) -> tuple[Path, str, Any, Any, dict[str, object]]:
    from archsim.config.memory import load_memory_config
    from archsim.pnm.cli import _defines
    from archsim.pnm.timed.unit_config import build_pnm_config

    ppath, tree, mpath, memory_sets, shape, defines = _pnm_parts(inputs, overrides)
    kernel = _kernel_path(inputs)
    if not kernel.is_file():
        raise ConfigError(f"no such kernel: {kernel}", where="sweep.inputs.kernel")
    return kernel, shape, load_memory_config(mpath, memory_sets), build_pnm_config(tree, str(ppath)), \
        _defines(tuple(defines))


def _check_pnm(inputs: dict[str, Any], overrides: list[str]) -> None:
    from archsim.pnm.problem.shape import parse_shape

    kernel, shape, *_ = _build_pnm(inputs, overrides)
    parse_shape(shape, kernel)


def _run_pnm(inputs: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    from archsim.pnm.timed.simulate import run_pnm
    from archsim.pnm.timed.stats import pnm_stats

    kernel, shape, memory, pnm, defines = _build_pnm(inputs, overrides)
    units = inputs.get("units")
    stats = pnm_stats(run_pnm(kernel, shape, memory, pnm, defines=defines, units=units), reproducible=True)
    entry = {"system": "pnm", "status": "ok", "pnm": stats["pnm"], "memory": stats["memory"]}
    return {"schema": stats["schema"], "results": [entry]}


# -- replay -----------------------------------------------------------------------------------------------------
# `archsim replay` as a point: a memory trace through one memory config; overrides memory.* (its --set).

REPLAY_RESULT_KEYS = frozenset(("system", "status", "memory"))


def _shipped_or_given(value: Any, top: str) -> Path:
    """A path as given, or a shipped file by its repository path (configs/..., traces/...)."""
    from archsim.resources import data_path

    path = Path(str(value))
    if not path.is_absolute() and not path.exists() and path.parts and path.parts[0] == top:
        return Path(data_path(*path.parts))
    return path


def _replay_paths(inputs: dict[str, Any]) -> tuple[Path, Path]:
    return _shipped_or_given(inputs["trace"], "traces"), _shipped_or_given(inputs["memory"], "configs")


def _resolve_replay(inputs: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    from archsim.config.memory import resolve_memory_tree

    trace, mpath = _replay_paths(inputs)
    memory = resolve_memory_tree(read_yaml(mpath), str(mpath), _prefixed(overrides, "memory."))
    digest = referenced_files({"trace": str(trace)}, Path.cwd()).get(str(trace))
    return {"memory": memory, "trace": trace.name, "format": inputs.get("format", "auto"),
            "wrap": bool(inputs.get("wrap", False)), "files": {trace.name: digest}}


def _check_replay(inputs: dict[str, Any], overrides: list[str]) -> None:
    from archsim.config.memory import load_memory_config

    trace, mpath = _replay_paths(inputs)
    load_memory_config(mpath, _prefixed(overrides, "memory."))
    if not trace.is_file():
        raise ConfigError(f"no such trace: {trace}", where="sweep.inputs.trace")


def _run_replay(inputs: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    from archsim.config.memory import load_memory_config
    from archsim.memory import Requests, check_addresses, replay
    from archsim.report.memory_stats import memory_stats
    from archsim.trace.text_formats import read_trace

    trace, mpath = _replay_paths(inputs)
    cfg = load_memory_config(mpath, _prefixed(overrides, "memory."))
    physical = read_trace(str(trace), str(inputs.get("format", "auto")))
    address = check_addresses(cfg, physical.address, bool(inputs.get("wrap", False)), str(trace))
    requests = Requests.build(physical.timestamp_cycles, address, physical.is_write, physical.source)
    stats = memory_stats(replay(cfg, requests), reproducible=True)
    return {"schema": stats["schema"], "results": [{"system": "replay", "status": "ok", "memory": stats["memory"]}]}


# -- the registry -------------------------------------------------------------------------------------------------

@functools.cache
def commands() -> dict[str, Command]:
    keys = _step_result_keys()
    return {
        "simulate": Command("simulate", ("system", "workload", "contexts"), ("system", "workload"),
                            ("system.", "workload."), keys, STEP_GROUPS, _resolve_simulate, _check_simulate,
                            _run_simulate, _pool_affinity),
        "compare": Command("compare", ("systems", "workload", "contexts"), ("systems", "workload"),
                           ("system.", "workload."), keys, STEP_GROUPS, _resolve_simulate, _check_simulate,
                           _run_simulate, _pool_affinity),
        "serve": Command("serve", ("systems", "system", "scenario", "requests", "duration", "seed", "warmup_requests"),
                         ("scenario",), ("scenario.", "system."), SERVE_RESULT_KEYS | SERVE_OPTIONAL_KEYS,
                         SERVE_GROUPS, _resolve_serve, _check_serve, _run_serve),
        "pnm": Command("pnm", ("kernel", "shape", "pnm", "memory", "units"), ("kernel", "shape"),
                       ("pnm.", "memory.", "define.", "shape."), PNM_RESULT_KEYS, PNM_GROUPS, _resolve_pnm,
                       _check_pnm, _run_pnm),
        "replay": Command("replay", ("trace", "memory", "format", "wrap"), ("trace", "memory"), ("memory.",),
                          REPLAY_RESULT_KEYS, frozenset(("memory",)), _resolve_replay, _check_replay, _run_replay),
    }


def command(name: str, *, file: str | None = None, where: str = "sweep.command") -> Command:
    known = commands()
    if name not in known:
        raise ConfigError(f"unknown command {name!r} (a sweep runs one of {', '.join(sorted(known))})", file=file,
                          where=where)
    return known[name]
