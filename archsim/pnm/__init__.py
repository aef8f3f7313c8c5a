"""PNM compute unit, in three layers that import only downward:

* `machine/` -- the functional executor of isa/ programs, its state, opcode semantics, access traces and
  the lockstep loop over units;
* `problem/` -- decode attention as the host sets it up: the reference, the DRAM placement a kernel
  reads, the partition over units;
* `timed/` -- the device configuration, the workload its units replay, the memory port and the cycle
  model with its roofline, statistics and timeline.

This package re-exports the functional API below; `cli.py` is the `archsim pnm` command group.
"""

from archsim.pnm.machine.functional import (
    DatapathConfig,
    Executor,
    UnitConfig,
    check_program,
    run_program,
    trace_program,
)
from archsim.pnm.machine.memimage import DramImage, Scratchpad
from archsim.pnm.machine.trace import DramAccess, ProgramTrace
from archsim.pnm.problem.partition import PartitionedRun, UnitAssignment, partition_kv_heads, run_decode_attention
from archsim.pnm.problem.placement import Placement, kernel_for, place_decode_attention, random_inputs
from archsim.pnm.problem.reference import DecodeAttentionSpec, decode_attention

__all__ = [
    "DatapathConfig", "DecodeAttentionSpec", "DramAccess", "DramImage", "Executor", "PartitionedRun",
    "Placement", "ProgramTrace", "Scratchpad", "UnitAssignment", "UnitConfig", "check_program",
    "decode_attention", "kernel_for", "partition_kv_heads", "place_decode_attention", "random_inputs",
    "run_decode_attention", "run_program", "trace_program",
]
