"""archsim's logical traces (captured or generated, traces/FORMAT.md) as serving sessions.

Every request (batch element) of the trace is a session; each of its prefill steps starts a turn. The layer-0
K writes of a request tell it all: a prefill writes slots [token_start, token_start + token_count), so the
turn's prompt is `token_start + token_count` tokens (with or without prefix reuse alike); each decode step
writes one token, so the turn's answer is its decode steps (at least 1: a prefill alone still yields a
token). Turn k+1 then sends prompt(k+1) - prompt(k) - answer(k) new tokens; turn 0 sends its prompt less the
header's `shared_prefix_tokens`, which every request shares. Arrivals come from the scenario's arrival
process (session s replays trace request s mod R), the think time between turns from `requests.think_time`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from archsim.errors import TraceError


@dataclass(frozen=True)
class TraceSession:
    new_tokens: tuple[int, ...]  # per turn: tokens the user sends (turn 0: after the shared prefix)
    output_tokens: tuple[int, ...]  # per turn: tokens of the answer


@dataclass(frozen=True)
class LogicalSessions:
    model: str  # the trace header's model name
    shared_prefix_tokens: int
    sessions: tuple[TraceSession, ...]  # one per trace request, in request order


def read_logical_sessions(path: str | os.PathLike[str]) -> LogicalSessions:
    """The sessions a logical trace records (see the module docstring)."""
    from archsim.trace.logical import KIND_K, OP_WRITE, PHASE_PREFILL, LogicalTrace

    file = os.fspath(path)
    with LogicalTrace(file) as trace:
        header = trace.header
        c = trace.read(["step", "phase", "op", "kind", "layer", "token_start", "token_count", "request"])
    writes = (c["kind"] == KIND_K) & (c["op"] == OP_WRITE) & (c["request"] >= 0)
    if not writes.any():
        raise TraceError("the trace writes no K cache of any request: no prefill or decode to serve", file=file,
                         where="kind")
    writes &= c["layer"] == c["layer"][writes].min()  # one layer tells the tokens of every step
    shared = int(header.get("shared_prefix_tokens", 0) or 0)
    sessions = []
    for request in np.unique(c["request"][writes]):
        rows = np.flatnonzero(writes & (c["request"] == request))
        rows = rows[np.argsort(c["step"][rows], kind="stable")]
        sessions.append(_session(c, rows, PHASE_PREFILL, shared, file, int(request)))
    model = header.get("model", {}).get("name", "")
    return LogicalSessions(str(model), shared, tuple(sessions))


def _session(c: dict[str, np.ndarray], rows: np.ndarray, prefill: int, shared: int, file: str,
             request: int) -> TraceSession:
    prompts: list[int] = []
    answers: list[int] = []
    for row in rows:
        if c["phase"][row] == prefill:
            prompts.append(int(c["token_start"][row] + c["token_count"][row]))
            answers.append(0)
        elif not prompts:
            raise TraceError(f"request {request} decodes before any prefill", file=file, where="phase")
        else:
            answers[-1] += 1
    answers = [max(a, 1) for a in answers]
    new = [prompts[0] - shared]
    for k in range(1, len(prompts)):
        new.append(prompts[k] - prompts[k - 1] - answers[k - 1])
    if new[0] < 0 or any(n < 0 for n in new[1:]):
        raise TraceError(f"request {request}: a turn's prompt is shorter than the history before it", file=file,
                         where="token_start")
    if prompts[0] < 1:
        raise TraceError(f"request {request}: an empty first prompt", file=file, where="token_count")
    return TraceSession(tuple(new), tuple(answers))
