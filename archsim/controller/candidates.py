"""Per pseudo-channel bitmasks of the banks that have a command to offer, kept current as banks change (numba).

The scheduler visits only the banks whose bit is set instead of every bank of the pseudo-channel, and skips
a whole mask when a shared bound (data bus, tRRD/tFAW) rules its command out at this cycle. Masks exist for
three views of the queues: reads only, writes only (write drain), and both (per-bank command queues).
Each view has three kinds of candidate bank. A bank found unable to issue remembers until when (`classify`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

CAND_HIT = 0  # open row with a queued hit: offers a column command
CAND_PRE = 1  # open row, a queued request for another row and no hit holding the row: offers PRE
CAND_ACT = 2  # closed, with a queued request: offers ACT
VIEW_READS, VIEW_WRITES, VIEW_BOTH = 0, 1, 2


def mask_words(banks_per_pseudo_channel: int) -> int:
    return (banks_per_pseudo_channel + 63) // 64


@njit(cache=True, inline="always", error_model="numpy")
def _put(cmask, pc, view, kind, word, bit, on):
    if on:
        cmask[pc, view, kind, word] |= bit
    else:
        cmask[pc, view, kind, word] &= ~bit


@njit(cache=True, inline="always", error_model="numpy")
def classify(gb, bpp, open_row, bcnt, hits_r, hits_w, col_count, capped_policy, cap, cmask, cand_wait):
    """Recompute bank `gb`'s bits in every view; call after anything changed its row, queue or hits.

    `cand_wait[gb, view * 3 + kind]` caches a cycle before which the bank's candidate command cannot issue.
    It stays a valid bound while the command stays the same, because earliest-issue times only grow; a
    change to the bank may change the command, so it clears the cache.
    """
    cand_wait[gb, :] = 0
    pc = gb // bpp
    bb = gb - pc * bpp
    word = bb >> 6
    bit = np.uint64(1) << np.uint64(bb & 63)
    orow = open_row[gb]
    holds = not (capped_policy and col_count[gb] >= cap)  # the open row's hits keep other rows waiting
    for view in range(3):
        if view == VIEW_READS:
            c = bcnt[gb, 0]
            h = hits_r[gb]
        elif view == VIEW_WRITES:
            c = bcnt[gb, 1]
            h = hits_w[gb]
        else:
            c = bcnt[gb, 0] + bcnt[gb, 1]
            h = hits_r[gb] + hits_w[gb]
        _put(cmask, pc, view, CAND_HIT, word, bit, orow >= 0 and h > 0)
        _put(cmask, pc, view, CAND_PRE, word, bit, orow >= 0 and c > h and (h == 0 or not holds))
        _put(cmask, pc, view, CAND_ACT, word, bit, orow < 0 and c > 0)
