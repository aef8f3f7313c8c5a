"""Closed-form figures beside the simulator: the oracle the tests hold the simulated results to.

Unloaded latencies are sums from the timing table; bandwidth bounds come from the data buses, the
activation rate limits (tRRD_S, tFAW per rank, tRC per bank) and refresh.
"""

from __future__ import annotations

from archsim.config.memory import MemoryConfig
from archsim.dram.spec import peak_bandwidth_GBps


def unloaded_read_latency_cycles(cfg: MemoryConfig, case: str) -> int:
    """Acceptance to last data beat for a lone read: `hit` (row open), `miss` (bank closed),
    `conflict` (another row open long enough that tRAS/tRTP/tWR no longer bind)."""
    t = cfg.timing
    base = cfg.controller.frontend_delay_cycles + t.CL + t.tBURST
    if case == "hit":
        return base
    if case == "miss":
        return base + t.tRCDRD
    if case == "conflict":
        return base + t.tRP + t.tRCDRD
    raise ValueError(f"unknown case {case!r}")


def refresh_loss_fraction(cfg: MemoryConfig) -> float:
    """Share of time a rank cannot activate because of all-bank refresh."""
    if cfg.controller.refresh.impl == "none":
        return 0.0
    return cfg.timing.tRFC / cfg.timing.tREFI


def activation_limit_per_cycle(cfg: MemoryConfig) -> float:
    """Most row activations per cycle the device allows: per rank min(4 / tFAW, 1 / tRRD_S), per bank 1 / tRC."""
    org, t = cfg.organization, cfg.timing
    n_ranks = org.n_pseudo_channels * org.ranks
    per_rank = min(4.0 / t.tFAW, 1.0 / t.tRRD_S)
    return min(n_ranks * per_rank, org.n_banks / t.tRC)


def random_read_bandwidth_bound_GBps(cfg: MemoryConfig) -> float:
    """Every access a row miss: bandwidth is the activation limit times the access size (or the peak)."""
    org, t = cfg.organization, cfg.timing
    bound = activation_limit_per_cycle(cfg) * org.access_bytes / t.tCK_ns
    return min(bound, peak_bandwidth_GBps(org, t))


def sequential_read_bandwidth_bound_GBps(cfg: MemoryConfig) -> float:
    """Streaming row hits keep every data bus busy except while refreshing."""
    return peak_bandwidth_GBps(cfg.organization, cfg.timing) * (1.0 - refresh_loss_fraction(cfg))
