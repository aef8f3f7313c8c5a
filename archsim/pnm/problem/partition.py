"""Partition decode attention across N PNM units and run them functionally.

Units are arranged as head groups x context splits: each head group owns a contiguous range of
KV heads (head-wise sharding), and with splits > 1 each head group's context is split across
`splits` units (flash-decoding). Split units store partial (m, l, acc) records to DRAM, meet at
a barrier, and split 0 of each head group merges them and answers the host. All units share
one DRAM image (the pool); each has its own SRAM and host port.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from archsim.isa.assembler import assemble_file
from archsim.isa.program import Program
from archsim.pnm.machine.functional import Executor, UnitConfig
from archsim.pnm.machine.lockstep import run_lockstep
from archsim.pnm.machine.trace import ProgramTrace
from archsim.pnm.problem.placement import Placement


@dataclass(frozen=True)
class UnitAssignment:
    unit: int
    head0: int  # first KV head
    nheads: int  # KV heads of this unit
    split: int  # context split index (0 merges and answers the host)
    splits: int


@dataclass
class PartitionedRun:
    output: np.ndarray  # [batch, (query_tokens,) query_heads, v_dim] fp32 as received by the host
    assignments: list[UnitAssignment]
    programs: list[Program]
    traces: list[ProgramTrace]


def partition_kv_heads(kv_heads: int, units: int, splits: int = 1) -> list[UnitAssignment]:
    """Assign `units` = head_groups * splits units; head groups get contiguous, near-equal head
    ranges (the first kv_heads % head_groups groups take one extra head)."""
    if units < 1 or splits < 1 or units % splits:
        raise ValueError(f"units ({units}) must be a positive multiple of splits ({splits})")
    groups = units // splits
    if groups > kv_heads:
        raise ValueError(f"{groups} head groups for {kv_heads} KV heads: some units would be idle")
    base, extra = divmod(kv_heads, groups)
    assignments, head0 = [], 0
    for group in range(groups):
        nheads = base + (1 if group < extra else 0)
        for split in range(splits):
            assignments.append(UnitAssignment(len(assignments), head0, nheads, split, splits))
        head0 += nheads
    return assignments


def unit_defines(placement: Placement, assignment: UnitAssignment) -> dict[str, object]:
    defines = dict(placement.defines)
    defines.update(HEAD0=assignment.head0, NHEADS=assignment.nheads)
    if assignment.splits > 1:
        defines.update(SPLITS=assignment.splits, SPLIT=assignment.split)
    else:
        defines.pop("PART_ADDR", None)
    return defines


def unit_queries(placement: Placement, assignment: UnitAssignment) -> np.ndarray | None:
    """The host stream of one unit: per sequence, per KV head, the group's query vectors."""
    if placement.queries is None:  # trace-only placement
        return None
    group = placement.spec.group
    lo, hi = assignment.head0 * group, (assignment.head0 + assignment.nheads) * group
    queries = placement.queries[..., lo:hi, :]
    if queries.ndim == 4:  # multi-token: per KV head, the query tokens' groups (token-major)
        batch, tokens, _, dim = queries.shape
        queries = queries.reshape(batch, tokens, assignment.nheads, group, dim).transpose(0, 2, 1, 3, 4)
    return queries.reshape(-1)


def run_decode_attention(placement: Placement, *, units: int = 1, splits: int = 1,
                         config: UnitConfig | None = None, compute: bool = True) -> PartitionedRun:
    """Assemble the kernel per unit, run all units in lockstep between barriers, gather outputs."""
    spec = placement.spec
    assignments = partition_kv_heads(spec.kv_heads, units, splits)
    programs = [assemble_file(placement.kernel, defines=unit_defines(placement, a)) for a in assignments]
    executors = [Executor(p, dram=placement.dram, host_input=unit_queries(placement, a), config=config,
                          compute=compute) for p, a in zip(programs, assignments, strict=True)]
    run_lockstep(executors, [a.unit for a in assignments], str(placement.kernel))
    tokens = spec.query_tokens
    output = np.zeros((spec.batch, tokens, spec.query_heads, spec.v_dim), dtype=np.float32)
    for assignment, executor in zip(assignments, executors, strict=True):
        if assignment.split:
            continue
        lo = assignment.head0 * spec.group
        hi = lo + assignment.nheads * spec.group
        shard = executor.outputs.reshape(spec.batch, assignment.nheads, tokens, spec.group, spec.v_dim)
        output[:, :, lo:hi] = shard.transpose(0, 2, 1, 3, 4).reshape(spec.batch, tokens, hi - lo, spec.v_dim)
    if not spec.multi_token:
        output = output[:, 0]
    return PartitionedRun(output, assignments, programs, [e.trace() for e in executors])
