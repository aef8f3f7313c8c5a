"""On-chip caches: the set-associative L2 (write-back, write-allocate, MSHRs) and its replacement policies."""

from archsim.cache.l2 import (
    HIT,
    KINDS,
    MERGE,
    MISS,
    SOURCES,
    STATS,
    L2Config,
    L2Result,
    MissStream,
    l2_config_from_mapping,
    parse_l2,
    simulate_l2,
)
from archsim.cache.replacement import REPLACEMENT_POLICIES

__all__ = [
    "HIT",
    "KINDS",
    "MERGE",
    "MISS",
    "REPLACEMENT_POLICIES",
    "SOURCES",
    "STATS",
    "L2Config",
    "L2Result",
    "MissStream",
    "l2_config_from_mapping",
    "parse_l2",
    "simulate_l2",
]
