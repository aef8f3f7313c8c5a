"""Per-bank request lists and their row-hit counts, the bank masks, the command log and priority keys (numba)."""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from archsim.controller.codes import (
    AGE_BITS,
    B_CNT,
    B_HEAD,
    B_HITS_R,
    B_OPEN,
    B_TAIL,
    B_WIN,
    INF,
    PC_HITS_R,
    S_LOGOVF,
    S_NLOG,
)
from archsim.controller.index_lowering import kernel_helper


@kernel_helper
def log_command(cmd, t, pc, bank, row, scal, log_cycle, log_cmd, log_pc, log_bank, log_row):
    k = scal[S_NLOG]
    if k < log_cycle.shape[0]:
        log_cycle[k] = t
        log_cmd[k] = cmd
        log_pc[k] = pc
        log_bank[k] = bank
        log_row[k] = row
        scal[S_NLOG] = k + 1
    else:
        scal[S_LOGOVF] = 1


@kernel_helper
def remove_at(queue, pstate, length_column, pc, i):
    n = pstate[pc, length_column]
    for j in range(i, n - 1):
        queue[pc, j] = queue[pc, j + 1]
    pstate[pc, length_column] = n - 1


@kernel_helper
def set_bank_bit(bank_mask, row, bb, on, words):
    """Set or clear bank `bb`'s bit (within its pseudo-channel) in row `row` of a flat bank mask of `words` words
    a row: the queued requests' and open rows' masks have a row per pseudo-channel `pc`, the row-hit mask one per
    pseudo-channel and kind, `pc * 2 + kind`."""
    bit = np.uint64(1) << np.uint64(bb & 63)
    if on:
        bank_mask[row, bb >> 6] |= bit
    else:
        bank_mask[row, bb >> 6] &= ~bit


@kernel_helper
def add_hit(gb, pc, kind, delta, bstate, pstate, hmask, bpp, words):
    """Count one queued row hit of `kind` more (`delta` 1) or less (-1) at bank `gb` of pseudo-channel `pc`."""
    bstate[gb, B_HITS_R + kind] += delta
    pstate[pc, PC_HITS_R + kind] += delta
    set_bank_bit(hmask, pc * 2 + kind, gb - pc * bpp, bstate[gb, B_HITS_R + kind] > 0, words)


@kernel_helper
def link(idx, gb, pc, k, bstate, bnext, bprev, amask, bpp, words):
    """Append request `idx` to bank `gb` (of pseudo-channel `pc`)'s age-ordered list of kind `k` (0 read, 1 write)."""
    if bstate[gb, B_CNT] + bstate[gb, B_CNT + 1] == 0:
        set_bank_bit(amask, pc, gb - pc * bpp, True, words)
    tail = bstate[gb, B_TAIL + k]
    bprev[idx] = tail
    bnext[idx] = -1
    if tail >= 0:
        bnext[tail] = idx
    else:
        bstate[gb, B_HEAD + k] = idx
    bstate[gb, B_TAIL + k] = idx
    bstate[gb, B_CNT + k] += 1


@kernel_helper
def unlink(idx, gb, pc, k, bstate, bnext, bprev, amask, bpp, words):
    before = bprev[idx]
    after = bnext[idx]
    if before >= 0:
        bnext[before] = after
    else:
        bstate[gb, B_HEAD + k] = after
    if after >= 0:
        bprev[after] = before
    else:
        bstate[gb, B_TAIL + k] = before
    bstate[gb, B_CNT + k] -= 1
    if bstate[gb, B_CNT] + bstate[gb, B_CNT + 1] == 0:
        set_bank_bit(amask, pc, gb - pc * bpp, False, words)


@intrinsic
def bit_index(typingctx, low):
    """Index of the lowest set bit of a uint64 (LLVM cttz: one instruction)."""
    sig = types.int64(types.uint64)

    def codegen(context, builder, signature, args):
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 0))

    return sig, codegen


@kernel_helper
def pow2_shift(divisor):
    """log2 of a power of two, else -1 (for `quotient`)."""
    return bit_index(np.uint64(divisor)) if divisor & (divisor - 1) == 0 else -1


@kernel_helper
def quotient(x, divisor, shift):
    """`x // divisor` for x >= 0: a shift when the divisor is a power of two (`shift` from `pow2_shift`), the
    division otherwise. A 64-bit division takes tens of cycles; the branch is the same on every call."""
    return x >> shift if shift >= 0 else x // divisor


@kernel_helper
def count_row(gb, k, row, bstate, bnext, req_row):
    """Requests of one kind queued at bank `gb` for `row`."""
    h = 0
    j = bstate[gb, B_HEAD + k]
    while j >= 0:
        if req_row[j] == row:
            h += 1
        j = bnext[j]
    return h


@kernel_helper
def priority_key(idx, t, req_src, accept, favored, agecap):
    """Priority key, smaller first: requests past the age cap, then the favoured port, then the rest; oldest
    first within a class. With the shared arbiter and no age cap this is the request index (pure age)."""
    cls = 2
    if agecap > 0 and t - accept[idx] >= agecap:
        cls = 0
    elif favored >= 0 and req_src[idx] == favored:
        cls = 1
    return (np.int64(cls) << AGE_BITS) | idx


@kernel_helper
def first_request(gb, k_lo, k_hi, row, for_row, t, bstate, bnext, req_row, req_src, accept, favored, agecap, ordered):
    """The first (oldest, or with `ordered` the highest-priority) request of bank `gb`'s lists of kinds
    `k_lo`..`k_hi` - 1 that is for `row` (`for_row`: a row hit) or is not (row -1: any request), and its priority
    key; (-1, INF) if none."""
    idx = -1
    key = INF
    for k in range(k_lo, k_hi):
        j = bstate[gb, B_HEAD + k]
        while j >= 0:
            if (req_row[j] == row) == for_row:
                kj = priority_key(j, t, req_src, accept, favored, agecap)
                if kj < key:
                    key = kj
                    idx = j
                if not ordered:
                    break
            j = bnext[j]
    return idx, key


@kernel_helper
def move_one(queue, pstate, unmoved_column, pc, base, bqd, t, bstate, hmask, req_bank, req_row, ready, kind, bnext,
             bprev, amask, bpp, words):
    """Move the oldest waiting request whose bank queue has room into it; return its bank, or -1 if none moved.
    `queue[pc]` holds the waiting requests only, oldest first: the moved ones are in their banks' lists."""
    for j in range(pstate[pc, unmoved_column]):
        idx = queue[pc, j]
        gb = base + req_bank[idx]
        if bstate[gb, B_WIN] < bqd:
            bstate[gb, B_WIN] += 1
            ready[idx] = t + 1
            link(idx, gb, pc, kind, bstate, bnext, bprev, amask, bpp, words)
            remove_at(queue, pstate, unmoved_column, pc, j)
            if bstate[gb, B_OPEN] == req_row[idx]:
                add_hit(gb, pc, kind, 1, bstate, pstate, hmask, bpp, words)
            return gb
    return -1
