"""The independent protocol checker: every rule caught at exactly one cycle short, and simulator logs clean.

Part 1 builds tiny logs by hand against a made-up timing whose numbers are all distinct, so each
scenario binds on exactly one rule: at the minimum gap the log passes, one cycle less it fails with that
rule. Part 2 replays hypothesis-generated traces through the simulator for every preset x scheduler x
row policy x refresh mode and requires zero violations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from archsim.config.memory import MemoryConfig, memory_config_from_preset
from archsim.dram.checker import CheckResult, check_command_log
from archsim.dram.commands import COMMAND_CODES
from archsim.dram.spec import Organization, Timing
from archsim.memory import CommandLog, Requests, replay

# Two channels x 2 pseudo-channels x 2 ranks x 4 bank groups x 2 banks: every scope has a neighbour.
ORG = Organization(stacks=1, channels=2, pseudo_channels=2, ranks=2, bankgroups=4, banks_per_group=2, rows=64,
                   columns=32, bus_width_bits=32, burst_length=8)
T = Timing(tCK_ns=1.0, data_rate_gbps=4.0, CL=10, CWL=6, tRCDRD=9, tRCDWR=7, tRP=8, tRAS=20, tRC=35, tCCD_S=3,
           tCCD_L=5, tRRD_S=3, tRRD_L=6, tFAW=20, tWTR_S=3, tWTR_L=7, tRTP=4, tWR=9, tRTRS=1, tRFC=100,
           tRFCpb=50, tRREFD=6, tREFI=1000, tBURST=2)
T_WIDE_BURST = dataclasses.replace(T, tBURST=6)  # bursts longer than tCCD_L: max(tCCD, tBURST) binds
T_NO_TRTRS = dataclasses.replace(T, tRTRS=0)  # so the plain tBURST rule binds before the rank switch
WRITE_RECOVERY = T.CWL + T.tBURST + T.tWR

Cmd = tuple[int, str, int, int, int]  # cycle, command name, pseudo-channel, bank in pseudo-channel, row


def b(rank: int, bankgroup: int, bank: int) -> int:
    return (rank * ORG.bankgroups + bankgroup) * ORG.banks_per_group + bank


def make_log(cmds: list[Cmd]) -> CommandLog:
    cols = list(zip(*cmds, strict=True)) if cmds else [(), (), (), (), ()]
    return CommandLog(np.array(cols[0], np.int64), np.array([COMMAND_CODES[c] for c in cols[1]], np.int8),
                      np.array(cols[2], np.int32), np.array(cols[3], np.int32), np.array(cols[4], np.int64))


def check(cmds: list[Cmd], timing: Timing = T, refresh_mode: str = "none") -> CheckResult:
    return check_command_log(make_log(cmds), ORG, timing, refresh_mode=refresh_mode)


def two_banks(first: int, second: int, col: str, gap: int, second_col: str | None = None) -> list[Cmd]:
    """Open two banks of pseudo-channel 0 legally, then two column commands `gap` cycles apart."""
    return [(0, "ACT", 0, first, 1), (12, "ACT", 0, second, 1), (40, col, 0, first, 1),
            (40 + gap, second_col or col, 0, second, 1)]


# name -> (rule, minimum gap, timing, log builder given the gap, other rules that may fire with it)
SCENARIOS: dict[str, tuple[str, int, Timing, Callable[[int], list[Cmd]], set[str]]] = {
    "ACT-PRE-ACT": ("tRC", T.tRC, T, lambda g: [(0, "ACT", 0, 0, 1), (20, "PRE", 0, 0, 1), (g, "ACT", 0, 0, 2)],
                    set()),
    "ACT-RD": ("tRCDRD", T.tRCDRD, T, lambda g: [(0, "ACT", 0, 0, 1), (g, "RD", 0, 0, 1)], set()),
    "ACT-RDA": ("tRCDRD", T.tRCDRD, T, lambda g: [(0, "ACT", 0, 0, 1), (g, "RDA", 0, 0, 1)], set()),
    "ACT-WR": ("tRCDWR", T.tRCDWR, T, lambda g: [(0, "ACT", 0, 0, 1), (g, "WR", 0, 0, 1)], set()),
    "ACT-WRA": ("tRCDWR", T.tRCDWR, T, lambda g: [(0, "ACT", 0, 0, 1), (g, "WRA", 0, 0, 1)], set()),
    "ACT-PRE": ("tRAS", T.tRAS, T, lambda g: [(0, "ACT", 0, 3, 1), (g, "PRE", 0, 3, 1)], set()),
    "ACT-PREA": ("tRAS", T.tRAS, T, lambda g: [(0, "ACT", 0, b(1, 2, 1), 1), (g, "PREA", 0, b(1, 0, 0), -1)],
                 set()),
    "PRE-ACT": ("tRP", T.tRP, T, lambda g: [(0, "ACT", 0, 0, 1), (30, "PRE", 0, 0, 1), (30 + g, "ACT", 0, 0, 2)],
                set()),
    "PREA-ACT": ("tRP", T.tRP, T,
                 lambda g: [(0, "ACT", 0, 0, 1), (30, "PREA", 0, 0, -1), (30 + g, "ACT", 0, 0, 2)], set()),
    "PREA-ACT idle bank": ("tRP", T.tRP, T,
                           lambda g: [(0, "ACT", 0, 0, 1), (30, "PREA", 0, 0, -1), (30 + g, "ACT", 0, 1, 2)],
                           set()),
    "PRE-REFpb": ("tRP", T.tRP, T,
                  lambda g: [(0, "ACT", 0, 0, 1), (30, "PRE", 0, 0, 1), (30 + g, "REFpb", 0, 0, -1)], set()),
    "PRE-REF": ("tRP", T.tRP, T,
                lambda g: [(0, "ACT", 0, 5, 1), (30, "PRE", 0, 5, 1), (30 + g, "REF", 0, 0, -1)], set()),
    "RD-PRE": ("tRTP", T.tRTP, T,
               lambda g: [(0, "ACT", 0, 0, 1), (20, "RD", 0, 0, 1), (20 + g, "PRE", 0, 0, 1)], set()),
    "RD-PREA": ("tRTP", T.tRTP, T,
                lambda g: [(0, "ACT", 0, 0, 1), (20, "RD", 0, 0, 1), (20 + g, "PREA", 0, 0, -1)], set()),
    "WR-PRE": ("tWR", WRITE_RECOVERY, T,
               lambda g: [(0, "ACT", 0, 0, 1), (20, "WR", 0, 0, 1), (20 + g, "PRE", 0, 0, 1)], set()),
    "WR-PREA": ("tWR", WRITE_RECOVERY, T,
                lambda g: [(0, "ACT", 0, 0, 1), (20, "WR", 0, 0, 1), (20 + g, "PREA", 0, 0, -1)], set()),
    "RDA-ACT": ("tRTP+tRP", T.tRTP + T.tRP, T,
                lambda g: [(0, "ACT", 0, 0, 1), (30, "RDA", 0, 0, 1), (30 + g, "ACT", 0, 0, 2)], set()),
    "RDA-REFpb": ("tRTP+tRP", T.tRTP + T.tRP, T,
                  lambda g: [(0, "ACT", 0, 0, 1), (30, "RDA", 0, 0, 1), (30 + g, "REFpb", 0, 0, -1)], set()),
    "WRA-ACT": ("tWR+tRP", WRITE_RECOVERY + T.tRP, T,
                lambda g: [(0, "ACT", 0, 0, 1), (30, "WRA", 0, 0, 1), (30 + g, "ACT", 0, 0, 2)], set()),
    "WRA-REF": ("tWR+tRP", WRITE_RECOVERY + T.tRP, T,
                lambda g: [(0, "ACT", 0, 0, 1), (30, "WRA", 0, 0, 1), (30 + g, "REF", 0, 0, -1)], set()),
    "REFpb-ACT same bank": ("tRFCpb", T.tRFCpb, T, lambda g: [(0, "REFpb", 0, 4, -1), (g, "ACT", 0, 4, 1)],
                            set()),
    "REFpb-REFpb same bank": ("tRFCpb", T.tRFCpb, T,
                              lambda g: [(0, "REFpb", 0, 4, -1), (g, "REFpb", 0, 4, -1)], set()),
    "ACT-ACT same bank group": ("tRRD_L", T.tRRD_L, T,
                                lambda g: [(0, "ACT", 0, b(0, 1, 0), 1), (g, "ACT", 0, b(0, 1, 1), 1)], set()),
    "RD-RD same bank group": ("tCCD_L(RD)", T.tCCD_L, T, lambda g: two_banks(b(0, 0, 0), b(0, 0, 1), "RD", g),
                              set()),
    "WR-WR same bank group": ("tCCD_L(WR)", T.tCCD_L, T, lambda g: two_banks(b(0, 0, 0), b(0, 0, 1), "WR", g),
                              set()),
    "RD-RD same bank group, long burst": (
        "tCCD_L(RD)", T_WIDE_BURST.tBURST, T_WIDE_BURST, lambda g: two_banks(b(0, 0, 0), b(0, 0, 1), "RDA", g),
        {"tCCD_S(RD)", "tBURST(RD)", "data_bus"}),
    "WR-RD same bank group": ("tWTR_L", T.CWL + T.tBURST + T.tWTR_L, T,
                              lambda g: two_banks(b(0, 0, 0), b(0, 0, 1), "WR", g, "RD"), set()),
    "ACT-ACT same rank": ("tRRD_S", T.tRRD_S, T,
                          lambda g: [(0, "ACT", 0, b(1, 0, 0), 1), (g, "ACT", 0, b(1, 3, 0), 1)], set()),
    "RD-RD same rank": ("tCCD_S(RD)", T.tCCD_S, T, lambda g: two_banks(b(0, 0, 0), b(0, 1, 0), "RD", g), set()),
    "WR-WR same rank": ("tCCD_S(WR)", T.tCCD_S, T, lambda g: two_banks(b(0, 0, 0), b(0, 1, 0), "WRA", g),
                        set()),
    "WR-RD same rank": ("tWTR_S", T.CWL + T.tBURST + T.tWTR_S, T,
                        lambda g: two_banks(b(0, 0, 0), b(0, 1, 0), "WRA", g, "RDA"), set()),
    "five ACTs": ("tFAW", T.tFAW, T, lambda g: [(3 * i, "ACT", 0, b(0, i, 0), 1) for i in range(4)]
                  + [(g, "ACT", 0, b(0, 0, 1), 1)], set()),
    "REF-ACT": ("tRFC", T.tRFC, T, lambda g: [(0, "REF", 0, b(1, 0, 0), -1), (g, "ACT", 0, b(1, 2, 1), 1)], set()),
    "REF-REF": ("tRFC", T.tRFC, T, lambda g: [(0, "REF", 0, 0, -1), (g, "REF", 0, 0, -1)], set()),
    "REF-REFpb": ("tRFC", T.tRFC, T, lambda g: [(0, "REF", 0, 0, -1), (g, "REFpb", 0, 7, -1)], set()),
    "REFpb-REFpb": ("tRREFD", T.tRREFD, T, lambda g: [(0, "REFpb", 0, 0, -1), (g, "REFpb", 0, 6, -1)], set()),
    "REFpb-ACT other bank": ("tRREFD", T.tRREFD, T,
                             lambda g: [(0, "REFpb", 0, 0, -1), (g, "ACT", 0, 6, 1)], set()),
    "RD-RD other rank": ("tBURST(RD)", T.tBURST, T_NO_TRTRS,
                         lambda g: two_banks(b(0, 0, 0), b(1, 0, 0), "RD", g), {"data_bus"}),
    "WR-WR other rank": ("tBURST(WR)", T.tBURST, T_NO_TRTRS,
                         lambda g: two_banks(b(0, 0, 0), b(1, 0, 0), "WR", g), {"data_bus"}),
    "RD-WR same rank": ("tRTW", T.tRTW, T, lambda g: two_banks(b(0, 0, 0), b(0, 1, 0), "RD", g, "WR"), set()),
    "RD-WR other rank": ("tRTW", T.tRTW, T, lambda g: two_banks(b(0, 0, 0), b(1, 1, 0), "RD", g, "WR"),
                         {"data_bus"}),
    "RD-RD other rank, tRTRS": ("data_bus", T.tBURST + T.tRTRS, T,
                                lambda g: two_banks(b(0, 0, 0), b(1, 0, 0), "RD", g), set()),
    "WR-WR other rank, tRTRS": ("data_bus", T.tBURST + T.tRTRS, T,
                                lambda g: two_banks(b(0, 0, 0), b(1, 0, 0), "WR", g), set()),
    "row commands, one channel": ("row_bus", 1, T, lambda g: [(5, "ACT", 0, 0, 1), (5 + g, "ACT", 1, 0, 1)],
                                  set()),
    "column commands, one channel": ("column_bus", 1, T, lambda g: [
        (0, "ACT", 0, 0, 1), (1, "ACT", 1, 0, 1), (30, "RD", 0, 0, 1), (30 + g, "WR", 1, 0, 1)], set()),
    "log order": ("cycle_order", 0, T, lambda g: [(10, "ACT", 0, 0, 1), (10 + g, "ACT", 2, 0, 1)], set()),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_rule_blocks_one_cycle_early_and_allows_at_minimum(name: str) -> None:
    rule, minimum, timing, build, also = SCENARIOS[name]
    at_minimum = check(build(minimum), timing)
    assert at_minimum.ok, at_minimum.summary()
    early = check(build(minimum - 1), timing)
    assert rule in early.violation_counts, early.summary()
    assert set(early.violation_counts) <= {rule} | also, early.summary()
    record = next(v for v in early.violations if v.rule == rule)
    assert (record.required_gap_cycles, record.actual_gap_cycles) in ((minimum, minimum - 1), (None, None)) or (
        rule == "data_bus")  # the data bus reports gaps between data starts, not command cycles
    assert record.second_index >= 0 and record.first_index >= 0


def test_record_names_both_commands() -> None:
    result = check([(0, "ACT", 0, 0, 1), (20, "PRE", 0, 0, 1), (34, "ACT", 0, 0, 2)])
    (v,) = result.violations
    assert (v.rule, v.first_index, v.second_index, v.first_cycle, v.second_cycle) == ("tRC", 0, 2, 0, 34)
    assert (v.required_gap_cycles, v.actual_gap_cycles) == (T.tRC, T.tRC - 1)
    assert "tRC" in str(v) and not result.ok


# name -> (state rule, bad log, the same log made legal)
STATE_CASES: dict[str, tuple[str, list[Cmd], list[Cmd]]] = {
    "ACT to an open bank": ("state:ACT_to_open_bank", [(0, "ACT", 0, 0, 1), (40, "ACT", 0, 0, 2)],
                            [(0, "ACT", 0, 0, 1), (20, "PRE", 0, 0, 1), (40, "ACT", 0, 0, 2)]),
    "RD to a closed bank": ("state:column_to_closed_bank", [(10, "RD", 0, 0, 1)],
                            [(0, "ACT", 0, 0, 1), (10, "RD", 0, 0, 1)]),
    "WR after RDA closed the bank": ("state:column_to_closed_bank",
                                     [(0, "ACT", 0, 0, 1), (20, "RDA", 0, 0, 1), (40, "WR", 0, 0, 1)],
                                     [(0, "ACT", 0, 0, 1), (20, "RD", 0, 0, 1), (40, "WR", 0, 0, 1)]),
    "RD after PREA": ("state:column_to_closed_bank",
                      [(0, "ACT", 0, 3, 1), (30, "PREA", 0, 0, -1), (50, "RD", 0, 3, 1)],
                      [(0, "ACT", 0, 3, 1), (30, "PREA", 0, 8, -1), (50, "RD", 0, 3, 1)]),
    "RD to another row": ("state:column_wrong_row", [(0, "ACT", 0, 0, 3), (20, "RD", 0, 0, 4)],
                          [(0, "ACT", 0, 0, 4), (20, "RD", 0, 0, 4)]),
    "REF with a bank open": ("state:REF_with_open_bank", [(0, "ACT", 0, b(0, 3, 1), 1), (100, "REF", 0, 0, -1)],
                             [(0, "ACT", 0, b(0, 3, 1), 1), (100, "REF", 0, b(1, 0, 0), -1)]),
    "REFpb to an open bank": ("state:REFpb_to_open_bank", [(0, "ACT", 0, 2, 1), (100, "REFpb", 0, 2, -1)],
                              [(0, "ACT", 0, 2, 1), (100, "REFpb", 0, 3, -1)]),
    "bank out of range": ("malformed", [(0, "ACT", 0, ORG.banks_per_pseudo_channel, 1)],
                          [(0, "ACT", 0, ORG.banks_per_pseudo_channel - 1, 1)]),
    "row out of range": ("malformed", [(0, "ACT", 3, 0, ORG.rows)], [(0, "ACT", 3, 0, ORG.rows - 1)]),
}


@pytest.mark.parametrize("name", sorted(STATE_CASES))
def test_state_rule(name: str) -> None:
    rule, bad, good = STATE_CASES[name]
    assert check(good).ok, check(good).summary()
    result = check(bad)
    assert set(result.violation_counts) == {rule}, result.summary()


def test_pre_to_closed_bank_is_a_warning_not_a_violation() -> None:
    result = check([(0, "PRE", 0, 0, -1)])
    assert result.ok and result.warning_counts == {"state:PRE_to_closed_bank": 1}


def _ranks_refreshed_early(skip: tuple[int, int]) -> list[Cmd]:
    """One REF per rank at cycles 1, 2, ... except rank `skip` = (pseudo-channel, rank)."""
    ranks = [(p, r) for p in range(ORG.n_pseudo_channels) for r in range(ORG.ranks) if (p, r) != skip]
    return [(1 + i, "REF", p, r * ORG.banks_per_rank, -1) for i, (p, r) in enumerate(ranks)]


@pytest.mark.parametrize("mode", ["all_bank", "per_bank"])
def test_refresh_deadline(mode: str) -> None:
    """Refresh k must issue by (k + 9) * tREFI: JEDEC lets 8 be postponed."""
    deadline = 9 * T.tREFI
    if mode == "all_bank":
        def build(g: int) -> list[Cmd]:
            return [*_ranks_refreshed_early((0, 1)), (g, "REF", 0, ORG.banks_per_rank, -1)]
    else:
        def build(g: int) -> list[Cmd]:  # every bank of pseudo-channel 0 by REFpb, one of them late
            early = _ranks_refreshed_early((0, 0))
            per_bank = [(20 + 10 * k, "REFpb", 0, k, -1) for k in range(1, ORG.banks_per_rank)]
            return [*early, *per_bank, (g, "REFpb", 0, 0, -1)]
    assert check(build(deadline), refresh_mode=mode).ok
    late = check(build(deadline + 1), refresh_mode=mode)
    assert set(late.violation_counts) == {"tREFI"} and late.violation_counts["tREFI"] == 1, late.summary()
    assert check(build(deadline + 1), refresh_mode="none").ok  # no refresh expected: not checked
    # The refresh never comes but the log runs past the deadline: reported against the end of the log.
    missing = check(build(deadline)[:-1] + [(deadline + 1, "ACT", 2, 0, 1)], refresh_mode=mode)
    assert missing.violation_counts == {"tREFI": 1} and missing.violations[0].second_index == -1


def test_max_violations_caps_records_but_counts_all() -> None:
    cmds = [(i, "RD", 0, 0, 1) for i in range(0, 1000, 10)]
    result = check_command_log(make_log(cmds), ORG, T, max_violations=7)
    assert len(result.violations) == 7 and result.violation_counts == {"state:column_to_closed_bank": 100}
    assert [v.second_index for v in result.violations] == list(range(7))


def test_empty_log() -> None:
    assert check([], refresh_mode="all_bank").ok


# ---------------------------------------------------------------------------------------------------
# Part 2: the simulator's logs

PRESETS = ("HBM2", "HBM3", "HBM3E")
SCHEDULERS = ("frfcfs", "fcfs")
ROW_POLICIES = ("open", "closed", "open_cap", "timeout")
REFRESH = ("none", "all_bank", "per_bank")


@cache
def _config(preset: str, scheduler: str, policy: str, refresh: str, queue_depth: int, knob: int) -> MemoryConfig:
    policy_tree: dict[str, object] = {"impl": policy}
    if policy == "open_cap":
        policy_tree["cap"] = knob
    elif policy == "timeout":
        policy_tree["timeout_cycles"] = knob * 16
    extra = {"controller": {"row_policy": policy_tree, "read_queue_depth": queue_depth,
                            "write_queue_depth": queue_depth}}
    return memory_config_from_preset(preset, [f"memory.controller.scheduler={scheduler}",
                                              f"memory.controller.refresh={refresh}"], extra)


@cache
def _one_address_per_pseudo_channel(preset: str) -> np.ndarray:
    """A line in every pseudo-channel, so every controller is active (see test_idle_pseudo_channel...)."""
    cfg = _config(preset, "frfcfs", "open", "none", 32, 4)
    lines = np.arange(0, 1 << 22, cfg.organization.access_bytes, dtype=np.uint64)
    flat = cfg.mapping.decode(lines).flat_pseudo_channel(cfg.organization)
    _, first = np.unique(flat, return_index=True)
    assert first.size == cfg.organization.n_pseudo_channels
    return lines[first]


@st.composite
def traces(draw: st.DrawFn) -> dict[str, object]:
    """Segments of sequential / random / strided / row-conflict / hot-line traffic with bursty arrivals."""
    segment = st.tuples(st.sampled_from(["sequential", "random", "strided", "conflict", "hot"]),
                        st.integers(20, 500), st.sampled_from([0.0, 0.3, 0.7, 1.0]),
                        st.sampled_from([0, 0, 1, 3, 20]), st.sampled_from([0, 0, 500, 40_000, 150_000]))
    return {"seed": draw(st.integers(0, 2**32 - 1)), "segments": draw(st.lists(segment, min_size=1, max_size=5)),
            "queue_depth": draw(st.sampled_from([4, 8, 32])), "knob": draw(st.sampled_from([1, 2, 4, 16]))}


def _build_trace(spec: dict[str, object], cfg: MemoryConfig,
                 preset: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    org = cfg.organization
    rng = np.random.default_rng(spec["seed"])
    line = org.access_bytes
    n_lines = org.capacity_bytes // line
    row_stride = org.capacity_bytes // org.rows  # the row is the top address field in every preset mapping
    prologue = _one_address_per_pseudo_channel(preset)
    stamps, addrs, writes = [np.zeros(prologue.size, np.int64)], [prologue], [np.zeros(prologue.size, bool)]
    now = 0
    for kind, n, write_share, spacing, idle in spec["segments"]:
        now += idle
        if kind == "sequential":
            a = int(rng.integers(0, n_lines - n)) * line + np.arange(n) * line
        elif kind == "random":
            a = rng.integers(0, n_lines, n) * line
        elif kind == "strided":
            stride = int(rng.choice([2, 3, 16, 64, 1024])) * line
            a = (int(rng.integers(0, n_lines)) * line + np.arange(n) * stride) % org.capacity_bytes
        elif kind == "conflict":  # few banks, many rows: misses and conflicts
            a = rng.integers(0, org.rows, n) * row_stride + rng.integers(0, 4, n) * line
        else:  # a handful of lines, read and written again: write-queue forwarding
            a = rng.choice(rng.integers(0, n_lines, 4), n) * line
        gaps = rng.poisson(spacing, n) if spacing else np.zeros(n, np.int64)
        stamps.append(now + np.cumsum(gaps))
        now = int(stamps[-1][-1])
        addrs.append(np.asarray(a, np.uint64))
        writes.append(rng.random(n) < write_share)
    return np.concatenate(stamps), np.concatenate(addrs), np.concatenate(writes)


@pytest.mark.parametrize("refresh", REFRESH)
@pytest.mark.parametrize("policy", ROW_POLICIES)
@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("preset", PRESETS)
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=traces())
def test_simulator_log_has_no_violations(preset: str, scheduler: str, policy: str, refresh: str,
                                         spec: dict[str, object]) -> None:
    cfg = _config(preset, scheduler, policy, refresh, spec["queue_depth"], spec["knob"])
    stamps, addrs, writes = _build_trace(spec, cfg, preset)
    result = replay(cfg, Requests.build(stamps, addrs, writes), command_log=True)
    checked = check_command_log(result.command_log, cfg.organization, cfg.timing, refresh_mode=refresh)
    note(f"{len(stamps)} requests, {checked.checked_commands} commands")
    assert checked.checked_commands > 0
    assert checked.ok, checked.summary()
