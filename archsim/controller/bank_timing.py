"""Earliest-issue bookkeeping of the bank timing state: queries, updates and bounds (numba, inlined)."""

from __future__ import annotations

import numpy as np

from archsim.controller.codes import ACT, B_BGF, B_HEAD, B_HITS_R, B_HITS_W, B_OPEN, INF, NCMD, PREA, RD, RDA, REF, WR
from archsim.controller.index_lowering import kernel_helper
from archsim.controller.request_lists import bit_index, quotient, set_bank_bit


@kernel_helper
def earliest(cmd, gb, bgf, rf, pc, nxt_bank, nxt_bg, nxt_rank, nxt_pc, faw, faw_pos, tfaw):
    e = nxt_bank[gb, cmd]
    v = nxt_bg[bgf, cmd]
    if v > e:
        e = v
    v = nxt_rank[rf, cmd]
    if v > e:
        e = v
    v = nxt_pc[pc, cmd]
    if v > e:
        e = v
    if cmd == ACT:
        v = faw[rf, faw_pos[rf]] + tfaw
        if v > e:
            e = v
    return e


@kernel_helper
def _raise_span(cells, row_start, gaps, level, cmd, first, end, t):
    for n in range(first, end):
        cells[row_start + n] = max(cells[row_start + n], t + gaps[level, cmd, n])


@kernel_helper
def _raise_scope(cells, row, gaps, level, cmd, t):
    """Raise row `row` of `cells` (an earliest-issue table, flat: rows of NCMD cycles, see `index_lowering`) to
    `t` plus `cmd`'s gaps at `level` (NEG where no rule: no change), skipping the groups of next commands (row,
    column, refresh) that have no rule: `gaps[level, cmd, NCMD + group]` is 0. The groups are runs of command
    codes (`codes.py`: ACT..PREA, RD..WRA, REF..REFPB)."""
    row_start = row * NCMD
    if gaps[level, cmd, NCMD] != 0:
        _raise_span(cells, row_start, gaps, level, cmd, ACT, RD, t)
    if gaps[level, cmd, NCMD + 1] != 0:
        _raise_span(cells, row_start, gaps, level, cmd, RD, REF, t)
    if gaps[level, cmd, NCMD + 2] != 0:
        _raise_span(cells, row_start, gaps, level, cmd, REF, NCMD, t)


@kernel_helper
def apply_command(cmd, t, gb, bgf, rf, pc, ranks, gaps, nxt_bank, nxt_bg, nxt_rank, nxt_pc):
    """Push every scope's earliest-issue times forward after `cmd` issued at `t`.

    `gaps[level, cmd, next]` holds every rule's gap, NEG where none exists, so each scope is a few branch-free
    passes (a sparse rule list with a loop exit per scope, or one pass over the span of next commands with a
    rule, measured slower).
    """
    _raise_scope(nxt_bank, gb, gaps, 0, cmd, t)
    _raise_scope(nxt_bg, bgf, gaps, 1, cmd, t)
    _raise_scope(nxt_rank, rf, gaps, 2, cmd, t)
    _raise_scope(nxt_pc, pc, gaps, 3, cmd, t)
    for r in range(pc * ranks, pc * ranks + ranks):  # the other ranks of the pseudo-channel
        if r != rf:
            _raise_scope(nxt_rank, r, gaps, 4, cmd, t)


@kernel_helper
def row_earliest(cmd, pc, bank, ranks, bpr, sh_bpr, bpp, bstate, nxt_bank, nxt_bg, nxt_rank, nxt_pc,
                  faw, faw_pos, tfaw):
    """Earliest issue of a row command; PREA looks at every open bank of the rank. `sh_bpr`: `pow2_shift(bpr)`."""
    r = quotient(bank, bpr, sh_bpr)
    rf = pc * ranks + r
    if cmd in (PREA, REF):
        e = nxt_rank[rf, cmd]
        if nxt_pc[pc, cmd] > e:
            e = nxt_pc[pc, cmd]
        if cmd == PREA:
            for bb in range(bpr):
                gb = pc * bpp + r * bpr + bb
                if bstate[gb, B_OPEN] >= 0:
                    v = earliest(PREA, gb, bstate[gb, B_BGF], rf, pc, nxt_bank, nxt_bg, nxt_rank, nxt_pc, faw, faw_pos,
                                  tfaw)
                    if v > e:
                        e = v
        return e
    gb = pc * bpp + bank
    return earliest(cmd, gb, bstate[gb, B_BGF], rf, pc, nxt_bank, nxt_bg, nxt_rank, nxt_pc, faw, faw_pos, tfaw)


@kernel_helper
def col_bound(cmd, pc, ranks, nxt_rank, nxt_pc):
    """No column command of kind `cmd` can issue in this pseudo-channel before this cycle (data bus, tCCD_S)."""
    e = nxt_pc[pc, cmd]
    lo = INF
    for r in range(pc * ranks, pc * ranks + ranks):
        if nxt_rank[r, cmd] < lo:
            lo = nxt_rank[r, cmd]
    return e if e > lo else lo


@kernel_helper
def act_bound(pc, ranks, skip_rank, nxt_rank, nxt_pc, faw, faw_pos, tfaw):
    """No ACT can issue in this pseudo-channel before this cycle (tRRD_S, tFAW, refresh)."""
    lo = INF
    for r in range(ranks):
        if r == skip_rank:
            continue
        rf = pc * ranks + r
        e = nxt_rank[rf, ACT]
        v = faw[rf, faw_pos[rf]] + tfaw
        if v > e:
            e = v
        if e < lo:
            lo = e
    v = nxt_pc[pc, ACT]
    return v if v > lo else lo


@kernel_helper
def set_hits(gb, pc, hr, hw, bstate, hsum_r, hsum_w, hmask, bpp):
    """Set bank `gb`'s queued row hits (reads `hr`, writes `hw`), its pseudo-channel's sums and hit-mask bits."""
    hsum_r[pc] += hr - bstate[gb, B_HITS_R]
    hsum_w[pc] += hw - bstate[gb, B_HITS_W]
    bstate[gb, B_HITS_R] = hr
    bstate[gb, B_HITS_W] = hw
    set_bank_bit(hmask[pc], 0, gb - pc * bpp, hr > 0)
    set_bank_bit(hmask[pc], 1, gb - pc * bpp, hw > 0)


@kernel_helper
def recompute_closed(closed_act, closed_head, pc, bpp, words, amask, omask, bstate, nxt_bank, nxt_bg):
    """Over the closed banks with requests queued: the earliest ACT by their banks' and bank groups' own timing
    (tRP, tRC, tRRD_L; `act_bound` gives the bounds they share) into `closed_act[pc]`, and the oldest request at
    the head of their read (write) lists into `closed_head[pc, 0 (1)]` (INF: none)."""
    lo = INF
    head_r = INF
    head_w = INF
    for word in range(words):
        closed = amask[pc, word] & ~omask[pc, word]
        while closed != 0:
            gb = pc * bpp + word * 64 + bit_index(closed)
            closed &= closed - np.uint64(1)
            lo = min(lo, max(nxt_bank[gb, ACT], nxt_bg[bstate[gb, B_BGF], ACT]))
            h = bstate[gb, B_HEAD]
            head_r = min(head_r, h if h >= 0 else INF)
            h = bstate[gb, B_HEAD + 1]
            head_w = min(head_w, h if h >= 0 else INF)
    closed_act[pc] = lo
    closed_head[pc, 0] = head_r
    closed_head[pc, 1] = head_w


@kernel_helper
def note_closed(closed_act, closed_head, pc, gb, bstate, nxt_bank, nxt_bg):
    """Take bank `gb`, just closed or given a request while closed, into its pseudo-channel's kept
    `recompute_closed` figures. Between ACTs (which recompute them) banks join the closed set only this way,
    their bounds only rise and their list heads stay (a closed bank's requests leave only after an ACT), so the
    kept bound stays a valid wake-up bound and the kept heads exact, without a scan of the closed banks."""
    closed_act[pc] = min(closed_act[pc], max(nxt_bank[gb, ACT], nxt_bg[bstate[gb, B_BGF], ACT]))
    for k in range(2):
        h = bstate[gb, B_HEAD + k]
        if h >= 0 and h < closed_head[pc, k]:
            closed_head[pc, k] = h


@kernel_helper
def hits_bound(pc, bpp, words, hmask, nxt_bank, cb_r, cb_w, auto_precharge):
    """No column command to a queued row hit can issue before this cycle: per bank with hits, its own bound
    (tRCD, tCCD_L, tWTR) or the pseudo-channel's for the kind (`cb_r`, `cb_w`; INF leaves a kind out).
    `words`: the bank masks' 64-bit words per pseudo-channel (a constant in a kernel compiled for its shape)."""
    lo = INF
    for kind in range(2):  # reads, writes
        cb = cb_r if kind == 0 else cb_w
        if cb == INF:
            continue
        cmd = RD if kind == 0 else WR
        for word in range(words):
            live = hmask[pc, kind, word]
            while live != 0:
                gb = pc * bpp + word * 64 + bit_index(live)
                live &= live - np.uint64(1)
                v = nxt_bank[gb, cmd]
                if auto_precharge:
                    v = min(v, nxt_bank[gb, cmd + RDA - RD])
                lo = min(lo, max(v, cb))
    return lo
