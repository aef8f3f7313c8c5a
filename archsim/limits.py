"""What the simulator's numbers and the machine can hold: the bounds every input check names.

A value beyond them is refused where it is read (one ConfigError naming the file and key, or the option), never
left to overflow or to exhaust memory deep inside a run.
"""

from __future__ import annotations

import os

from archsim.errors import ConfigError

INT64_MAX = 2**63 - 1  # numpy's and the kernels' integers; also the latest time in ns or cycles
# a request's or a sequence's tokens: no model's context window comes near 2^31 (the presets' largest is 128K),
# and the bound keeps tokens x bytes per token within int64
MAX_TOKENS = 2**31 - 1


def physical_memory_bytes() -> int:
    """This machine's RAM (0 where the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 0


def check_fits_memory(count: int, bytes_each: int, what: str, *, where: str, file: str | None = None) -> None:
    """Refuse `count` items of at least `bytes_each` bytes when they alone exceed this machine's RAM."""
    ram = physical_memory_bytes()
    need = count * bytes_each
    if ram and need > ram:
        raise ConfigError(f"{count:,} {what} need at least {_size(need)} of memory; this machine has {_size(ram)}",
                          file=file, where=where)


def _size(n_bytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n_bytes < 1024:
            return f"{n_bytes:,.1f} {unit}" if unit != "B" else f"{int(n_bytes):,} B"
        n_bytes /= 1024
    return f"{n_bytes:,.1f} PiB" if n_bytes < 1e6 else f"{n_bytes:.3g} PiB"
