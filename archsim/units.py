"""The only parser of quantities with units ("14ns", "6.4Gbps", "64KiB", "1.6GHz").

Config values may be given as a number (in the field's base unit) or as a string with a unit.
ns -> cycles always rounds up: a constraint of 13.75 ns at tCK 0.625 ns needs 22 cycles, never 21.
"""

from __future__ import annotations

import math
import re

from archsim.errors import ConfigError

_NUMBER_UNIT = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-zµ/]*)\s*$")

_TIME_NS = {"ps": 1e-3, "ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}
_SIZE_BYTES = {
    "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
    # DRAM densities are binary by JEDEC convention: an "8Gb" die holds 2^33 bits
    "b": 1 / 8, "Kb": 2**10 / 8, "Mb": 2**20 / 8, "Gb": 2**30 / 8,
    "Kib": 2**10 / 8, "Mib": 2**20 / 8, "Gib": 2**30 / 8,
}
_RATE_GBPS_PER_PIN = {"bps": 1e-9, "Kbps": 1e-6, "Mbps": 1e-3, "Gbps": 1.0, "Tbps": 1e3, "Gb/s": 1.0, "Mb/s": 1e-3}
_BANDWIDTH_GBPS = {"B/s": 1e-9, "KB/s": 1e-6, "MB/s": 1e-3, "GB/s": 1.0, "TB/s": 1e3, "GBps": 1.0, "TBps": 1e3}
_FREQ_GHZ = {"Hz": 1e-9, "kHz": 1e-6, "KHz": 1e-6, "MHz": 1e-3, "GHz": 1.0}


def _split(value: object, where: str, kind: str) -> tuple[float, str]:
    if isinstance(value, bool):
        raise ConfigError(f"expected a {kind}, got {value!r}", where=where)
    if isinstance(value, int | float):
        try:
            return float(value), ""
        except OverflowError:  # an integer beyond a float's range
            raise ConfigError(f"a {kind} beyond the largest number a float holds (about 1.8e308)",
                              where=where) from None
    if not isinstance(value, str):
        raise ConfigError(f"expected a {kind}, got {value!r}", where=where)
    match = _NUMBER_UNIT.match(value)
    if not match:
        raise ConfigError(f"cannot read {value!r} as a {kind}", where=where)
    return float(match.group(1)), match.group(2)


def _parse(value: object, where: str, kind: str, table: dict[str, float], default_unit: str) -> float:
    number, unit = _split(value, where, kind)
    unit = unit or default_unit
    if unit not in table:
        known = ", ".join(sorted(table))
        raise ConfigError(f"bad unit {unit!r} for a {kind} (use one of {known})", where=where)
    result = number * table[unit]
    if result < 0 or not math.isfinite(result):
        raise ConfigError(f"a {kind} must be finite and non-negative, got {value!r}", where=where)
    return result


def parse_time_ns(value: object, where: str = "") -> float:
    """A duration in ns; a bare number is taken as ns."""
    return _parse(value, where, "duration", _TIME_NS, "ns")


def parse_time_option_ns(text: str, where: str) -> float:
    """A duration typed on the command line: it needs its unit (a bare 60 would be 60 ns, rarely what was
    meant); a bare 0 is 0 in any unit."""
    number, unit = _split(text, where, "duration")
    if not unit and number != 0:
        raise ConfigError(f"{text!r}: give the unit (e.g. {text.strip()}s or {text.strip()}ms)", where=where)
    return parse_time_ns(text, where)


def parse_size_bytes(value: object, where: str = "") -> int:
    """A size in bytes; a bare number is taken as bytes. Must come to a whole number of bytes."""
    size = _parse(value, where, "size", _SIZE_BYTES, "B")
    if abs(size - round(size)) > 1e-6:
        raise ConfigError(f"size {value!r} is not a whole number of bytes", where=where)
    return int(round(size))


def parse_pin_rate_gbps(value: object, where: str = "") -> float:
    """A per-pin data rate in Gb/s; a bare number is taken as Gb/s."""
    return _parse(value, where, "data rate", _RATE_GBPS_PER_PIN, "Gbps")


def parse_bandwidth_GBps(value: object, where: str = "") -> float:
    """A bandwidth in GB/s (10^9 bytes per second); a bare number is taken as GB/s."""
    return _parse(value, where, "bandwidth", _BANDWIDTH_GBPS, "GB/s")


def parse_frequency_ghz(value: object, where: str = "") -> float:
    """A clock frequency in GHz; a bare number is taken as GHz."""
    return _parse(value, where, "frequency", _FREQ_GHZ, "GHz")


def ns_to_cycles(time_ns: float, tck_ns: float) -> int:
    """Cycles needed to cover `time_ns` at clock period `tck_ns`, rounded up (never down).

    A tiny tolerance keeps 30 ns / 0.625 ns = 48 exact despite float noise.
    """
    if tck_ns <= 0:
        raise ValueError("tck_ns must be positive")
    return int(math.ceil(time_ns / tck_ns - 1e-9))


def parse_cycles(value: object, tck_ns: float, where: str = "") -> int:
    """A timing value: an integer is cycles (nCK); a string with a time unit converts with ceil."""
    if isinstance(value, bool):
        raise ConfigError(f"expected cycles or a duration, got {value!r}", where=where)
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(f"cycles must be non-negative, got {value}", where=where)
        return value
    if isinstance(value, float):
        if value < 0 or value != int(value):
            raise ConfigError(f"cycles must be a whole non-negative number, got {value}", where=where)
        return int(value)
    number, unit = _split(value, where, "duration")
    if unit in ("", "nCK", "nck", "cycles", "cycle", "tCK", "clk"):
        if number < 0 or number != int(number):
            raise ConfigError(f"cycles must be a whole non-negative number, got {value!r}", where=where)
        return int(number)
    return ns_to_cycles(parse_time_ns(value, where), tck_ns)
