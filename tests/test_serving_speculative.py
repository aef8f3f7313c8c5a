"""Speculative decoding in the serving engine: the acceptance draws, bytes per accepted token against the
analytic E[accepted], what verification writes and costs, determinism and bad scenarios."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from archsim.cli import main
from archsim.serving.scenario import SCENARIOS_DIR
from archsim.serving.speculative import emitted_tokens, expected_tokens

pytestmark = pytest.mark.system


def _serve(tmp_path: Path, *sets: str, system: str = "gpu-hbm", requests: int = 4, seed: int = 0) -> dict:
    out = tmp_path / f"serve-{abs(hash(sets)) % 10**8}-{seed}.json"
    args = ["serve", system, "--scenario", "speculative", "--requests", str(requests), "--seed", str(seed),
            "--quiet", "--json", str(out)]
    for s in sets:
        args += ["--set", s]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())["results"][0]


def _plain(tmp_path: Path, *sets: str) -> dict:
    """The speculative scenario without speculation: 4 requests on gpu-hbm."""
    plain_path = tmp_path / "plain.yaml"
    tree = yaml.safe_load((SCENARIOS_DIR / "speculative.yaml").read_text())
    del tree["scenario"]["speculative"]
    plain_path.write_text(yaml.safe_dump(tree))
    out = tmp_path / "plain.json"
    args = ["serve", "gpu-hbm", "--scenario", str(plain_path), "--requests", "4", "--quiet", "--json", str(out)]
    for item in sets:
        args += ["--set", item]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())["results"][0]


# ---------------------------------------------------------------- the draws
@pytest.mark.parametrize(("k", "a"), [(2, 0.5), (4, 0.7), (8, 0.9), (3, 0.0), (5, 1.0)])
def test_draws_follow_the_truncated_geometric_law(k, a):
    n = 200_000
    tokens = emitted_tokens(k, a, seed=11, requests=np.arange(n) % 97, steps=np.arange(n) // 97)
    assert tokens.min() >= 1 and tokens.max() <= k + 1
    assert tokens.mean() == pytest.approx(expected_tokens(k, a), rel=0.01)
    for j in range(1, k + 1):  # P(at least j drafts accepted) = a^j
        assert np.mean(tokens >= j + 1) == pytest.approx(a**j, abs=0.005)


def test_expected_tokens():
    assert expected_tokens(4, 0.7) == pytest.approx((1 - 0.7**5) / 0.3)
    assert expected_tokens(4, 1.0) == 5 and expected_tokens(4, 0.0) == 1


def test_draws_depend_on_seed_request_and_step_only():
    a = emitted_tokens(4, 0.7, 3, np.array([5, 6, 7]), np.array([0, 1, 2]))
    b = emitted_tokens(4, 0.7, 3, np.array([7, 5]), np.array([2, 0]))
    assert a[[2, 0]].tolist() == b.tolist()
    many = np.arange(1000)
    assert not np.array_equal(emitted_tokens(4, 0.7, 3, many, many), emitted_tokens(4, 0.7, 4, many, many))


# ---------------------------------------------------------------- bytes per accepted token
@pytest.mark.parametrize("k", [2, 4, 8])
@pytest.mark.parametrize("a", [0.5, 0.7, 0.9])
def test_bytes_per_accepted_token_are_bytes_per_step_over_expected_tokens(tmp_path, k, a):
    """Long answers, so the steps capped at an answer's end hardly weigh on the mean."""
    entry = _serve(tmp_path, f"scenario.speculative.k={k}", f"scenario.speculative.acceptance={a}",
                   "scenario.input.value=1024", "scenario.output.value=3000", "scenario.arrivals.users=4")
    sp = entry["speculative"]
    analytic = sp["kv_read_bytes_per_step"] / expected_tokens(k, a)
    assert sp["kv_read_bytes_per_token"] == pytest.approx(analytic, rel=0.03)
    assert sp["expected_tokens_per_step"] == pytest.approx(expected_tokens(k, a), rel=1e-6)


def test_every_rejected_position_is_written_and_counted(tmp_path):
    entry = _serve(tmp_path, "scenario.speculative.acceptance=0", "scenario.input.value=512",
                   "scenario.output.value=64")
    sp = entry["speculative"]
    decode_tokens = 4 * 63  # the first token of each answer comes from its prefill
    assert sp["verification_steps"] == decode_tokens and sp["tokens_per_step"] == 1.0
    # each step verifies min(k + 1, tokens left) positions and keeps one
    left = np.arange(63, 0, -1)
    assert sp["rejected_tokens"] == 4 * int((np.minimum(5, left) - 1).sum())
    assert sp["rejected_kv_bytes"] == sp["rejected_tokens"] * 327_680  # Llama-3.1-70B: 320 KiB per token


def test_rejected_positions_and_the_draft_are_counted_for_energy(tmp_path):
    """Acceptance 0, 4 requests of 512 + 64 tokens, k = 4: step s (s = 0 .. 62) holds 512 + s tokens, verifies
    v = min(5, 63 - s) positions and keeps one, so positions 2 .. v (rejected) attend over 512 + s + p keys. The
    draft runs v - 1 decode steps (alone: one request) and one prefill pass, and is priced as its own energy
    terms."""
    entry = _serve(tmp_path, "scenario.speculative.acceptance=0", "scenario.input.value=512",
                   "scenario.output.value=64")
    sp = entry["speculative"]
    s = np.arange(63)
    v = np.minimum(5, 63 - s)
    rejected_pairs = sum(512 + si + p for si, vi in zip(s.tolist(), v.tolist(), strict=True) for p in range(2, vi + 1))
    assert sp["rejected_attention_pairs"] == 4 * rejected_pairs
    one = _serve(tmp_path, "scenario.speculative.acceptance=0", "scenario.input.value=512",
                 "scenario.output.value=64", requests=1)["speculative"]
    draft_steps = int((v - 1).sum())
    assert one["draft_passes"] == draft_steps + 1 and one["draft_tokens"] == draft_steps + 512
    # decode step j of a verification reads the context and the j drafted before; the prefill its 512 tokens
    assert one["draft_kv_tokens_read"] == 512 + sum(
        512 + si + j for si, vi in zip(s.tolist(), v.tolist(), strict=True) for j in range(vi - 1))
    parts = entry["energy_breakdown_mJ_per_token"]
    assert parts["draft.gpu.flop"] > 0 and parts["draft.gpu.hbm_bit"] > 0
    plain = _plain(tmp_path, "scenario.input.value=512", "scenario.output.value=64")["energy_breakdown_mJ_per_token"]
    # the weights' FLOPs scale with the positions computed: 4 x 512 prompt + 4 x 63 decode, + the rejected
    computed = 4 * 512 + 4 * 63
    assert parts["gpu.flop"] / plain["gpu.flop"] == pytest.approx((computed + sp["rejected_tokens"]) / computed,
                                                                  rel=0.02)


def test_the_drafts_kv_takes_hbm_room():
    """With the KV home in HBM a held token costs the target's and the draft's KV there; with it in a PNM pool,
    the pool holds no more tokens than HBM's room has for the draft's KV."""
    from archsim.serving.run import tiers_with_draft
    from archsim.serving.spec import ServingSpec, TierSpec

    hbm = TierSpec("hbm", "hbm", 10_000, None, 0.0, 0.0, "none")
    pool = TierSpec("pool", "pool", 100_000, "pool_link", 64.0, 500.0, "pnm")
    spec = ServingSpec("s", "t", 2, 1, "round_robin", 8192, 256, True, 16, "recompute", 10, (hbm, pool), 0,
                       4096, "load")
    tiers = tiers_with_draft(spec, 1_000, 5)
    assert tiers[0].capacity_bytes == 9_000 * 10 // 15 and tiers[1].capacity_bytes == 100_000
    tiers = tiers_with_draft(replace(spec, kv_home=1), 1_000, 5)  # 1,800 draft tokens per instance, two of them
    assert tiers[0].capacity_bytes == 9_000 and tiers[1].capacity_bytes == 2 * 1_800 * 10
    streamed = tiers_with_draft(replace(spec, decode="stream"), 1_000, 5)  # KV streamed from the tier below
    assert streamed[0].capacity_bytes == 9_000 and streamed[1].capacity_bytes == 2 * 1_800 * 10
    both = tiers_with_draft(replace(spec, kv_home=1, placement="auto"), 1_000, 5)  # HBM and pool both hold KV
    assert both[0].capacity_bytes == 9_000 * 10 // 15 and both[1].capacity_bytes == 2 * 1_800 * 10
    roomy = replace(spec, kv_home=1, tiers=(replace(hbm, capacity_bytes=10**9), pool))
    assert tiers_with_draft(roomy, 1_000, 5)[1].capacity_bytes == 100_000  # the pool binds first


def test_full_acceptance_emits_k_plus_one_per_step(tmp_path):
    entry = _serve(tmp_path, "scenario.speculative.acceptance=1", "scenario.input.value=512",
                   "scenario.output.value=101")
    sp = entry["speculative"]
    assert sp["verification_steps"] == 4 * 20 and sp["rejected_tokens"] == 0  # 100 decode tokens in 20 steps of 5


def test_good_drafts_cut_tpot_and_bad_drafts_cost_more_than_none(tmp_path):
    sets = ("scenario.input.value=1024", "scenario.output.value=400")
    good = _serve(tmp_path, *sets, "scenario.speculative.acceptance=0.9")
    bad = _serve(tmp_path, *sets, "scenario.speculative.acceptance=0")
    plain = _plain(tmp_path, *sets)
    assert good["tpot_ms"]["mean"] < 0.7 * plain["tpot_ms"]["mean"]
    assert bad["tpot_ms"]["mean"] > plain["tpot_ms"]["mean"]
    assert bad["speculative"]["draft_ms"] > 0


def test_same_seed_same_json_other_seed_other_draws(tmp_path):
    first = _serve(tmp_path, "scenario.input.value=512", "scenario.output.value=200")
    again = _serve(tmp_path, "scenario.input.value=512", "scenario.output.value=200")
    other = _serve(tmp_path, "scenario.input.value=512", "scenario.output.value=200", seed=1)
    assert json.dumps(first, sort_keys=True) == json.dumps(again, sort_keys=True)
    draws = [(e["speculative"]["verification_steps"], e["speculative"]["rejected_tokens"]) for e in (first, other)]
    assert draws[0] != draws[1]


# ---------------------------------------------------------------- bad scenarios
@pytest.mark.parametrize(("key", "value", "words"), [
    ("k", 0, "positive integer"),
    ("k", -2, "positive integer"),
    ("k", 2.5, "positive integer"),
    ("acceptance", 1.5, "[0, 1]"),
    ("acceptance", -0.1, "[0, 1]"),
    ("acceptance", "often", "acceptance"),
    ("draft", "no-such-model", "no-such-model"),
    ("draft", "qwen2.5-0.5b", "vocabulary"),
])
def test_bad_speculation_is_one_line_naming_file_and_key(tmp_path, key, value, words):
    tree = yaml.safe_load((SCENARIOS_DIR / "speculative.yaml").read_text())
    tree["scenario"]["speculative"][key] = value
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(tree))
    out = tmp_path / "out.json"
    result = CliRunner().invoke(main, ["serve", "gpu-hbm", "--scenario", str(path), "--requests", "2",
                                       "--json", str(out)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output
    assert str(path) in lines[0] and f"scenario.speculative.{key}" in lines[0] and words in lines[0]
    assert not out.exists()


# ---------------------------------------------------------------- engine-level properties
def _spec_engine_run(max_batch_tokens: int, k: int = 4, acceptance: float = 0.5, requests: int = 40,
                     prompt: int = 2, output: int = 30):
    from archsim.serving.engine import simulate
    from archsim.serving.speculative import Speculation
    from tests.serving_tables import LinearCost, spec, table

    t = table(np.zeros(requests), [prompt] * requests, [output] * requests)
    cost = LinearCost()
    return simulate(t, spec(max_batch_tokens=max_batch_tokens), cost, record=True,
                    speculation=Speculation(k, acceptance, 0, cost))


def test_verified_positions_count_against_the_token_budget():
    result = _spec_engine_run(max_batch_tokens=64)
    assert result.completed.all()
    assert int(result.activity["iteration_tokens"].max()) <= 64


def test_a_budget_smaller_than_one_verification_still_decodes():
    result = _spec_engine_run(max_batch_tokens=3, requests=3, prompt=2)
    assert result.completed.all()  # a lone verification of k + 1 = 5 positions runs alone


def test_one_position_entries_are_read_once_not_twice(tmp_path):
    """Answers of 2 tokens: the only decode step has one token left, so it verifies nothing: it reads the
    100-token context once, as a decode step, not also as a verification."""
    entry = _serve(tmp_path, "scenario.input.value=100", "scenario.output.value=2")
    assert entry["kv_read_bytes_per_token"] == pytest.approx(100 * 327_680, rel=1e-9)
