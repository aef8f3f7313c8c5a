"""What users send, as arrays: `RequestTable` (one row per request, no per-request Python objects).

A request's prompt is described by its content: an ordered list of *segments* (a shared prefix, a session's
earlier user turns and outputs, the new user tokens), each a 64-bit content id and a token count. Its KV
blocks of `block_tokens` tokens get content-chained keys, as vLLM's prefix hashing does: the key of a full
block is a function of every token before its end (the complete segments before it, by id and length, then
the id of the segment it ends in and how far into it it ends). Equal content before a block's end gives equal
keys; a block after any difference differs. Only full blocks are shareable: the last, partial block of a
prompt gets a key unique to its request. The mix is splitmix64 (fixed constants, numpy uint64 arithmetic),
never Python's `hash()`, which is salted per process.

A later turn (`prev >= 0`) has arrival NaN: it arrives `think_ns` after the last token of request `prev`,
which only the engine knows. `prev` is the request a row waits for: the previous turn of its session, or, in
a closed loop, the same user's previous request (then `session` differs and `turn` restarts at 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
# domain tags keep keys of different kinds apart (arbitrary fixed odd constants)
CHAIN_SEED = np.uint64(0x5EED0C0FFEE1D5A1)
PARTIAL_TAG = np.uint64(0x7A121A1B10C4E7F3)
KEY_CHUNK_BLOCKS = 1 << 22  # blocks keyed per numpy pass (about 32 MiB per temporary array)


def splitmix64(x: np.ndarray | np.uint64 | int) -> np.ndarray:
    """The splitmix64 finalizer applied element-wise (uint64 in, uint64 out; wraps modulo 2^64)."""
    z = np.asarray(x, dtype=np.uint64) + _GOLDEN
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def mix(h: np.ndarray | np.uint64 | int, v: np.ndarray | np.uint64 | int) -> np.ndarray:
    """Chain value `v` into hash `h` (element-wise, broadcasting): order matters, mix(a, b) != mix(b, a)."""
    return splitmix64(splitmix64(np.asarray(h, dtype=np.uint64)) ^ np.asarray(v, dtype=np.uint64))


def content_id(*parts: int) -> np.uint64:
    """A 64-bit content id for a tuple of non-negative ints (e.g. (kind tag, session, turn))."""
    h = np.uint64(CHAIN_SEED)
    for p in parts:
        h = mix(h, np.uint64(p))
    return np.uint64(h)


def _blocks_per_request(input_tokens: np.ndarray, block_tokens: int) -> np.ndarray:
    return (input_tokens + block_tokens - 1) // block_tokens


def block_offsets_for(input_tokens: np.ndarray, block_tokens: int) -> np.ndarray:
    """int64[n+1]: where each request's keys start in `block_keys` (ceil(input / block_tokens) each)."""
    offsets = np.zeros(len(input_tokens) + 1, dtype=np.int64)
    np.cumsum(_blocks_per_request(np.asarray(input_tokens, dtype=np.int64), block_tokens), out=offsets[1:])
    return offsets


def partial_keys(requests: np.ndarray) -> np.ndarray:
    """Keys of the last partial blocks of `requests` (indices): unique to each request of the table."""
    return mix(PARTIAL_TAG, np.asarray(requests, dtype=np.uint64))


def keys_from_segments(seg_offsets: np.ndarray, seg_ids: np.ndarray, seg_tokens: np.ndarray,
                       block_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Content-chained block keys of n prompts given as segments.

    Request i's prompt is segments seg_offsets[i]:seg_offsets[i+1] (ids uint64, token counts int64 > 0) in
    order; its length is their sum. Returns (block_offsets int64[n+1], block_keys uint64[...]).
    """
    seg_offsets = np.asarray(seg_offsets, dtype=np.int64)
    ids = np.asarray(seg_ids, dtype=np.uint64)
    lens = np.asarray(seg_tokens, dtype=np.int64)
    n = len(seg_offsets) - 1
    if np.any(lens <= 0):
        raise ValueError("every segment must hold at least one token")
    counts = np.diff(seg_offsets)
    if np.any(counts <= 0):
        raise ValueError("every request needs at least one segment")
    seg_end = np.cumsum(lens)  # global token position after each segment (prompts laid end to end)
    seg_start = seg_end - lens
    input_tokens = seg_end[seg_offsets[1:] - 1] - seg_start[seg_offsets[:-1]]
    # chain over complete segments: inside[m] = hash of the request's segments before m (ids and lengths)
    # and of m's id; a block ending `into` tokens into segment m has key mix(inside[m], into)
    inside = np.empty(len(ids), dtype=np.uint64)
    first = seg_offsets[:-1]
    for j in range(int(counts.max(initial=0))):
        rows = first[counts > j] + j
        before = CHAIN_SEED if j == 0 else mix(inside[rows - 1], lens[rows - 1])
        inside[rows] = mix(before, ids[rows])
    offsets = block_offsets_for(input_tokens, block_tokens)
    keys = np.empty(int(offsets[-1]), dtype=np.uint64)
    prompt_start = seg_start[seg_offsets[:-1]]  # global position of each prompt's first token
    r0 = 0
    while r0 < n:  # requests in chunks of about KEY_CHUNK_BLOCKS blocks: bounded temporaries
        r1 = max(r0 + 1, int(np.searchsorted(offsets, offsets[r0] + KEY_CHUNK_BLOCKS, side="right")) - 1)
        r1 = min(r1, n)
        lo, hi = int(offsets[r0]), int(offsets[r1])
        req = np.repeat(np.arange(r0, r1, dtype=np.int64), np.diff(offsets[r0:r1 + 1]))
        end = (np.arange(lo, hi, dtype=np.int64) - offsets[req] + 1) * block_tokens  # prompt position after it
        full = end <= input_tokens[req]
        last = prompt_start[req[full]] + end[full] - 1
        m = np.searchsorted(seg_end, last, side="right")
        chunk = np.empty(hi - lo, dtype=np.uint64)
        chunk[full] = mix(inside[m], last + 1 - seg_start[m])
        chunk[~full] = partial_keys(req[~full])
        keys[lo:hi] = chunk
        r0 = r1
    return offsets, keys


@dataclass(frozen=True)
class RequestTable:
    arrival_ns: np.ndarray      # float64[n]; absolute for first turns / open-loop requests; NaN for a later
                                # turn, whose arrival = last-token time of `prev` + think_ns (the engine sets it)
    prev: np.ndarray            # int64[n]; the request this one waits for (previous turn of its session), -1 if none
    think_ns: np.ndarray        # float64[n]; 0 where prev == -1
    session: np.ndarray         # int64[n]
    turn: np.ndarray            # int32[n], 0-based
    input_tokens: np.ndarray    # int64[n]; the WHOLE prompt: shared prefix + session history + new tokens
    output_tokens: np.ndarray   # int64[n]
    block_offsets: np.ndarray   # int64[n+1]
    block_keys: np.ndarray      # uint64[...]; request i's prompt KV blocks, ceil(input_tokens/block_tokens)
    block_tokens: int
    verifier: np.ndarray | None = None  # bool[n]: rows a tree's own verifier model runs (None: no such rows)

    def __post_init__(self) -> None:
        _validate(self)

    def __len__(self) -> int:
        return len(self.arrival_ns)

    def keys(self, i: int) -> np.ndarray:
        """Request i's prompt block keys (a view)."""
        return self.block_keys[self.block_offsets[i]:self.block_offsets[i + 1]]

    def next_turn(self) -> np.ndarray:
        """int64[n]: the request that waits for request i (its `prev` is i), -1 if none."""
        nxt = np.full(len(self), -1, dtype=np.int64)
        waiting = np.flatnonzero(self.prev >= 0)
        nxt[self.prev[waiting]] = waiting
        return nxt

    def kv_keys_after(self, i: int, next_turn: np.ndarray | None = None) -> np.ndarray:
        """Keys of the full blocks of request i's KV once it has finished, as a later request can find them:
        the prompt and every answer token but the last (generated, never fed, so it has no KV yet). The next
        turn of its session carries them as its first blocks; without one, only the prompt's full blocks have
        content another request may share."""
        nxt = (self.next_turn() if next_turn is None else next_turn)[i]
        if nxt >= 0 and self.session[nxt] == self.session[i]:
            full = (self.input_tokens[i] + self.output_tokens[i] - 1) // self.block_tokens
            return self.keys(int(nxt))[:full]
        return self.keys(i)[: self.input_tokens[i] // self.block_tokens]

    @classmethod
    def from_segments(cls, *, arrival_ns: np.ndarray, prev: np.ndarray, think_ns: np.ndarray, session: np.ndarray,
                      turn: np.ndarray, output_tokens: np.ndarray, seg_offsets: np.ndarray, seg_ids: np.ndarray,
                      seg_tokens: np.ndarray, block_tokens: int,
                      verifier: np.ndarray | None = None) -> RequestTable:
        """A table whose prompts are given as content segments (input_tokens = their sums)."""
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
        offsets, keys = keys_from_segments(seg_offsets, seg_ids, seg_tokens, block_tokens)
        seg_offsets = np.asarray(seg_offsets, dtype=np.int64)
        sums = np.add.reduceat(np.asarray(seg_tokens, dtype=np.int64), seg_offsets[:-1]) if len(seg_offsets) > 1 \
            else np.zeros(0, dtype=np.int64)
        return cls(np.asarray(arrival_ns, dtype=np.float64), np.asarray(prev, dtype=np.int64),
                   np.asarray(think_ns, dtype=np.float64), np.asarray(session, dtype=np.int64),
                   np.asarray(turn, dtype=np.int32), sums.astype(np.int64),
                   np.asarray(output_tokens, dtype=np.int64), offsets, keys, int(block_tokens), verifier)


_DTYPES = {"arrival_ns": np.float64, "prev": np.int64, "think_ns": np.float64, "session": np.int64,
           "turn": np.int32, "input_tokens": np.int64, "output_tokens": np.int64}


def _validate(t: RequestTable) -> None:
    """The table's invariants (a violation is a bug in whoever built it: ValueError naming the first row)."""
    n = len(t.arrival_ns)
    for name, dtype in _DTYPES.items():
        a = getattr(t, name)
        if not isinstance(a, np.ndarray) or a.dtype != dtype or a.shape != (n,):
            raise ValueError(f"RequestTable.{name} must be {np.dtype(dtype).name}[{n}]")
    if t.verifier is not None and (t.verifier.dtype != np.bool_ or t.verifier.shape != (n,)):
        raise ValueError(f"RequestTable.verifier must be bool[{n}]")
    if not isinstance(t.block_tokens, int) or t.block_tokens < 1:
        raise ValueError(f"block_tokens must be a positive int, got {t.block_tokens!r}")
    if t.block_offsets.dtype != np.int64 or t.block_offsets.shape != (n + 1,) or t.block_keys.dtype != np.uint64:
        raise ValueError("block_offsets must be int64[n+1] and block_keys uint64")

    def bad(mask: np.ndarray, what: str) -> None:
        rows = np.flatnonzero(mask)
        if len(rows):
            raise ValueError(f"request {rows[0]}: {what}")

    bad(t.input_tokens < 1, "input_tokens must be >= 1")
    bad(t.output_tokens < 1, "output_tokens must be >= 1")
    bad(t.session < 0, "session must be >= 0")
    bad((t.prev < -1) | (t.prev >= np.arange(n)), "prev must be -1 or an earlier request")
    first = t.prev < 0
    bad(first & ~(np.isfinite(t.arrival_ns) & (t.arrival_ns >= 0)), "a first request needs a finite arrival >= 0")
    bad(~first & ~np.isnan(t.arrival_ns), "a request with prev >= 0 has arrival NaN (the engine sets it)")
    bad(~np.isfinite(t.think_ns) | (t.think_ns < 0) | (first & (t.think_ns != 0)),
        "think_ns must be finite, >= 0, and 0 where prev == -1")
    first_rows = np.flatnonzero(first)
    earlier = np.zeros(n, dtype=bool)
    earlier[first_rows[1:]] = np.diff(t.arrival_ns[first_rows]) < 0
    bad(earlier, "arrives before an earlier row's first request (first arrivals must not decrease in row order)")
    waited = t.prev[~first]  # several may wait for one: the rows a program forks from it
    same = np.zeros(n, dtype=bool)
    same[~first] = t.session[~first] == t.session[waited]
    expected = np.zeros(n, dtype=np.int64)
    expected[same] = t.turn[t.prev[same]].astype(np.int64) + 1
    bad(t.turn.astype(np.int64) != expected, "turn must be 0 for a session's first request, else prev's turn + 1")
    if t.block_offsets[0] != 0 or np.any(np.diff(t.block_offsets) != _blocks_per_request(t.input_tokens,
                                                                                         t.block_tokens)):
        raise ValueError("block_offsets must give ceil(input_tokens / block_tokens) keys per request")
    if t.block_offsets[-1] != len(t.block_keys):
        raise ValueError(f"block_keys holds {len(t.block_keys)} keys, block_offsets ends at {t.block_offsets[-1]}")
