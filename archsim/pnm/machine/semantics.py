"""Functional semantics of the control, configuration, scalar, DMA and host-port opcodes.

Each handler takes (executor, raw operand fields) in opcode-table order. HANDLERS maps every
mnemonic of isa/opcodes.yaml to its handler (a test checks none is missing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from archsim.pnm.machine import dtypes
from archsim.pnm.machine.compute_ops import COMPUTE_HANDLERS
from archsim.pnm.machine.state import ExecutionError, Transfer

if TYPE_CHECKING:  # the executor imports this module's handlers
    from archsim.pnm.machine.functional import Executor

_INT64 = 1 << 64


def _wrap(value: int) -> int:
    """Registers are 64-bit two's complement."""
    return (value + (1 << 63)) % _INT64 - (1 << 63)


def _set(ex: Executor, rd: int, value: int) -> None:
    if rd:  # r0 stays zero
        ex.regs[rd] = _wrap(value)


# ------------------------------------------------------------------------- control
def _nop(ex: Executor, ops: tuple[int, ...]) -> None:
    pass


def _drain(ex: Executor) -> None:
    ex.transfers.clear()


def _halt(ex: Executor, ops: tuple[int, ...]) -> None:
    _drain(ex)
    ex.stop = "halted"


def _loop(ex: Executor, count: int, end: int) -> None:
    if count <= 0:
        ex.jump = end
        return
    if len(ex.loops) >= ex.table.loop_stack_depth:
        raise ExecutionError(f"loop stack overflow (depth {ex.table.loop_stack_depth})")
    ex.loops.append([ex.pc + 1, end, count])


def _loop_reg(ex: Executor, ops: tuple[int, ...]) -> None:
    _loop(ex, ex.regs[ops[0]], ops[1])


def _loop_imm(ex: Executor, ops: tuple[int, ...]) -> None:
    _loop(ex, ops[0], ops[1])


def _wait(ex: Executor, ops: tuple[int, ...]) -> None:
    while len(ex.transfers) > ops[0]:
        ex.transfers.popleft()


def _barrier(ex: Executor, ops: tuple[int, ...]) -> None:
    _drain(ex)
    ex.stop, ex.barrier_id = "barrier", ops[0]


# ------------------------------------------------------------------------- configuration
def _cfg_shape(ex: Executor, ops: tuple[int, ...]) -> None:
    ex.cfg.qk_dim, ex.cfg.v_dim, ex.cfg.v_pitch, ex.cfg.group = ops


def _cfg_kv(ex: Executor, ops: tuple[int, ...]) -> None:
    ex.cfg.kv_dtype = ex.table.enums["kv_dtype"][ops[0]]
    ex.cfg.scale_group = ops[1]


def _cfg_io(ex: Executor, ops: tuple[int, ...]) -> None:
    ex.cfg.io_dtype = ex.table.enums["io_dtype"][ops[0]]


def _cfg_scale(ex: Executor, ops: tuple[int, ...]) -> None:
    ex.cfg.softmax_scale = np.array(ops[0], dtype=np.uint32).view(np.float32)[()]


def _cfg_win(ex: Executor, ops: tuple[int, ...]) -> None:
    ex.cfg.window_tokens = ops[0]


def _cfg_page(ex: Executor, ops: tuple[int, ...]) -> None:
    ex.cfg.block_tokens = ops[0]


# ------------------------------------------------------------------------- scalar
def _binary(function: Callable[[int, int], int]) -> Callable[[Executor, tuple[int, ...]], None]:
    def handler(ex: Executor, ops: tuple[int, ...]) -> None:
        _set(ex, ops[0], function(ex.regs[ops[1]], ex.regs[ops[2]]))
    return handler


def _li(ex: Executor, ops: tuple[int, ...]) -> None:
    _set(ex, ops[0], ops[1])


def _addi(ex: Executor, ops: tuple[int, ...]) -> None:
    _set(ex, ops[0], ex.regs[ops[1]] + ops[2])


def _muli(ex: Executor, ops: tuple[int, ...]) -> None:
    _set(ex, ops[0], ex.regs[ops[1]] * ops[2])


def _divi(ex: Executor, ops: tuple[int, ...]) -> None:
    _set(ex, ops[0], ex.regs[ops[1]] // ops[2])


def _read_int32(ex: Executor, address: int) -> int:
    if address % 4:
        raise ExecutionError(f"int32 at SRAM 0x{address:x} is not 4-byte aligned")
    return int(ex.sram_read(address, 4).view("<i4")[0])


def _ldr(ex: Executor, ops: tuple[int, ...]) -> None:
    _set(ex, ops[0], _read_int32(ex, ex.regs[ops[1]] + ops[2]))


# ------------------------------------------------------------------------- DMA
def _dram_span(ex: Executor, address: int, rows: int, row_bytes: int, stride: int) -> tuple[int, int]:
    if rows == 0 or row_bytes == 0:
        return address, address
    hi = address + (rows - 1) * stride + row_bytes
    if address < 0 or hi > ex.config.dram_capacity_bytes:
        raise ExecutionError(f"DRAM [0x{address:x}, 0x{hi:x}) is beyond the configured "
                             f"{ex.config.dram_capacity_bytes}-byte DRAM")
    return address, hi


def _load(ex: Executor, sram_dst: int, address: int, rows: int, row_bytes: int, stride: int) -> None:
    lo, hi = _dram_span(ex, address, rows, row_bytes, stride)
    for t in ex.transfers:
        if not t.is_load and t.dram_lo < hi and lo < t.dram_hi:
            raise ExecutionError(f"reads DRAM [0x{lo:x}, 0x{hi:x}) that an outstanding ST is still "
                                 f"writing (missing WAIT)")
    data = ex.dram.read_rows(address, rows, row_bytes, stride)
    ex.recorder.dram(address, rows, row_bytes, stride, is_write=False)
    ex.sram_write(sram_dst, data)
    ex.transfers.append(Transfer(True, sram_dst, sram_dst + data.size))


def _regs(ex: Executor, ops: tuple[int, ...], names: tuple[str, ...]) -> list[int]:
    """Values of register operands, each checked non-negative (addresses, counts, strides)."""
    return [ex.reg(number, name) for number, name in zip(ops, names, strict=True)]


_LD_OPERANDS = ("sram_dst", "dram_src", "rows", "row_bytes", "dram_stride")
_LDG_OPERANDS = ("sram_dst", "dram_base", "table", "index", "page_stride", "rows", "row_bytes",
                 "token_stride")
_ST_OPERANDS = ("sram_src", "dram_dst", "rows", "row_bytes", "dram_stride")


def _ld(ex: Executor, ops: tuple[int, ...]) -> None:
    _load(ex, *_regs(ex, ops, _LD_OPERANDS))


def _ldg(ex: Executor, ops: tuple[int, ...]) -> None:
    sram_dst, base, table, index, page_stride, rows, row_bytes, token_stride = _regs(ex, ops, _LDG_OPERANDS)
    if rows == 0 or row_bytes == 0:  # branch-free tail: nothing moves, the table is not read
        ex.transfers.append(Transfer(True, sram_dst, sram_dst))
        return
    if ex.cfg.block_tokens == 0:
        raise ExecutionError("LDG before CFG.PAGE")
    if rows > ex.cfg.block_tokens:
        raise ExecutionError(f"gathers {rows} rows from one page of {ex.cfg.block_tokens} tokens")
    page = _read_int32(ex, table + 4 * index)
    if page < 0:
        raise ExecutionError(f"block table entry {index} is {page}")
    _load(ex, sram_dst, base + page * page_stride, rows, row_bytes, token_stride)


def _st(ex: Executor, ops: tuple[int, ...]) -> None:
    sram_src, dram_dst, rows, row_bytes, stride = _regs(ex, ops, _ST_OPERANDS)
    lo, hi = _dram_span(ex, dram_dst, rows, row_bytes, stride)
    data = ex.sram_read(sram_src, rows * row_bytes)
    ex.dram.write_rows(dram_dst, data, rows, row_bytes, stride)
    ex.recorder.dram(dram_dst, rows, row_bytes, stride, is_write=True)
    ex.transfers.append(Transfer(False, sram_src, sram_src + data.size, lo, hi))


# ------------------------------------------------------------------------- host port
def _recv(ex: Executor, ops: tuple[int, ...]) -> None:
    sram_dst, count = ex.reg(ops[0], "sram_dst"), ex.reg(ops[1], "elems")
    ex.recorder.add("host_in_bytes", count * dtypes.ELEMENT_BYTES[ex.cfg.io_dtype])
    if ex.host_input is None and not ex.compute:
        ex.sram_write_f32(sram_dst, None, count)
        return
    available = 0 if ex.host_input is None else ex.host_input.size - ex.host_cursor
    if count > available:
        raise ExecutionError(f"host port underflow: needs {count} elements, {available} left")
    values = ex.host_input[ex.host_cursor:ex.host_cursor + count]
    ex.host_cursor += count
    ex.sram_write_f32(sram_dst, dtypes.round_trip(values, ex.cfg.io_dtype), count)


def _send(ex: Executor, ops: tuple[int, ...]) -> None:
    sram_src, count = ex.reg(ops[0], "sram_src"), ex.reg(ops[1], "elems")
    values = ex.sram_read_f32(sram_src, count)
    ex.recorder.add("host_out_bytes", count * dtypes.ELEMENT_BYTES[ex.cfg.io_dtype])
    ex.host_output.append(dtypes.round_trip(values, ex.cfg.io_dtype))


HANDLERS: dict[str, Callable[[Executor, tuple[int, ...]], None]] = {
    "NOP": _nop, "HALT": _halt, "LOOP": _loop_reg, "LOOPI": _loop_imm, "WAIT": _wait, "BARRIER": _barrier,
    "CFG.SHAPE": _cfg_shape, "CFG.KV": _cfg_kv, "CFG.IO": _cfg_io, "CFG.SCALE": _cfg_scale,
    "CFG.WIN": _cfg_win, "CFG.PAGE": _cfg_page,
    "LI": _li, "ADD": _binary(lambda a, b: a + b), "SUB": _binary(lambda a, b: a - b),
    "MUL": _binary(lambda a, b: a * b), "MIN": _binary(min), "MAX": _binary(max),
    "XOR": _binary(lambda a, b: a ^ b), "ADDI": _addi, "MULI": _muli, "DIVI": _divi, "LDR": _ldr,
    "LD": _ld, "LDG": _ldg, "ST": _st, "RECV": _recv, "SEND": _send,
    **COMPUTE_HANDLERS,
}
