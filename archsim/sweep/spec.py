"""Sweep specs (`configs/sweeps/*.yaml`): the command, its base inputs, the axes, the search, the objectives.

    sweep:
      name: lanes-sram
      command: simulate                     # simulate | compare | serve
      inputs:                               # the command's base inputs, and `set:` overrides applied first
        system: g25
        workload: llama3-70b-b16
        contexts: 32K
        set: [system.sampling.window_requests=16384]
      axes:                                 # over base inputs or dotted keys (system.*, workload.*)
        system.pool.pnm.macs_per_cycle: {log_range: [64, 1024, 5]}    # 5 values, geometric
        system.pool.pnm.sram: [96KiB, 512KiB]                        # a list
        system.interconnect.bandwidth_scale: {range: [0.5, 2.0, 0.5]}  # start, stop (inclusive), step
      zip:                                  # axes that move together: equal-length lists
        - {system.gpus.count: [4, 8], workload.tensor_parallel: [4, 8]}
      search: {method: grid}                # or {method: random, count: 50, seed: 1}, or Optuna's
                                            # {method: tpe | nsga2, count: 60, seed: 1, batch: 4}
      objectives:                           # each reads one result entry: `select` names it
        - {key: decode_step_ns, goal: minimize, select: {system: g25, context: 32K}}
      constraints:
        - {key: tokens_per_s, min: 1000, select: {context: 32K}}
      timeout_s: 600                        # per point; a point past it is `failed: timeout`
      memory_cap: 8GiB                      # a worker's address space while a point runs (local processes)

Every point is the product of the axes (in the order written) and the zipped groups. Bad input is one
ConfigError naming the spec file and the dotted key: an empty axis, an axis over a key that no system or
workload of the sweep has (checked by loading the base inputs with the override), an objective over a key the
command's result entries do not hold.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from archsim.config.yaml_files import read_yaml
from archsim.errors import ConfigError
from archsim.limits import check_fits_memory
from archsim.resources import data_path
from archsim.section import Section
from archsim.sweep.commands import Command, command

SWEEPS_DIR = data_path("configs", "sweeps")
# lower bounds on what an axis value and a grid point take in memory (sys.getsizeof: a float 24 B, a one-key dict
# 184 B, each with its 8-B list slot), so an axis or grid beyond this machine's memory is refused before it is built
AXIS_VALUE_BYTES = 32
POINT_BYTES = 192
SEARCH_METHODS = ("grid", "random", "tpe", "nsga2")
GOALS = ("minimize", "maximize")
_MISSING_KEY = ("unknown key", "no such config path", "cannot set a key inside a non-mapping")


@dataclass(frozen=True)
class Axis:
    keys: tuple[str, ...]  # one key, or the keys of a zipped group
    values: tuple[tuple[Any, ...], ...]  # one tuple per position: a value per key


@dataclass(frozen=True)
class Selector:
    key: str  # dotted inside one result entry: decode_step_ns, breakdown_ns.critical.pnm
    select: tuple[tuple[str, Any], ...]  # (system, name) / (context, tokens)

    def entry(self, entries: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The one result entry `select` names (the only entry when it names none); None if absent."""
        hits = [e for e in entries if all(e.get(k) == v for k, v in self.select)]
        return hits[0] if len(hits) == 1 else None

    def value(self, entries: list[dict[str, Any]]) -> float | None:
        entry = self.entry(entries)
        if entry is None or entry.get("status") != "ok":
            return None
        node: Any = entry
        for part in self.key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return float(node) if isinstance(node, int | float) and not isinstance(node, bool) else None

    @property
    def column(self) -> str:
        prefix = ".".join(str(v) for _, v in self.select)
        return f"{prefix}.{self.key}" if prefix else self.key


@dataclass(frozen=True)
class Objective(Selector):
    goal: str = "minimize"

    def better(self, a: float, b: float) -> bool:
        return a < b if self.goal == "minimize" else a > b


@dataclass(frozen=True)
class Constraint(Selector):
    minimum: float | None = None
    maximum: float | None = None

    def holds(self, entries: list[dict[str, Any]]) -> bool:
        value = self.value(entries)
        if value is None:
            return False
        return (self.minimum is None or value >= self.minimum) and (self.maximum is None or value <= self.maximum)


@dataclass(frozen=True)
class SweepSpec:
    file: str
    name: str
    command: Command
    inputs: dict[str, Any]  # base inputs, without `set`
    base_overrides: tuple[str, ...]
    axes: tuple[Axis, ...]
    method: str
    count: int | None
    seed: int
    objectives: tuple[Objective, ...]
    constraints: tuple[Constraint, ...]
    timeout_s: float | None
    batch: int = 1  # trials asked and told together (tpe, nsga2)
    memory_cap_bytes: int | None = None  # a worker's address space while a point runs

    @property
    def axis_keys(self) -> tuple[str, ...]:
        return tuple(k for axis in self.axes for k in axis.keys)

    @property
    def grid_size(self) -> int:
        return math.prod(len(axis.values) for axis in self.axes)

    def identity(self) -> dict[str, Any]:
        """What a store must have been written by: the command and its base inputs (axes and budget may grow)."""
        return {"command": self.command.name, "inputs": self.inputs, "set": list(self.base_overrides)}

    def grid_point(self, index: int) -> dict[str, Any]:
        """The index-th point of the grid (last axis fastest)."""
        point: dict[str, Any] = {}
        for axis in reversed(self.axes):
            index, pos = divmod(index, len(axis.values))
            point.update(zip(axis.keys, axis.values[pos], strict=True))
        return {k: point[k] for k in self.axis_keys}

    def points(self) -> list[dict[str, Any]]:
        """The points to compute, in a fixed order: the whole grid, or `count` of it drawn without replacement
        (a seeded permutation, so a larger count keeps every earlier point)."""
        if self.method == "grid":
            return [self.grid_point(i) for i in range(self.grid_size)]
        import numpy as np

        n = min(self.count or 0, self.grid_size)
        order = np.random.default_rng(self.seed).permutation(self.grid_size)[:n]
        return [self.grid_point(int(i)) for i in order]

    def point_inputs(self, point: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """The command's inputs and overrides at `point`: axis values over base inputs replace them, the rest
        become `--set key=value` after the spec's own `set`."""
        inputs = dict(self.inputs)
        overrides = list(self.base_overrides)
        for key, value in point.items():
            if key in self.command.input_names:
                inputs[key] = value
            else:
                overrides.append(f"{key}={json.dumps(value)}")  # JSON is YAML: the loader reads it back exactly
        return inputs, overrides


def resolve_spec_path(name_or_path: str | Path) -> Path:
    path = Path(name_or_path)
    if not path.exists() and not path.suffix and (SWEEPS_DIR / f"{path}.yaml").exists():
        return SWEEPS_DIR / f"{path}.yaml"
    return path


def load_spec(name_or_path: str | Path) -> SweepSpec:
    path = resolve_spec_path(name_or_path)
    if not path.is_file():
        raise ConfigError("no such sweep spec", file=str(path))
    return spec_from_mapping(read_yaml(path), file=str(path))


def _number(value: Any, s: Section, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise s.error(key, f"expected a finite number, got {value!r}")
    return value


def _axis_values(s: Section, key: str) -> tuple[Any, ...]:
    raw = s.raw(key)
    where = s.where(key)
    if isinstance(raw, list):
        values = tuple(raw)
    elif isinstance(raw, dict) and len(raw) == 1 and next(iter(raw)) in ("range", "log_range"):
        kind, args = next(iter(raw.items()))
        if not isinstance(args, list) or len(args) != 3:
            raise ConfigError(f"{kind} takes [start, stop, {'step' if kind == 'range' else 'count'}]", file=s.file,
                              where=f"{where}.{kind}")
        start, stop, third = (_number(a, s, f"{key}.{kind}") for a in args)
        values = _range(start, stop, third, kind, s.file, f"{where}.{kind}")
    else:
        raise ConfigError(f"expected a list of values, {{range: [start, stop, step]}} or "
                          f"{{log_range: [start, stop, count]}}, got {raw!r}", file=s.file, where=where)
    if not values:
        raise ConfigError("an empty axis (give at least one value)", file=s.file, where=where)
    seen: set[str] = set()
    for value in values:
        text = json.dumps(value, sort_keys=True, default=str)
        if text in seen:
            raise ConfigError(f"the value {value!r} is given twice", file=s.file, where=where)
        seen.add(text)
    return values


def _range(start: float, stop: float, third: float, kind: str, file: str, where: str) -> tuple[Any, ...]:
    integral = all(isinstance(v, int) for v in (start, stop)) and (kind == "log_range" or isinstance(third, int))
    if kind == "range":
        if third <= 0:
            raise ConfigError(f"the step must be positive, got {third}", file=file, where=where)
        n = int(math.floor((stop - start) / third + 1e-9)) + 1
        check_fits_memory(max(n, 0), AXIS_VALUE_BYTES, "axis values", where=where, file=file)
        values = [start + i * third for i in range(max(n, 0))]
    else:
        if start <= 0 or stop <= 0 or not isinstance(third, int) or third < 1:
            raise ConfigError("log_range needs a positive start and stop and an integer count >= 1", file=file,
                              where=where)
        check_fits_memory(third, AXIS_VALUE_BYTES, "axis values", where=where, file=file)
        ratio = (stop / start) ** (1 / (third - 1)) if third > 1 else 1.0
        values = [start * ratio**i for i in range(third)]
    if integral:
        return tuple(dict.fromkeys(int(round(v)) for v in values))
    return tuple(round(v, 12) for v in values)


def _selector_args(s: Section, command_: Command) -> tuple[str, tuple[tuple[str, Any], ...]]:
    from archsim.system.workload import parse_tokens

    key = s.str("key")
    root, _, below = key.partition(".")
    if root not in command_.result_keys:
        raise s.error("key", f"the {command_.name} command's results have no key {key!r} "
                             f"(known: {', '.join(sorted(command_.result_keys))})")
    if below and root not in command_.groups:
        raise s.error("key", f"{root!r} is one value in the {command_.name} command's results: nothing lies "
                             f"below it ({key!r})")
    if not below and root in command_.groups:
        raise s.error("key", f"{root!r} is a group of values in the {command_.name} command's results: name "
                             f"one inside it ({root}.<key>)")
    sel = s.sub("select", {})
    select: list[tuple[str, Any]] = []
    if sel.has("system"):
        select.append(("system", sel.str("system")))
    if sel.has("context"):
        select.append(("context", sel.parsed("context", parse_tokens)))
    sel.done()
    return key, tuple(select)


def spec_from_mapping(tree: Any, *, file: str) -> SweepSpec:
    top = Section(tree, "", file)
    root = top.sub("sweep")
    top.done()
    name = root.name("name", Path(file).stem)
    if "/" in name or "\\" in name or name in (".", ".."):  # the default --out is out/sweeps/<name>
        raise root.error("name", f"a sweep's name names its directory: no path separators, got {name!r}")
    cmd = command(root.str("command"), file=file, where=root.where("command"))
    inputs_s = root.sub("inputs", {})
    inputs = {k: inputs_s.raw(k) for k in list(inputs_s.data) if k != "set"}
    sets = inputs_s.raw("set", [])
    if not isinstance(sets, list) or not all(isinstance(o, str) and "=" in o for o in sets):
        raise inputs_s.error("set", "expected a list of dotted.key=value strings")
    for key in inputs:
        if key not in cmd.input_names:
            raise inputs_s.error(key, f"{cmd.name} takes no input {key!r} (known: {', '.join(cmd.input_names)})")
    for o in sets:
        if not o.strip().startswith(cmd.prefixes):
            raise inputs_s.error("set", f"{o!r}: a {cmd.name} override starts with {' or '.join(cmd.prefixes)}")
    axes = _parse_axes(root, cmd, inputs)
    search = root.sub("search", {"method": "grid"})
    method = search.choice("method", SEARCH_METHODS)
    count = search.int("count", minimum=1) if method != "grid" else None
    seed = search.int("seed", 0)
    batch = search.int("batch", 1, minimum=1) if method in ("tpe", "nsga2") else 1
    search.done()
    objectives = tuple(_objective(Section(o, f"{root.where('objectives')}[{i}]", file), cmd)
                       for i, o in enumerate(_list(root, "objectives")))
    constraints = tuple(_constraint(Section(c, f"{root.where('constraints')}[{i}]", file), cmd)
                        for i, c in enumerate(_list(root, "constraints")))
    if method in ("tpe", "nsga2") and not objectives:
        raise root.error("objectives", f"the {method} search needs at least one objective")
    if method == "nsga2" and len(objectives) < 2:
        raise root.error("objectives", "nsga2 is a multi-objective search: give two objectives or more (or tpe)")
    timeout = root.float("timeout_s") if root.has("timeout_s") else None
    if timeout is not None and timeout <= 0:
        raise root.error("timeout_s", f"must be positive, got {timeout:g}")
    from archsim.units import parse_size_bytes

    cap = root.parsed("memory_cap", parse_size_bytes) if root.has("memory_cap") else None
    if cap is not None and cap <= 0:
        raise root.error("memory_cap", f"must be positive, got {cap}")
    root.done()
    spec = SweepSpec(file, name, cmd, inputs, tuple(sets), axes, method, count, seed, objectives, constraints,
                     timeout, batch, cap)
    for missing in (k for k in cmd.required if k not in inputs and k not in spec.axis_keys):
        raise root.error("inputs", f"the {cmd.name} command needs the input {missing!r} (in inputs or as an axis)")
    check_fits_memory(spec.grid_size, POINT_BYTES, "grid points", where=root.where("axes"), file=file)
    _check_axis_keys(spec, root)
    _check_values(spec, root)
    _check_selected_systems(spec, root)
    return spec


def _check_selected_systems(spec: SweepSpec, root: Section) -> None:
    """A `select.system` must name a system the sweep runs, when its systems are shipped presets (named as their
    files; a system given by path is named inside its YAML and is not read here)."""
    from archsim.system.config import resolve_system_path

    names: set[str] = set()
    for key in ("system", "systems"):
        given = [spec.inputs[key]] if key in spec.inputs else []
        given += [v[axis.keys.index(key)] for axis in spec.axes if key in axis.keys for v in axis.values]
        for value in given:
            names.update([value] if isinstance(value, str) else list(value))
    renamed = any(o.strip().startswith("system.name=") for o in spec.base_overrides) or "system.name" in spec.axis_keys
    if renamed or not names or any("/" in n or n.endswith((".yaml", ".yml")) for n in names):
        return
    try:
        if not all(resolve_system_path(n).stem == n for n in names):
            return
    except ConfigError:  # an unknown system: the point reports it as the command does
        return
    for kind, selectors in (("objectives", spec.objectives), ("constraints", spec.constraints)):
        for i, selector in enumerate(selectors):
            system = dict(selector.select).get("system")
            if system is not None and system not in names:
                raise ConfigError(f"selects system {system!r}, which the sweep does not run (it runs "
                                  f"{', '.join(sorted(names))})", file=spec.file,
                                  where=f"{root.where(kind)}[{i}].select.system")


def _list(root: Section, key: str) -> list[Any]:
    value = root.raw(key, [])
    if not isinstance(value, list):
        raise root.error(key, "expected a list")
    return value


def _objective(s: Section, cmd: Command) -> Objective:
    key, select = _selector_args(s, cmd)
    goal = s.choice("goal", GOALS, "minimize")
    s.done()
    return Objective(key, select, goal)


def _constraint(s: Section, cmd: Command) -> Constraint:
    key, select = _selector_args(s, cmd)
    low = s.float("min") if s.has("min") else None
    high = s.float("max") if s.has("max") else None
    if low is None and high is None:
        raise s.error("key", "a constraint needs min or max")
    s.done()
    return Constraint(key, select, low, high)


def _parse_axes(root: Section, cmd: Command, inputs: dict[str, Any]) -> tuple[Axis, ...]:
    axes: list[Axis] = []
    seen: set[str] = set()

    def add_key(s: Section, key: str) -> None:
        if key in seen:
            raise s.error(key, "this key is swept twice")
        if key not in cmd.input_names and not key.startswith(cmd.prefixes):
            raise s.error(key, f"a {cmd.name} axis is one of its inputs ({', '.join(cmd.input_names)}) or a dotted "
                               f"key starting with {' or '.join(cmd.prefixes)}")
        seen.add(key)

    s = root.sub("axes", {})
    for key in list(s.data):
        add_key(s, key)
        axes.append(Axis((key,), tuple((v,) for v in _axis_values(s, key))))
    s.done()
    for i, group in enumerate(_list(root, "zip")):
        g = Section(group, f"{root.where('zip')}[{i}]", root.file)
        keys = list(g.data)
        if not keys:
            raise ConfigError("an empty zipped group", file=root.file, where=g.path)
        columns = []
        for key in keys:
            add_key(g, key)
            columns.append(_axis_values(g, key))
        if len({len(c) for c in columns}) != 1:
            raise ConfigError(f"zipped axes must have equal lengths, got {[len(c) for c in columns]}",
                              file=root.file, where=g.path)
        g.done()
        axes.append(Axis(tuple(keys), tuple(zip(*columns, strict=True))))
    if not axes:
        raise root.error("axes", "a sweep needs at least one axis")
    return tuple(axes)


def _check_axis_keys(spec: SweepSpec, root: Section) -> None:
    """Every dotted axis key must exist: the base inputs load with it overridden by its first value, for at
    least one value of the axes over base inputs (a key of g25's pool need not exist on gpu-hbm)."""
    names = spec.command.input_names
    input_axes = [a for a in spec.axes if any(k in names for k in a.keys)]
    first = {k: v for a in input_axes for k, v in zip(a.keys, a.values[0], strict=True) if k in names}
    variants = [{k: v for k, v in zip(a.keys, values, strict=True) if k in names}
                for a in input_axes for values in a.values] or [{}]
    for axis in spec.axes:
        for pos, key in enumerate(axis.keys):
            if key in names:
                continue
            assignment = f"{key}={json.dumps(axis.values[0][pos])}"
            last: ConfigError | None = None
            for variant in variants:
                inputs = {**spec.inputs, **first, **variant}
                try:
                    spec.command.check(inputs, [*spec.base_overrides, assignment])
                    last = None
                    break
                except ConfigError as exc:
                    if not any(words in exc.detail for words in _MISSING_KEY):
                        last = None  # the key exists; this value is merely infeasible here
                        break
                    last = exc
            if last is not None:
                where = root.where("zip") if len(axis.keys) > 1 else f"{root.where('axes')}.{key}"
                raise ConfigError(f"no such key {key!r} in the {spec.command.name} inputs ({last.render()})",
                                  file=spec.file, where=where)


def _point_error(spec: SweepSpec, point: dict[str, Any]) -> ConfigError | None:
    inputs, overrides = spec.point_inputs(point)
    try:
        spec.command.check(inputs, overrides)
    except ConfigError as exc:
        return exc
    return None


def _fails_everywhere(spec: SweepSpec, first: dict[str, Any], change: dict[str, Any]) -> ConfigError | None:
    """The error of the point `first` + `change` if every other axis moved alone leaves it standing (the same
    key at fault): then it is not a combination infeasible here but a bad input, whatever the others are."""
    error = _point_error(spec, {**first, **change})
    if error is None:
        return None
    for axis in spec.axes:
        if any(k in change for k in axis.keys):
            continue
        for values in axis.values[1:]:
            other = _point_error(spec, {**first, **change, **dict(zip(axis.keys, values, strict=True))})
            if other is None or (other.where, other.file) != (error.where, error.file) or (
                    error.where is None and other.detail != error.detail):
                return None
    return error


def _check_values(spec: SweepSpec, root: Section) -> None:
    """Refuse, before any point runs, base inputs that no point can take and an axis value that fails whatever
    the other axes are (each with every other axis at its first value, then each other axis moved alone); a
    value infeasible only in some combinations stays a point's recorded failure."""
    first = {k: v for axis in spec.axes for k, v in zip(axis.keys, axis.values[0], strict=True)}
    error = _fails_everywhere(spec, first, {})
    if error is not None:
        raise ConfigError(f"no point of the sweep can run: {error.render()}", file=spec.file,
                          where=root.where("inputs"))
    for axis in spec.axes:
        where = root.where("zip") if len(axis.keys) > 1 else f"{root.where('axes')}.{axis.keys[0]}"
        for values in axis.values[1:]:
            error = _fails_everywhere(spec, first, dict(zip(axis.keys, values, strict=True)))
            if error is not None:
                shown = values[0] if len(values) == 1 else list(values)
                raise ConfigError(f"the value {shown!r} fails at every point: {error.render()}", file=spec.file,
                                  where=where)
