"""The independent protocol checker: every rule caught at exactly one cycle short, and simulator logs clean.

Part 1 builds tiny logs by hand against a made-up timing whose numbers are all distinct, so each
scenario binds on exactly one rule: at the minimum gap the log passes, one cycle less it fails with that
rule. Part 2 replays hypothesis-generated traces through the simulator for every preset x scheduler x
row policy x refresh mode and requires zero violations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
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

pytestmark = pytest.mark.component

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


@dataclasses.dataclass(frozen=True)
class Scenario:
    rule: str
    minimum_cycles: int
    build: Callable[[int], list[Cmd]]  # the log, given the gap under test
    timing: Timing = T
    also: frozenset[str] = frozenset()  # other rules that necessarily fire one cycle early too


def pair(first: Cmd, second: tuple[str, int, int, int],
         opening: Sequence[Cmd] = ()) -> Callable[[int], list[Cmd]]:
    """`opening` commands, then `first`, then `second` (command, pc, bank, row) `gap` cycles later."""
    return lambda g: [*opening, first, (first[0] + g, *second)]


OPEN_B0 = [(0, "ACT", 0, 0, 1)]  # the later commands to bank 0 come at 20-30: tRAS and tRC never bind
FOUR_ACTS = [(3 * i, "ACT", 0, b(0, i, 0), 1) for i in range(4)]
SCENARIOS: dict[str, Scenario] = {
    "ACT-PRE-ACT": Scenario("tRC", T.tRC, lambda g: [*OPEN_B0, (20, "PRE", 0, 0, 1), (g, "ACT", 0, 0, 2)]),
    "ACT-RD": Scenario("tRCDRD", T.tRCDRD, pair(OPEN_B0[0], ("RD", 0, 0, 1))),
    "ACT-RDA": Scenario("tRCDRD", T.tRCDRD, pair(OPEN_B0[0], ("RDA", 0, 0, 1))),
    "ACT-WR": Scenario("tRCDWR", T.tRCDWR, pair(OPEN_B0[0], ("WR", 0, 0, 1))),
    "ACT-WRA": Scenario("tRCDWR", T.tRCDWR, pair(OPEN_B0[0], ("WRA", 0, 0, 1))),
    "ACT-PRE": Scenario("tRAS", T.tRAS, pair((0, "ACT", 0, 3, 1), ("PRE", 0, 3, 1))),
    "ACT-PREA": Scenario("tRAS", T.tRAS, pair((0, "ACT", 0, b(1, 2, 1), 1), ("PREA", 0, b(1, 0, 0), -1))),
    "PRE-ACT": Scenario("tRP", T.tRP, pair((30, "PRE", 0, 0, 1), ("ACT", 0, 0, 2), OPEN_B0)),
    "PREA-ACT": Scenario("tRP", T.tRP, pair((30, "PREA", 0, 0, -1), ("ACT", 0, 0, 2), OPEN_B0)),
    "PREA-ACT idle bank": Scenario("tRP", T.tRP, pair((30, "PREA", 0, 0, -1), ("ACT", 0, 1, 2), OPEN_B0)),
    "PRE-REFpb": Scenario("tRP", T.tRP, pair((30, "PRE", 0, 0, 1), ("REFpb", 0, 0, -1), OPEN_B0)),
    "PRE-REF": Scenario("tRP", T.tRP, pair((30, "PRE", 0, 5, 1), ("REF", 0, 0, -1), [(0, "ACT", 0, 5, 1)])),
    "RD-PRE": Scenario("tRTP", T.tRTP, pair((20, "RD", 0, 0, 1), ("PRE", 0, 0, 1), OPEN_B0)),
    "RD-PREA": Scenario("tRTP", T.tRTP, pair((20, "RD", 0, 0, 1), ("PREA", 0, 0, -1), OPEN_B0)),
    "WR-PRE": Scenario("tWR", WRITE_RECOVERY, pair((20, "WR", 0, 0, 1), ("PRE", 0, 0, 1), OPEN_B0)),
    "WR-PREA": Scenario("tWR", WRITE_RECOVERY, pair((20, "WR", 0, 0, 1), ("PREA", 0, 0, -1), OPEN_B0)),
    "RDA-ACT": Scenario("tRTP+tRP", T.tRTP + T.tRP, pair((30, "RDA", 0, 0, 1), ("ACT", 0, 0, 2), OPEN_B0)),
    "RDA-REFpb": Scenario("tRTP+tRP", T.tRTP + T.tRP, pair((30, "RDA", 0, 0, 1), ("REFpb", 0, 0, -1), OPEN_B0)),
    "WRA-ACT": Scenario("tWR+tRP", WRITE_RECOVERY + T.tRP, pair((30, "WRA", 0, 0, 1), ("ACT", 0, 0, 2), OPEN_B0)),
    "WRA-REF": Scenario("tWR+tRP", WRITE_RECOVERY + T.tRP, pair((30, "WRA", 0, 0, 1), ("REF", 0, 0, -1), OPEN_B0)),
    "REFpb-ACT same bank": Scenario("tRFCpb", T.tRFCpb, pair((0, "REFpb", 0, 4, -1), ("ACT", 0, 4, 1))),
    "REFpb-REFpb same bank": Scenario("tRFCpb", T.tRFCpb, pair((0, "REFpb", 0, 4, -1), ("REFpb", 0, 4, -1))),
    "ACT-ACT same bank group": Scenario("tRRD_L", T.tRRD_L, pair((0, "ACT", 0, b(0, 1, 0), 1),
                                                                 ("ACT", 0, b(0, 1, 1), 1))),
    "RD-RD same bank group": Scenario("tCCD_L(RD)", T.tCCD_L, lambda g: two_banks(b(0, 0, 0), b(0, 0, 1), "RD", g)),
    "WR-WR same bank group": Scenario("tCCD_L(WR)", T.tCCD_L, lambda g: two_banks(b(0, 0, 0), b(0, 0, 1), "WR", g)),
    "RD-RD same bank group, long burst": Scenario(
        "tCCD_L(RD)", T_WIDE_BURST.tBURST, lambda g: two_banks(b(0, 0, 0), b(0, 0, 1), "RDA", g), T_WIDE_BURST,
        frozenset({"tCCD_S(RD)", "tBURST(RD)", "data_bus"})),
    "WR-RD same bank group": Scenario("tWTR_L", T.CWL + T.tBURST + T.tWTR_L,
                                      lambda g: two_banks(b(0, 0, 0), b(0, 0, 1), "WR", g, "RD")),
    "ACT-ACT same rank": Scenario("tRRD_S", T.tRRD_S, pair((0, "ACT", 0, b(1, 0, 0), 1), ("ACT", 0, b(1, 3, 0), 1))),
    "RD-RD same rank": Scenario("tCCD_S(RD)", T.tCCD_S, lambda g: two_banks(b(0, 0, 0), b(0, 1, 0), "RD", g)),
    "WR-WR same rank": Scenario("tCCD_S(WR)", T.tCCD_S, lambda g: two_banks(b(0, 0, 0), b(0, 1, 0), "WRA", g)),
    "WR-RD same rank": Scenario("tWTR_S", T.CWL + T.tBURST + T.tWTR_S,
                                lambda g: two_banks(b(0, 0, 0), b(0, 1, 0), "WRA", g, "RDA")),
    "five ACTs": Scenario("tFAW", T.tFAW, lambda g: [*FOUR_ACTS, (g, "ACT", 0, b(0, 0, 1), 1)]),
    "REF-ACT": Scenario("tRFC", T.tRFC, pair((0, "REF", 0, b(1, 0, 0), -1), ("ACT", 0, b(1, 2, 1), 1))),
    "REF-REF": Scenario("tRFC", T.tRFC, pair((0, "REF", 0, 0, -1), ("REF", 0, 0, -1))),
    "REF-REFpb": Scenario("tRFC", T.tRFC, pair((0, "REF", 0, 0, -1), ("REFpb", 0, 7, -1))),
    "REFpb-REFpb": Scenario("tRREFD", T.tRREFD, pair((0, "REFpb", 0, 0, -1), ("REFpb", 0, 6, -1))),
    "REFpb-ACT other bank": Scenario("tRREFD", T.tRREFD, pair((0, "REFpb", 0, 0, -1), ("ACT", 0, 6, 1))),
    "RD-RD other rank": Scenario("tBURST(RD)", T.tBURST, lambda g: two_banks(b(0, 0, 0), b(1, 0, 0), "RD", g),
                                 T_NO_TRTRS, frozenset({"data_bus"})),
    "WR-WR other rank": Scenario("tBURST(WR)", T.tBURST, lambda g: two_banks(b(0, 0, 0), b(1, 0, 0), "WR", g),
                                 T_NO_TRTRS, frozenset({"data_bus"})),
    "RD-WR same rank": Scenario("tRTW", T.tRTW, lambda g: two_banks(b(0, 0, 0), b(0, 1, 0), "RD", g, "WR")),
    "RD-WR other rank": Scenario("tRTW", T.tRTW, lambda g: two_banks(b(0, 0, 0), b(1, 1, 0), "RD", g, "WR"),
                                 also=frozenset({"data_bus"})),
    "RD-RD other rank, tRTRS": Scenario("data_bus", T.tBURST + T.tRTRS,
                                        lambda g: two_banks(b(0, 0, 0), b(1, 0, 0), "RD", g)),
    "WR-WR other rank, tRTRS": Scenario("data_bus", T.tBURST + T.tRTRS,
                                        lambda g: two_banks(b(0, 0, 0), b(1, 0, 0), "WR", g)),
    "row commands, one channel": Scenario("row_bus", 1, pair((5, "ACT", 0, 0, 1), ("ACT", 1, 0, 1))),
    "column commands, one channel": Scenario(
        "column_bus", 1, pair((30, "RD", 0, 0, 1), ("WR", 1, 0, 1), [(0, "ACT", 0, 0, 1), (1, "ACT", 1, 0, 1)])),
    "log order": Scenario("cycle_order", 0, pair((10, "ACT", 0, 0, 1), ("ACT", 2, 0, 1))),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_rule_blocks_one_cycle_early_and_allows_at_minimum(name: str) -> None:
    case = SCENARIOS[name]
    at_minimum = check(case.build(case.minimum_cycles), case.timing)
    assert at_minimum.ok, at_minimum.summary()
    early = check(case.build(case.minimum_cycles - 1), case.timing)
    assert case.rule in early.violation_counts, early.summary()
    assert set(early.violation_counts) <= {case.rule} | case.also, early.summary()
    record = next(v for v in early.violations if v.rule == case.rule)
    n_commands = len(case.build(case.minimum_cycles))
    assert record.second_index == n_commands - 1 and 0 <= record.first_index < record.second_index
    if case.rule != "data_bus":  # the data bus measures between data-burst starts, not commands
        assert (record.required_gap_cycles, record.actual_gap_cycles) == (case.minimum_cycles,
                                                                          case.minimum_cycles - 1)


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
    "REF with a bank open": ("state:REF_with_open_bank",
                             [(0, "ACT", 0, b(0, 3, 1), 1), (100, "REF", 0, 0, -1)],
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


def test_prea_on_closed_banks_only_starts_trp() -> None:
    """PREA right after a PRE is legal (tRAS / tRTP do not apply to idle banks); ACTs then wait tRP."""
    cmds = [(0, "ACT", 0, 0, 1), (20, "RD", 0, 0, 1), (24, "PRE", 0, 0, 1), (25, "PREA", 0, 0, -1)]
    assert check([*cmds, (35, "ACT", 0, 0, 2)]).ok
    assert check([*cmds, (25 + T.tRP - 1, "ACT", 0, 3, 2)]).violation_counts == {"tRP": 1}


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
SCHEDULERS = ("frfcfs", "fcfs", "round_robin")
ROW_POLICIES = ("open", "closed", "open_cap", "timeout")
REFRESH = ("none", "all_bank", "per_bank")


@cache
def _config(preset: str, scheduler: str, policy: str, refresh: str,
            knobs: tuple[int, int, bool, bool, int] = (32, 4, False, True, 0)) -> MemoryConfig:
    """A preset with the modes under test; `knobs`: queue depth, row-policy cap (timeout in 16-cycle
    units), staggered refresh, posted writes, front-end injections per cycle (0 = unlimited)."""
    depth, scale, stagger, posted, injections = knobs
    policy_tree: dict[str, object] = {"impl": policy}
    if policy == "open_cap":
        policy_tree["cap"] = scale
    elif policy == "timeout":
        policy_tree["timeout_cycles"] = scale * 16
    controller = {"scheduler": scheduler, "row_policy": policy_tree, "read_queue_depth": depth,
                  "write_queue_depth": depth, "refresh": {"impl": refresh, "stagger": stagger}}
    return memory_config_from_preset(preset, extra={"controller": controller, "frontend": {
        "posted_writes": posted, "max_injections_per_cycle": injections}})


@cache
def _one_address_per_pseudo_channel(preset: str) -> np.ndarray:
    """A line in every pseudo-channel, so every controller is active (see test_idle_pseudo_channel...)."""
    cfg = _config(preset, "frfcfs", "open", "none")
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
    return {"seed": draw(st.integers(0, 2**32 - 1)),
            "segments": draw(st.lists(segment, min_size=1, max_size=5)),
            "knobs": (draw(st.sampled_from([1, 4, 32])), draw(st.sampled_from([1, 2, 4, 16])), draw(st.booleans()),
                      draw(st.booleans()), draw(st.sampled_from([0, 0, 1, 4])))}


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
@pytest.mark.slow  # every preset x scheduler x row policy x refresh mode, 8 generated traces each: 864 replays
@settings(max_examples=8, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=traces())
def test_simulator_log_has_no_violations(preset: str, scheduler: str, policy: str, refresh: str,
                                         spec: dict[str, object]) -> None:
    cfg = _config(preset, scheduler, policy, refresh, spec["knobs"])
    stamps, addrs, writes = _build_trace(spec, cfg, preset)
    result = replay(cfg, Requests.build(stamps, addrs, writes), command_log=True)
    checked = check_command_log(result.command_log, cfg.organization, cfg.timing, refresh_mode=refresh)
    note(f"{len(stamps)} requests, {checked.checked_commands} commands")
    assert checked.checked_commands > 0
    assert checked.ok, checked.summary()


@pytest.mark.parametrize("refresh", ["all_bank", "per_bank"])
def test_idle_pseudo_channel_is_still_refreshed(refresh: str) -> None:
    """JEDEC refresh is owed by every rank, busy or not: traffic to pseudo-channel 0 only, over 20 tREFI."""
    cfg = _config("HBM2", "frfcfs", "open", refresh)
    t_refi = cfg.timing.tREFI
    stamps = np.arange(0, 20 * t_refi, t_refi // 2, dtype=np.int64)
    addrs = np.full(stamps.size, _one_address_per_pseudo_channel("HBM2")[0])
    result = replay(cfg, Requests.build(stamps, addrs, np.zeros(stamps.size, bool)), command_log=True)
    checked = check_command_log(result.command_log, cfg.organization, cfg.timing, refresh_mode=refresh)
    assert checked.ok, checked.summary()
