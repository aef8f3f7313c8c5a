"""The protocol checker's rule table, written from the JEDEC definitions (JESD235 HBM2, JESD238 HBM3).

Deliberately independent of archsim/dram/timing_table.py and the controller: a rule here is "the
second command may not issue earlier than `gap` cycles after the most recent first command in the same
scope". Checking only the most recent first command is enough because the log's cycles never decrease:
every older first command lies at least as far back.

Scopes: bank (one bank; PREA and REF expanded to every bank of their rank), bankgroup, rank (a stack
ID / rank of one pseudo-channel), pseudo_channel (one data bus, all its ranks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from archsim.dram.commands import ACT, PRE, PREA, RD, RDA, REF, REFPB, WR, WRA
from archsim.dram.spec import Timing

# Checker-local code for a PREA on a bank that was already closed: a no-op for that bank's tRAS / tRTP /
# write-recovery (JEDEC: precharging an idle bank is a NOP), but it still starts the rank's tRP.
PREA_IDLE = 9

READS = (RD, RDA)
WRITES = (WR, WRA)
COLUMNS = READS + WRITES
PRECHARGES = (PRE, PREA)  # the bank-scope PREA here only counts banks that were open
OPENERS = (ACT, REF, REFPB)  # commands that need the bank precharged and idle


def write_recovery_cycles(t: Timing) -> int:
    """WR -> PRE: write data must reach the array: write latency + burst + tWR (JEDEC tWR from last data)."""
    return t.CWL + t.tBURST + t.tWR


def read_to_write_cycles(t: Timing) -> int:
    """RD -> WR on one data bus: the read's data (CL + burst) must clear, plus a turnaround, before CWL."""
    return max(0, t.CL + t.tBURST + t.tRTRS - t.CWL)


@dataclass(frozen=True)
class GapRule:
    name: str
    scope: str  # "bank", "bankgroup", "rank" or "pseudo_channel"
    first: tuple[int, ...]
    second: tuple[int, ...]
    gap_cycles: Callable[[Timing], int]
    meaning: str


GAP_RULES: tuple[GapRule, ...] = (
    # --- same bank: the row cycle
    GapRule("tRC", "bank", (ACT,), (ACT,), lambda t: t.tRC, "ACT -> ACT, same bank"),
    GapRule("tRCDRD", "bank", (ACT,), READS, lambda t: t.tRCDRD, "ACT -> RD/RDA, same bank"),
    GapRule("tRCDWR", "bank", (ACT,), WRITES, lambda t: t.tRCDWR, "ACT -> WR/WRA, same bank"),
    GapRule("tRAS", "bank", (ACT,), PRECHARGES, lambda t: t.tRAS, "ACT -> PRE/PREA, same (open) bank"),
    GapRule("tRP", "bank", (PRE, PREA, PREA_IDLE), OPENERS, lambda t: t.tRP,
            "PRE/PREA -> ACT/REF/REFpb, same bank (a refresh needs the bank idle for tRP too)"),
    GapRule("tRTP", "bank", (RD,), PRECHARGES, lambda t: t.tRTP, "RD -> PRE/PREA, same (open) bank"),
    GapRule("tWR", "bank", (WR,), PRECHARGES, write_recovery_cycles,
            "WR -> PRE/PREA, same (open) bank: CWL + tBURST + tWR"),
    GapRule("tRTP+tRP", "bank", (RDA,), OPENERS, lambda t: t.tRTP + t.tRP,
            "RDA -> ACT/REF/REFpb, same bank: the auto-precharge starts tRTP after RDA"),
    GapRule("tWR+tRP", "bank", (WRA,), OPENERS, lambda t: write_recovery_cycles(t) + t.tRP,
            "WRA -> ACT/REF/REFpb, same bank: CWL + tBURST + tWR + tRP"),
    GapRule("tRFCpb", "bank", (REFPB,), OPENERS, lambda t: t.tRFCpb,
            "REFpb -> ACT/REF/REFpb, same bank: the bank is busy refreshing"),
    # --- same bank group: the shared local I/O (the "long" timings)
    GapRule("tRRD_L", "bankgroup", (ACT,), (ACT,), lambda t: t.tRRD_L, "ACT -> ACT, same bank group"),
    GapRule("tCCD_L(RD)", "bankgroup", READS, READS, lambda t: max(t.tCCD_L, t.tBURST),
            "RD -> RD, same bank group: max(tCCD_L, tBURST)"),
    GapRule("tCCD_L(WR)", "bankgroup", WRITES, WRITES, lambda t: max(t.tCCD_L, t.tBURST),
            "WR -> WR, same bank group: max(tCCD_L, tBURST)"),
    GapRule("tWTR_L", "bankgroup", WRITES, READS, lambda t: t.CWL + t.tBURST + t.tWTR_L,
            "WR -> RD, same bank group: CWL + tBURST + tWTR_L (from the end of the write data)"),
    # --- same rank (stack ID)
    GapRule("tRRD_S", "rank", (ACT,), (ACT,), lambda t: t.tRRD_S, "ACT -> ACT, same rank"),
    GapRule("tCCD_S(RD)", "rank", READS, READS, lambda t: max(t.tCCD_S, t.tBURST),
            "RD -> RD, same rank: max(tCCD_S, tBURST)"),
    GapRule("tCCD_S(WR)", "rank", WRITES, WRITES, lambda t: max(t.tCCD_S, t.tBURST),
            "WR -> WR, same rank: max(tCCD_S, tBURST)"),
    GapRule("tWTR_S", "rank", WRITES, READS, lambda t: t.CWL + t.tBURST + t.tWTR_S,
            "WR -> RD, same rank: CWL + tBURST + tWTR_S"),
    GapRule("tRFC", "rank", (REF,), OPENERS, lambda t: t.tRFC, "REF -> ACT/REF/REFpb, same rank"),
    GapRule("tRREFD", "rank", (REFPB,), (ACT, REFPB), lambda t: t.tRREFD,
            "REFpb -> REFpb/ACT, same rank (same bank is covered by tRFCpb)"),
    # --- same pseudo-channel: one data bus shared by every rank
    GapRule("tBURST(RD)", "pseudo_channel", READS, READS, lambda t: t.tBURST,
            "RD -> RD, same pseudo-channel: bursts may not overlap"),
    GapRule("tBURST(WR)", "pseudo_channel", WRITES, WRITES, lambda t: t.tBURST,
            "WR -> WR, same pseudo-channel: bursts may not overlap"),
    GapRule("tRTW", "pseudo_channel", READS, WRITES, read_to_write_cycles,
            "RD -> WR, same pseudo-channel: CL + tBURST + tRTRS - CWL"),
)

# Rules that are not a plain gap between two commands.
STATE_RULES: tuple[str, ...] = (
    "state:ACT_to_open_bank", "state:column_to_closed_bank", "state:column_wrong_row",
    "state:REF_with_open_bank", "state:REFpb_to_open_bank",
)
SPECIAL_RULES: tuple[str, ...] = ("malformed", "cycle_order", "tFAW", "data_bus", "row_bus", "column_bus")
REFRESH_RULE = "tREFI"
WARNING_RULES: tuple[str, ...] = ("state:PRE_to_closed_bank",)

# JEDEC lets a controller postpone up to 8 refreshes, so refresh number k (0-based) of a rank (all-bank)
# or of a bank (per-bank) must issue by (k + 1 + 8) * tREFI.
MAX_POSTPONED_REFRESHES = 8
REFRESH_MODES: tuple[str, ...] = ("none", "all_bank", "per_bank")

__all__ = [
    "GAP_RULES", "GapRule", "STATE_RULES", "SPECIAL_RULES", "REFRESH_RULE", "WARNING_RULES", "PREA_IDLE",
    "READS", "WRITES", "COLUMNS", "MAX_POSTPONED_REFRESHES", "REFRESH_MODES", "write_recovery_cycles",
    "read_to_write_cycles",
]
