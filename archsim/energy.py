"""Energy = action counts x a YAML energy table (Accelergy's split: the simulator counts, this module prices).

File layout (top-level key `energy`; docs/energy.md lists every default and its source):

    energy:
      description: one line
      scales:                       # named technology scalings, referenced by entries with `scale:`
        logic_45nm_to_7nm: {from_node_nm: 45, from_vdd_V: 0.9, to_node_nm: 7, to_vdd_V: 0.75, source: ...}
      actions:
        dram.cell:       {per: bit, energy_pJ: 0.44, source: ...}
        dram.act:        {per: activation, pJ_per_bit: 0.11, size: 1KiB, source: ...}   # 0.11 x 8192 bits
        pnm.fp16_mult:   {per: op, energy_pJ: 1.1, scale: logic_45nm_to_7nm, source: ...}
        dram.read_bit.host: {per: bit, sum_of: {dram.cell: 1, interposer.io: 1, ...}, source: ...}

An entry is exactly one of: `energy_pJ` (per `per`), `pJ_per_bit` x `size` (a byte size), or `sum_of`
(other entries with multipliers; a list means multiplier 1). `scale:` multiplies the first two forms by
(to_node / from_node) x (to_vdd / from_vdd)^2, first-order C V^2 scaling. Every entry needs `per` and `source`.

Entries that are not sums are the *components*: `energy_breakdown` expands sums and reports pJ per component,
so the host-read path shows its interposer term apart from its in-die terms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from archsim.config.yaml_files import read_yaml
from archsim.errors import ConfigError
from archsim.resources import data_path
from archsim.section import Section
from archsim.units import parse_size_bytes

DEFAULT_TABLE = data_path("configs", "energy", "default.yaml")


@dataclass(frozen=True)
class Scale:
    name: str
    from_node_nm: float
    from_vdd_V: float
    to_node_nm: float
    to_vdd_V: float
    source: str

    @property
    def factor(self) -> float:
        """Dynamic energy ~ C V^2 with C proportional to the feature size (first order; see docs/energy.md)."""
        return (self.to_node_nm / self.from_node_nm) * (self.to_vdd_V / self.from_vdd_V) ** 2


@dataclass(frozen=True)
class EnergyEntry:
    name: str
    per: str  # the unit one count of this action stands for
    energy_pJ: float  # per count, after scaling and summing
    parts: tuple[tuple[str, float], ...]  # components (non-sum entries) and pJ each contributes per count
    source: str
    note: str


class EnergyTable:
    """A resolved energy table: entry lookup and component expansion."""

    def __init__(self, entries: dict[str, EnergyEntry], scales: dict[str, Scale], description: str = "",
                 file: str | None = None, path: str = "energy") -> None:
        self.entries = entries
        self.scales = scales
        self.description = description
        self.file = file
        self.path = path

    @staticmethod
    def load(path: str | Path = DEFAULT_TABLE) -> EnergyTable:
        """Load a table file, or a preset by name (`default` -> configs/energy/default.yaml)."""
        p = Path(path)
        if not p.suffix and not p.exists():
            p = DEFAULT_TABLE.parent / f"{path}.yaml"
        top = Section(read_yaml(p), "", str(p))
        table = parse_energy_table(top.sub("energy"))
        top.done()
        return table

    @staticmethod
    def from_mapping(data: Any, *, path: str = "energy", file: str | None = None) -> EnergyTable:
        return parse_energy_table(Section(data, path, file))

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def __getitem__(self, name: str) -> EnergyEntry:
        if name not in self.entries:
            raise self.missing(name)
        return self.entries[name]

    def pJ(self, name: str) -> float:
        """Energy of one count of `name` in pJ."""
        return self[name].energy_pJ

    def missing(self, name: str) -> ConfigError:
        return ConfigError(f"action {name!r} has no entry in the energy table", file=self.file,
                           where=f"{self.path}.actions.{name}")


def _check_counts(counts: Mapping[str, float], table: EnergyTable) -> None:
    for name, count in counts.items():
        if name not in table:
            raise table.missing(name)
        if not math.isfinite(count) or count < 0:
            raise ValueError(f"count of {name!r} must be finite and >= 0, got {count}")


def energy_by_action(counts: Mapping[str, float], table: EnergyTable) -> dict[str, float]:
    """pJ per counted action (keys as in `counts`)."""
    _check_counts(counts, table)
    return {name: count * table.entries[name].energy_pJ for name, count in counts.items()}


def energy_breakdown(counts: Mapping[str, float], table: EnergyTable) -> dict[str, float]:
    """pJ per component (non-sum table entry) the counts touch, sums expanded, in table order.

    An action the table lacks is a ConfigError naming `energy.actions.<action>`.
    """
    _check_counts(counts, table)
    acc: dict[str, float] = {}
    for name, count in counts.items():
        for part, pj in table.entries[name].parts:
            acc[part] = acc.get(part, 0.0) + count * pj
    return {name: acc[name] for name in table.entries if name in acc}


def total_energy_pJ(counts: Mapping[str, float], table: EnergyTable) -> float:
    return math.fsum(energy_by_action(counts, table).values())


def _parse_scale(section: Section, name: str) -> Scale:
    sub = section.sub(name)
    values = [sub.float(key) for key in ("from_node_nm", "from_vdd_V", "to_node_nm", "to_vdd_V")]
    for key, value in zip(("from_node_nm", "from_vdd_V", "to_node_nm", "to_vdd_V"), values, strict=True):
        if value <= 0:
            raise sub.error(key, f"must be positive, got {value}")
    scale = Scale(name, *values, source=_source(sub))
    sub.done()
    return scale


def _source(sub: Section) -> str:
    source = sub.str("source")
    if not source.strip():
        raise sub.error("source", "every number needs a source")
    return source


def parse_energy_table(section: Section) -> EnergyTable:
    description = section.str("description", "")
    scale_section = section.sub("scales", {})
    scales = {name: _parse_scale(scale_section, name) for name in scale_section.data}
    scale_section.done()
    actions = section.sub("actions")
    section.done()
    raw: dict[str, tuple[Section, str, str, str, float | None, dict[str, float] | None]] = {}
    for name in actions.data:
        sub = actions.sub(name)
        per = sub.str("per")
        source = _source(sub)
        note = sub.str("note", "")
        forms = [key for key in ("energy_pJ", "pJ_per_bit", "sum_of") if sub.has(key)]
        if len(forms) != 1:
            raise ConfigError("give exactly one of energy_pJ, pJ_per_bit (with size) or sum_of"
                              + (f" (found {', '.join(forms)})" if forms else ""), file=sub.file, where=sub.path)
        value: float | None = None
        parts: dict[str, float] | None = None
        if forms[0] == "sum_of":
            parts = _parse_sum(sub)
        else:
            if forms[0] == "energy_pJ":
                value = sub.float("energy_pJ")
            else:
                value = sub.float("pJ_per_bit") * 8 * sub.parsed("size", parse_size_bytes)
            if value < 0:
                raise sub.error(forms[0], f"must be >= 0, got {value}")
            if sub.has("scale"):
                scale = sub.str("scale")
                if scale not in scales:
                    known = ", ".join(scales) or "none defined under `scales:`"
                    raise sub.error("scale", f"unknown scale {scale!r} (known: {known})")
                value *= scales[scale].factor
        sub.done()
        raw[name] = (sub, per, source, note, value, parts)
    entries: dict[str, EnergyEntry] = {}
    for name in raw:
        _resolve(name, raw, entries, ())
    return EnergyTable({name: entries[name] for name in raw}, scales, description, section.file, section.path)


def _parse_sum(sub: Section) -> dict[str, float]:
    value = sub.raw("sum_of")
    if isinstance(value, list):
        if not all(isinstance(v, str) for v in value):
            raise sub.error("sum_of", "a list of entry names is expected")
        out: dict[str, float] = {}
        for v in value:
            out[v] = out.get(v, 0.0) + 1.0
        return out
    terms = Section(value, sub.where("sum_of"), sub.file)
    out = {name: terms.float(name) for name in terms.data}
    terms.done()
    if not out:
        raise sub.error("sum_of", "an empty sum")
    return out


def _resolve(name: str, raw: dict, entries: dict[str, EnergyEntry], stack: tuple[str, ...]) -> EnergyEntry:
    if name in entries:
        return entries[name]
    sub, per, source, note, value, parts = raw[name]
    if parts is None:
        entry = EnergyEntry(name, per, value, ((name, value),), source, note)
    else:
        if name in stack:
            raise sub.error("sum_of", f"entries sum each other in a cycle: {' -> '.join((*stack, name))}")
        expanded: dict[str, float] = {}
        for part, multiplier in parts.items():
            if part not in raw:
                raise ConfigError(f"unknown entry {part!r}", file=sub.file, where=f"{sub.where('sum_of')}.{part}")
            if part in stack or part == name:
                raise sub.error("sum_of", f"entries sum each other in a cycle: {' -> '.join((*stack, name, part))}")
            for comp, pj in _resolve(part, raw, entries, (*stack, name)).parts:
                expanded[comp] = expanded.get(comp, 0.0) + multiplier * pj
        entry = EnergyEntry(name, per, math.fsum(expanded.values()), tuple(expanded.items()), source, note)
    entries[name] = entry
    return entry
