"""The protocol checker fed a command log in stretches finds what it finds in the whole log: the same counts per
rule, the same warnings and the same records, however the log is cut."""

from __future__ import annotations

import numpy as np
import pytest

from archsim.dram.checker import check_command_log
from archsim.dram.checker_stream import StreamingChecker
from archsim.dram.commands import REF, REFPB, CommandLog
from scripts.make_golden import cases, memory_config, replay_case

pytestmark = pytest.mark.component

CASES = {case.name: case for case in cases()}


def _stretches(log: CommandLog, cuts: np.ndarray):
    edges = np.concatenate([[0], cuts, [len(log.cycle)]])
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        yield CommandLog(*(array[a:b] for array in (log.cycle, log.command, log.pseudo_channel, log.bank, log.row)))


def assert_streamed_check_equals_whole(cfg, log: CommandLog, cuts: np.ndarray, max_violations: int = 100):
    mode = cfg.controller.refresh.impl
    whole = check_command_log(log, cfg.organization, cfg.timing, refresh_mode=mode, max_violations=max_violations)
    checker = StreamingChecker(cfg.organization, cfg.timing, mode, max_violations=max_violations)
    for stretch in _stretches(log, cuts):
        checker.add(stretch)
    streamed = checker.result()
    assert streamed.violation_counts == whole.violation_counts
    assert streamed.warning_counts == whole.warning_counts
    assert streamed.checked_commands == whole.checked_commands
    assert streamed.rules_checked == whole.rules_checked
    assert len(streamed.violations) == len(whole.violations)
    if sum(whole.violation_counts.values()) <= max_violations:  # beyond, the whole check lists its own choice
        assert streamed.violations == whole.violations
        assert streamed.warnings == whole.warnings
    return whole


def _broken(cfg, log: CommandLog, rng) -> CommandLog:
    """The log with 2 % of its commands left out and 1 % sent to another bank: every kind of rule breaks."""
    n = len(log.cycle)
    keep = rng.random(n) > 0.02
    bank = log.bank.copy()
    moved = rng.random(n) < 0.01
    bank[moved] = rng.integers(0, cfg.organization.banks_per_pseudo_channel, int(moved.sum()))
    return CommandLog(log.cycle[keep], log.command[keep], log.pseudo_channel[keep], bank[keep], log.row[keep])


@pytest.mark.parametrize("name", ["HBM2-default-mixed", "HBM3-per_bank-mixed", "HBM3E-rr_bankq_drain_hold-mixed",
                                  "dramsim3-sequential", "HBM3-wide-random", "HBM3-default-sparse"])
def test_a_broken_log_checked_in_stretches_gives_the_whole_logs_violations(name):
    case = CASES[name]
    cfg = memory_config(case)
    log = replay_case(case).command_log
    rng = np.random.default_rng(7)
    broken = _broken(cfg, log, rng)
    n = len(broken.cycle)
    for stretches in (1, 40, 400):
        cuts = np.sort(rng.choice(np.arange(1, n), size=stretches - 1, replace=False))
        whole = assert_streamed_check_equals_whole(cfg, broken, cuts)
        assert sum(whole.violation_counts.values()) > 20  # the test sees violations of many kinds
    assert_streamed_check_equals_whole(cfg, log, np.arange(1, len(log.cycle), 37))  # a clean log stays clean
    assert_streamed_check_equals_whole(cfg, broken, np.arange(1, n, 97), max_violations=5)


def test_refreshes_that_stop_coming_are_late_and_missing_across_stretches():
    case = CASES["HBM3-per_bank-sparse"]
    cfg = memory_config(case)
    log = replay_case(case).command_log
    refresh = np.isin(log.command, (REF, REFPB))
    stop = int(np.flatnonzero(refresh)[len(np.flatnonzero(refresh)) // 3])
    keep = ~refresh | (np.arange(len(log.cycle)) < stop)
    starved = CommandLog(*(array[keep] for array in (log.cycle, log.command, log.pseudo_channel, log.bank, log.row)))
    whole = assert_streamed_check_equals_whole(cfg, starved, np.arange(1, len(starved.cycle), 53),
                                               max_violations=10_000)
    assert whole.violation_counts.get("tREFI", 0) > 0
    assert any(v.second_index == -1 for v in whole.violations)  # a refresh that never came
