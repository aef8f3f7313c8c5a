"""Multi-token attention (isa/kernels/tree_decode.s): the numpy reference, KV read once, roofline, bad shapes."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from archsim.cli import main
from archsim.config.memory import load_memory_config
from archsim.isa import KERNELS_DIR
from archsim.pnm import DecodeAttentionSpec, place_decode_attention, random_inputs, run_decode_attention
from archsim.pnm.machine import dtypes
from archsim.pnm.problem.reference import ancestors_or_self, chain_lengths, decode_attention, tree_attention
from archsim.pnm.problem.shape import ShapeError, parse_shape
from archsim.pnm.timed.simulate import run_pnm
from archsim.pnm.timed.unit_config import load_pnm_config
from tests.conftest import REPO

pytestmark = pytest.mark.component

TREE = KERNELS_DIR / "tree_decode.s"
LONG = "heads=32,kv_heads=8,head_dim=128,context=8192,batch=1"
DATAPATH_TOLERANCE = {"fp16": 2e-3, "bf16": 2e-3, "int8": 1e-4}


def solve(spec: DecodeAttentionSpec, *, units: int = 1, splits: int = 1, tile: int = 32, token_major: bool = False):
    q, k, v = random_inputs(spec, np.random.default_rng(7))
    placement = place_decode_attention(spec, q, k, v, tile_tokens=tile, token_major=token_major)
    run = run_decode_attention(placement, units=units, splits=splits)
    reference = tree_attention(dtypes.round_trip(q, spec.io_dtype), placement.k_seen, placement.v_seen,
                               spec.context_tokens, spec.parents, softmax_scale=spec.scale)
    return run, reference, placement


def spec(**overrides: object) -> DecodeAttentionSpec:
    base = {"batch": 1, "kv_heads": 1, "group": 1, "qk_dim": 64, "v_dim": 64, "context_tokens": (100,)}
    base.update(overrides)
    if "qk_dim" in overrides:
        base["v_dim"] = base["qk_dim"]
    return DecodeAttentionSpec(**base)


# Chains (speculative verification), trees with branches and several roots, batches whose prefixes are
# empty, shorter than a tile or not a multiple of it, quantized caches, both layouts, split-K.
GRID = {
    "chain-4": (spec(query_tokens=4), {}),
    "chain-8-gqa-b3": (spec(batch=3, kv_heads=2, group=4, qk_dim=128, context_tokens=(300, 8, 65),
                            query_tokens=8), {}),
    "tree-branches": (spec(kv_heads=2, group=2, context_tokens=(200,), query_tokens=7,
                           tree_parents=(-1, 0, 0, 1, 1, 2, -1)), {}),
    "best-of-5": (spec(batch=2, group=3, context_tokens=(90, 33), query_tokens=5, tree_parents=(-1,) * 5), {}),
    "tree-bf16-token-major": (spec(batch=2, kv_heads=2, group=2, context_tokens=(129, 64), kv_dtype="bf16",
                                   query_tokens=4, tree_parents=(-1, 0, 1, 0)), {"token_major": True}),
    "chain-int8-g32": (spec(kv_heads=2, group=2, qk_dim=128, context_tokens=(250,), kv_dtype="int8",
                            scale_group=32, query_tokens=3), {}),
    "tree-split-k": (spec(batch=2, kv_heads=4, group=2, context_tokens=(500, 70), query_tokens=4,
                          tree_parents=(-1, 0, 0, 2)), {"units": 4, "splits": 2}),
    "one-token": (spec(batch=2, kv_heads=2, group=4, context_tokens=(77, 1), tree_parents=(-1,)), {"units": 2}),
}


@pytest.mark.parametrize("name", list(GRID))
def test_kernel_matches_the_numpy_reference(name):
    problem, options = GRID[name]
    run, reference, _ = solve(problem, **options)
    assert run.output.shape == reference.shape
    assert np.abs(run.output - reference).max() <= DATAPATH_TOLERANCE[problem.kv_dtype]


def test_the_tree_mask_is_what_the_kernel_applies():
    """Siblings must not see each other: the same queries under a chain give clearly different outputs."""
    tree = spec(kv_heads=2, group=2, context_tokens=(40,), query_tokens=6, tree_parents=(-1, 0, 0, 1, 2, 2))
    run, reference, placement = solve(tree)
    q = dtypes.round_trip(placement.queries, tree.io_dtype)
    chain = tree_attention(q, placement.k_seen, placement.v_seen, tree.context_tokens,
                           np.arange(-1, 5), softmax_scale=tree.scale)
    assert np.abs(run.output - reference).max() <= 2e-3
    assert np.abs(run.output - chain).max() > 0.05


def test_one_query_token_is_decode_attention():
    one = spec(batch=2, kv_heads=2, group=4, context_tokens=(300, 5), tree_parents=(-1,))
    run, _, placement = solve(one, units=2)
    q = dtypes.round_trip(placement.queries[:, 0], one.io_dtype)
    decode = decode_attention(q, placement.k_seen, placement.v_seen, one.context_tokens, softmax_scale=one.scale)
    assert np.abs(run.output[:, 0] - decode).max() <= 2e-3


def test_reference_masks():
    parents = np.array([-1, 0, 0, 1, -1])
    seen = ancestors_or_self(parents)
    assert seen.tolist() == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0], [0, 0, 0, 0, 1]]
    assert chain_lengths(parents).tolist() == [1, 2, 2, 3, 1]
    assert spec(query_tokens=4).parents.tolist() == [-1, 0, 1, 2]


# ---------------------------------------------------------------- timed on the memory
@pytest.fixture(scope="module")
def memory():
    return load_memory_config(REPO / "configs" / "memory" / "hbm3.yaml")


@pytest.fixture(scope="module")
def pnm_cfg():
    return load_pnm_config()


def test_the_kv_is_read_once_for_every_query_token(memory, pnm_cfg):
    """One unit per KV head (no split-K records): DRAM bytes of 2..8 query tokens within 1 % of one token's."""
    one = run_pnm(TREE, LONG, memory, pnm_cfg, units=8)
    for queries in (2, 4, 8):
        many = run_pnm(TREE, f"{LONG},queries={queries}", memory, pnm_cfg, units=8)
        assert many.roofline.dram_bytes == pytest.approx(one.roofline.dram_bytes, rel=0.01)
        assert many.roofline.memory_cycles == pytest.approx(one.roofline.memory_cycles, rel=0.01)


@pytest.mark.parametrize("extra", [",queries=2", ",queries=4", ",parents=-1:0:0:1"])
def test_memory_bound_multi_token_attention_is_at_its_roofline(memory, pnm_cfg, extra):
    run = run_pnm(TREE, LONG + extra, memory, pnm_cfg)
    assert run.roofline.bound == "memory"
    assert 0.97 <= run.timing.cycles / run.roofline.cycles <= 1.10


def test_cycles_grow_sublinearly_in_query_tokens_while_memory_bound(memory, pnm_cfg):
    one = run_pnm(TREE, LONG, memory, pnm_cfg).timing.cycles
    four = run_pnm(TREE, f"{LONG},queries=4", memory, pnm_cfg)
    assert four.roofline.bound == "memory"
    assert one < four.timing.cycles < 1.10 * one  # 4x the queries, under 10 % more time


def test_compute_starved_unit_follows_the_flop_count(memory):
    """N samples off one prompt (every new token a root): twice the tokens are exactly twice the FLOPs."""
    starved = load_pnm_config(None, ["pnm.compute.macs_per_cycle=16", "pnm.compute.vector_lanes=4",
                                     "pnm.compute.exp_per_cycle=1"])
    runs = [run_pnm(TREE, f"heads=4,kv_heads=1,context=1024,parents={':'.join(['-1'] * n)}", memory, starved,
                    units=1) for n in (2, 4)]
    assert all(r.roofline.bound == "compute" for r in runs)
    short, long = runs
    assert long.roofline.compute_cycles == pytest.approx(2 * short.roofline.compute_cycles, rel=0.005)
    assert long.timing.cycles / short.timing.cycles == pytest.approx(2.0, rel=0.03)


# ---------------------------------------------------------------- bad shapes
@pytest.mark.parametrize(("shape", "key", "words"), [
    ("heads=4,context=64,parents=-1:2", "parents", "not a tree"),
    ("heads=4,context=64,parents=0", "parents", "first token's parent is -1"),
    ("heads=4,context=64,parents=-1:-2", "parents", "not a tree"),
    ("heads=4,context=64,parents=-1:x", "parents", "colon-separated integers"),
    ("heads=4,context=64,queries=3,parents=-1:0", "parents", "2 parents for 3 query tokens"),
    ("heads=4,context=64,queries=0", "queries", "must be positive"),
    ("heads=4,context=64,queries=-2", "queries", "must be positive"),
    ("heads=4,context=3,queries=4", None, "exceed the shortest context"),
    ("heads=4,context=64,queries=2,window=16", "window", "does not apply"),
])
def test_bad_tree_shapes_are_one_line_errors(shape, key, words):
    with pytest.raises(ShapeError) as raised:
        parse_shape(shape, TREE)
    assert words in str(raised.value)
    assert raised.value.where == "--shape" + (f" {key}" if key else "")


def test_tree_keys_do_not_apply_to_single_token_kernels():
    with pytest.raises(ShapeError, match="applies only to multi-token kernels"):
        parse_shape("heads=4,context=64,queries=2", KERNELS_DIR / "gqa_decode.s")


def test_cli_reports_a_bad_tree_in_one_line(tmp_path):
    out = tmp_path / "out.json"
    result = CliRunner().invoke(main, ["pnm", "run", "--kernel", str(TREE), "--json", str(out),
                                       "--shape", "heads=8,kv_heads=2,context=512,parents=-1:0:5"])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0 and "--shape parents: not a tree" in result.output
    assert not out.exists()
