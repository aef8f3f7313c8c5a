"""What a serving run did over time, kept only when asked (`serve --timeline`): every batch iteration of every
instance (start, end, sequences, new tokens, prefill chunks) and every timed link transfer (link, start, end,
bytes, what it moved), writes away from the GPUs on their own direction of the link. Decode appends are counted,
not timed (archsim/serving/engine.py), so they are not here."""

from __future__ import annotations

import numpy as np

# engine.X_LOAD, X_SWAP_IN, X_ITER, X_WRITE, X_MOVE, X_ITER_WRITE, X_SWAP_OUT, X_DEMOTE
TRANSFER_KINDS = ("KV load", "swap-in", "KV stream", "write-through", "move", "prefill write", "swap-out",
                  "demotion")


class ActivityLog:
    """Appended to by the engine as it runs; `arrays()` turns it into the result's columns (iterations by
    instance and start, transfers by link and start)."""

    def __init__(self) -> None:
        self._iterations: list[tuple[int, float, float, int, int, int]] = []
        self._open: dict[int, tuple[float, int, int, int]] = {}   # instance -> its iteration in progress
        self._transfers: list[tuple[int, float, float, float, int]] = []
        self._started: dict[int, tuple[int, float, float, int]] = {}  # transfer id -> (link, start, bytes, kind)
        self.links: list[str] = []

    def begin(self, instance: int, t: float, sequences: int, tokens: int, prefills: int) -> None:
        self._open[instance] = (t, sequences, tokens, prefills)

    def end(self, instance: int, t: float) -> None:
        start, sequences, tokens, prefills = self._open.pop(instance)
        self._iterations.append((instance, start, t, sequences, tokens, prefills))

    def decode_steps(self, instance: int, t: float, ends: list[float], sequences: int) -> None:
        """Iterations the engine's fast path ran back to back from `t`, each ending at `ends[k]`."""
        for end in ends:
            self._iterations.append((instance, t, end, sequences, sequences, 0))
            t = end

    def transfer_started(self, tid: int, link: str, size_bytes: float, kind: int, t: float) -> None:
        if link not in self.links:
            self.links.append(link)
        self._started[tid] = (self.links.index(link), t, size_bytes, kind)

    def transfer_done(self, tid: int, t: float) -> None:
        link, start, size, kind = self._started.pop(tid)
        self._transfers.append((link, start, t, size, kind))

    def arrays(self) -> dict[str, object]:
        it = np.array(self._iterations, dtype=np.float64).reshape(-1, 6)
        tr = np.array(self._transfers, dtype=np.float64).reshape(-1, 5)
        # by instance, then start: the engine's fast path logs a stretch of iterations when it runs it, ahead of
        # other instances' iterations that end within it; sorted, both paths give the same columns
        it = it[np.lexsort((it[:, 1], it[:, 0]))]
        tr = tr[np.lexsort((tr[:, 2], tr[:, 1], tr[:, 0]))]
        return {"iteration_instance": it[:, 0].astype(np.int64), "iteration_start_ns": it[:, 1],
                "iteration_end_ns": it[:, 2], "iteration_sequences": it[:, 3].astype(np.int64),
                "iteration_tokens": it[:, 4].astype(np.int64), "iteration_prefills": it[:, 5].astype(np.int64),
                "transfer_link": tr[:, 0].astype(np.int64), "transfer_start_ns": tr[:, 1],
                "transfer_end_ns": tr[:, 2], "transfer_bytes": tr[:, 3], "transfer_kind": tr[:, 4].astype(np.int64),
                "links": list(self.links)}


__all__ = ["ActivityLog", "TRANSFER_KINDS"]
