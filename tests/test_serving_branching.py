"""Programs that fork from their parent's KV (best-of-N, beam search, tree search): their rows, their prompts'
keys, one copy of the shared blocks however many branches hold them, and bad scenarios."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from archsim.cli import main
from archsim.serving.branching import Branching, program
from archsim.serving.run import requests_source, run_system
from archsim.serving.scenario import SCENARIOS_DIR, load_scenario, scenario_from_mapping
from archsim.system.config import load_system_config

pytestmark = pytest.mark.system


def _tree(**scenario) -> dict:
    tree = yaml.safe_load((SCENARIOS_DIR / "tree-search.yaml").read_text())
    tree["scenario"].pop("tree")
    tree["scenario"].update(scenario)
    return tree


def _scenario(**scenario):
    return scenario_from_mapping(_tree(**scenario), file=str(SCENARIOS_DIR / "tree-search.yaml"))


# ---------------------------------------------------------------- the programs
def test_best_of_n_prefills_once_and_forks_n_answers():
    p = program(Branching("samples", samples=5), 300, 40, np.random.default_rng(0))
    assert p.parent == [-1, 0, 0, 0, 0, 0] and p.after == p.parent
    assert p.user == [300, 0, 0, 0, 0, 0] and p.output == [1] + [39] * 5


def test_beam_levels_continue_beams_of_the_level_before():
    p = program(Branching("beam", width=4, segment_tokens=16), 100, 81, np.random.default_rng(3))
    assert len(p.parent) == 1 + 4 * 5 and sum(p.output[1:5]) == 64  # 80 tokens after the prefill: 16 x 5 levels
    for level in range(1, 5):
        rows = range(1 + 4 * level, 5 + 4 * level)
        assert all(1 + 4 * (level - 1) <= p.parent[r] < 1 + 4 * level for r in rows)
    pruned = set(range(1, 17)) - set(p.parent)
    assert pruned  # some beams are never continued: their blocks are freed


@pytest.mark.parametrize("backtrack", [0.0, 1.0])
def test_tree_search_reaches_its_depth_and_backtracks_only_when_asked(backtrack):
    b = Branching("tree", width=3, depth=4, backtrack=backtrack, eval_tokens=8)
    p = program(b, 70, 50, np.random.default_rng(1))
    depth = {0: 0}
    for r, parent in enumerate(p.parent):
        if r and p.user[r] == 0:
            depth[r] = depth[parent] + 1
    assert max(depth.values()) == 4
    expanded = sorted({p.parent[r] for r in depth if r})
    levels = [depth[n] for n in expanded]
    went_back = any(b_ <= a for a, b_ in zip(levels, levels[1:], strict=False))
    assert went_back == (backtrack == 1.0)
    evals = [r for r in range(len(p.parent)) if p.user[r] == 8]
    assert len(evals) == 3 * len(expanded) and all(p.output[r] == 1 for r in evals)
    # an expansion waits for the evaluation of the node it expands, which waits for that node's answer
    for r in depth:
        if r and depth[r] > 1:
            assert p.user[p.after[r]] == 8 and p.parent[p.after[r]] == p.parent[r]


def test_explicit_tree_rows():
    p = program(Branching("tree", parents=(-1, 0, 0, 1), eval_tokens=0), 70, 20, np.random.default_rng(0))
    assert p.parent == [-1, 0, 0, 1] and p.output == [20] * 4


def test_a_fork_continues_its_parents_prompt_and_answer():
    table = _scenario(samples={"n": 4, "source": "t"}).requests(n_requests=10, seed=0)
    root, kids = 0, [1, 2, 3, 4]
    assert all(table.prev[k] == root for k in kids)
    full = int(table.input_tokens[root] // table.block_tokens)
    for k in kids:
        assert table.input_tokens[k] == table.input_tokens[root] + table.output_tokens[root]
        assert np.array_equal(table.keys(k)[:full], table.keys(root)[:full])
    assert not np.array_equal(table.keys(1)[-1:], table.keys(2)[-1:])  # each fork's last, partial block is its own


def test_shared_blocks_are_stored_once_however_many_branches_hold_them():
    """Best-of-8 on a 1,600-token prompt (100 blocks): while the 8 answers decode, HBM holds the prompt's blocks
    once and each answer's own 2 blocks (tokens 1,600-1,631): 116 pinned blocks, not 8 x 102."""
    tree = _tree(samples={"n": 8, "source": "t"})
    tree["scenario"]["input"]["value"] = 1600
    tree["scenario"]["output"]["value"] = 33
    tree["scenario"]["arrivals"]["users"] = 1
    scenario = scenario_from_mapping(tree, file=str(SCENARIOS_DIR / "tree-search.yaml"))
    run = run_system(load_system_config("gpu-hbm"), scenario, requests_source(scenario, 9, None, 0), warmup=0)
    result = run.result
    assert result.completed.all()
    assert int(result.peak_pinned_blocks[0]) == 100 + 8 * 2
    assert result.hit_blocks[1:, 0].tolist() == [100] * 8  # every answer found the prompt's blocks in HBM
    assert result.tokens_computed == 1600 + 8 * 32  # the prompt once, then each answer's 1 + 31 tokens


def test_a_shipped_tree_search_serves_deterministically(tmp_path):
    out = [tmp_path / f"{k}.json" for k in range(2)]
    for path in out:
        result = CliRunner().invoke(main, ["serve", "gpu-hbm", "--scenario", "tree-search", "--requests", "150",
                                           "--quiet", "--json", str(path)])
        assert result.exit_code == 0, result.output
    assert out[0].read_bytes() == out[1].read_bytes()


def test_the_scenario_reads_every_kind():
    assert load_scenario("tree-search").branching == Branching("tree", width=4, depth=8, backtrack=0.3, eval_tokens=16)
    assert _scenario(beam={"width": 4, "segment_tokens": 16, "source": "t"}).branching.width == 4
    assert _scenario(tree={"parents": [-1, 0, 0], "source": "t"}).branching.parents == (-1, 0, 0)


# ---------------------------------------------------------------- bad scenarios
@pytest.mark.parametrize(("part", "key", "words"), [
    ({"tree": {"width": 0, "depth": 3, "source": "t"}}, "tree.width", "positive integer"),
    ({"tree": {"width": 2, "depth": -1, "source": "t"}}, "tree.depth", "positive integer"),
    ({"tree": {"width": 2, "depth": 3, "backtrack": 1.5, "source": "t"}}, "tree.backtrack", "[0, 1]"),
    ({"tree": {"width": 2, "depth": 3, "eval_tokens": -4, "source": "t"}}, "tree.eval_tokens", "non-negative"),
    ({"tree": {"parents": [0, 0], "source": "t"}}, "tree.parents", "not a tree"),
    ({"tree": {"parents": [-1, 2, 0], "source": "t"}}, "tree.parents", "not a tree"),
    ({"tree": {"parents": [-1, 0, -1], "source": "t"}}, "tree.parents", "one root"),
    ({"tree": {"parents": [-1], "depth": 2, "source": "t"}}, "tree.depth", "drop depth"),
    ({"tree": {"width": 2, "depth": 3, "eval_tokens": 8, "verifier": "no-such-model", "source": "t"}},
     "tree.verifier", "no-such-model"),
    ({"tree": {"width": 2, "depth": 3, "verifier": "llama-3.2-1b", "source": "t"}}, "tree.verifier", "eval_tokens"),
    ({"samples": {"n": 0, "source": "t"}}, "samples.n", "positive integer"),
    ({"beam": {"width": -2, "segment_tokens": 16, "source": "t"}}, "beam.width", "positive integer"),
    ({"beam": {"width": 2, "segment_tokens": 0, "source": "t"}}, "beam.segment_tokens", "positive integer"),
    ({"beam": {"width": 2, "segment_tokens": 8, "source": "t"}, "samples": {"n": 2, "source": "t"}}, "beam",
     "give one of"),
    ({"samples": {"n": 2, "source": "t"},
      "sessions": {"turns": 2, "new_tokens": 5, "think_time": "0s", "source": "t"}}, "samples", "sessions"),
])
def test_bad_programs_are_one_line_naming_file_and_key(tmp_path: Path, part, key, words):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_tree(**part)))
    out = tmp_path / "out.json"
    result = CliRunner().invoke(main, ["serve", "gpu-hbm", "--scenario", str(path), "--requests", "3",
                                       "--json", str(out)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output
    assert str(path) in lines[0] and f"scenario.{key}" in lines[0] and words in lines[0], lines[0]
    assert not out.exists()


def test_branches_in_a_pnm_pool_read_their_shared_prompt_once(monkeypatch):
    """Best-of-8 on a 30K-token prompt on G2.5: the pool's multi-token kernel reads the prompt once for the
    eight answers; reading it once per answer (every group dissolved) decodes more slowly."""
    from archsim.serving import engine

    tree = _tree(samples={"n": 8, "source": "t"})
    tree["scenario"]["input"]["value"] = 30_000
    tree["scenario"]["output"]["value"] = 65
    tree["scenario"]["arrivals"]["users"] = 1
    scenario = scenario_from_mapping(tree, file=str(SCENARIOS_DIR / "tree-search.yaml"))
    system = load_system_config("g25")
    shared = run_system(system, scenario, requests_source(scenario, 9, None, 0), warmup=0).metrics
    monkeypatch.setattr(engine._Engine, "_shared_groups", lambda self, ids, decoding: None)
    alone = run_system(system, scenario, requests_source(scenario, 9, None, 0), warmup=0).metrics
    assert shared["tpot_ms"]["mean"] < 0.97 * alone["tpot_ms"]["mean"]


def test_a_cost_without_the_shared_read_serves_sharers_in_a_pnm_pool():
    """Sharers in a pool whose cost has no shared_prefix_factor (an analytic stand-in) decode unchanged."""
    from archsim.serving.engine import simulate
    from tests.serving_tables import LinearCost, spec, table

    t = table(np.zeros(4), [640] * 4, [20] * 4, prefix_tokens=320)
    result = simulate(t, spec(lower="pool", kv_home=1), LinearCost())
    assert result.completed.all()


def test_groups_follow_where_sharers_part():
    """A one-block common prompt, then two pairs that share 40 more blocks each: two groups of 41 blocks, not one
    of a single block."""
    from archsim.serving.engine import _Engine
    from tests.serving_tables import LinearCost, spec, table

    t = table(np.zeros(4), [16 * 50] * 4, [5] * 4)
    engine = _Engine(t, spec(lower="pool", kv_home=1), LinearCost())
    a, b = np.uint64(11), np.uint64(22)
    for r, tail in enumerate((a, a, b, b)):
        lo = engine.coff[r]
        engine.ckeys[lo] = 7  # the common first block
        engine.ckeys[lo + 1:lo + 41] = tail + np.arange(40, dtype=np.uint64)  # shared within each pair
    engine.ctx[:4] = 16 * 50
    engine.res[:4] = 0  # view tier 0 is the pool (kv_home 1, decode load)
    prefixes, privates = engine._shared_groups(np.arange(4), np.ones(4, dtype=bool))
    assert sorted(prefixes.tolist()) == [41 * 16, 41 * 16]
    assert [len(p) for p in privates] == [2, 2] and all((p == 9 * 16).all() for p in privates)


def _tree_search(tmp_path: Path, *sets: str, system: str = "gpu-hbm") -> dict:
    out = tmp_path / f"tree-{abs(hash(sets)) % 10**8}.json"
    args = ["serve", system, "--scenario", "tree-search", "--requests", "200", "--quiet", "--json", str(out)]
    for item in sets:
        args += ["--set", item]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return json.loads(out.read_bytes())


def test_the_verifier_defaults_to_the_scenario_model(tmp_path):
    """Naming the scenario's own model as the verifier is the default: the same bytes."""
    assert _tree_search(tmp_path) == _tree_search(tmp_path, "scenario.tree.verifier=llama-3.1-70b")


def test_a_verifier_of_its_own_holds_its_own_kv_and_is_priced_as_itself(tmp_path):
    """A 1B verifier for the 70B target: the evaluations no longer find the target's KV of their node (their
    content is the verifier's), only what sibling evaluations of the same path computed, so they prefill more
    tokens, but on a model 70x smaller: evaluations get faster (TTFT over all rows), the target computes fewer
    tokens, and the verifier's weights and FLOPs are their own energy terms."""
    own = _tree_search(tmp_path)["results"][0]
    small = _tree_search(tmp_path, "scenario.tree.verifier=llama-3.2-1b")["results"][0]
    from archsim.serving.run import requests_source
    from archsim.serving.scenario import load_scenario

    table = requests_source(load_scenario("tree-search", ["scenario.tree.verifier=llama-3.2-1b"]), 200, None,
                            0)(16)
    evaluations = np.flatnonzero(table.verifier)
    targets = np.flatnonzero(~table.verifier)
    # no verifier block is a target block; siblings' evaluations share their path's blocks
    target_keys = set(np.concatenate([table.keys(int(r)) for r in targets]).tolist())
    eval_keys = [table.keys(int(r)) for r in evaluations]
    assert not target_keys & set(np.concatenate(eval_keys).tolist())
    assert len(set(np.concatenate(eval_keys).tolist())) < sum(len(k) for k in eval_keys)
    v = small["verifier"]
    assert v["model"] == "llama-3.2-1b" and v["evaluations"] == len(evaluations)
    assert 1 <= v["passes"] <= len(evaluations)
    assert small["ttft_ms"]["mean"] < own["ttft_ms"]["mean"]
    parts, plain = small["energy_breakdown_mJ_per_token"], own["energy_breakdown_mJ_per_token"]
    assert parts["gpu.flop"] < plain["gpu.flop"] and parts["verifier.gpu.flop"] > 0
    assert "verifier" not in own and not any(k.startswith("verifier.") for k in plain)
