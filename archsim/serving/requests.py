"""What users send, as arrays (no per-request Python objects). Interface fixed in serving_interfaces.md;
helper A's version (with the generators) replaces this one on merge."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RequestTable:
    arrival_ns: np.ndarray      # float64[n]; NaN for a later turn (arrival = prev's last token + think_ns)
    prev: np.ndarray            # int64[n]; previous turn of the same session, -1 if none
    think_ns: np.ndarray        # float64[n]
    session: np.ndarray         # int64[n]
    turn: np.ndarray            # int32[n]
    input_tokens: np.ndarray    # int64[n]; the whole prompt
    output_tokens: np.ndarray   # int64[n]
    block_offsets: np.ndarray   # int64[n+1]
    block_keys: np.ndarray      # uint64[...]; ceil(input_tokens / block_tokens) content-chained keys per request
    block_tokens: int

    def __len__(self) -> int:
        return int(len(self.input_tokens))

    def keys(self, i: int) -> np.ndarray:
        return self.block_keys[self.block_offsets[i]:self.block_offsets[i + 1]]
