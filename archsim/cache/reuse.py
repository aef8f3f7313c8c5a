"""LRU stack distances of an access stream: for each access, how many distinct other lines were touched since the
same line's previous access (-1 on a first access). A fully associative LRU cache of C lines hits exactly the
accesses whose distance is below C (Mattson et al., "Evaluation techniques for storage hierarchies", IBM Systems
Journal 9(2), 1970), so one pass gives the hit rate at every capacity: the size sweep of a reuse study.
"""

from __future__ import annotations

import numpy as np

from archsim.jit import njit


@njit(cache=True)
def _distances(ids: np.ndarray, distinct: int) -> np.ndarray:
    """Stack distances of dense line ids (a Fenwick tree over positions marks each line's latest access)."""
    n = ids.size
    tree = np.zeros(n + 1, dtype=np.int64)
    last = np.full(distinct, -1, dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    marked = 0
    for i in range(n):
        k = ids[i]
        j = last[k]
        if j < 0:
            out[i] = -1
        else:
            # marks after position j: lines touched since, each once (its latest access)
            s, p = 0, j + 1
            while p > 0:
                s += tree[p]
                p -= p & -p
            out[i] = marked - s
            p = j + 1
            while p <= n:
                tree[p] -= 1
                p += p & -p
            marked -= 1
        p = i + 1
        while p <= n:
            tree[p] += 1
            p += p & -p
        marked += 1
        last[k] = i
    return out


def stack_distances(lines: np.ndarray) -> np.ndarray:
    """int64 stack distance of every access of `lines` (any integer labels), -1 for a line's first access."""
    lines = np.asarray(lines)
    if lines.size == 0:
        return np.zeros(0, dtype=np.int64)
    _, ids = np.unique(lines, return_inverse=True)
    return _distances(ids.astype(np.int64).ravel(), int(ids.max()) + 1)


def hits_at(distances: np.ndarray, capacity_lines: int) -> int:
    """Accesses a fully associative LRU cache of `capacity_lines` lines hits."""
    return int(np.count_nonzero((distances >= 0) & (distances < capacity_lines)))
