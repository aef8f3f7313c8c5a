"""Functional semantics of the attention compute opcodes (QK, MASK, VMAX, VEXP, VRESC, VSUM,
PV, MERGE, VNORM, VFILL), vectorized with numpy in fp32 like the datapath.

In access-trace mode (executor.compute False) the handlers still perform every SRAM read (so
uninitialized and racing reads are caught and bytes are counted) but skip the arithmetic and
only mark their outputs written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from archsim.pnm.machine import dtypes
from archsim.pnm.machine.state import ExecutionError

if TYPE_CHECKING:  # the executor imports this module's handlers
    from archsim.pnm.machine.functional import Executor

_NEG_INF = np.float32(-np.inf)


def _shape(ex: Executor) -> tuple[int, int, int, int]:
    """(group, qk_dim, v_dim, v_pitch) from CFG.SHAPE."""
    cfg = ex.cfg
    if cfg.qk_dim == 0:
        raise ExecutionError("compute instruction before CFG.SHAPE")
    return cfg.group, cfg.qk_dim, cfg.v_dim, cfg.v_pitch


def _kv_tile(ex: Executor, address: int, scales_address: int, rows: int, pitch: int,
             cols: int) -> np.ndarray | None:
    """The first `cols` elements of `rows` K/V rows `pitch` elements apart, dequantized to fp32.

    Only the bytes actually used are read (and counted): V of an MLA latent tile reads the
    leading v_dim elements of each qk_dim row.
    """
    if rows == 0:
        return np.zeros((0, cols), dtype=np.float32)
    dtype, group = ex.cfg.kv_dtype, ex.cfg.scale_group
    size = dtypes.ELEMENT_BYTES[dtype]
    span = ((rows - 1) * pitch + cols) * size
    raw = ex.sram_read(address, span)
    scales = None
    if group > 0:
        per_row, used = dtypes.scales_per_row(pitch, group), dtypes.scales_per_row(cols, group)
        scale_span = (rows - 1) * per_row + used
        scales = ex.sram_read_f32(scales_address, scale_span)
    if not ex.compute:
        return None
    if pitch != cols:
        padded = np.zeros(rows * pitch * size, dtype=np.uint8)
        padded[:span] = raw
        raw = padded.reshape(rows, pitch * size)[:, :cols * size]
        if scales is not None:
            padded_scales = np.ones(rows * per_row, dtype=np.float32)
            padded_scales[:scale_span] = scales
            scales = padded_scales.reshape(rows, per_row)[:, :used]
    if scales is not None:
        scales = scales.reshape(rows, -1)
    return dtypes.dequantize(raw.reshape(rows, cols * size), scales, dtype, group, cols)


def _vfill(ex: Executor, ops: tuple[int, ...]) -> None:
    dst, count = ex.reg(ops[0], "dst"), ex.reg(ops[1], "elems")
    value = np.array(ops[2], dtype=np.uint32).view(np.float32)
    ex.recorder.add("vec_ops", count)
    ex.sram_write_f32(dst, np.full(count, value, dtype=np.float32) if ex.compute else None, count)


def _qk(ex: Executor, ops: tuple[int, ...]) -> None:
    group, qk_dim, _, _ = _shape(ex)
    s_dst, q_addr, k_addr = ex.reg(ops[0], "s_dst"), ex.reg(ops[1], "q"), ex.reg(ops[2], "k")
    ks_addr, tokens = ex.reg(ops[3], "k_scales"), ex.reg(ops[4], "tokens")
    q = ex.sram_read_f32(q_addr, group * qk_dim)
    k = _kv_tile(ex, k_addr, ks_addr, tokens, qk_dim, qk_dim)
    ex.recorder.add("macs", group * tokens * qk_dim)
    scores = None
    if ex.compute:
        scores = (q.reshape(group, qk_dim) @ k.T) * ex.cfg.softmax_scale
    ex.sram_write_f32(s_dst, scores, group * tokens)


def _mask(ex: Executor, ops: tuple[int, ...]) -> None:
    group = _shape(ex)[0]
    s_addr, first = ex.reg(ops[0], "s"), ex.reg(ops[1], "first_pos", None)
    tokens, query = ex.reg(ops[2], "tokens"), ex.reg(ops[3], "query_pos", None)
    scores = ex.sram_read_f32(s_addr, group * tokens)
    ex.recorder.add("vec_ops", group * tokens)
    if ex.compute:
        positions = first + np.arange(tokens)
        hidden = positions > query
        if ex.cfg.window_tokens:
            hidden |= positions <= query - ex.cfg.window_tokens
        scores = scores.reshape(group, tokens).copy()
        scores[:, hidden] = _NEG_INF
    ex.sram_write_f32(s_addr, scores if ex.compute else None, group * tokens)


def _vmax(ex: Executor, ops: tuple[int, ...]) -> None:
    group = _shape(ex)[0]
    m_new, s_addr, m_addr, tokens = (ex.reg(ops[0], "m_new"), ex.reg(ops[1], "s"), ex.reg(ops[2], "m"),
                                     ex.reg(ops[3], "tokens"))
    scores = ex.sram_read_f32(s_addr, group * tokens)
    m = ex.sram_read_f32(m_addr, group)
    ex.recorder.add("vec_ops", group * tokens)
    result = None
    if ex.compute:
        result = m if tokens == 0 else np.maximum(m, scores.reshape(group, tokens).max(axis=1))
    ex.sram_write_f32(m_new, result, group)


def _vexp(ex: Executor, ops: tuple[int, ...]) -> None:
    group = _shape(ex)[0]
    s_addr, m_addr, tokens = ex.reg(ops[0], "s"), ex.reg(ops[1], "m_new"), ex.reg(ops[2], "tokens")
    scores = ex.sram_read_f32(s_addr, group * tokens)
    m = ex.sram_read_f32(m_addr, group)
    ex.recorder.add("exp_ops", group * tokens)
    p = None
    if ex.compute:
        live = m > _NEG_INF  # a row with max -inf has seen no key yet: its weights are 0
        shifted = scores.reshape(group, tokens) - np.where(live, m, 0)[:, None]
        p = np.where(live[:, None], np.exp(shifted), np.float32(0))
    ex.sram_write_f32(s_addr, p, group * tokens)


def _decay(m_old: np.ndarray, m_new: np.ndarray) -> np.ndarray:
    """exp(m_old - m_new), 0 where m_old is -inf and 1 where both are -inf."""
    with np.errstate(invalid="ignore"):
        alpha = np.exp(m_old - m_new)
    return np.where(m_new == _NEG_INF, np.float32(1), np.where(m_old == _NEG_INF, np.float32(0), alpha))


def _vresc(ex: Executor, ops: tuple[int, ...]) -> None:
    group, _, v_dim, _ = _shape(ex)
    acc_addr, l_addr, m_addr, mn_addr = (ex.reg(ops[0], "acc"), ex.reg(ops[1], "l"), ex.reg(ops[2], "m"),
                                         ex.reg(ops[3], "m_new"))
    acc = ex.sram_read_f32(acc_addr, group * v_dim)
    total = ex.sram_read_f32(l_addr, group)
    m = ex.sram_read_f32(m_addr, group)
    m_new = ex.sram_read_f32(mn_addr, group)
    ex.recorder.add("exp_ops", group)
    ex.recorder.add("vec_ops", group * v_dim + group)
    if ex.compute:
        alpha = _decay(m, m_new)
        acc = acc.reshape(group, v_dim) * alpha[:, None]
        total = total * alpha
    ex.sram_write_f32(acc_addr, acc if ex.compute else None, group * v_dim)
    ex.sram_write_f32(l_addr, total if ex.compute else None, group)
    ex.sram_write_f32(m_addr, m_new if ex.compute else None, group)


def _vsum(ex: Executor, ops: tuple[int, ...]) -> None:
    group = _shape(ex)[0]
    l_addr, p_addr, tokens = ex.reg(ops[0], "l"), ex.reg(ops[1], "p"), ex.reg(ops[2], "tokens")
    total = ex.sram_read_f32(l_addr, group)
    p = ex.sram_read_f32(p_addr, group * tokens)
    ex.recorder.add("vec_ops", group * tokens)
    result = total + p.reshape(group, tokens).sum(axis=1, dtype=np.float32) if ex.compute else None
    ex.sram_write_f32(l_addr, result, group)


def _pv(ex: Executor, ops: tuple[int, ...]) -> None:
    group, _, v_dim, v_pitch = _shape(ex)
    acc_addr, p_addr, v_addr = ex.reg(ops[0], "acc"), ex.reg(ops[1], "p"), ex.reg(ops[2], "v")
    vs_addr, tokens = ex.reg(ops[3], "v_scales"), ex.reg(ops[4], "tokens")
    acc = ex.sram_read_f32(acc_addr, group * v_dim)
    p = ex.sram_read_f32(p_addr, group * tokens)
    v = _kv_tile(ex, v_addr, vs_addr, tokens, v_pitch, v_dim)
    ex.recorder.add("macs", group * tokens * v_dim)
    result = None
    if ex.compute:
        result = acc.reshape(group, v_dim) + p.reshape(group, tokens) @ v
    ex.sram_write_f32(acc_addr, result, group * v_dim)


def _merge(ex: Executor, ops: tuple[int, ...]) -> None:
    group, _, v_dim, _ = _shape(ex)
    dst, src = ex.reg(ops[0], "dst_record"), ex.reg(ops[1], "src_record")
    size = 2 * group + group * v_dim
    a = ex.sram_read_f32(dst, size)
    b = ex.sram_read_f32(src, size)
    ex.recorder.add("exp_ops", 2 * group)
    ex.recorder.add("vec_ops", 3 * group * v_dim + 3 * group)
    merged = None
    if ex.compute:
        m1, l1, acc1 = a[:group], a[group:2 * group], a[2 * group:].reshape(group, v_dim)
        m2, l2, acc2 = b[:group], b[group:2 * group], b[2 * group:].reshape(group, v_dim)
        m = np.maximum(m1, m2)
        w1, w2 = _decay(m1, m), _decay(m2, m)
        w1 = np.where(m1 == _NEG_INF, np.float32(0), w1)  # an empty partial contributes nothing
        w2 = np.where(m2 == _NEG_INF, np.float32(0), w2)
        merged = np.concatenate([m, w1 * l1 + w2 * l2, (acc1 * w1[:, None] + acc2 * w2[:, None]).ravel()])
    ex.sram_write_f32(dst, merged, size)


def _vnorm(ex: Executor, ops: tuple[int, ...]) -> None:
    group, _, v_dim, _ = _shape(ex)
    out, acc_addr, l_addr = ex.reg(ops[0], "out"), ex.reg(ops[1], "acc"), ex.reg(ops[2], "l")
    acc = ex.sram_read_f32(acc_addr, group * v_dim)
    total = ex.sram_read_f32(l_addr, group)
    ex.recorder.add("vec_ops", group * v_dim)
    result = None
    if ex.compute:
        safe = np.where(total > 0, total, np.float32(1))
        result = np.where(total[:, None] > 0, acc.reshape(group, v_dim) / safe[:, None], np.float32(0))
    ex.sram_write_f32(out, result, group * v_dim)


COMPUTE_HANDLERS: dict[str, Callable[[Executor, tuple[int, ...]], None]] = {
    "VFILL": _vfill, "QK": _qk, "MASK": _mask, "VMAX": _vmax, "VEXP": _vexp, "VRESC": _vresc,
    "VSUM": _vsum, "PV": _pv, "MERGE": _merge, "VNORM": _vnorm,
}
