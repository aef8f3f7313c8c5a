"""A scheduler from outside the package (tests/bank_order_scheduler.py), registered by name and run end to end:
configs accept its name, it gets a kernel variant of its own, every request completes, and its command log obeys
every JEDEC rule."""

import numpy as np
import pytest

from archsim.config.memory import SCHEDULERS
from archsim.controller.kernel import KernelVariant
from archsim.controller.schedulers import register_scheduler
from archsim.dram.checker import check_command_log
from archsim.memory import kernel_params, kernel_variant, replay
from tests import bank_order_scheduler
from tests.conftest import config
from tests.test_event_driven import _mixed_stream

pytestmark = pytest.mark.component


def test_a_registered_name_is_a_config_choice_with_its_own_variant():
    code = register_scheduler("bank_order", bank_order_scheduler.choose)
    assert register_scheduler("bank_order", bank_order_scheduler.choose) == code  # idempotent
    assert "bank_order" in SCHEDULERS.names()
    cfg = config("HBM2", "memory.controller.scheduler=bank_order")
    assert kernel_variant(kernel_params(cfg, 0)) == KernelVariant(scheduler=code)
    with pytest.raises(ValueError, match="built-in"):
        register_scheduler("fcfs", bank_order_scheduler.choose)
    with pytest.raises(ValueError, match="registered already"):
        register_scheduler("bank_order", lambda *args: 0)


@pytest.mark.slow  # compiles a kernel variant of its own (about a minute cold)
def test_a_scheduler_defined_outside_the_package_runs_end_to_end():
    register_scheduler("bank_order", bank_order_scheduler.choose)
    cfg = config("HBM2", "memory.controller.scheduler=bank_order", "memory.controller.refresh=all_bank")
    requests = _mixed_stream(cfg)
    ours = replay(cfg, requests, command_log=True)
    assert (ours.done_cycle >= 0).all()
    checked = check_command_log(ours.command_log, cfg.organization, cfg.timing, refresh_mode="all_bank")
    assert checked.violations == []
    # it is not FCFS under another name: serving the lowest bank first reorders the commands
    fcfs = replay(config("HBM2", "memory.controller.scheduler=fcfs", "memory.controller.refresh=all_bank"),
                  requests, command_log=True)
    assert not np.array_equal(ours.done_cycle, fcfs.done_cycle)
    # and the event-driven wake-ups skip nothing for it either
    slow = replay(cfg, requests, command_log=True, tick_every_cycle=True)
    assert np.array_equal(ours.done_cycle, slow.done_cycle)
