"""Configuration of the PNM compute unit's timing model (`configs/pnm/*.yaml`), strictly parsed.

File layout (top-level key `pnm`; every key is documented in docs/pnm.md):

    pnm:
      memory: ../memory/hbm3.yaml       # the memory config the units attach to (relative to this file)
      clock: 1GHz                       # or `memory`: run in the memory command clock
      units: {channels_per_unit: 1, address_space: channel_local}
      issue: {width: 1}
      compute: {macs_per_cycle, mac_pipeline_cycles, vector_lanes, vector_pipeline_cycles,
                exp_per_cycle, sfu_pipeline_cycles}
      sram: {capacity, banks, bank_width, read_ports, write_ports, access_latency_cycles}
      dma: {max_outstanding_loads, requests_per_memory_cycle}
      host_port: {bandwidth, latency}
      barrier_latency_cycles: 16

Unknown keys, missing keys and bad units are ConfigErrors naming the dotted path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from archsim.config.memory import MemoryConfig
from archsim.config.overrides import apply_overrides
from archsim.config.yaml_files import read_yaml
from archsim.errors import ConfigError
from archsim.isa.program import MAX_SRAM_BYTES
from archsim.resources import data_path
from archsim.section import Section
from archsim.units import parse_bandwidth_GBps, parse_frequency_ghz, parse_size_bytes, parse_time_ns

CONFIGS_DIR = data_path("configs")
DEFAULT_PNM_CONFIG = CONFIGS_DIR / "pnm" / "default.yaml"
ADDRESS_SPACES: tuple[str, ...] = ("channel_local", "interleaved")


@dataclass(frozen=True)
class UnitsConfig:
    channels_per_unit: int  # one unit per channel controller (1) or per group of this many channels
    address_space: str  # channel_local: a unit's DRAM addresses are local to its channel group


@dataclass(frozen=True)
class ComputeConfig:
    macs_per_cycle: int  # dot-product array width (fp16/bf16/fp8/int8 x fp32 MACs per cycle)
    mac_pipeline_cycles: int  # fill/drain of the multiplier + adder tree
    vector_lanes: int  # fp32 element operations per cycle in the vector unit
    vector_pipeline_cycles: int
    exp_per_cycle: int  # exponentials per cycle in the special-function unit
    sfu_pipeline_cycles: int


@dataclass(frozen=True)
class SramConfig:
    capacity_bytes: int
    banks: int
    bank_width_bytes: int
    read_ports: int  # per bank
    write_ports: int  # per bank
    access_latency_cycles: int

    @property
    def read_bytes_per_cycle(self) -> int:
        return self.banks * self.bank_width_bytes * self.read_ports

    @property
    def write_bytes_per_cycle(self) -> int:
        return self.banks * self.bank_width_bytes * self.write_ports


@dataclass(frozen=True)
class DmaConfig:
    max_outstanding_loads: int  # DMA transfers (LD/LDG/ST instructions) in flight per unit
    requests_per_memory_cycle: int  # requests the DMA engine pushes into the pnm port per memory cycle


@dataclass(frozen=True)
class HostPortConfig:
    bandwidth_GBps: float
    latency_ns: float


@dataclass(frozen=True)
class PnmConfig:
    clock_GHz: float | None  # None: the memory command clock
    units: UnitsConfig
    issue_width: int
    compute: ComputeConfig
    sram: SramConfig
    dma: DmaConfig
    host_port: HostPortConfig
    barrier_latency_cycles: int
    memory_path: Path | None  # resolved against the config file's directory
    source_file: str | None
    resolved_tree: dict[str, Any]


def _positive(section: Section, key: str, default: Any = None) -> int:
    return section.int(key, default, minimum=1) if default is not None else section.int(key, minimum=1)


def _clock(section: Section) -> float | None:
    value = section.raw("clock", "memory")
    if value == "memory":
        return None
    ghz = section.parsed("clock", parse_frequency_ghz)
    if ghz <= 0:
        raise section.error("clock", "must be positive (or `memory` for the memory command clock)")
    return ghz


def _power_of_two(section: Section, key: str, value: int) -> int:
    if value & (value - 1):
        raise section.error(key, f"must be a power of two, got {value}")
    return value


def build_pnm_config(tree: Any, file: str | None) -> PnmConfig:
    if not isinstance(tree, dict) or "pnm" not in tree:
        raise ConfigError("expected a top-level `pnm:` mapping", file=file, where="pnm")
    extra = sorted(set(tree) - {"pnm"})
    if extra:
        raise ConfigError(f"unknown key {extra[0]!r}", file=file, where=extra[0])
    root = Section(tree["pnm"], "pnm", file)
    memory = root.raw("memory", None)
    if memory is not None and not isinstance(memory, str):
        raise root.error("memory", f"expected a path, got {memory!r}")
    memory_path = None
    if memory is not None:
        memory_path = Path(memory)
        if not memory_path.is_absolute() and file is not None:
            memory_path = Path(file).resolve().parent / memory_path
    clock = _clock(root)

    units_section = root.sub("units", {})
    channels = _power_of_two(units_section, "channels_per_unit",
                             _positive(units_section, "channels_per_unit", 1))
    space = units_section.choice("address_space", ADDRESS_SPACES, "channel_local")
    units_section.done()

    issue = root.sub("issue", {})
    width = _positive(issue, "width", 1)
    issue.done()

    c = root.sub("compute")
    compute = ComputeConfig(
        macs_per_cycle=_positive(c, "macs_per_cycle"),
        mac_pipeline_cycles=c.int("mac_pipeline_cycles"),
        vector_lanes=_positive(c, "vector_lanes"),
        vector_pipeline_cycles=c.int("vector_pipeline_cycles"),
        exp_per_cycle=_positive(c, "exp_per_cycle"),
        sfu_pipeline_cycles=c.int("sfu_pipeline_cycles"),
    )
    c.done()

    s = root.sub("sram")
    sram = SramConfig(
        capacity_bytes=s.parsed("capacity", parse_size_bytes),
        banks=_positive(s, "banks"),
        bank_width_bytes=s.parsed("bank_width", parse_size_bytes),
        read_ports=_positive(s, "read_ports", 1),
        write_ports=_positive(s, "write_ports", 1),
        access_latency_cycles=_positive(s, "access_latency_cycles"),
    )
    if not 0 < sram.capacity_bytes <= MAX_SRAM_BYTES:
        raise s.error("capacity", f"must lie in (0, {MAX_SRAM_BYTES:,}] bytes (a program addresses its SRAM with "
                                  f"the 32-bit size of its header), got {sram.capacity_bytes:,}")
    if sram.bank_width_bytes <= 0:
        raise s.error("bank_width", "must be positive")
    s.done()

    d = root.sub("dma")
    dma = DmaConfig(max_outstanding_loads=_positive(d, "max_outstanding_loads"),
                    requests_per_memory_cycle=_positive(d, "requests_per_memory_cycle"))
    d.done()

    h = root.sub("host_port")
    host = HostPortConfig(bandwidth_GBps=h.parsed("bandwidth", parse_bandwidth_GBps),
                          latency_ns=h.parsed("latency", parse_time_ns, 0.0))
    if host.bandwidth_GBps <= 0:
        raise h.error("bandwidth", "must be positive")
    h.done()

    barrier = root.int("barrier_latency_cycles", 16)
    root.done()
    return PnmConfig(clock, UnitsConfig(channels, space), width, compute, sram, dma, host, barrier, memory_path,
                     file, tree)


def load_pnm_config(path: str | Path | None = None, overrides: tuple[str, ...] | list[str] = ()) -> PnmConfig:
    """Read a PNM config (default: configs/pnm/default.yaml) and apply `pnm.a.b=value` overrides."""
    path = Path(path) if path is not None else DEFAULT_PNM_CONFIG
    tree = read_yaml(path)
    if isinstance(tree, dict):
        apply_overrides(tree, overrides, str(path))
    return build_pnm_config(tree, str(path))


@dataclass(frozen=True)
class ClockRatio:
    """Conversions between unit cycles and memory command-clock cycles; both directions round up."""

    unit_period_ns: float
    memory_tck_ns: float
    num: int  # unit period / memory period = num / den, exactly
    den: int

    @staticmethod
    def between(unit_period_ns: float, memory_tck_ns: float) -> ClockRatio:
        ratio = Fraction(unit_period_ns).limit_denominator(1_000_000) / \
            Fraction(memory_tck_ns).limit_denominator(1_000_000)
        return ClockRatio(unit_period_ns, memory_tck_ns, ratio.numerator, ratio.denominator)

    def to_memory(self, unit_cycles: int) -> int:
        """First memory cycle at or after unit cycle `unit_cycles`."""
        return -(-unit_cycles * self.num // self.den)

    def to_unit(self, memory_cycles: int) -> int:
        """First unit cycle at or after memory cycle `memory_cycles`."""
        return -(-memory_cycles * self.den // self.num)


@dataclass(frozen=True)
class DeviceLayout:
    """The PNM units of one memory device: how many, which channels each owns, the shared clock."""

    units: int
    channels_per_unit: int
    address_space: str
    clock: ClockRatio
    unit_capacity_bytes: int  # DRAM a unit addresses: its channel group (channel_local) or the device

    @property
    def unit_period_ns(self) -> float:
        return self.clock.unit_period_ns


def device_layout(pnm: PnmConfig, memory: MemoryConfig) -> DeviceLayout:
    """Bind a PNM config to the memory it attaches to (checks channels_per_unit against the organization)."""
    org = memory.organization
    channels = org.n_channels
    per_unit = pnm.units.channels_per_unit
    if per_unit > channels or channels % per_unit:
        raise ConfigError(f"{per_unit} channels per unit does not divide the memory's {channels} channels",
                          file=pnm.source_file, where="pnm.units.channels_per_unit")
    tck = memory.timing.tCK_ns
    period = tck if pnm.clock_GHz is None else 1.0 / pnm.clock_GHz
    units = channels // per_unit
    capacity = org.capacity_bytes // units if pnm.units.address_space == "channel_local" else org.capacity_bytes
    return DeviceLayout(units, per_unit, pnm.units.address_space, ClockRatio.between(period, tck), capacity)


def ceil_div(a: float, b: float) -> int:
    return int(math.ceil(a / b - 1e-9))
