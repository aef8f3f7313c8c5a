"""The PNM opcode table, loaded from isa/opcodes.yaml and validated strictly.

The YAML file is the single source of truth for mnemonics, encodings, operand kinds, execution
units and latency classes; nothing else in archsim hard-codes an encoding. Field positions are
derived here: operands are packed from just below the opcode downwards in the order listed.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import yaml

from archsim.errors import ConfigError
from archsim.resources import data_path

# isa/ sits beside the package at the repository root (archsim/../isa).
ISA_DIR = data_path("isa")
OPCODES_PATH = ISA_DIR / "opcodes.yaml"
KERNELS_DIR = ISA_DIR / "kernels"

_INT_KIND = re.compile(r"^([us])(\d+)$")
_TOP_KEYS = {"version", "word_bits", "opcode_bits", "machine", "enums", "units", "counters",
             "latency_classes", "classes", "opcodes"}
_OPCODE_KEYS = {"mnemonic", "opcode", "class", "unit", "latency", "operands", "summary", "semantics",
                "counters"}
_OPERAND_KEYS = {"name", "kind", "range"}


@dataclass(frozen=True)
class OperandSpec:
    """One encoded operand field."""

    name: str
    kind: str  # "reg" | "uint" | "sint" | "f32" | "label" | "enum"
    kind_text: str  # as written in the table: "reg", "u14", "s48", "f32", "label", "kv_dtype"
    bits: int
    lsb: int
    minimum: int  # for reg/uint/sint/label/enum: the legal range of the raw field value
    maximum: int
    enum_values: tuple[str, ...] = ()

    @property
    def msb(self) -> int:
        return self.lsb + self.bits - 1


@dataclass(frozen=True)
class OpcodeSpec:
    mnemonic: str
    code: int
    group: str  # the instruction class: control, configuration, scalar, data_movement, compute
    unit: str
    latency: str
    operands: tuple[OperandSpec, ...]
    summary: str
    semantics: str
    counters: tuple[str, ...]


@dataclass(frozen=True)
class LatencyClass:
    name: str
    unit: str
    scales_with: tuple[str, ...]
    doc: str


@dataclass(frozen=True)
class IsaTable:
    """The validated opcode table. Mappings are read-only views."""

    path: Path
    version: int
    word_bits: int
    opcode_bits: int
    register_count: int
    loop_stack_depth: int
    label_bits: int
    opcodes: tuple[OpcodeSpec, ...]
    by_mnemonic: Mapping[str, OpcodeSpec]
    by_code: Mapping[int, OpcodeSpec]
    enums: Mapping[str, tuple[str, ...]]
    enum_docs: Mapping[str, str]
    element_bytes: Mapping[str, int]  # bytes per element of every data type named by an enum
    units: Mapping[str, str]
    counters: Mapping[str, str]
    latency_classes: Mapping[str, LatencyClass]
    classes: Mapping[str, str]

    @property
    def operand_bits(self) -> int:
        return self.word_bits - self.opcode_bits

    def opcode(self, mnemonic: str) -> OpcodeSpec:
        return self.by_mnemonic[mnemonic]


def _fail(path: Path, where: str, message: str) -> ConfigError:
    return ConfigError(message, file=str(path), where=where)


def _require_keys(raw: object, allowed: set[str], required: set[str], path: Path, where: str) -> dict:
    if not isinstance(raw, dict):
        raise _fail(path, where, f"expected a mapping, got {type(raw).__name__}")
    unknown = set(raw) - allowed
    if unknown:
        raise _fail(path, where, f"unknown key(s) {sorted(unknown)}")
    missing = required - set(raw)
    if missing:
        raise _fail(path, where, f"missing key(s) {sorted(missing)}")
    return raw


def _operand(raw: object, lsb_top: int, enums: Mapping[str, tuple[str, ...]],
             enum_bits: Mapping[str, int], label_bits: int, register_count: int,
             path: Path, where: str) -> OperandSpec:
    spec = _require_keys(raw, _OPERAND_KEYS, {"name", "kind"}, path, where)
    kind_text = str(spec["kind"])
    enum_values: tuple[str, ...] = ()
    if kind_text == "reg":
        kind, bits, lo, hi = "reg", max(1, (register_count - 1).bit_length()), 0, register_count - 1
    elif kind_text == "label":
        kind, bits, lo, hi = "label", label_bits, 0, (1 << label_bits) - 1
    elif kind_text == "f32":
        kind, bits, lo, hi = "f32", 32, 0, (1 << 32) - 1
    elif kind_text in enums:
        enum_values = enums[kind_text]
        kind, bits, lo, hi = "enum", enum_bits[kind_text], 0, len(enum_values) - 1
    elif match := _INT_KIND.match(kind_text):
        bits = int(match.group(2))
        if match.group(1) == "u":
            kind, lo, hi = "uint", 0, (1 << bits) - 1
        else:
            kind, lo, hi = "sint", -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    else:
        raise _fail(path, f"{where}.kind", f"unknown operand kind {kind_text!r}")
    if "range" in spec:
        rng = spec["range"]
        if (not isinstance(rng, list) or len(rng) != 2 or not all(isinstance(v, int) for v in rng)
                or not lo <= rng[0] <= rng[1] <= hi):
            raise _fail(path, f"{where}.range", f"range must be [lo, hi] within [{lo}, {hi}], got {rng!r}")
        lo, hi = rng
    lsb = lsb_top - bits
    if lsb < 0:
        raise _fail(path, where, "operands do not fit in the instruction word")
    return OperandSpec(str(spec["name"]), kind, kind_text, bits, lsb, lo, hi, enum_values)


def _load(path: Path) -> IsaTable:
    try:
        # The C loader (when PyYAML has it) keeps CLI start-up fast; both are safe loaders.
        raw = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read the opcode table: {exc}", file=str(path)) from exc
    top = _require_keys(raw, _TOP_KEYS, _TOP_KEYS, path, "")
    machine = _require_keys(top["machine"], {"registers", "loop_stack_depth", "label_bits"},
                            {"registers", "loop_stack_depth", "label_bits"}, path, "machine")
    enums: dict[str, tuple[str, ...]] = {}
    enum_bits: dict[str, int] = {}
    enum_docs: dict[str, str] = {}
    element_bytes: dict[str, int] = {}
    for name, spec in top["enums"].items():
        keys = {"bits", "values", "element_bytes", "doc"}
        spec = _require_keys(spec, keys, keys, path, f"enums.{name}")
        values = tuple(str(v) for v in spec["values"])
        if len(values) > (1 << spec["bits"]) or len(set(values)) != len(values):
            raise _fail(path, f"enums.{name}", "values are not unique or do not fit in bits")
        if len(spec["element_bytes"]) != len(values):
            raise _fail(path, f"enums.{name}.element_bytes", "needs one size per value")
        for value, size in zip(values, spec["element_bytes"], strict=True):
            element_bytes[value] = int(size)
        enums[name], enum_bits[name], enum_docs[name] = values, int(spec["bits"]), str(spec["doc"])
    units = {str(k): str(v) for k, v in top["units"].items()}
    counters = {str(k): str(v) for k, v in top["counters"].items()}
    latency: dict[str, LatencyClass] = {}
    for name, spec in top["latency_classes"].items():
        where = f"latency_classes.{name}"
        keys = {"unit", "scales_with", "doc"}
        spec = _require_keys(spec, keys, keys, path, where)
        if spec["unit"] not in units:
            raise _fail(path, f"{where}.unit", f"unknown unit {spec['unit']!r}")
        unknown = [c for c in spec["scales_with"] if c not in counters]
        if unknown:
            raise _fail(path, f"{where}.scales_with", f"unknown counter(s) {unknown}")
        latency[name] = LatencyClass(name, spec["unit"], tuple(spec["scales_with"]), str(spec["doc"]))
    classes = {str(k): str(v) for k, v in top["classes"].items()}

    word_bits, opcode_bits = int(top["word_bits"]), int(top["opcode_bits"])
    opcodes: list[OpcodeSpec] = []
    for index, entry in enumerate(top["opcodes"]):
        where = f"opcodes[{index}]"
        entry = _require_keys(entry, _OPCODE_KEYS, _OPCODE_KEYS - {"counters"}, path, where)
        mnemonic = str(entry["mnemonic"])
        where = f"opcodes.{mnemonic}"
        code = entry["opcode"]
        if not isinstance(code, int) or not 0 < code < (1 << opcode_bits):
            raise _fail(path, f"{where}.opcode", f"opcode must be in 1..{(1 << opcode_bits) - 1}")
        for key, known in (("class", classes), ("unit", units), ("latency", latency)):
            if entry[key] not in known:
                raise _fail(path, f"{where}.{key}", f"unknown {key} {entry[key]!r}")
        bad_counters = [c for c in entry.get("counters", []) if c not in counters]
        if bad_counters:
            raise _fail(path, f"{where}.counters", f"unknown counter(s) {bad_counters}")
        operands: list[OperandSpec] = []
        top_bit = word_bits - opcode_bits
        for j, raw_operand in enumerate(entry["operands"]):
            operand = _operand(raw_operand, top_bit, enums, enum_bits, int(machine["label_bits"]),
                               int(machine["registers"]), path, f"{where}.operands[{j}]")
            top_bit = operand.lsb
            operands.append(operand)
        if len({o.name for o in operands}) != len(operands):
            raise _fail(path, f"{where}.operands", "operand names are not unique")
        opcodes.append(OpcodeSpec(mnemonic, code, str(entry["class"]), str(entry["unit"]),
                                  str(entry["latency"]), tuple(operands), str(entry["summary"]),
                                  str(entry["semantics"]), tuple(entry.get("counters", []))))

    by_mnemonic = {op.mnemonic: op for op in opcodes}
    by_code = {op.code: op for op in opcodes}
    if len(by_mnemonic) != len(opcodes):
        raise _fail(path, "opcodes", "duplicate mnemonic")
    if len(by_code) != len(opcodes):
        raise _fail(path, "opcodes", "duplicate opcode number")
    return IsaTable(
        path=path, version=int(top["version"]), word_bits=word_bits, opcode_bits=opcode_bits,
        register_count=int(machine["registers"]), loop_stack_depth=int(machine["loop_stack_depth"]),
        label_bits=int(machine["label_bits"]), opcodes=tuple(opcodes),
        by_mnemonic=MappingProxyType(by_mnemonic), by_code=MappingProxyType(by_code),
        enums=MappingProxyType(enums), enum_docs=MappingProxyType(enum_docs),
        element_bytes=MappingProxyType(element_bytes),
        units=MappingProxyType(units), counters=MappingProxyType(counters),
        latency_classes=MappingProxyType(latency), classes=MappingProxyType(classes),
    )


@functools.lru_cache(maxsize=8)
def _load_cached(path: str) -> IsaTable:
    return _load(Path(path))


def load_table(path: Path | str | None = None) -> IsaTable:
    """The opcode table at `path` (default isa/opcodes.yaml), parsed once per path."""
    return _load_cached(str(Path(path).resolve() if path else OPCODES_PATH))
