"""Logical traces as serving requests: every request, turn and shared prefix of the shipped traces becomes a
session of the RequestTable, with arrivals from the scenario's process."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from archsim.errors import ConfigError, TraceError
from archsim.resources import data_path
from archsim.serving.logical import read_logical_sessions
from archsim.serving.scenario import load_scenario

pytestmark = pytest.mark.unit


def _scenario(tmp_path, trace: str, model: str, **requests):
    body = {"name": "lg", "model": {"preset": model, "source": "t"},
            "arrivals": {"process": "poisson", "rate_per_s": 5.0, "source": "t"},
            "requests": {"trace": str(data_path("traces", trace)), "format": "logical", "source": "t", **requests}}
    path = tmp_path / "lg.yaml"
    path.write_text(yaml.safe_dump({"scenario": body}))
    return load_scenario(path)


def test_chat_turns_become_chained_requests(tmp_path):
    found = read_logical_sessions(data_path("traces", "tiny-llama_chat.npz"))
    assert found.model == "tiny-llama" and found.shared_prefix_tokens == 0
    assert [s.new_tokens for s in found.sessions] == [(16, 8, 8)] * 2  # prompt 16, then 8 tokens per turn
    assert [s.output_tokens for s in found.sessions] == [(8, 8, 8)] * 2  # 8 decode steps per turn
    t = _scenario(tmp_path, "tiny-llama_chat.npz", "tiny-llama", think_time="2s").requests(n_requests=8, seed=1,
                                                                                           block_tokens=4)
    assert t.input_tokens.tolist() == [16, 32, 48, 16, 32, 48, 16, 32]  # prompt + answer + new, turn by turn
    assert t.prev.tolist() == [-1, 0, 1, -1, 3, 4, -1, 6]
    assert t.think_ns.tolist() == [0, 2e9, 2e9, 0, 2e9, 2e9, 0, 2e9]
    for i in (1, 2, 4, 5, 7):
        history = t.kv_keys_after(i - 1)
        assert np.array_equal(history, t.keys(i)[:len(history)])
    assert t.keys(0)[0] != t.keys(3)[0]  # sessions replaying the same trace request are different users


def test_the_shared_prefix_is_shared_by_every_session(tmp_path):
    found = read_logical_sessions(data_path("traces", "qwen2.5-0.5b_2l_decode.npz"))
    assert found.shared_prefix_tokens == 32 and len(found.sessions) == 4
    assert all(s.new_tokens == (32,) and s.output_tokens == (32,) for s in found.sessions)
    t = _scenario(tmp_path, "qwen2.5-0.5b_2l_decode.npz", "qwen2.5-0.5b").requests(n_requests=10, seed=0,
                                                                                     block_tokens=16)
    assert (t.input_tokens == 64).all() and (t.output_tokens == 32).all() and (t.prev == -1).all()
    heads = np.array([t.keys(i)[:2] for i in range(10)])  # 32 shared tokens: two full blocks
    assert (heads == heads[0]).all()
    assert len({int(t.keys(i)[2]) for i in range(10)}) == 10
    gaps = np.diff(t.arrival_ns)
    assert t.arrival_ns[0] == 0 and (gaps > 0).all()  # the scenario's Poisson arrivals


def test_trace_and_scenario_must_agree(tmp_path):
    with pytest.raises(ConfigError) as err:
        _scenario(tmp_path, "tiny-llama_chat.npz", "llama-3.1-8b").requests(n_requests=2)
    assert err.value.where == "scenario.model.preset" and "tiny-llama" in err.value.detail
    with pytest.raises(ConfigError) as err:
        _scenario(tmp_path, "tiny-llama_chat.npz", "tiny-llama", hash_block_tokens=512)
    assert err.value.where == "scenario.requests.hash_block_tokens" and "only for format: mooncake" in err.value.detail


def test_a_broken_trace_names_its_file(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"PK\x03\x04 not a zip archive")
    with pytest.raises(TraceError) as err:
        read_logical_sessions(bad)
    assert err.value.file == str(bad) and "\n" not in str(err.value)
