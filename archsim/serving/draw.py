"""Drawing a scenario's requests: sessions, arrivals, lengths, prefixes and the content of every prompt.

One numpy Generator per random quantity, spawned from the seed, so the same inputs give identical arrays and
adding one part (e.g. reasoning outputs) leaves the others' draws unchanged. docs/scenarios.md gives the
semantics; archsim/serving/requests.py turns the prompts' content segments into block keys.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from archsim.errors import ConfigError
from archsim.limits import INT64_MAX, check_fits_memory
from archsim.serving.branching import Program, program
from archsim.serving.requests import RequestTable, content_id, mix
from archsim.serving.scenario import Arrivals, LengthDist, Scenario

# content-id tags of prompt segments (requests.py chains them into block keys)
PREFIX, USER, ANSWER = 1, 2, 3
VERIFIER = np.uint64(0x7E81F1E5C0DE0001)  # salts the content a tree's own verifier model holds KV of
# a RequestTable row's columns: arrival, prev, think, session, turn, input, output, block offset
ROW_BYTES = 8 + 8 + 8 + 8 + 4 + 8 + 8 + 8
_STREAMS = ("arrivals", "turns", "input", "new_tokens", "output", "prefix", "think", "reasoning", "programs")


def generate(scn: Scenario, *, n_requests: int | None = None, duration_ns: float | None = None, seed: int = 0,
             block_tokens: int = 16) -> RequestTable:
    """Draw the scenario's requests: the first `n_requests`, or every session arriving before `duration_ns`.

    One numpy Generator per random quantity (spawned from `seed`), so the same inputs give identical arrays.
    """
    if (n_requests is None) == (duration_ns is None):
        raise ConfigError("give exactly one of a request count or a duration", file=scn.file, where="--requests")
    if n_requests is not None and n_requests < 1:
        raise ConfigError(f"must be >= 1, got {n_requests}", where="--requests")
    if duration_ns is not None and not duration_ns > 0:
        raise ConfigError(f"must be a positive duration, got {duration_ns} ns", where="--duration")
    if block_tokens < 1:
        raise ConfigError(f"must be >= 1, got {block_tokens}", where="system.serving.block_tokens")
    if duration_ns is not None and duration_ns > INT64_MAX:
        raise ConfigError(f"{duration_ns / 1e9:.3g} s is beyond the longest time the simulator holds "
                          f"({INT64_MAX / 1e9:,.0f} s)", where="--duration")
    if scn.trace is not None:
        return _from_trace(scn, n_requests, duration_ns, seed, block_tokens)
    _check_table_size(scn, n_requests, duration_ns, block_tokens)
    rng = dict(zip(_STREAMS, np.random.default_rng(seed).spawn(len(_STREAMS)), strict=True))
    assert scn.arrivals is not None and scn.input is not None and scn.output is not None
    if scn.branching is not None:
        return _build_programs(scn, n_requests, duration_ns, rng, block_tokens)
    turns_dist = scn.sessions.turns if scn.sessions else LengthDist("fixed", value=1)
    turns, starts = _sessions_and_starts(scn, n_requests, duration_ns, rng,
                                         lambda k: turns_dist.sample(rng["turns"], k))
    return _build(scn, turns, starts, rng, block_tokens)


def _check_table_size(scn: Scenario, n_requests: int | None, duration_ns: float | None, block_tokens: int) -> None:
    """Refuse a request count (or a duration's expected one) whose table alone exceeds this machine's memory: a
    row's columns (RequestTable) and its first prompt's block keys, a lower bound on what a run holds."""
    assert scn.input is not None
    prompt = scn.input.least_typical + (scn.prefix.tokens * scn.prefix.fraction if scn.prefix else 0)
    row_bytes = ROW_BYTES + 8 * max(1, math.ceil(prompt / block_tokens))
    if n_requests is not None:
        check_fits_memory(n_requests, row_bytes, "requests", where="--requests")
    elif scn.arrivals is not None and scn.arrivals.rate_per_s is not None and duration_ns is not None:
        expected = scn.arrivals.rate_per_s * duration_ns / 1e9
        if expected > INT64_MAX:
            raise ConfigError(f"{expected:.3g} sessions expected at {scn.arrivals.rate_per_s:g}/s: beyond what the "
                              "simulator counts", where="--duration")
        check_fits_memory(int(expected), row_bytes, "requests (the sessions expected in it)", where="--duration")


def _inter_arrivals_s(arr: Arrivals, rng: np.random.Generator, n: int) -> np.ndarray:
    assert arr.rate_per_s is not None
    if arr.process == "poisson":
        return rng.exponential(1.0 / arr.rate_per_s, size=n)
    assert arr.cv is not None
    shape = 1.0 / arr.cv**2  # gamma: mean shape x scale = 1 / rate, CV = 1 / sqrt(shape)
    return rng.gamma(shape, 1.0 / (arr.rate_per_s * shape), size=n)


def _open_loop_starts(arr: Arrivals, rng: np.random.Generator, n: int, file: str | None = None) -> np.ndarray:
    """n session arrivals in ns, the first at 0."""
    gaps = _inter_arrivals_s(arr, rng, max(n - 1, 0))
    with np.errstate(over="ignore"):  # a tiny rate's arrivals overflow to inf: refused just below
        starts = np.concatenate(([0.0], np.cumsum(gaps) * 1e9))[:n]
    if not starts[-1] <= INT64_MAX:  # a tiny rate: arrivals beyond int64 ns (or infinite)
        raise ConfigError(f"{arr.rate_per_s:g} sessions per second puts arrivals beyond the latest time the "
                          f"simulator holds ({INT64_MAX / 1e9:,.0f} s)", file=file,
                          where="scenario.arrivals.rate_per_s")
    return starts


def _sessions_and_starts(scn: Scenario, n_requests: int | None, duration_ns: float | None,
                         rng: dict[str, np.random.Generator],
                         draw_turns: Callable[[int], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Turns per session and each session's arrival (NaN: it waits for its user's previous session);
    `draw_turns(k)` gives the turns of the first k sessions."""
    arr = scn.arrivals
    assert arr is not None
    if n_requests is not None:
        drawn = draw_turns(n_requests)
        total = np.cumsum(drawn)
        sessions = int(np.searchsorted(total, n_requests)) + 1
        turns = drawn[:sessions].copy()
        turns[-1] -= total[sessions - 1] - n_requests  # the last session is cut to give exactly n requests
    else:
        if arr.process == "closed_loop":
            raise ConfigError("a closed loop's arrivals depend on the run: give a request count, not a duration",
                              file=scn.file, where="scenario.arrivals.process")
        assert arr.rate_per_s is not None and duration_ns is not None
        chunk = max(64, int(arr.rate_per_s * duration_ns * 1e-9 * 1.25) + 16)
        gaps: list[np.ndarray] = []
        while sum(g.sum() for g in gaps) * 1e9 < duration_ns:
            gaps.append(_inter_arrivals_s(arr, rng["arrivals"], chunk))
        starts = np.concatenate(([0.0], np.cumsum(np.concatenate(gaps)) * 1e9))
        sessions = int(np.searchsorted(starts, duration_ns, side="left"))
        return draw_turns(sessions), starts[:sessions]
    if arr.process == "closed_loop":
        assert arr.users is not None
        starts = np.full(sessions, np.nan)
        starts[: arr.users] = 0.0  # every user sends at once; the next session waits for the user's last answer
        return turns, starts
    return turns, _open_loop_starts(arr, rng["arrivals"], sessions, scn.file)


def _build(scn: Scenario, turns: np.ndarray, starts: np.ndarray, rng: dict[str, np.random.Generator],
           block_tokens: int) -> RequestTable:
    assert scn.input is not None and scn.output is not None
    shape = _Layout(turns)
    later = shape.turn > 0
    # lengths: each quantity from its own stream, so e.g. adding reasoning leaves the prompts unchanged
    user = np.empty(shape.n, dtype=np.int64)
    user[~later] = scn.input.sample(rng["input"], shape.sessions)
    if scn.sessions is not None:
        user[later] = scn.sessions.new_tokens.sample(rng["new_tokens"], int(later.sum()))
    output = scn.output.sample(rng["output"], shape.n)
    if scn.reasoning is not None:
        long = rng["reasoning"].random(shape.n) < scn.reasoning.fraction
        output[long] = scn.reasoning.output.sample(rng["reasoning"], int(long.sum()))
    prefix_group = _prefix_groups(scn, shape.sessions, rng)
    think = np.zeros(shape.n)
    if scn.sessions is not None:
        think[later] = scn.sessions.think.sample(rng["think"], int(later.sum()))
    return _assemble(scn, shape, starts, user, output, think, prefix_group, scn.prefix.tokens if scn.prefix else 0,
                     rng, block_tokens)


class _Layout:
    """Rows of `turns[s]` requests per session s, session after session."""

    def __init__(self, turns: np.ndarray) -> None:
        self.turns = np.asarray(turns, dtype=np.int64)
        self.sessions = len(self.turns)
        self.n = int(self.turns.sum())
        self.session = np.repeat(np.arange(self.sessions, dtype=np.int64), self.turns)
        self.first_row = np.concatenate(([0], np.cumsum(self.turns)[:-1])).astype(np.int64)
        self.turn = (np.arange(self.n, dtype=np.int64) - self.first_row[self.session]).astype(np.int32)


def _assemble(scn: Scenario, shape: _Layout, starts: np.ndarray, user: np.ndarray, output: np.ndarray,
              think: np.ndarray, prefix_group: np.ndarray, prefix_tokens: int, rng: dict[str, np.random.Generator],
              block_tokens: int) -> RequestTable:
    """The table: a later turn waits for the previous one; in a closed loop a user's next session waits for
    the last turn of its previous one (think time from the arrivals)."""
    assert scn.arrivals is not None
    later = shape.turn > 0
    prev = np.where(later, np.arange(shape.n, dtype=np.int64) - 1, -1)
    arrival = np.full(shape.n, np.nan)
    arrival[shape.first_row] = starts
    think = think.copy()
    _close_the_loop(scn, shape, prev, think, rng)
    seg_offsets, ids, lens = _segments(shape.session, shape.first_row, prefix_group, user, output, prefix_tokens)
    blocks = int(lens.sum()) // block_tokens + shape.n  # every prompt's blocks, its last partial one too
    check_fits_memory(blocks, 8, "KV block keys of the drawn prompts", where="scenario.input", file=scn.file)
    return RequestTable.from_segments(arrival_ns=arrival, prev=prev, think_ns=think, session=shape.session,
                                      turn=shape.turn, output_tokens=output, seg_offsets=seg_offsets, seg_ids=ids,
                                      seg_tokens=lens, block_tokens=block_tokens)


def _build_programs(scn: Scenario, n_requests: int | None, duration_ns: float | None,
                    rng: dict[str, np.random.Generator], block_tokens: int) -> RequestTable:
    """Sessions that are programs (archsim.serving.branching): rows in dependency order, each continuing its
    parent row's prompt and answer; `--requests` counts rows (the last program is cut to fit)."""
    assert scn.branching is not None and scn.input is not None and scn.output is not None
    programs: list[Program] = []

    def draw_rows(k: int) -> np.ndarray:
        prompts, answers = scn.input.sample(rng["input"], k), scn.output.sample(rng["output"], k)
        if scn.reasoning is not None:
            long = rng["reasoning"].random(k) < scn.reasoning.fraction
            answers[long] = scn.reasoning.output.sample(rng["reasoning"], int(long.sum()))
        branching = scn.branching
        assert branching is not None
        programs.extend(program(branching, int(p), int(a), rng["programs"])
                        for p, a in zip(prompts.tolist(), answers.tolist(), strict=True))
        return np.array([len(p.parent) for p in programs[-k:]], dtype=np.int64)

    rows, starts = _sessions_and_starts(scn, n_requests, duration_ns, rng, draw_rows)
    shape = _Layout(rows)
    base = shape.first_row[shape.session]

    def flat(field: str) -> np.ndarray:  # the sessions' rows (the last program cut to its share)
        parts = [getattr(p, field)[:n] for p, n in zip(programs[:shape.sessions], rows.tolist(), strict=True)]
        return np.concatenate(parts).astype(np.int64)

    parent, after, user, output = flat("parent"), flat("after"), flat("user"), flat("output")
    verifier = flat("evaluation").astype(bool) if scn.branching.verifier is not None else None
    parent = np.where(parent >= 0, parent + base, -1)
    prev = np.where(after >= 0, after + base, -1)
    turn = np.zeros(shape.n, dtype=np.int32)
    for r in np.flatnonzero(prev >= 0).tolist():  # rows come after what they wait for
        turn[r] = turn[prev[r]] + 1
    prefix_group = _prefix_groups(scn, shape.sessions, rng)
    arrival = np.full(shape.n, np.nan)
    arrival[shape.first_row] = starts
    think = np.zeros(shape.n)
    _close_the_loop(scn, shape, prev, think, rng)
    seg_offsets, ids, lens = _tree_segments(shape.session, parent, prefix_group, user, output,
                                            scn.prefix.tokens if scn.prefix else 0)
    if verifier is not None:  # the verifier's KV of a path is its own: the evaluations share it, nothing else
        ids = np.where(np.repeat(verifier, np.diff(seg_offsets)), mix(ids, VERIFIER), ids)
    return RequestTable.from_segments(arrival_ns=arrival, prev=prev, think_ns=think, session=shape.session,
                                      turn=turn, output_tokens=output, seg_offsets=seg_offsets, seg_ids=ids,
                                      seg_tokens=lens, block_tokens=block_tokens, verifier=verifier)


def _prefix_groups(scn: Scenario, sessions: int, rng: dict[str, np.random.Generator]) -> np.ndarray:
    prefix_group = np.full(sessions, -1, dtype=np.int64)
    if scn.prefix is not None:
        has = rng["prefix"].random(sessions) < scn.prefix.fraction
        groups = rng["prefix"].integers(scn.prefix.groups, size=sessions)
        prefix_group[has] = groups[has]
    return prefix_group


def _close_the_loop(scn: Scenario, shape: _Layout, prev: np.ndarray, think: np.ndarray,
                    rng: dict[str, np.random.Generator]) -> None:
    """In a closed loop a user's next session waits for the last row of its previous one (think time from the
    arrivals); in place."""
    assert scn.arrivals is not None
    if scn.arrivals.process != "closed_loop":
        return
    users, gap = scn.arrivals.users, scn.arrivals.think
    assert users is not None and gap is not None
    waiting = np.arange(users, shape.sessions)
    prev[shape.first_row[waiting]] = shape.first_row[waiting - users] + shape.turns[waiting - users] - 1
    think[shape.first_row[waiting]] = gap.sample(rng["think"], len(waiting))


def _tree_segments(session: np.ndarray, parent: np.ndarray, prefix_group: np.ndarray, user: np.ndarray,
                   output: np.ndarray, prefix_tokens: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's prompt: [shared prefix] + along its content ancestors from the root, their own tokens and
    answers + its own tokens. Content ids: the prefix by its group; a row's own tokens and its answer by the row
    that sent / produced them, so a row continuing another repeats its history's ids exactly and nothing else
    matches. A row may send no tokens of its own (a fork, a trace's turn)."""
    kinds: list[int] = []
    refs: list[int] = []
    lens: list[int] = []
    offsets = [0]
    for r in range(len(session)):
        if prefix_group[session[r]] >= 0:
            kinds.append(PREFIX)
            refs.append(int(prefix_group[session[r]]))
            lens.append(prefix_tokens)
        path = [r]
        while parent[path[-1]] >= 0:
            path.append(int(parent[path[-1]]))
        for q in reversed(path):
            for kind, tokens in ((USER, user[q]), (ANSWER, output[q])):
                if tokens > 0 and (q != r or kind == USER):
                    kinds.append(kind)
                    refs.append(q)
                    lens.append(int(tokens))
        offsets.append(len(kinds))
    ids = mix(mix(content_id(), np.asarray(kinds, dtype=np.uint64)), np.asarray(refs, dtype=np.uint64))
    return np.asarray(offsets, dtype=np.int64), ids, np.asarray(lens, dtype=np.int64)


def _segments(session: np.ndarray, first_row: np.ndarray, prefix_group: np.ndarray, user: np.ndarray,
              output: np.ndarray, prefix_tokens: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each request's prompt as content segments: [shared prefix] + earlier turns (user, answer) + new user tokens
    (a session's turns continue one another: _tree_segments over the chain of its rows)."""
    rows = np.arange(len(session), dtype=np.int64)
    parent = np.where(rows > first_row[session], rows - 1, -1)
    return _tree_segments(session, parent, prefix_group, user, output, prefix_tokens)


def _from_trace(scn: Scenario, n_requests: int | None, duration_ns: float | None, seed: int,
                block_tokens: int) -> RequestTable:
    trace = scn.trace
    assert trace is not None
    if trace.format == "logical":
        return _from_logical(scn, n_requests, duration_ns, seed, block_tokens)
    from archsim.serving.mooncake import read_mooncake

    if trace.hash_block_tokens % block_tokens:
        raise ConfigError(f"KV blocks of {block_tokens} tokens do not divide the trace's {trace.hash_block_tokens}-"
                          f"token hash blocks (system.serving.block_tokens must divide it)", file=scn.file,
                          where="scenario.requests.hash_block_tokens")
    table = read_mooncake(trace.path, block_tokens=block_tokens, hash_block_tokens=trace.hash_block_tokens,
                          time_scale=trace.time_scale)
    if n_requests is not None:
        if n_requests > len(table):
            raise ConfigError(f"the trace holds {len(table)} requests, {n_requests} were asked for",
                              file=trace.path, where="--requests")
        return head(table, n_requests)
    assert duration_ns is not None
    return head(table, int(np.searchsorted(table.arrival_ns, duration_ns, side="left")))


def _from_logical(scn: Scenario, n_requests: int | None, duration_ns: float | None, seed: int,
                  block_tokens: int) -> RequestTable:
    """Sessions replaying the trace's requests in turn (session s: trace request s mod R), arriving by the
    scenario's arrival process (archsim/serving/logical.py)."""
    from archsim.serving.logical import read_logical_sessions

    assert scn.trace is not None
    found = read_logical_sessions(scn.trace.path)
    if found.model and found.model != scn.model:
        raise ConfigError(f"the trace records model {found.model!r}: name it here", file=scn.file,
                          where="scenario.model.preset")
    templates = found.sessions
    counts = np.array([len(t.new_tokens) for t in templates], dtype=np.int64)
    rng = dict(zip(_STREAMS, np.random.default_rng(seed).spawn(len(_STREAMS)), strict=True))
    turns, starts = _sessions_and_starts(scn, n_requests, duration_ns, rng,
                                         lambda k: counts[np.arange(k) % len(templates)])
    shape = _Layout(turns)
    which = shape.session % len(templates)
    user = np.array([templates[w].new_tokens[t] for w, t in zip(which, shape.turn, strict=True)], dtype=np.int64)
    output = np.array([templates[w].output_tokens[t] for w, t in zip(which, shape.turn, strict=True)],
                      dtype=np.int64)
    think = np.zeros(shape.n)
    later = shape.turn > 0
    think[later] = scn.trace.think.sample(rng["think"], int(later.sum()))
    shared = found.shared_prefix_tokens
    prefix_group = np.zeros(shape.sessions, dtype=np.int64) if shared > 0 else np.full(shape.sessions, -1)
    return _assemble(scn, shape, starts, user, output, think, prefix_group, shared, rng, block_tokens)


def head(table: RequestTable, n: int) -> RequestTable:
    """The first n requests of a table (a prefix keeps every `prev` inside it)."""
    if n < 1:
        raise ConfigError("no request arrives within the duration", where="--duration")
    end = int(table.block_offsets[n])
    return RequestTable(table.arrival_ns[:n].copy(), table.prev[:n].copy(), table.think_ns[:n].copy(),
                        table.session[:n].copy(), table.turn[:n].copy(), table.input_tokens[:n].copy(),
                        table.output_tokens[:n].copy(), table.block_offsets[: n + 1].copy(),
                        table.block_keys[:end].copy(), table.block_tokens,
                        None if table.verifier is None else table.verifier[:n].copy())
