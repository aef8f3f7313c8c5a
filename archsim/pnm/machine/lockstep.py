"""Several units running one program each, in lockstep between barriers.

Every unit runs to its next BARRIER (or HALT); when all have stopped they must agree on where (the
same barrier id, or all halted) and then resume together. This is how split units meet before the
merge; the partitioned functional run and the timed workload both use it.
"""

from __future__ import annotations

from collections.abc import Sequence

from archsim.errors import ProgramError
from archsim.pnm.machine.functional import Executor


def run_lockstep(executors: Sequence[Executor], unit_ids: Sequence[int], kernel_file: str) -> None:
    """Run every executor to HALT through its barriers; `unit_ids` name the units in an error."""
    running = list(range(len(executors)))
    while running:
        states = {i: (executors[i].run(), executors[i].barrier_id) for i in running}
        if len(set(states.values())) > 1:
            seen = ", ".join(f"unit {unit_ids[i]}: {state}" + (f" {barrier}" if state == "barrier" else "")
                             for i, (state, barrier) in states.items())
            raise ProgramError(f"units disagree at a barrier ({seen})", file=kernel_file)
        running = [i for i, (state, _) in states.items() if state == "barrier"]
