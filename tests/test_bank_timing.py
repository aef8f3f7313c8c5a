"""The generated timing update (archsim.controller.bank_timing.apply_command) against the dense rule table."""

from __future__ import annotations

import re

import numpy as np
import pytest

from archsim.config.memory import memory_config_from_preset
from archsim.controller import bank_timing
from archsim.controller.codes import ACT, FAW_ACTS, NCMD
from archsim.dram.commands import COMMAND_NAMES
from archsim.dram.timing_table import N_LEVELS, RULES, compile_timing_table
from tests.conftest import tiered

pytestmark = pytest.mark.unit

PRESETS = ["HBM2", "HBM3", "HBM3E"]


def _dense_update(gap, cmd, t, rows, rf, ranks, pc):
    """Every cell of every scope raised to t + gap wherever the table has a rule: the plain reading of the table."""
    nxt_bank, nxt_bg, nxt_rank, nxt_pc = (row.copy() for row in rows)
    gb, bgf = 1, 2
    for level, table, row in ((0, nxt_bank, gb), (1, nxt_bg, bgf), (2, nxt_rank, rf), (3, nxt_pc, pc)):
        for nxt in range(NCMD):
            if gap[level, cmd, nxt] >= 0:
                table[row, nxt] = max(table[row, nxt], t + gap[level, cmd, nxt])
    for r in range(pc * ranks, pc * ranks + ranks):
        for nxt in range(NCMD):
            if r != rf and gap[4, cmd, nxt] >= 0:
                nxt_rank[r, nxt] = max(nxt_rank[r, nxt], t + gap[4, cmd, nxt])
    return nxt_bank, nxt_bg, nxt_rank, nxt_pc


@pytest.mark.parametrize("preset", tiered(PRESETS, 1))
@pytest.mark.parametrize("cmd", range(NCMD), ids=COMMAND_NAMES)
def test_the_generated_update_raises_exactly_the_cells_with_a_rule(preset, cmd):
    gap = compile_timing_table(memory_config_from_preset(preset).timing)
    rng = np.random.default_rng(cmd)
    ranks, pc, rf, t = 2, 1, 3, 500
    # earliest-issue rows around t, so that some cells rise and some already lie beyond t + gap
    rows = [rng.integers(t - 50, t + 60, (count, NCMD)).astype(np.int64) for count in (4, 6, 4, 2)]
    expected = _dense_update(gap, cmd, t, rows, rf, ranks, pc)
    flat = [row.copy().reshape(-1) for row in rows]
    bank_timing.apply_command(cmd, t, 1, 2, rf, pc, ranks, gap.reshape(-1), *flat)
    for got, want, shape in zip(flat, expected, (row.shape for row in rows), strict=True):
        assert np.array_equal(got.reshape(shape), want)
    assert any(not np.array_equal(got.reshape(row.shape), row) for got, row in zip(flat, rows, strict=True))


def _raised_cells(source: str) -> set[tuple[int, str, str]]:
    """(level, command, next command) of every cell the generated source raises: a line per cell, or a loop over
    a tuple of next commands with one line for them all."""
    raised, loop = set(), None
    for line in source.splitlines():
        head = re.match(r"\s*for nxt in \(([A-Z, ]+)\):", line)
        if head:
            loop = [name.strip() for name in head.group(1).split(",")]
            continue
        cell = re.search(r"= max\(.*t \+ gaps\[(\d), ([A-Z]+), (\w+)\]\)", line)
        if cell:  # a loop's body is the line after its head
            level, cmd, nxt = int(cell.group(1)), cell.group(2), cell.group(3)
            raised |= {(level, cmd, n) for n in (loop if nxt == "nxt" else [nxt])}
            loop = None
    return raised


def test_the_generated_source_raises_exactly_the_cells_with_a_rule():
    raised = _raised_cells(bank_timing.apply_command_source())
    ruled = set()
    for level, prevs, nexts, _formula, _label in RULES:
        assert level < N_LEVELS
        ruled |= {(level, COMMAND_NAMES[p].upper(), COMMAND_NAMES[n].upper()) for p in prevs for n in nexts}
    assert raised == ruled


@pytest.mark.parametrize("preset", PRESETS)
def test_the_generated_earliest_equals_the_max_over_every_scope(preset):
    """After any sequence of updates, reading only the scopes where a rule holds a command back gives the max over
    all four scopes: the update never raises another cell."""
    gap = compile_timing_table(memory_config_from_preset(preset).timing).reshape(-1)
    rng = np.random.default_rng(7)
    ranks, tfaw = 2, 20
    tables = [np.zeros(count * NCMD, dtype=np.int64) for count in (8, 4, 4, 2)]  # bank, group, rank, pc rows
    faw = rng.integers(0, 40, 4 * FAW_ACTS).astype(np.int64)  # per rank, the cycles of its last ACTs
    faw_pos = rng.integers(0, FAW_ACTS, 4).astype(np.int64)
    for t in range(0, 400, 3):
        gb, bgf, pc = int(rng.integers(0, 8)), int(rng.integers(0, 4)), int(rng.integers(0, 2))
        rf = pc * ranks + int(rng.integers(0, ranks))
        bank_timing.apply_command(int(rng.integers(0, NCMD)), t, gb, bgf, rf, pc, ranks, gap, *tables)
        for cmd in range(NCMD):
            dense = max(table.reshape(-1, NCMD)[row, cmd] for table, row in zip(tables, (gb, bgf, rf, pc), strict=True))
            if cmd == ACT:
                dense = max(dense, faw[rf * FAW_ACTS + faw_pos[rf]] + tfaw)
            assert bank_timing.earliest(cmd, gb, bgf, rf, pc, *tables, faw, faw_pos, tfaw) == dense, (t, cmd)
