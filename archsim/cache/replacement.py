"""Replacement policies of the set-associative cache: a registry by name plus the compiled per-set routines.

Every policy keeps one int64 of state per line (`repl[set, way]`) so the kernel stores all policies the same way:

* ``lru``   -- the state is the access stamp of the line's last touch; the victim is the smallest stamp.
* ``srrip`` -- static re-reference interval prediction (Jaleel et al., ISCA 2010), M-bit RRPV per line; insert
  at RRPV = 2^M - 2 ("long"), promote to 0 on a hit (hit priority), evict the first way at 2^M - 1, ageing every
  line of the set by one until such a way exists. Scan-resistant; not thrash-resistant: a cyclic scan one line
  larger than the set misses every time, exactly like LRU.
* ``brrip`` -- bimodal RRIP (same paper): like SRRIP but inserts at 2^M - 1 ("distant") except every
  `bimodal_interval`-th fill, which goes in at 2^M - 2. The paper uses probability 1/32; a deterministic counter
  keeps runs reproducible. Thrash-resistant: most of a too-large cyclic working set stays resident.

An invalid way is always taken before any valid one, lowest index first, so every choice is deterministic.
"""

from __future__ import annotations

import numpy as np

from archsim.jit import njit
from archsim.registry import Registry

LRU, SRRIP, BRRIP = 0, 1, 2

REPLACEMENT_POLICIES: Registry[int] = Registry("replacement policy")
REPLACEMENT_POLICIES.add("lru", LRU)
REPLACEMENT_POLICIES.add("srrip", SRRIP)
REPLACEMENT_POLICIES.add("brrip", BRRIP)


def policy_id(name: str) -> int:
    """The kernel's integer code of a registered policy name (KeyError for an unknown name)."""
    return REPLACEMENT_POLICIES.get(name)


@njit(cache=True, inline="always")
def choose_victim(policy: int, repl: np.ndarray, valid: np.ndarray, s: int, ways: int, rrpv_max: int) -> int:
    """The way to fill in set `s`. RRIP ageing mutates `repl` (that is part of the policy, not a side effect)."""
    for w in range(ways):
        if valid[s, w] == 0:
            return w
    if policy == LRU:
        best = 0
        for w in range(1, ways):
            if repl[s, w] < repl[s, best]:
                best = w
        return best
    # SRRIP / BRRIP: age the whole set by the distance to the nearest distant line in one step; this equals
    # repeating "+1 to every line" until some line reaches rrpv_max, without the loop.
    top = repl[s, 0]
    for w in range(1, ways):
        if repl[s, w] > top:
            top = repl[s, w]
    shift = rrpv_max - top
    if shift > 0:
        for w in range(ways):
            repl[s, w] += shift
    for w in range(ways):
        if repl[s, w] == rrpv_max:
            return w
    return 0  # unreachable: after ageing the maximum equals rrpv_max


@njit(cache=True, inline="always")
def on_hit(policy: int, repl: np.ndarray, s: int, w: int, stamp: int) -> None:
    if policy == LRU:
        repl[s, w] = stamp
    else:
        repl[s, w] = 0


@njit(cache=True, inline="always")
def on_fill(policy: int, repl: np.ndarray, s: int, w: int, stamp: int, rrpv_max: int, fill_ordinal: int,
            bimodal_interval: int) -> None:
    """Set the inserted line's state. `fill_ordinal` counts fills from 0 (BRRIP's bimodal throttle)."""
    if policy == LRU:
        repl[s, w] = stamp
    elif policy == SRRIP or fill_ordinal % bimodal_interval == 0:  # SRRIP always, BRRIP 1 in bimodal_interval
        repl[s, w] = rrpv_max - 1
    else:
        repl[s, w] = rrpv_max
