"""The timing rules as a table, compiled into the earliest-issue matrix the controller kernel uses.

Each rule says: after command `prev` issues at scope `level`, command `next` may not issue at the same
scope for `gap` cycles. Scopes nest (bank ⊂ bank group ⊂ rank ⊂ pseudo-channel), so the kernel keeps
one earliest-issue row per scope instance and takes the max over the four scopes a command touches.
A constraint that is tighter within a smaller scope (tCCD_L vs tCCD_S) is written at both scopes.
`other_ranks` rules apply to the other ranks (stack IDs) of the same pseudo-channel only: the kernel
writes them into those ranks' rows (rank switching costs tRTRS on a shared data bus).
tFAW is not a pairwise rule; the kernel keeps the last four activations per rank.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from archsim.dram.commands import (
    ACT,
    N_COMMANDS,
    PRE,
    PREA,
    RD,
    RDA,
    REF,
    REFPB,
    WR,
    WRA,
)
from archsim.dram.spec import Timing

BANK, BANKGROUP, RANK, PSEUDO_CHANNEL, OTHER_RANKS = 0, 1, 2, 3, 4
N_LEVELS = 5
LEVEL_NAMES = ("bank", "bankgroup", "rank", "pseudo_channel", "other_ranks")

_READS = (RD, RDA)
_WRITES = (WR, WRA)
_COLUMN = _READS + _WRITES


def _write_recovery(t: Timing) -> int:
    return t.CWL + t.tBURST + t.tWR


RULES: tuple[tuple[int, tuple[int, ...], tuple[int, ...], Callable[[Timing], int], str], ...] = (
    # same bank
    (BANK, (ACT,), (ACT,), lambda t: t.tRC, "tRC"),
    (BANK, (ACT,), _READS, lambda t: t.tRCDRD, "tRCDRD"),
    (BANK, (ACT,), _WRITES, lambda t: t.tRCDWR, "tRCDWR"),
    (BANK, (ACT,), (PRE, PREA), lambda t: t.tRAS, "tRAS"),
    (BANK, (PRE,), (ACT, REFPB), lambda t: t.tRP, "tRP"),
    (BANK, (RD,), (PRE, PREA), lambda t: t.tRTP, "tRTP"),
    (BANK, (WR,), (PRE, PREA), _write_recovery, "CWL + tBURST + tWR"),
    (BANK, (RDA,), (ACT, REFPB), lambda t: t.tRTP + t.tRP, "tRTP + tRP"),
    (BANK, (WRA,), (ACT, REFPB), lambda t: _write_recovery(t) + t.tRP, "CWL + tBURST + tWR + tRP"),
    (BANK, (REFPB,), (ACT, REFPB), lambda t: t.tRFCpb, "tRFCpb"),
    # same bank group
    (BANKGROUP, (ACT,), (ACT,), lambda t: t.tRRD_L, "tRRD_L"),
    (BANKGROUP, _READS, _READS, lambda t: max(t.tCCD_L, t.tBURST), "tCCD_L"),
    (BANKGROUP, _WRITES, _WRITES, lambda t: max(t.tCCD_L, t.tBURST), "tCCD_L"),
    (BANKGROUP, _WRITES, _READS, lambda t: t.CWL + t.tBURST + t.tWTR_L, "CWL + tBURST + tWTR_L"),
    # same rank (stack ID)
    (RANK, (ACT,), (ACT,), lambda t: t.tRRD_S, "tRRD_S"),
    (RANK, _READS, _READS, lambda t: max(t.tCCD_S, t.tBURST), "tCCD_S"),
    (RANK, _WRITES, _WRITES, lambda t: max(t.tCCD_S, t.tBURST), "tCCD_S"),
    (RANK, _WRITES, _READS, lambda t: t.CWL + t.tBURST + t.tWTR_S, "CWL + tBURST + tWTR_S"),
    (RANK, (PREA,), (ACT, REF, REFPB), lambda t: t.tRP, "tRP"),
    (RANK, (PRE,), (REF,), lambda t: t.tRP, "tRP"),
    (RANK, (RDA,), (REF,), lambda t: t.tRTP + t.tRP, "tRTP + tRP"),
    (RANK, (WRA,), (REF,), lambda t: _write_recovery(t) + t.tRP, "CWL + tBURST + tWR + tRP"),
    (RANK, (ACT,), (REF,), lambda t: t.tRC, "tRC"),
    (RANK, (REF,), (ACT, REF, REFPB), lambda t: t.tRFC, "tRFC"),
    (RANK, (REFPB,), (REF,), lambda t: t.tRFCpb, "tRFCpb"),
    (RANK, (REFPB,), (ACT, REFPB), lambda t: t.tRREFD, "tRREFD"),
    (RANK, (ACT,), (REFPB,), lambda t: t.tRREFD, "tRREFD"),
    # same pseudo-channel: shared data bus
    (PSEUDO_CHANNEL, _READS, _READS, lambda t: t.tBURST, "tBURST"),
    (PSEUDO_CHANNEL, _WRITES, _WRITES, lambda t: t.tBURST, "tBURST"),
    (PSEUDO_CHANNEL, _READS, _WRITES, lambda t: t.tRTW, "CL + tBURST + tRTRS - CWL"),
    # other ranks of the pseudo-channel: rank-to-rank switch on the data bus
    (OTHER_RANKS, _READS, _READS, lambda t: t.tBURST + t.tRTRS, "tBURST + tRTRS"),
    (OTHER_RANKS, _WRITES, _WRITES, lambda t: t.tBURST + t.tRTRS, "tBURST + tRTRS"),
    (OTHER_RANKS, _WRITES, _READS, lambda t: t.tWTR_data, "CWL + tBURST + tRTRS - CL"),
)


def compile_timing_table(timing: Timing) -> np.ndarray:
    """gap[level, prev, next] in cycles; -1 where no rule applies. Rules at one cell combine by max."""
    gap = np.full((N_LEVELS, N_COMMANDS, N_COMMANDS), -1, dtype=np.int64)
    for level, prevs, nexts, formula, _label in RULES:
        value = int(formula(timing))
        for p in prevs:
            for n in nexts:
                gap[level, p, n] = max(gap[level, p, n], value)
    return gap


__all__ = ["compile_timing_table", "RULES", "LEVEL_NAMES", "BANK", "BANKGROUP", "RANK",
           "PSEUDO_CHANNEL", "OTHER_RANKS", "N_LEVELS"]
