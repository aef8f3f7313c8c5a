"""Physical address -> (channel, pseudo-channel, rank, bank group, bank, row, column), vectorized.

A mapping is an ordered list of field bits above the access offset, least significant first. Schemes
come from a registry: DRAMSim3 strings (`rorabgbachco`: two-letter fields, most significant first),
Ramulator-style names (`RoBaRaCoCh`), or an explicit list of field names, one per bit. Every field
with more than one value must be covered; a field whose size is not a power of two may only be the
top-most one, and then takes all remaining high bits. Optional XOR hashing folds the low row bits into
the bank / bank-group / channel / pseudo-channel index (permutation-based interleaving).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from archsim.dram.spec import Organization, log2_exact
from archsim.errors import ConfigError
from archsim.registry import Registry
from archsim.section import Section

FIELDS: tuple[str, ...] = ("ch", "pc", "ra", "bg", "ba", "ro", "co")
_RAMULATOR_TOKENS = {"Ch": ("ch",), "Pc": ("pc",), "Ra": ("ra",), "Bg": ("bg",), "Ba": ("ba",), "Ro": ("ro",),
                     "Co": ("co",)}


def field_sizes(org: Organization) -> dict[str, int]:
    return {"ch": org.n_channels, "pc": org.pseudo_channels, "ra": org.ranks, "bg": org.bankgroups,
            "ba": org.banks_per_group, "ro": org.rows, "co": org.accesses_per_row}


@dataclass(frozen=True)
class Decoded:
    """Per-address fields as int64 arrays, plus the flat indices the controller kernel uses."""

    channel: np.ndarray
    pseudo_channel: np.ndarray
    rank: np.ndarray
    bankgroup: np.ndarray
    bank: np.ndarray
    row: np.ndarray
    column: np.ndarray

    # each a new array built in place: a replay computes them for every request
    def flat_pseudo_channel(self, org: Organization) -> np.ndarray:
        out = self.channel * org.pseudo_channels
        out += self.pseudo_channel
        return out

    def bank_in_pseudo_channel(self, org: Organization) -> np.ndarray:
        out = self.rank * org.bankgroups
        out += self.bankgroup
        out *= org.banks_per_group
        out += self.bank
        return out


@dataclass(frozen=True)
class AddressMapping:
    """Bit layout above the offset: `order` lists field names per bit, LSB first; `top` takes the rest."""

    description: str
    offset_bits: int
    order: tuple[str, ...]
    top: str | None
    sizes: tuple[tuple[str, int], ...]
    xor_fields: tuple[str, ...]

    @property
    def capacity_bytes(self) -> int:
        sizes = dict(self.sizes)
        span = 1 << (self.offset_bits + len(self.order))
        return span * (sizes[self.top] if self.top else 1)

    def _runs(self) -> list[tuple[str, int, int, int]]:
        """Contiguous (field, address shift, width, field shift) runs, so decode is a few array ops."""
        runs: list[tuple[str, int, int, int]] = []
        seen: dict[str, int] = {}
        for i, name in enumerate(self.order):
            shift = self.offset_bits + i
            if runs and runs[-1][0] == name and runs[-1][1] + runs[-1][2] == shift:
                f, s, w, fs = runs[-1]
                runs[-1] = (f, s, w + 1, fs)
            else:
                runs.append((name, shift, 1, seen.get(name, 0)))
            seen[name] = seen.get(name, 0) + 1
        return runs

    def decode(self, address: np.ndarray) -> Decoded:
        addr = np.asarray(address, dtype=np.uint64)
        values: dict[str, np.ndarray] = {}
        # each run's bits in place, viewed as int64 (they are far below 2**63): a replay decodes every request, and
        # zeroed fields ORed with converted copies took twice the passes
        for name, shift, width, field_shift in self._runs():
            part = ((addr >> np.uint64(shift)) & np.uint64((1 << width) - 1)).view(np.int64)
            if field_shift:
                part <<= field_shift
            if name in values:
                values[name] |= part
            else:
                values[name] = part
        if self.top is not None:
            values[self.top] = (addr >> np.uint64(self.offset_bits + len(self.order))).view(np.int64)
        for name in FIELDS:
            if name not in values:
                values[name] = np.zeros(addr.shape, dtype=np.int64)
        if addr.ndim == 0:  # one address: fields as 0-d arrays, as for many
            values = {name: np.asarray(value) for name, value in values.items()}
        sizes = dict(self.sizes)
        for name in self.xor_fields:
            values[name] ^= values["ro"] & (sizes[name] - 1)
        return Decoded(values["ch"], values["pc"], values["ra"], values["bg"], values["ba"], values["ro"],
                       values["co"])

    def encode(self, decoded: Decoded) -> np.ndarray:
        values = {"ch": decoded.channel, "pc": decoded.pseudo_channel, "ra": decoded.rank,
                  "bg": decoded.bankgroup, "ba": decoded.bank, "ro": decoded.row, "co": decoded.column}
        values = {k: np.asarray(v, dtype=np.int64).copy() for k, v in values.items()}
        sizes = dict(self.sizes)
        for name in self.xor_fields:
            values[name] ^= values["ro"] & (sizes[name] - 1)
        addr = np.zeros(values["ro"].shape, dtype=np.uint64)
        for name, shift, width, field_shift in self._runs():
            part = (values[name] >> field_shift) & ((1 << width) - 1)
            addr |= part.astype(np.uint64) << np.uint64(shift)
        if self.top is not None:
            addr |= values[self.top].astype(np.uint64) << np.uint64(self.offset_bits + len(self.order))
        return addr


def _from_field_list(msb_first: list[str], org: Organization, description: str, where: str,
                     file: str | None) -> list[str]:
    """Expand whole fields (most significant first) to one entry per bit, least significant first."""
    sizes = field_sizes(org)
    order: list[str] = []
    for name in reversed(msb_first):
        bits = log2_exact(sizes[name])
        if bits < 0:
            bits = -1  # marks a non-power-of-two field; only legal at the top
        order.extend([name] * max(bits, 0) if bits >= 0 else ["?" + name])
    return order


def _build(order_lsb: list[str], org: Organization, description: str, xor_fields: tuple[str, ...], where: str,
           file: str | None) -> AddressMapping:
    sizes = field_sizes(org)
    top: str | None = None
    if order_lsb and order_lsb[-1].startswith("?"):
        top = order_lsb.pop()[1:]
    for name in order_lsb:
        if name.startswith("?"):
            raise ConfigError(f"field {name[1:]!r} has {sizes[name[1:]]} values, not a power of two, so it "
                              f"must be the most significant field of {description!r}", file=file, where=where)
    for name, size in sizes.items():
        count = order_lsb.count(name)
        if name == top:
            continue
        needed = log2_exact(size)
        if needed < 0 and size > 1:
            raise ConfigError(f"field {name!r} has {size} values, not a power of two, so it must be the most "
                              f"significant field of {description!r}", file=file, where=where)
        if count != needed:
            raise ConfigError(f"mapping {description!r} gives field {name!r} {count} bits but the organization "
                              f"needs {needed} ({size} values): it does not cover the address bits",
                              file=file, where=where)
    for name in xor_fields:
        if log2_exact(sizes[name]) < 0:
            raise ConfigError(f"cannot XOR-hash field {name!r} of size {sizes[name]}", file=file, where=where)
    if "ro" in xor_fields:
        raise ConfigError("the row is the hash key and cannot itself be XOR-hashed", file=file, where=where)
    mapping = AddressMapping(description, log2_exact(org.access_bytes), tuple(order_lsb), top,
                             tuple(sizes.items()), xor_fields)
    if mapping.capacity_bytes != org.capacity_bytes:
        raise ConfigError(f"mapping {description!r} spans {mapping.capacity_bytes} B but the organization has "
                          f"{org.capacity_bytes} B", file=file, where=where)
    return mapping


SCHEMES: Registry = Registry("address-mapping scheme")


@SCHEMES.register("dramsim3")
def _dramsim3(text: str, org: Organization, where: str, file: str | None) -> list[str]:
    if len(text) % 2 or not re.fullmatch(r"([a-z]{2})+", text):
        raise ConfigError(f"{text!r} is not a DRAMSim3 mapping string (two-letter fields such as rorabgbachco)",
                          file=file, where=where)
    tokens = [text[i:i + 2] for i in range(0, len(text), 2)]
    unknown = [t for t in tokens if t not in FIELDS]
    if unknown:
        raise ConfigError(f"unknown field {unknown[0]!r} in {text!r} (fields: {' '.join(FIELDS)})",
                          file=file, where=where)
    if len(set(tokens)) != len(tokens):
        raise ConfigError(f"a field repeats in {text!r}", file=file, where=where)
    return _from_field_list(tokens, org, text, where, file)


@SCHEMES.register("ramulator")
def _ramulator(text: str, org: Organization, where: str, file: str | None) -> list[str]:
    tokens = re.findall(r"[A-Z][a-z]", text)
    if "".join(tokens) != text or any(t not in _RAMULATOR_TOKENS for t in tokens):
        raise ConfigError(f"{text!r} is not a Ramulator-style mapping name (e.g. RoBaRaCoCh)",
                          file=file, where=where)
    fields_msb: list[str] = []
    for token in tokens:
        # Ramulator's "Ba" is the whole bank address when no separate "Bg" is given: bank group bits lowest,
        # so consecutive rows of a bank field spread across bank groups first (tCCD_S rather than tCCD_L).
        if token == "Ba" and "Bg" not in tokens:
            fields_msb.extend(["ba", "bg"])
        else:
            fields_msb.extend(_RAMULATOR_TOKENS[token])
    if len(set(fields_msb)) != len(fields_msb):
        raise ConfigError(f"a field repeats in {text!r}", file=file, where=where)
    return _from_field_list(fields_msb, org, text, where, file)


@SCHEMES.register("bits")
def _bits(items: list[str], org: Organization, where: str, file: str | None) -> list[str]:
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise ConfigError("expected a list of field names, least significant bit first", file=file, where=where)
    unknown = [i for i in items if i not in FIELDS]
    if unknown:
        raise ConfigError(f"unknown field {unknown[0]!r} (fields: {' '.join(FIELDS)})", file=file, where=where)
    order = list(items)
    sizes = field_sizes(org)
    missing_top = [name for name in FIELDS if name not in order and sizes[name] > 1]
    if len(missing_top) == 1:
        # The one field left out takes all remaining high bits (the row, typically).
        name = missing_top[0]
        bits = log2_exact(sizes[name])
        order.extend([name] * bits if bits >= 0 else ["?" + name])
    return order


def detect_scheme(text: str) -> str:
    return "dramsim3" if text.islower() else "ramulator"


def parse_address_mapping(section: Section, org: Organization) -> AddressMapping:
    xor_fields = tuple(section.raw("xor", []) or [])
    for name in xor_fields:
        if name not in FIELDS:
            raise section.error("xor", f"unknown field {name!r} (fields: {' '.join(FIELDS)})")
    if section.has("bits") == section.has("scheme"):
        raise section.error("scheme", "give exactly one of `scheme` (a DRAMSim3 string or Ramulator name) or "
                                      "`bits` (an explicit list)")
    if section.has("bits"):
        items = section.raw("bits")
        order = SCHEMES.get("bits")(items, org, section.where("bits"), section.file)
        description = "bits"
        where = section.where("bits")
    else:
        text = section.str("scheme")
        kind = section.choice("kind", SCHEMES.names(), detect_scheme(text))
        where = section.where("scheme")
        order = SCHEMES.get(kind)(text, org, where, section.file)
        description = text
    section.done()
    return _build(order, org, description, xor_fields, where, section.file)


def mapping_from_string(text: str, org: Organization, xor_fields: tuple[str, ...] = ()) -> AddressMapping:
    """Convenience for code and tests: a DRAMSim3 string or Ramulator name, no config file involved."""
    kind = detect_scheme(text)
    order = SCHEMES.get(kind)(text, org, "address_mapping.scheme", None)
    return _build(order, org, text, xor_fields, "address_mapping.scheme", None)
