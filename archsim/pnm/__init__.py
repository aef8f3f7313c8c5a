"""PNM compute unit: the functional executor of isa/ programs, its access traces, and the
host-side helpers that place attention problems in DRAM and partition them across units.
(The unit's timing model is a separate part built on `ProgramTrace`.)
"""

from archsim.pnm.functional import (
    DatapathConfig,
    Executor,
    UnitConfig,
    check_program,
    run_program,
    trace_program,
)
from archsim.pnm.memimage import DramImage, Scratchpad
from archsim.pnm.partition import PartitionedRun, UnitAssignment, partition_kv_heads, run_decode_attention
from archsim.pnm.placement import Placement, kernel_for, place_decode_attention, random_inputs
from archsim.pnm.reference import DecodeAttentionSpec, decode_attention
from archsim.pnm.trace import DramAccess, ProgramTrace

__all__ = [
    "DatapathConfig", "DecodeAttentionSpec", "DramAccess", "DramImage", "Executor", "PartitionedRun",
    "Placement", "ProgramTrace", "Scratchpad", "UnitAssignment", "UnitConfig", "check_program",
    "decode_attention", "kernel_for", "partition_kv_heads", "place_decode_attention", "random_inputs",
    "run_decode_attention", "run_program", "trace_program",
]
