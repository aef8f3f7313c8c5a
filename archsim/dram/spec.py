"""Organization and timing of a DRAM device: named fields, parsed strictly, derived figures on top.

Timing values are stored in cycles of the command clock (tCK). Config values may be cycles (integers,
the JEDEC "nCK") or durations ("14ns"); durations convert with ceil.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from archsim.section import Section
from archsim.units import ns_to_cycles, parse_cycles, parse_pin_rate_gbps, parse_size_bytes, parse_time_ns


@dataclass(frozen=True)
class Organization:
    """How one device is built. A channel may split into pseudo-channels that share its command bus."""

    stacks: int
    channels: int  # per stack
    pseudo_channels: int  # per channel; each has its own data bus, banks and controller queues
    ranks: int  # stack IDs (SIDs) / ranks per pseudo-channel; they share the pseudo-channel's data bus
    bankgroups: int  # per rank
    banks_per_group: int
    rows: int  # per bank
    columns: int  # bus-width words per row
    bus_width_bits: int  # data pins of one pseudo-channel
    burst_length: int  # beats per access

    @property
    def access_bytes(self) -> int:
        return self.bus_width_bits * self.burst_length // 8

    @property
    def row_bytes(self) -> int:
        return self.columns * self.bus_width_bits // 8

    @property
    def accesses_per_row(self) -> int:
        return self.columns // self.burst_length

    @property
    def n_channels(self) -> int:
        """Channels across all stacks (the address-mapping `ch` field ranges over these)."""
        return self.stacks * self.channels

    @property
    def n_pseudo_channels(self) -> int:
        return self.n_channels * self.pseudo_channels

    @property
    def banks_per_rank(self) -> int:
        return self.bankgroups * self.banks_per_group

    @property
    def banks_per_pseudo_channel(self) -> int:
        return self.ranks * self.banks_per_rank

    @property
    def n_banks(self) -> int:
        return self.n_pseudo_channels * self.banks_per_pseudo_channel

    @property
    def capacity_bytes(self) -> int:
        return self.n_banks * self.rows * self.row_bytes

    @property
    def capacity_per_stack_bytes(self) -> int:
        return self.capacity_bytes // self.stacks


@dataclass(frozen=True)
class Timing:
    """Timing in command-clock cycles; `tCK_ns` and `data_rate_gbps` give the clock and the pin rate."""

    tCK_ns: float
    data_rate_gbps: float
    CL: int
    CWL: int
    tRCDRD: int
    tRCDWR: int
    tRP: int
    tRAS: int
    tRC: int
    tCCD_S: int
    tCCD_L: int
    tRRD_S: int
    tRRD_L: int
    tFAW: int
    tWTR_S: int
    tWTR_L: int
    tRTP: int
    tWR: int
    tRTRS: int
    tRFC: int
    tRFCpb: int
    tRREFD: int
    tREFI: int
    tBURST: int  # data-bus cycles of one burst (derived: burst length / beats per clock)

    @property
    def clock_ghz(self) -> float:
        return 1.0 / self.tCK_ns

    @property
    def tRTW(self) -> int:
        """Read-to-write turnaround on one data bus: the read's data must clear before the write's starts."""
        return max(0, self.CL + self.tBURST + self.tRTRS - self.CWL)

    @property
    def tWTR_data(self) -> int:
        """Write-to-read on one data bus from another rank: the write's data must clear first."""
        return max(0, self.CWL + self.tBURST + self.tRTRS - self.CL)

    def as_dict(self) -> dict[str, float | int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


CYCLE_FIELDS: tuple[str, ...] = tuple(
    f.name for f in fields(Timing) if f.name not in ("tCK_ns", "data_rate_gbps", "tBURST")
)


def peak_bandwidth_GBps(org: Organization, timing: Timing) -> float:
    """Every pseudo-channel's data bus busy every cycle (10^9 B/s)."""
    return org.n_pseudo_channels * org.bus_width_bits * timing.data_rate_gbps / 8.0


def peak_bandwidth_per_stack_GBps(org: Organization, timing: Timing) -> float:
    return peak_bandwidth_GBps(org, timing) / org.stacks


def _is_pow2(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def parse_organization(section: Section) -> Organization:
    values = {}
    for name in ("stacks", "channels", "pseudo_channels", "ranks", "bankgroups", "banks_per_group", "rows",
                 "columns", "bus_width_bits", "burst_length"):
        values[name] = section.int(name, 1, minimum=1) if name == "stacks" else section.int(name, minimum=1)
    org = Organization(**values)
    if org.bus_width_bits % 8:
        raise section.error("bus_width_bits", f"must be a multiple of 8, got {org.bus_width_bits}")
    if org.columns % org.burst_length:
        raise section.error("columns", f"{org.columns} columns is not a whole number of bursts of "
                                       f"{org.burst_length}")
    if section.has("capacity"):
        stated = section.parsed("capacity", parse_size_bytes)
        if stated != org.capacity_per_stack_bytes:
            raise section.error(
                "capacity",
                f"organization gives {org.capacity_per_stack_bytes / 2**30:g} GiB per stack "
                f"({org.capacity_per_stack_bytes} B), not the stated {stated} B",
            )
    section.done()
    return org


def parse_timing(section: Section, org: Organization) -> Timing:
    tck_ns = section.parsed("tCK", parse_time_ns)
    if tck_ns <= 0:
        raise section.error("tCK", "must be positive")
    rate_gbps = section.parsed("data_rate", parse_pin_rate_gbps)
    beats_per_clock = rate_gbps * tck_ns
    if beats_per_clock <= 0 or abs(beats_per_clock - round(beats_per_clock)) > 0.01:
        raise section.error("data_rate", f"{rate_gbps:g} Gb/s at tCK {tck_ns:g} ns is not a whole number "
                                         f"of beats per clock ({beats_per_clock:.3f})")
    beats = int(round(beats_per_clock))
    if org.burst_length % beats:
        raise section.error("data_rate", f"burst length {org.burst_length} is not a whole number of clocks "
                                         f"at {beats} beats per clock")
    cycles = {name: section.parsed(name, lambda value, where: parse_cycles(value, tck_ns, where))
              for name in CYCLE_FIELDS}
    section.done()
    timing = Timing(tCK_ns=tck_ns, data_rate_gbps=rate_gbps, tBURST=org.burst_length // beats, **cycles)
    _check_consistency(timing, section)
    return timing


def _check_consistency(t: Timing, section: Section) -> None:
    rules = (
        ("tRAS", t.tRAS >= t.tRCDRD, f"tRAS ({t.tRAS}) < tRCDRD ({t.tRCDRD})"),
        ("tRAS", t.tRAS >= t.tRCDWR, f"tRAS ({t.tRAS}) < tRCDWR ({t.tRCDWR})"),
        ("tRC", t.tRC >= t.tRAS + t.tRP, f"tRC ({t.tRC}) < tRAS + tRP ({t.tRAS} + {t.tRP})"),
        ("tCCD_L", t.tCCD_L >= t.tCCD_S, f"tCCD_L ({t.tCCD_L}) < tCCD_S ({t.tCCD_S})"),
        ("tRRD_L", t.tRRD_L >= t.tRRD_S, f"tRRD_L ({t.tRRD_L}) < tRRD_S ({t.tRRD_S})"),
        ("tWTR_L", t.tWTR_L >= t.tWTR_S, f"tWTR_L ({t.tWTR_L}) < tWTR_S ({t.tWTR_S})"),
        ("tFAW", t.tFAW >= t.tRRD_S, f"tFAW ({t.tFAW}) < tRRD_S ({t.tRRD_S})"),
        ("tREFI", t.tREFI > t.tRFC, f"tREFI ({t.tREFI}) <= tRFC ({t.tRFC})"),
        ("tRFC", t.tRFC >= t.tRFCpb, f"tRFC ({t.tRFC}) < tRFCpb ({t.tRFCpb})"),
        ("CL", t.CL >= 1, "CL must be at least 1 cycle"),
        ("tRP", t.tRP >= 1, "tRP must be at least 1 cycle"),
        ("tRCDRD", t.tRCDRD >= 1, "tRCDRD must be at least 1 cycle"),
        ("tRCDWR", t.tRCDWR >= 1, "tRCDWR must be at least 1 cycle"),
    )
    for key, ok, message in rules:
        if not ok:
            raise section.error(key, f"inconsistent timing: {message}")


def refresh_interval_per_bank(org: Organization, t: Timing) -> int:
    """Per-bank refresh issues one REFpb every tREFI / banks so each bank is refreshed once per tREFI."""
    return max(1, t.tREFI // org.banks_per_rank)


def log2_exact(value: int) -> int:
    return int(math.log2(value)) if _is_pow2(value) else -1


__all__ = [
    "Organization", "Timing", "parse_organization", "parse_timing", "peak_bandwidth_GBps",
    "peak_bandwidth_per_stack_GBps", "ns_to_cycles", "refresh_interval_per_bank", "log2_exact",
]
