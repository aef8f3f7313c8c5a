"""Short chunks over a cached prefix in the PNM pool, timed by isa/kernels/tree_decode.s (system.multi_token)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from archsim.kvlayout import range_bounds
from archsim.models.presets import load_preset
from archsim.serving.build import serving_workload
from archsim.system import mixed, multi_token
from archsim.system.config import load_system_config

pytestmark = pytest.mark.component

G25 = load_system_config("g25")
LLAMA = load_preset("llama-3.1-70b")
SHAPE = LLAMA.shape()


def _workload(system=G25, preset=LLAMA):
    return serving_workload(system, preset.shape(), preset.dtype, 131072, "test")


def test_one_query_token_costs_what_the_decode_kernel_does():
    """The tree kernel with one query is decode attention: its per-token time matches the decode fit's."""
    fixed, per_token = multi_token.unit_fit(G25, SHAPE, 2, 1)
    from archsim.system.attention import timed_run_ns

    pnm = G25.pool.pnm
    decode = [timed_run_ns(G25.pool.memory, pnm, "gqa", 8, (128, 0), "bf16", pnm.tile_tokens, n)[0]
              for n in multi_token.SAMPLE_TOKENS]
    decode_per_token = (decode[1] - decode[0]) / (multi_token.SAMPLE_TOKENS[1] - multi_token.SAMPLE_TOKENS[0])
    assert per_token == pytest.approx(decode_per_token, rel=0.03)
    assert 0 < fixed < 2000


def test_the_busiest_channel_takes_an_even_cut_of_the_tokens():
    cached = np.full(8, 15_000)
    new = np.full(8, 4)
    fixed, per_token = multi_token.unit_fit(G25, SHAPE, 2, 4)
    layer_ns = multi_token.pool_layer_ns(G25, SHAPE, 2, cached, new)
    channels = G25.pool.channels
    total = 8 * SHAPE.kv_cache_heads * 15_004
    widest = int(np.diff(range_bounds(total, channels)).max())
    # one or two pieces of head contexts per channel (a context is 15,004 tokens, a channel's share ~1,876)
    assert per_token * widest + fixed <= layer_ns <= per_token * widest + 2 * fixed + 1e-6


def test_verification_past_the_crossover_grows_with_its_query_tokens():
    """Four query tokens of an 8-head group (32 rows) are compute-bound on the pool's units: twice the tokens,
    twice the time; one token is memory-bound, so two cost far less than twice one."""
    cached = np.full(4, 30_000)
    t = {q: multi_token.pool_layer_ns(G25, SHAPE, 2, cached, np.full(4, q)) for q in (1, 2, 4, 8)}
    assert t[8] / t[4] == pytest.approx(2.0, rel=0.1)
    assert t[2] < 1.6 * t[1]


def test_the_mixed_step_uses_the_kernel_for_short_chunks_and_the_roofline_for_long_ones():
    workload = _workload()
    cached, short = np.array([20_000.0]), np.array([5.0])
    timed = multi_token.pool_layer_ns(G25, SHAPE, 2, cached, short)
    with_kernel = mixed.prefill_layer_ns(G25, workload, cached, short)["pnm"]
    assert with_kernel >= timed  # plus the queries and outputs over the links
    roofline_system = replace(G25, pool=replace(G25.pool, pnm=replace(G25.pool.pnm, model="roofline")))
    assert multi_token.pool_layer_ns(roofline_system, SHAPE, 2, cached, short) is None
    assert mixed.prefill_layer_ns(roofline_system, workload, cached, short)["pnm"] != with_kernel
    long = np.array([400.0])
    both = mixed.prefill_layer_ns(G25, workload, np.array([20_000.0, 20_000.0]), np.array([5.0, 400.0]))["pnm"]
    alone = mixed.prefill_layer_ns(roofline_system, workload, cached, long)["pnm"]
    assert both > alone and both > with_kernel


def test_mla_and_long_chunks_are_not_timed_by_the_kernel():
    deepseek = load_preset("deepseek-v2-lite").shape()
    assert multi_token.unit_fit(G25, deepseek, 2, 4) is None
    assert multi_token.pool_layer_ns(G25, SHAPE, 2, np.array([1000]), np.array([multi_token.QUERIES_MAX + 1])) is None


def test_a_shared_prefix_read_once_saves_what_the_units_compute_allows():
    """8 sequences sharing a 30K-token prefix: the kernel streams the prefix once with 8 x 8 query rows, so
    the pool's time falls by less than 8x (the MAC array binds), and more sharers save more."""
    prefix = np.array([30_000])
    four = multi_token.shared_prefix_factor(G25, SHAPE, 2, prefix, [np.full(4, 100)])
    eight = multi_token.shared_prefix_factor(G25, SHAPE, 2, prefix, [np.full(8, 100)])
    assert 1 / 8 < eight < four < 1.0
    # a short prefix does not pay for the kernel's fixed cost: the sequences read their own KV
    assert multi_token.shared_prefix_factor(G25, SHAPE, 2, np.array([500]), [np.full(4, 100)]) == 1.0
    roofline_system = replace(G25, pool=replace(G25.pool, pnm=replace(G25.pool.pnm, model="roofline")))
    assert multi_token.shared_prefix_factor(roofline_system, SHAPE, 2, prefix, [np.full(8, 100)]) == 1.0
