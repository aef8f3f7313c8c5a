"""Scheduler orders: FR-FCFS serves the oldest ready request, round-robin gives the banks turns."""

import numpy as np
import pytest

from archsim.dram.address_map import Decoded
from archsim.dram.commands import COMMAND_CODES
from tests.conftest import config, run

pytestmark = pytest.mark.component


def _address(cfg, *, bank: int, column: int) -> int:
    d = Decoded(*(np.array([v], dtype=np.int64) for v in (0, 0, 0, 0, bank, 5, column)))
    return int(cfg.mapping.encode(d)[0])


def _read_banks(scheduler: str) -> list[int]:
    """Four row hits to bank 0, then four to bank 1, all queued at cycle 0: the banks of the RDs in order."""
    cfg = config("HBM2", "memory.controller.refresh=none", f"memory.controller.scheduler={scheduler}")
    address = [_address(cfg, bank=b, column=c) for b in (0, 1) for c in range(4)]
    log = run(cfg, [0] * 8, address, command_log=True).command_log
    return log.bank[log.command == COMMAND_CODES["RD"]].tolist()


def test_frfcfs_serves_the_oldest_ready_hits_first():
    assert _read_banks("frfcfs") == [0, 0, 0, 0, 1, 1, 1, 1]


def test_round_robin_alternates_banks_once_both_are_ready():
    banks = _read_banks("round_robin")
    assert sorted(banks) == [0, 0, 0, 0, 1, 1, 1, 1]
    # bank 1 opens tRRD after bank 0, so bank 0 may go first a few times; from then on they take turns
    first_one = banks.index(1)
    assert banks[first_one:first_one + 4] in ([1, 0, 1, 0], [1, 0, 1, 1])
    assert banks != _read_banks("frfcfs")
