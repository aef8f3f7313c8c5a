"""Analytic generators: byte counts against closed forms and published parameter counts, workload shapes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from archsim.errors import ConfigError
from archsim.models import list_presets, load_preset
from archsim.trace.logical import KIND_K, KIND_V, KIND_WEIGHT, OP_READ, OP_WRITE, PHASE_PREFILL, LogicalTrace
from archsim.workloads import (
    chat_trace,
    decode_step_bytes,
    decode_trace,
    expected_distinct_experts,
    prefill_trace,
    reasoning_trace,
)

pytestmark = pytest.mark.unit

# Published parameter counts (model cards / safetensors index): the generator's weight bytes must agree.
PUBLISHED_PARAMETERS = {"llama-3.1-8b": 8_030_261_248, "llama-2-7b": 6_738_415_616, "qwen2.5-7b": 7_615_616_512}


def _sum(cols: dict[str, np.ndarray], **match: int) -> int:
    mask = np.ones(len(cols["step"]), dtype=bool)
    for name, value in match.items():
        mask &= cols[name] == value
    return int(cols["bytes"][mask].sum())


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMETERS))
def test_decode_weight_bytes_match_published_parameter_counts(name: str) -> None:
    shape = load_preset(name).shape()
    batch = 4
    cols = decode_trace(shape, batch=batch, context_tokens=100, dtype="bfloat16").columns()
    weight_bytes = _sum(cols, kind=KIND_WEIGHT)
    embedding = shape.vocab_size * shape.hidden_size
    # every parameter once, except the embedding table, of which each request reads one row
    expected = 2 * (PUBLISHED_PARAMETERS[name] - embedding) + 2 * batch * shape.hidden_size
    assert weight_bytes == expected


def test_decode_kv_bytes_closed_form() -> None:
    shape = load_preset("llama-3.1-70b").shape()
    batch, context = 8, 32768
    cols = decode_trace(shape, batch=batch, context_tokens=context, steps=2).columns()
    per_token = shape.num_layers * shape.num_kv_heads * shape.head_dim * 2  # one of K or V, bf16
    for step in (0, 1):
        tokens = context + step + 1
        assert _sum(cols, step=step, kind=KIND_K, op=OP_READ) == batch * tokens * per_token
        assert _sum(cols, step=step, kind=KIND_V, op=OP_READ) == batch * tokens * per_token
        assert _sum(cols, step=step, kind=KIND_K, op=OP_WRITE) == batch * per_token
    # 70B at 32K: 10 GiB of KV per request read every step (the number that motivates the pool)
    assert _sum(cols, step=0, kind=KIND_K, op=OP_READ) * 2 / batch / 2**30 == pytest.approx(10.0, rel=1e-3)


def test_decode_step_bytes_oracle_agrees_with_records() -> None:
    for name in ("qwen2.5-7b", "deepseek-v2-lite", "qwen3-8b"):
        shape = load_preset(name).shape()
        cols = decode_trace(shape, batch=3, context_tokens=500).columns()
        oracle = decode_step_bytes(shape, batch=3, context_tokens=500)
        assert oracle["weight_read"] == _sum(cols, kind=KIND_WEIGHT)
        assert oracle["k_read"] == _sum(cols, kind=KIND_K, op=OP_READ)
        assert oracle["v_written"] == _sum(cols, kind=KIND_V, op=OP_WRITE)


def test_mla_caches_the_latent() -> None:
    shape = load_preset("deepseek-v2-lite").shape()
    cols = decode_trace(shape, batch=1, context_tokens=999).columns()
    # 512 latent + 64 RoPE elements per token per layer: 27 x 576 x 2 B x 1000 tokens
    assert _sum(cols, kind=KIND_K, op=OP_READ) + _sum(cols, kind=KIND_V, op=OP_READ) == 27 * 576 * 2 * 1000
    kv = (cols["kind"] == KIND_K) | (cols["kind"] == KIND_V)
    assert set(cols["head_count"][kv].tolist()) == {1}


def test_expected_distinct_experts() -> None:
    assert expected_distinct_experts(64, 6, 1) == 6
    assert expected_distinct_experts(64, 6, 1000) == 64
    assert 6 < expected_distinct_experts(64, 6, 8) < 48


def test_prefill_is_one_step() -> None:
    shape = load_preset("tiny-qwen2").shape()
    cols = prefill_trace(shape, batch=2, prompt_tokens=40, dtype="float32").columns()
    assert set(cols["phase"].tolist()) == {PHASE_PREFILL} and set(cols["step"].tolist()) == {0}
    per_token = shape.num_layers * shape.num_kv_heads * shape.head_dim * 4
    assert _sum(cols, kind=KIND_K, op=OP_WRITE) == 2 * 40 * per_token


def test_chat_reuse_prefix_saves_prefill_work() -> None:
    shape = load_preset("tiny-llama").shape()
    kwargs = {"batch": 1, "prompt_tokens": 64, "reply_tokens": 8, "turns": 3, "turn_tokens": 16}
    reuse = chat_trace(shape, reuse_prefix=True, **kwargs).columns()
    again = chat_trace(shape, reuse_prefix=False, **kwargs).columns()
    per_token = shape.num_layers * shape.num_kv_heads * shape.head_dim * 2
    # with reuse each turn writes only its new tokens; without it turn t rewrites the whole history
    assert _sum(reuse, kind=KIND_K, op=OP_WRITE) == (64 + 8 + 16 + 8 + 16 + 8) * per_token
    assert _sum(again, kind=KIND_K, op=OP_WRITE) == (64 + 8 + 88 + 8 + 112 + 8) * per_token
    # the last decode step reads the same history in both
    last = int(reuse["step"].max())
    assert _sum(reuse, step=last, kind=KIND_K, op=OP_READ) == _sum(again, step=last, kind=KIND_K, op=OP_READ)


def test_reasoning_revisits_ancestor_segments() -> None:
    shape = load_preset("tiny-llama").shape()
    prompt, seg, depth, fanout = 10, 4, 3, 2
    generated = reasoning_trace(shape, batch=1, prompt_tokens=prompt, depth=depth, fanout=fanout,
                                segment_tokens=seg)
    nodes = fanout + fanout**2 + fanout**3
    assert len(generated.steps) == 1 + nodes * seg
    slots_written = sorted(s.write_start for s in generated.steps[1:])
    assert slots_written == list(range(prompt, prompt + nodes * seg))  # every node keeps its own slots
    for spec in generated.steps[1:]:
        starts = [start for start, _ in spec.read_ranges]
        assert starts[0] == 0 and starts == sorted(starts)
        ends = [start + count for start, count in spec.read_ranges]
        assert all(e <= s for e, s in zip(ends, starts[1:], strict=False))  # disjoint, ascending
        # prompt + ancestors + own tokens so far: depth of the node decides the length
        level_tokens = sum(count for _, count in spec.read_ranges) - prompt
        assert 1 <= level_tokens <= depth * seg
    # a deepest node reads prompt + 2 ancestor segments + its own tokens, some of them non-adjacent
    assert any(len(spec.read_ranges) == 3 for spec in generated.steps)
    cols = generated.columns()
    per_token = shape.num_layers * shape.num_kv_heads * shape.head_dim * 2
    expected = sum(sum(c for _, c in spec.read_ranges) for spec in generated.steps) * per_token
    assert _sum(cols, kind=KIND_K, op=OP_READ) == expected


def test_generated_trace_file(tmp_path: Path) -> None:
    shape = load_preset("tiny-deepseek-v2").shape()
    generated = chat_trace(shape, batch=2, prompt_tokens=8, reply_tokens=2, turns=2, turn_tokens=3,
                           shared_prefix_tokens=4)
    path = generated.write(tmp_path / "g.npz", chunk_records=100)
    with LogicalTrace(path) as trace:
        assert trace.header["source"] == "generator"
        assert trace.header["shared_prefix_tokens"] == 4
        assert trace.header["model"]["shape"]["attention"] == "mla"
        back = trace.read()
    cols = generated.columns()
    for name, values in cols.items():
        np.testing.assert_array_equal(back[name], values.astype(back[name].dtype))


def test_bad_generator_input() -> None:
    shape = load_preset("tiny-llama").shape()
    with pytest.raises(ConfigError) as info:
        decode_trace(shape, batch=0, context_tokens=10)
    assert info.value.where == "batch"
    with pytest.raises(ConfigError):
        chat_trace(shape, batch=1, prompt_tokens=8, reply_tokens=1, shared_prefix_tokens=9)
    with pytest.raises(ConfigError):
        reasoning_trace(shape, batch=1, prompt_tokens=8, depth=20, fanout=4, segment_tokens=100)
    with pytest.raises(ConfigError, match="dtype"):
        decode_trace(shape, batch=1, context_tokens=1, dtype="int8").columns()


@pytest.mark.parametrize("name", list_presets())
def test_every_preset_generates(name: str) -> None:
    shape = load_preset(name).shape()
    cols = decode_trace(shape.with_layers(min(shape.num_layers, 3)), batch=1, context_tokens=4).columns()
    assert _sum(cols, kind=KIND_WEIGHT) > 0 and _sum(cols, kind=KIND_K, op=OP_READ) > 0
