"""Scenarios: every shipped one loads and draws deterministically; arrival processes keep their rate and CV;
closed loops and multi-turn sessions chain correctly; shared prefixes share keys; bad input is one line
naming the file and the dotted key."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from archsim.errors import ConfigError
from archsim.serving.scenario import SCENARIOS_DIR, load_scenario, scenario_from_mapping, scenario_overrides

pytestmark = pytest.mark.unit

SHIPPED = ("fixed-input", "multiturn", "shared-prefix", "reasoning", "mooncake-sample", "long-short-mix",
           "speculative", "tree-search")
MODEL = {"preset": "llama-3.1-70b", "source": "test"}


def _scenario(tmp_path: Path | None = None, **parts):
    body = {"name": "t", "model": MODEL, "arrivals": {"process": "poisson", "rate_per_s": 10.0, "source": "test"},
            "input": {"dist": "fixed", "value": 100, "source": "test"},
            "output": {"dist": "fixed", "value": 10, "source": "test"}}
    body.update(parts)
    body = {k: v for k, v in body.items() if v is not None}
    if tmp_path is None:
        return scenario_from_mapping({"scenario": body}, file="t.yaml")
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"scenario": body}))
    return load_scenario(path)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_scenarios_draw_the_same_arrays_for_a_seed(name):
    scn = load_scenario(name)
    n = 300 if name == "mooncake-sample" else 500
    a, b = scn.requests(n_requests=n, seed=7), scn.requests(n_requests=n, seed=7)
    assert len(a) == n
    for field in ("arrival_ns", "prev", "think_ns", "session", "turn", "input_tokens", "output_tokens",
                  "block_offsets", "block_keys"):
        assert np.array_equal(getattr(a, field), getattr(b, field), equal_nan=True), field
    if name not in ("fixed-input", "mooncake-sample", "speculative", "tree-search"):  # no random lengths
        c = scn.requests(n_requests=n, seed=8)
        assert not all(np.array_equal(getattr(a, f), getattr(c, f), equal_nan=True)
                       for f in ("arrival_ns", "input_tokens", "output_tokens", "think_ns"))


def test_shipped_scenarios_cite_every_part():
    for path in sorted(SCENARIOS_DIR.glob("*.yaml")):
        body = yaml.safe_load(path.read_text())["scenario"]
        for key, part in body.items():
            if isinstance(part, dict):
                assert str(part.get("source", "")).strip(), f"{path.name}: scenario.{key} has no source"
    assert {p.stem for p in SCENARIOS_DIR.glob("*.yaml")} == set(SHIPPED)


def test_poisson_keeps_its_rate_and_exponential_gaps():
    t = _scenario(arrivals={"process": "poisson", "rate_per_s": 4.0, "source": "t"}).requests(n_requests=20000,
                                                                                              seed=3)
    gaps = np.diff(t.arrival_ns) / 1e9
    assert t.arrival_ns[0] == 0.0 and np.all(gaps >= 0)
    assert abs(1 / gaps.mean() / 4.0 - 1) < 0.03
    assert abs(gaps.std() / gaps.mean() - 1) < 0.03  # an exponential's CV is 1


def test_gamma_keeps_its_rate_and_cv():
    t = _scenario(arrivals={"process": "gamma", "rate_per_s": 2.0, "cv": 3.0, "source": "t"}).requests(
        n_requests=40000, seed=5)
    gaps = np.diff(t.arrival_ns) / 1e9
    assert abs(1 / gaps.mean() / 2.0 - 1) < 0.05
    assert abs(gaps.std() / gaps.mean() / 3.0 - 1) < 0.05


def test_duration_keeps_every_session_that_starts_within_it():
    scn = _scenario(arrivals={"process": "poisson", "rate_per_s": 50.0, "source": "t"})
    t = scn.requests(duration_ns=60e9, seed=1)
    assert t.arrival_ns.max() < 60e9
    assert abs(len(t) / 60 / 50 - 1) < 0.05
    with pytest.raises(ConfigError, match="exactly one"):
        scn.requests(n_requests=5, duration_ns=1e9)


def test_closed_loop_chains_each_users_requests():
    scn = _scenario(arrivals={"process": "closed_loop", "users": 3, "think_time": "2s", "source": "t"})
    t = scn.requests(n_requests=10, seed=0)
    assert t.arrival_ns[:3].tolist() == [0.0, 0.0, 0.0]
    assert np.isnan(t.arrival_ns[3:]).all()
    assert t.prev.tolist() == [-1, -1, -1, 0, 1, 2, 3, 4, 5, 6]  # user u sends rows u, u + 3, u + 6, ...
    assert t.think_ns[3:].tolist() == [2e9] * 7 and t.think_ns[:3].tolist() == [0.0] * 3
    assert len(set(t.session.tolist())) == 10 and (t.turn == 0).all()  # separate requests, no history kept
    with pytest.raises(ConfigError, match="closed loop") as err:
        scn.requests(duration_ns=1e9)
    assert err.value.where == "scenario.arrivals.process"


def test_multiturn_sessions_keep_their_history():
    scn = _scenario(sessions={"turns": 4, "new_tokens": {"dist": "uniform", "min": 5, "max": 50},
                              "think_time": {"dist": "exponential", "mean": "10s"}, "source": "t"},
                    output={"dist": "uniform", "min": 1, "max": 40, "source": "t"})
    t = scn.requests(n_requests=4 * 50 + 2, seed=11)  # 50 whole sessions and a cut one of 2 turns
    assert len(t) == 202 and t.session.max() == 50 and (t.session == 50).sum() == 2
    later = np.flatnonzero(t.turn > 0)
    assert np.array_equal(t.prev[later], later - 1)
    assert np.isnan(t.arrival_ns[later]).all() and np.isfinite(t.arrival_ns[t.turn == 0]).all()
    assert (t.think_ns[later] > 0).all() and (t.think_ns[t.turn == 0] == 0).all()
    assert abs(t.think_ns[later].mean() / 10e9 - 1) < 0.15  # 152 exponential draws of mean 10 s
    grown = t.input_tokens[later] - t.input_tokens[later - 1] - t.output_tokens[later - 1]
    assert grown.min() >= 5 and grown.max() <= 50  # the new user message only
    for i in later:  # the history (prompt + answer) is reused block for block
        history = t.kv_keys_after(int(i) - 1)
        assert np.array_equal(history, t.keys(int(i))[:len(history)])
        assert len(history) == (t.input_tokens[i - 1] + t.output_tokens[i - 1] - 1) // t.block_tokens
    firsts = np.flatnonzero(t.turn == 0)
    assert len({int(t.keys(int(i))[0]) for i in firsts}) == len(firsts)  # sessions share nothing


def test_shared_prefix_keys_are_equal_across_requests_and_different_otherwise():
    scn = _scenario(shared_prefix={"tokens": 100, "fraction": 0.5, "groups": 2, "source": "t"},
                    input={"dist": "fixed", "value": 40, "source": "t"})
    t = scn.requests(n_requests=400, seed=2, block_tokens=16)
    firsts = np.array([t.keys(i)[0] for i in range(len(t))])
    values, counts = np.unique(firsts, return_counts=True)
    shared = values[counts > 1]
    assert len(shared) == 2  # two prefix groups
    with_prefix = np.isin(firsts, shared)
    assert abs(with_prefix.mean() - 0.5) < 0.08
    assert (t.input_tokens[with_prefix] == 140).all() and (t.input_tokens[~with_prefix] == 40).all()
    for g in shared:
        rows = np.flatnonzero(firsts == g)
        heads = np.array([t.keys(int(i))[:6] for i in rows])  # 100 // 16 = 6 full prefix blocks
        assert (heads == heads[0]).all()
        tails = {int(t.keys(int(i))[6]) for i in rows}  # block 6 mixes prefix and the request's own tokens
        assert len(tails) == len(rows)


def test_reasoning_replaces_the_answers_of_its_fraction():
    scn = _scenario(reasoning={"fraction": 0.25, "output": {"dist": "uniform", "min": 8192, "max": 32768},
                               "source": "t"})
    t = scn.requests(n_requests=4000, seed=4)
    long = t.output_tokens >= 8192
    assert abs(long.mean() - 0.25) < 0.03
    assert (t.output_tokens[~long] == 10).all() and t.output_tokens.max() <= 32768
    plain = _scenario().requests(n_requests=4000, seed=4)
    assert np.array_equal(plain.input_tokens, t.input_tokens) and np.array_equal(plain.arrival_ns, t.arrival_ns)


def test_lognormal_and_empirical_lengths(tmp_path):
    scn = _scenario(input={"dist": "lognormal", "mean": 438.5, "median": 336, "source": "t"})
    t = scn.requests(n_requests=40000, seed=9)
    assert abs(np.median(t.input_tokens) / 336 - 1) < 0.02
    assert abs(t.input_tokens.mean() / 438.5 - 1) < 0.03
    (tmp_path / "lengths.csv").write_text("tokens,weight\n100,1\n300,3\n")
    scn = _scenario(tmp_path, input={"dist": "empirical", "file": "lengths.csv", "source": "t"})
    t = scn.requests(n_requests=20000, seed=9)
    assert set(np.unique(t.input_tokens).tolist()) == {100, 300}
    assert abs((t.input_tokens == 300).mean() - 0.75) < 0.015


def test_overrides_reach_the_scenario():
    scn = load_scenario("multiturn", scenario_overrides(["system.serving.instances=2",
                                                         "scenario.arrivals.rate_per_s=4"]))
    assert scn.arrivals is not None and scn.arrivals.rate_per_s == 4.0
    with pytest.raises(ConfigError) as err:
        load_scenario("multiturn", ["scenario.arrivals.rate=4"])
    assert err.value.where == "scenario.arrivals.rate" and "unknown key" in err.value.detail


def _error(tmp_path, **parts) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        _scenario(tmp_path, **parts)
    assert "\n" not in str(err.value)
    assert err.value.file is not None
    return err.value


@pytest.mark.parametrize(("parts", "where", "words"), [
    ({"arrivals": {"process": "poisson", "rate_per_s": 0, "source": "t"}}, "scenario.arrivals.rate_per_s",
     "positive"),
    ({"arrivals": {"process": "gamma", "rate_per_s": 1, "cv": -1, "source": "t"}}, "scenario.arrivals.cv",
     "positive"),
    ({"arrivals": {"process": "poisson", "rate_per_s": 1, "burst": 2, "source": "t"}}, "scenario.arrivals.burst",
     "unknown key"),
    ({"arrivals": {"process": "poisson", "rate_per_s": 1}}, "scenario.arrivals.source", "missing"),
    ({"arrivals": {"process": "closed_loop", "users": 0, "think_time": "1s", "source": "t"}},
     "scenario.arrivals.users", "positive"),
    ({"input": {"dist": "fixed", "value": 0, "source": "t"}}, "scenario.input.value", "positive"),
    ({"input": {"dist": "uniform", "min": 10, "max": 5, "source": "t"}}, "scenario.input.max", ">= min"),
    ({"input": {"dist": "zipf", "source": "t"}}, "scenario.input.dist", "unknown value"),
    ({"output": {"dist": "lognormal", "median": 100, "mean": 50, "source": "t"}}, "scenario.output.mean",
     "exceeds its median"),
    ({"slo": {"ttft": 2, "source": "t"}}, "scenario.slo.ttft", "duration with a unit"),
    ({"slo": {"ttft": "soon", "source": "t"}}, "scenario.slo.ttft", "duration"),
    ({"slo": {"tpot": "0ms", "source": "t"}}, "scenario.slo.tpot", "positive"),
    ({"sessions": {"turns": 0, "new_tokens": 5, "think_time": "1s", "source": "t"}}, "scenario.sessions.turns",
     "positive"),
    ({"shared_prefix": {"tokens": 10, "fraction": 1.5, "source": "t"}}, "scenario.shared_prefix.fraction",
     "(0, 1]"),
    ({"model": {"preset": "gpt-9", "source": "t"}}, "scenario.model.preset", "unknown model preset"),
    ({"colour": "red"}, "scenario.colour", "unknown key"),
])
def test_bad_scenarios_name_file_and_key(tmp_path, parts, where, words):
    err = _error(tmp_path, **parts)
    assert err.where == where
    assert words in err.detail
    assert err.file.endswith("s.yaml")


def test_bad_empirical_tables_name_the_csv_line(tmp_path):
    (tmp_path / "l.csv").write_text("tokens,weight\n100,1\n3x,2\n")
    err = _error(tmp_path, input={"dist": "empirical", "file": "l.csv", "source": "t"})
    assert err.file.endswith("l.csv") and err.where == "line 3"
    (tmp_path / "l.csv").write_text("length,weight\n100,1\n")
    assert _error(tmp_path, input={"dist": "empirical", "file": "l.csv", "source": "t"}).where == "line 1"
    err = _error(tmp_path, input={"dist": "empirical", "file": "absent.csv", "source": "t"})
    assert err.file.endswith("absent.csv") and "no such file" in err.detail


def test_duplicate_keys_and_traces_given_as_scenarios(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text("scenario:\n  name: a\n  name: b\n")
    with pytest.raises(ConfigError, match="given twice"):
        load_scenario(path)
    with pytest.raises(ConfigError, match=r"requests: \{trace: PATH, format: mooncake\|logical"):
        load_scenario("traces/mooncake_sample.jsonl")
    with pytest.raises(ConfigError, match="no scenario file or preset"):
        load_scenario("no-such-scenario")


def test_a_mooncake_scenario_refuses_lengths_of_its_own(tmp_path):
    trace = {"trace": "absent.jsonl", "format": "mooncake", "source": "t"}
    err = _error(tmp_path, requests=trace, arrivals=None, input=None, output=None)
    assert err.where == "scenario.requests.trace" and "no such file" in err.detail
    (tmp_path / "t.jsonl").write_text('{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [0]}\n')
    trace = {"trace": "t.jsonl", "format": "mooncake", "source": "t"}
    err = _error(tmp_path, requests=trace, arrivals=None, input=None, output=None,
                 sessions={"turns": 2, "new_tokens": 5, "think_time": "1s", "source": "t"})
    assert err.where == "scenario.sessions"
    err = _error(tmp_path, requests=trace, input=None, output=None)
    assert err.where == "scenario.arrivals"


def test_mean_of_length_distributions():
    scn = _scenario(input={"dist": "lognormal", "median": 100, "sigma": 1.0, "source": "t"})
    assert scn.input is not None and math.isclose(scn.input.mean, 100 * math.exp(0.5))


def test_summary_names_the_shipped_files():
    assert load_scenario("multiturn").summary() == {
        "name": "multiturn", "file": "configs/scenarios/multiturn.yaml", "model": "llama-3.1-70b", "trace": None,
        "slo_ttft_ms": 2000.0, "slo_tpot_ms": 200.0}
    assert load_scenario("mooncake-sample").summary()["trace"] == "traces/mooncake_sample.jsonl"
