"""Analytic logical traces in the capture's schema, from a model shape alone (no torch).

Every workload is a list of steps (one forward pass each); a step is fully described by how many tokens
each request feeds, which KV slots they are written to, and which slot ranges the attention reads. The
records of a step come from the operator inventory in archsim.workloads.ops, so for the scenarios a
capture can run (prefill, decode, chat turns on a kept cache) the generator reproduces the capture's
bytes per kind, layer and step exactly; the tests hold it to that.

Workloads:
* prefill_trace   one prefill of `prompt_tokens` per request
* decode_trace    `steps` decode steps at batch B on a context of `context_tokens` already cached
* chat_trace      multi-turn chat; with reuse_prefix the KV cache survives between turns and each turn
                  prefills only its new tokens, without it every turn re-prefills the whole history
* reasoning_trace slow thinking as a depth-first tree search: every node decodes a segment; a step
                  reads the prompt, the KV segments of all its ancestors (revisited after each
                  backtrack) and its own segment so far. Abandoned branches keep their slots.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from archsim.errors import ConfigError
from archsim.limits import check_fits_memory
from archsim.models import ModelShape, dtype_bytes
from archsim.trace.logical import (
    DEFAULT_CHUNK_RECORDS,
    KIND_ACTIVATION,
    KIND_K,
    KIND_OTHER,
    KIND_V,
    KIND_WEIGHT,
    OP_READ,
    OP_WRITE,
    PHASE_DECODE,
    PHASE_PREFILL,
    LogicalTraceWriter,
    concat_columns,
)
from archsim.workloads.ops import (
    ATTENTION,
    CACHED,
    KV_CACHE,
    LAST,
    Op,
    layer_ops,
    model_epilogue,
    model_prologue,
)

ARTEFACTS = {
    "rules": "same recording rules as archsim.capture (see traces/FORMAT.md)",
    "moe": "routed-expert weight reads assume uniform routing: expected distinct experts "
    "E*(1-(1-k/E)^tokens), rounded",
    "padding": "none: every request of the batch has the same length",
}


@dataclass(frozen=True)
class StepSpec:
    """One forward pass: `new_tokens` per request written at slots [write_start, +new_tokens); the
    attention then reads the slot ranges in `read_ranges` (each (start, count))."""

    phase: int
    new_tokens: int
    write_start: int
    read_ranges: tuple[tuple[int, int], ...]


def expected_distinct_experts(experts: int, top_k: int, tokens: int) -> int:
    """Distinct experts hit by `tokens` tokens choosing top_k of `experts` uniformly (rounded)."""
    if experts == 0 or tokens == 0:
        return 0
    return min(experts, int(round(experts * (1.0 - (1.0 - top_k / experts) ** tokens))))


# (op, kind, head_start, head_count, token_start, token_count, bytes, operator, request)
_Row = tuple[int, int, int, int, int, int, int, int, int]


class _StepBuilder:
    """Builds the column arrays of one step for a fixed model, dtype and batch."""

    def __init__(self, shape: ModelShape, dtype: str, batch: int) -> None:
        self.shape, self.batch = shape, batch
        self.el = dtype_bytes(dtype)
        self.prologue = model_prologue(shape)
        self.epilogue = model_epilogue(shape)
        # consecutive layers with the same op list share one template (dense layers, then MoE layers)
        self.layer_groups: list[tuple[list[Op], list[int]]] = []
        for layer in range(shape.num_layers):
            ops = layer_ops(shape, layer)
            if self.layer_groups and [o.name for o in self.layer_groups[-1][0]] == [o.name for o in ops]:
                self.layer_groups[-1][1].append(layer)
            else:
                self.layer_groups.append((ops, [layer]))
        self.operators: list[str] = []
        self.operator_weight_bytes: dict[str, int] = {}
        for op in [*self.prologue, *(o for ops, _ in self.layer_groups for o in ops), *self.epilogue]:
            if op.name not in self.operator_weight_bytes:
                self.operators.append(op.name)
                self.operator_weight_bytes[op.name] = op.weight_elements * (
                    op.weight_element_bytes or self.el
                )
        self.index = {name: i for i, name in enumerate(self.operators)}

    def _op_rows(self, op: Op, spec: StepSpec) -> list[_Row]:
        b, t = self.batch, spec.new_tokens
        cached = sum(count for _, count in spec.read_ranges)
        index = self.index[op.name]
        if op.special == KV_CACHE:
            return self._kv_rows(index, spec)
        if op.special == ATTENTION:
            return self._attention_rows(index, spec)
        rows: list[_Row] = []
        weight_bytes = self.operator_weight_bytes[op.name]
        if op.row_elements:
            weight_bytes = b * t * op.row_elements * self.el
        elif op.routed_experts:
            picked = expected_distinct_experts(op.routed_experts, self.shape.num_experts_per_tok, b * t)
            weight_bytes = weight_bytes * picked // op.routed_experts
        rows.append((OP_READ, KIND_WEIGHT, -1, 0, -1, 0, weight_bytes, index, -1))
        tokens_by_basis = {LAST: b, CACHED: b * cached}
        for op_code, operands in ((OP_READ, op.reads), (OP_WRITE, op.writes)):
            for operand in operands:
                tokens = tokens_by_basis.get(operand.basis, b * t)
                nbytes = tokens * operand.width * (operand.element_bytes or self.el)
                kind = KIND_OTHER if operand.integer else KIND_ACTIVATION
                rows.append((op_code, kind, -1, 0, -1, 0, nbytes, index, -1))
        return rows

    def _kv_rows(self, index: int, spec: StepSpec) -> list[_Row]:
        s = self.shape
        heads, t = s.kv_cache_heads, spec.new_tokens
        rows: list[_Row] = []
        dims = ((KIND_K, s.k_cache_dim), (KIND_V, s.v_cache_dim))
        for kind, dim in dims:
            nbytes = heads * t * dim * self.el
            rows += [
                (OP_WRITE, kind, 0, heads, spec.write_start, t, nbytes, index, r) for r in range(self.batch)
            ]
        for kind, dim in dims:
            for request in range(self.batch):
                rows += [
                    (OP_READ, kind, 0, heads, start, count, heads * count * dim * self.el, index, request)
                    for start, count in spec.read_ranges
                ]
        return rows

    def _attention_rows(self, index: int, spec: StepSpec) -> list[_Row]:
        s = self.shape
        nh, t = s.num_attention_heads, spec.new_tokens
        q_bytes = nh * t * s.q_head_dim * self.el
        o_bytes = nh * t * s.out_head_dim * self.el
        rows: list[_Row] = []
        for request in range(self.batch):
            rows.append((OP_READ, KIND_ACTIVATION, 0, nh, spec.write_start, t, q_bytes, index, request))
            rows.append((OP_WRITE, KIND_ACTIVATION, 0, nh, spec.write_start, t, o_bytes, index, request))
        return rows

    def columns(self, step: int, spec: StepSpec) -> dict[str, np.ndarray]:
        blocks: list[tuple[np.ndarray, np.ndarray]] = []  # (rows, layer per row)

        def add(ops: list[Op], layers: list[int]) -> None:
            rows = [row for op in ops for row in self._op_rows(op, spec)]
            table = np.array(rows, dtype=np.int64).reshape(-1, 9)
            blocks.append((np.tile(table, (len(layers), 1)), np.repeat(np.array(layers), len(table))))

        add(self.prologue, [-1])
        for ops, layers in self.layer_groups:
            add(ops, layers)
        add(self.epilogue, [-1])
        table = np.concatenate([rows for rows, _ in blocks])
        n = len(table)
        return {
            "step": np.full(n, step),
            "phase": np.full(n, spec.phase),
            "op": table[:, 0],
            "kind": table[:, 1],
            "layer": np.concatenate([layers for _, layers in blocks]),
            "head_start": table[:, 2],
            "head_count": table[:, 3],
            "token_start": table[:, 4],
            "token_count": table[:, 5],
            "bytes": table[:, 6],
            "operator": table[:, 7],
            "request": table[:, 8],
        }


@dataclass
class GeneratedTrace:
    """A generated workload: header plus a lazy sequence of steps."""

    shape: ModelShape
    dtype: str
    batch: int
    steps: list[StepSpec]
    workload: dict[str, Any]
    shared_prefix_tokens: int = 0
    _builder: _StepBuilder | None = field(default=None, repr=False)

    @property
    def builder(self) -> _StepBuilder:
        if self._builder is None:
            self._builder = _StepBuilder(self.shape, self.dtype, self.batch)
        return self._builder

    def header(self) -> dict[str, Any]:
        return {
            "source": "generator",
            "model": {"name": self.shape.name, "kind": "shape", "shape": asdict(self.shape)},
            "dtype": self.dtype,
            "dtype_bytes": dtype_bytes(self.dtype),
            "shapes": {"batch": self.batch, **{k: v for k, v in self.workload.items() if k != "type"}},
            "workload": self.workload,
            "shared_prefix_tokens": self.shared_prefix_tokens,
            "artefacts": ARTEFACTS,
        }

    def iter_steps(self) -> Iterator[dict[str, np.ndarray]]:
        for step, spec in enumerate(self.steps):
            yield self.builder.columns(step, spec)

    def columns(self) -> dict[str, np.ndarray]:
        """All records in memory."""
        return concat_columns(list(self.iter_steps()))

    def write(self, path: str | Path, *, chunk_records: int = DEFAULT_CHUNK_RECORDS) -> Path:
        """Write the trace (streamed step by step, atomically)."""
        builder = self.builder
        with LogicalTraceWriter(
            path, self.header(), operators=builder.operators, chunk_records=chunk_records
        ) as writer:
            for name, size in builder.operator_weight_bytes.items():
                writer.operator_id(name, size)
            for columns in self.iter_steps():
                writer.append(columns)
        return Path(path)


# batch and step counts land in the logical trace's int32 `request` and `step` columns
_COUNT_MAX = 2**31 - 1


# a reasoning tree's thought tokens: the trace holds a step per token of every node
_TREE_TOKENS_MAX = 10_000_000
# what one step's description holds in memory while a trace is generated: a decode StepSpec with its slot range
# takes 280 B (tracemalloc over 100,000 of them)
_STEP_BYTES = 280


def _check_steps(steps: int, where: str) -> None:
    """Refuse a step count whose step descriptions alone would not fit this machine's memory."""
    check_fits_memory(steps, _STEP_BYTES, "steps", where=where)


def _positive(**values: int) -> None:
    for name, value in values.items():
        if value < 1:
            raise ConfigError(f"must be >= 1, got {value}", where=name)
        if value > _COUNT_MAX:
            raise ConfigError(f"{value:,} exceeds {_COUNT_MAX:,}, the largest count a logical trace's int32 columns "
                              "hold", where=name)


def prefill_trace(
    shape: ModelShape, *, batch: int, prompt_tokens: int, dtype: str = "bfloat16"
) -> GeneratedTrace:
    """One prefill step of `prompt_tokens` per request."""
    _positive(batch=batch, prompt_tokens=prompt_tokens)
    steps = [StepSpec(PHASE_PREFILL, prompt_tokens, 0, ((0, prompt_tokens),))]
    return GeneratedTrace(shape, dtype, batch, steps, {"type": "prefill", "prompt_tokens": prompt_tokens})


def decode_trace(
    shape: ModelShape, *, batch: int, context_tokens: int, steps: int = 1, dtype: str = "bfloat16"
) -> GeneratedTrace:
    """`steps` decode steps on `context_tokens` already in the cache (no prefill step)."""
    _positive(batch=batch, steps=steps)
    if not 0 <= context_tokens <= _COUNT_MAX - 1:
        raise ConfigError(f"must lie in [0, {_COUNT_MAX - 1:,}]: token positions land in the trace's int32 columns, "
                          f"got {context_tokens:,}", where="context_tokens")
    if context_tokens + steps > _COUNT_MAX:
        raise ConfigError(f"{context_tokens:,} cached tokens + {steps:,} steps pass {_COUNT_MAX:,}, the last token "
                          "position the trace's int32 columns hold", where="steps")
    _check_steps(steps, "steps")
    specs = [
        StepSpec(PHASE_DECODE, 1, context_tokens + i, ((0, context_tokens + i + 1),)) for i in range(steps)
    ]
    workload = {"type": "decode", "context_tokens": context_tokens, "steps": steps}
    return GeneratedTrace(shape, dtype, batch, specs, workload)


def chat_trace(
    shape: ModelShape,
    *,
    batch: int,
    prompt_tokens: int,
    reply_tokens: int,
    turns: int = 1,
    turn_tokens: int = 0,
    reuse_prefix: bool = True,
    shared_prefix_tokens: int = 0,
    dtype: str = "bfloat16",
) -> GeneratedTrace:
    """Multi-turn chat, step for step what `capture` runs with the same options.

    Turn 0 prefills `prompt_tokens` and decodes `reply_tokens` (one forward pass each; the last reply
    token is not fed back, as in the capture); every later turn feeds `turn_tokens` new tokens.
    """
    _positive(batch=batch, prompt_tokens=prompt_tokens, turns=turns)
    if turns > 1:
        _positive(turn_tokens=turn_tokens)
    if prompt_tokens + (turns - 1) * turn_tokens + turns * reply_tokens > _COUNT_MAX:
        raise ConfigError(f"the conversation's {prompt_tokens + (turns - 1) * turn_tokens + turns * reply_tokens:,} "
                          f"tokens exceed {_COUNT_MAX:,}, the largest position the trace's int32 token columns hold",
                          where="turns")
    _check_steps(turns * (1 + reply_tokens), "turns")
    if not 0 <= shared_prefix_tokens <= prompt_tokens:
        raise ConfigError(
            f"must lie in [0, {prompt_tokens}], got {shared_prefix_tokens}", where="shared_prefix_tokens"
        )
    specs: list[StepSpec] = []
    history = 0  # slots holding valid KV
    for turn in range(turns):
        fed = prompt_tokens if turn == 0 else turn_tokens
        if reuse_prefix or turn == 0:
            specs.append(StepSpec(PHASE_PREFILL, fed, history, ((0, history + fed),)))
        else:  # no prefix cache: the whole conversation so far is prefilled again from slot 0
            specs.append(StepSpec(PHASE_PREFILL, history + fed, 0, ((0, history + fed),)))
        history += fed
        for _ in range(reply_tokens):
            specs.append(StepSpec(PHASE_DECODE, 1, history, ((0, history + 1),)))
            history += 1
    workload = {
        "type": "chat",
        "prompt_tokens": prompt_tokens,
        "decode_steps": reply_tokens,
        "turns": turns,
        "turn_tokens": turn_tokens if turns > 1 else 0,
        "reuse_prefix": reuse_prefix,
    }
    return GeneratedTrace(shape, dtype, batch, specs, workload, shared_prefix_tokens)


def _merge(ranges: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Join adjacent slot ranges (a first child's segment directly follows its parent's)."""
    merged: list[list[int]] = []
    for start, count in ranges:
        if count == 0:
            continue
        if merged and merged[-1][0] + merged[-1][1] == start:
            merged[-1][1] += count
        else:
            merged.append([start, count])
    return tuple((start, count) for start, count in merged)


def reasoning_trace(
    shape: ModelShape,
    *,
    batch: int,
    prompt_tokens: int,
    depth: int,
    fanout: int,
    segment_tokens: int,
    dtype: str = "bfloat16",
) -> GeneratedTrace:
    """Slow-thinking tree search: DFS over a `fanout`-ary tree of `depth` levels of thought segments."""
    _positive(
        batch=batch, prompt_tokens=prompt_tokens, depth=depth, fanout=fanout, segment_tokens=segment_tokens
    )
    nodes, level_nodes = 0, 1
    for _level in range(depth):  # stops as soon as the tree is too large (fanout ** depth may be astronomical)
        level_nodes *= fanout
        nodes += level_nodes
        if nodes * segment_tokens > _TREE_TOKENS_MAX:
            raise ConfigError(f"a tree of fanout {fanout} and depth {depth} holds more than {_TREE_TOKENS_MAX:,} "
                              f"tokens of {segment_tokens}-token segments", where="depth")
    specs = [StepSpec(PHASE_PREFILL, prompt_tokens, 0, ((0, prompt_tokens),))]
    next_slot = prompt_tokens
    # DFS with an explicit stack of (level, ancestor segment ranges)
    stack: list[tuple[int, list[tuple[int, int]]]] = [(1, []) for _ in range(fanout)]
    while stack:
        level, ancestors = stack.pop()
        start = next_slot
        next_slot += segment_tokens
        for j in range(segment_tokens):
            reads = _merge([(0, prompt_tokens), *ancestors, (start, j + 1)])
            specs.append(StepSpec(PHASE_DECODE, 1, start + j, reads))
        if level < depth:
            mine = [*ancestors, (start, segment_tokens)]
            stack.extend((level + 1, mine) for _ in range(fanout))
    workload = {
        "type": "reasoning",
        "prompt_tokens": prompt_tokens,
        "depth": depth,
        "fanout": fanout,
        "segment_tokens": segment_tokens,
        "nodes": nodes,
    }
    return GeneratedTrace(shape, dtype, batch, specs, workload)


def decode_step_bytes(
    shape: ModelShape, *, batch: int, context_tokens: int, dtype: str = "bfloat16"
) -> dict[str, int]:
    """Closed-form bytes of one decode step with `context_tokens` cached before it (an oracle for tests).

    weight: every parameter once (embedding: one row per request; routed experts by expected use);
    k / v read: the whole cache after the write; k / v written: one token per request and layer.
    """
    el = dtype_bytes(dtype)
    s = shape
    total_tokens = context_tokens + 1
    k_read = batch * s.num_layers * s.kv_cache_heads * s.k_cache_dim * total_tokens * el
    v_read = batch * s.num_layers * s.kv_cache_heads * s.v_cache_dim * total_tokens * el
    weights = 0
    builder = _StepBuilder(s, dtype, batch)
    for ops, layers in builder.layer_groups:
        for op in ops:
            if op.routed_experts:
                picked = expected_distinct_experts(op.routed_experts, s.num_experts_per_tok, batch)
                weights += len(layers) * builder.operator_weight_bytes[op.name] * picked // op.routed_experts
            else:
                weights += len(layers) * builder.operator_weight_bytes[op.name]
    weights += batch * s.hidden_size * el  # embedding rows
    weights += builder.operator_weight_bytes["model.norm"] + builder.operator_weight_bytes["lm_head"]
    return {
        "weight_read": weights,
        "k_read": k_read,
        "v_read": v_read,
        "k_written": batch * s.num_layers * s.kv_cache_heads * s.k_cache_dim * el,
        "v_written": batch * s.num_layers * s.kv_cache_heads * s.v_cache_dim * el,
    }
