"""Collects the records of one forward pass and hands them to the trace writer as arrays.

Hooks call `add` a few dozen times per layer per step; Python lists are the cheapest buffer for that, and
`end_step` turns them into the column arrays once per step so memory stays bounded by one step.
"""

from __future__ import annotations

import re

import numpy as np

from archsim.trace.logical import COLUMN_NAMES, LogicalTraceWriter

# "model.layers.12.self_attn.q_proj" -> ("model.layers.*.self_attn.q_proj", 12)
_LAYER_PATTERN = re.compile(r"^(?P<head>.*?\b(?:layers|h|blocks|layer))\.(?P<index>\d+)(?P<tail>(\..*)?)$")


def operator_template(module_name: str) -> tuple[str, int]:
    """The layer-independent operator name and the decoder-layer index (-1 outside the layers)."""
    match = _LAYER_PATTERN.match(module_name)
    if not match:
        return module_name or "<root>", -1
    return f"{match['head']}.*{match['tail']}", int(match["index"])


class StepRecorder:
    """Record buffer for the current step (one model forward call)."""

    def __init__(self, writer: LogicalTraceWriter) -> None:
        self.writer = writer
        self.step = -1
        self.phase = 0
        self.token_start = 0  # first new token slot of the step (same for every request)
        self.token_count = 0  # new tokens per request in the step
        self._rows: list[tuple[int, ...]] = []

    def begin_step(self, step: int, phase: int, token_start: int, token_count: int) -> None:
        self.step, self.phase = step, phase
        self.token_start, self.token_count = token_start, token_count
        self._rows.clear()

    def operator(self, name: str, weight_bytes: int | None = None) -> int:
        return self.writer.operator_id(name, weight_bytes)

    def add(
        self,
        op: int,
        kind: int,
        layer: int,
        nbytes: int,
        operator: int,
        *,
        head_start: int = -1,
        head_count: int = 0,
        token_start: int = -1,
        token_count: int = 0,
        request: int = -1,
    ) -> None:
        self._rows.append(
            (
                self.step,
                self.phase,
                op,
                kind,
                layer,
                head_start,
                head_count,
                token_start,
                token_count,
                nbytes,
                operator,
                request,
            )
        )

    def end_step(self) -> int:
        """Write the step's records; returns how many there were."""
        count = len(self._rows)
        if count:
            table = np.array(self._rows, dtype=np.int64)
            self.writer.append({name: table[:, i] for i, name in enumerate(COLUMN_NAMES)})
        self._rows.clear()
        return count
