"""What a functional run did, in program order: the input of a timing model.

One row per executed (dynamic) instruction: pc, opcode and the counters named in
isa/opcodes.yaml (macs, exp_ops, vec_ops, sram/dram/host bytes). DRAM accesses are separate
rows (address, bytes, read/write) that point back at the instruction that made them, so a
timed model can replay each DMA's accesses through the memory controller's pnm port when that
instruction issues.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from archsim.isa.table import IsaTable


class DramAccess(NamedTuple):
    instr_index: int  # index into the dynamic instruction stream
    address: int
    size_bytes: int
    is_write: bool


@dataclass(frozen=True)
class ProgramTrace:
    counter_names: tuple[str, ...]
    pc: np.ndarray  # int32 [instructions]
    opcode: np.ndarray  # uint8 [instructions]; look up unit / latency class in the opcode table
    counts: np.ndarray  # int64 [instructions, counters]
    access_instr: np.ndarray  # int64 [accesses]
    access_address: np.ndarray  # int64 [accesses]
    access_bytes: np.ndarray  # int64 [accesses]
    access_is_write: np.ndarray  # bool [accesses]

    def __len__(self) -> int:
        return int(self.pc.size)

    def counter(self, name: str) -> np.ndarray:
        """Per-instruction values of one counter."""
        return self.counts[:, self.counter_names.index(name)]

    def totals(self) -> dict[str, int]:
        sums = self.counts.sum(axis=0)
        return {name: int(sums[i]) for i, name in enumerate(self.counter_names)}

    def dram_accesses(self) -> Iterator[DramAccess]:
        """DRAM accesses in program order."""
        for i in range(self.access_address.size):
            yield DramAccess(int(self.access_instr[i]), int(self.access_address[i]),
                             int(self.access_bytes[i]), bool(self.access_is_write[i]))

    def by_mnemonic(self, table: IsaTable) -> dict[str, dict[str, int]]:
        """Executed count and counter totals per mnemonic."""
        result: dict[str, dict[str, int]] = {}
        for code in np.unique(self.opcode):
            rows = self.opcode == code
            sums = self.counts[rows].sum(axis=0)
            entry = {"executed": int(rows.sum())}
            entry.update({name: int(sums[i]) for i, name in enumerate(self.counter_names)})
            result[table.by_code[int(code)].mnemonic] = entry
        return result

    def units(self, table: IsaTable) -> np.ndarray:
        """Execution unit of every executed instruction (object array of unit names)."""
        lookup = {op.code: op.unit for op in table.opcodes}
        return np.array([lookup[int(c)] for c in self.opcode], dtype=object)


class TraceRecorder:
    """Appends rows cheaply during a run; `finish` builds the arrays."""

    def __init__(self, table: IsaTable) -> None:
        self.names = tuple(table.counters)
        self._index = {name: i for i, name in enumerate(self.names)}
        self._pcs: list[int] = []
        self._codes: list[int] = []
        self._counts: list[list[int]] = []
        self._current: list[int] = [0] * len(self.names)
        # (instr index, address, rows, row_bytes, stride, is_write); expanded in finish()
        self._transfers: list[tuple[int, int, int, int, int, bool]] = []

    def begin(self, pc: int, code: int) -> None:
        self._pcs.append(pc)
        self._codes.append(code)
        self._current = [0] * len(self.names)
        self._counts.append(self._current)

    def add(self, name: str, value: int) -> None:
        self._current[self._index[name]] += int(value)

    def dram(self, address: int, rows: int, row_bytes: int, stride: int, is_write: bool) -> None:
        """Record a strided DRAM transfer of the current instruction."""
        if rows and row_bytes:
            self._transfers.append((len(self._pcs) - 1, address, rows, row_bytes, stride, is_write))
            self.add("dram_write_bytes" if is_write else "dram_read_bytes", rows * row_bytes)

    def finish(self) -> ProgramTrace:
        instr, address, size, write = [], [], [], []
        for index, start, rows, row_bytes, stride, is_write in self._transfers:
            if stride == row_bytes or rows == 1:  # contiguous: one access
                instr.append(np.array([index]))
                address.append(np.array([start]))
                size.append(np.array([rows * row_bytes]))
                write.append(np.array([is_write]))
            else:
                instr.append(np.full(rows, index))
                address.append(start + stride * np.arange(rows, dtype=np.int64))
                size.append(np.full(rows, row_bytes))
                write.append(np.full(rows, is_write))

        def cat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
            return np.concatenate(parts).astype(dtype) if parts else np.empty(0, dtype=dtype)

        counts = np.array(self._counts, dtype=np.int64).reshape(len(self._pcs), len(self.names))
        pcs, codes = np.array(self._pcs, dtype=np.int32), np.array(self._codes, dtype=np.uint8)
        return ProgramTrace(self.names, pcs, codes, counts, cat(instr, np.int64), cat(address, np.int64),
                            cat(size, np.int64), cat(write, bool))
