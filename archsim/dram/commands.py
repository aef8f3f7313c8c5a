"""DRAM command codes shared by the controller kernel, the command log and the protocol checker.

The codes are plain integers so that numba kernels and numpy command logs can carry them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ACT = 0
PRE = 1
PREA = 2
RD = 3
WR = 4
RDA = 5
WRA = 6
REF = 7
REFPB = 8
N_COMMANDS = 9

COMMAND_NAMES: tuple[str, ...] = ("ACT", "PRE", "PREA", "RD", "WR", "RDA", "WRA", "REF", "REFpb")
COMMAND_CODES: dict[str, int] = {name: code for code, name in enumerate(COMMAND_NAMES)}

READS = (RD, RDA)
WRITES = (WR, WRA)
COLUMN_COMMANDS = (RD, WR, RDA, WRA)
ROW_COMMANDS = (ACT, PRE, PREA, REF, REFPB)


@dataclass(frozen=True)
class CommandLog:
    """Every command issued, in issue order: cycle, code (archsim.dram.commands), pseudo-channel, bank, row."""

    cycle: np.ndarray
    command: np.ndarray
    pseudo_channel: np.ndarray
    bank: np.ndarray  # bank index within the pseudo-channel: (rank * bankgroups + bankgroup) * banks + bank
    row: np.ndarray  # -1 for commands without a row (PREA, REF)
