"""Serving metrics on hand-made results (every figure computed by hand) and on an engine run (JSON-ready,
deterministic)."""

import json
from dataclasses import replace

import numpy as np
import pytest

from archsim.serving.engine import ServingResult, simulate
from archsim.serving.metrics import distribution_ms, measured_requests, summarize
from tests.serving_tables import LinearCost, sessions, spec

pytestmark = pytest.mark.unit

MS = 1e6


def _result(arrival_ms, first_ms, last_ms, out, *, inp=None, hits=None, completed=None) -> ServingResult:
    n = len(arrival_ms)
    arrival, first, last = (np.asarray(x, dtype=float) * MS for x in (arrival_ms, first_ms, last_ms))
    sp = spec(lower="host_dram")
    return ServingResult(
        spec=sp, arrival_ns=arrival, first_token_ns=first, last_token_ns=last,
        queueing_ns=(first - arrival) * 0.25, kv_load_ns=(first - arrival) * 0.25, prefill_ns=(first - arrival) * 0.5,
        input_tokens=np.asarray(inp if inp is not None else [160] * n, dtype=np.int64),
        output_tokens=np.asarray(out, dtype=np.int64),
        hit_blocks=np.asarray(hits if hits is not None else np.zeros((n, 2)), dtype=np.int64),
        loaded_blocks=np.zeros((n, 2), dtype=np.int64), instance=np.zeros(n, dtype=np.int64),
        completed=np.ones(n, dtype=bool) if completed is None else np.asarray(completed),
        rejected=np.zeros(n, dtype=np.int8), streamed=np.zeros(n, dtype=bool), preemptions=np.zeros(n, dtype=np.int64),
        tier_read_bytes=np.array([0.0, 4.0]), tier_write_bytes=np.array([8.0, 2.0]), swap_out_bytes=0.0,
        swap_in_bytes=0.0, link_bytes={"pcie": 6.0}, link_busy_ns={"pcie": 0.5 * (last.max() - arrival.min())},
        peak_pinned_blocks=np.zeros(2, dtype=np.int64), capacity_blocks=np.zeros(2, dtype=np.int64),
        iterations=10, tokens_emitted=int(np.sum(out)), tokens_computed=0, events=20,
        inflight_area_ns=float(np.sum(last - arrival)), span_start_ns=float(arrival.min()),
        span_end_ns=float(last.max()), cache_stats=[], wall_s=0.5)


def test_distribution_is_mean_and_numpy_linear_percentiles_in_ms():
    values_ns = np.array([1.0, 2.0, 3.0, 4.0, 10.0]) * MS
    d = distribution_ms(values_ns)
    assert d == {"mean": 4.0, "p50": 3.0, "p90": pytest.approx(7.6), "p99": pytest.approx(9.76)}
    assert distribution_ms(np.array([])) == {"mean": None, "p50": None, "p90": None, "p99": None}


def test_ttft_tpot_e2e_by_their_definitions():
    res = _result(arrival_ms=[0, 10, 20, 30], first_ms=[5, 30, 26, 40], last_ms=[50, 30, 56, 70], out=[10, 1, 4, 7])
    s = summarize(res)
    assert s["ttft_ms"]["mean"] == pytest.approx((5 + 20 + 6 + 10) / 4)
    # TPOT only over requests with more than one output token: 45/9, 30/3, 30/6
    assert s["tpot_ms"]["mean"] == pytest.approx((5 + 10 + 5) / 3)
    assert s["tpot_ms"]["p50"] == pytest.approx(5.0)
    assert s["e2e_ms"]["mean"] == pytest.approx((50 + 20 + 36 + 40) / 4)
    assert s["e2e_ms"]["p99"] == pytest.approx(np.percentile([50, 20, 36, 40], 99))
    # the split sums to TTFT; decode is last - first
    b = s["breakdown_ms"]
    assert b["queueing"] + b["kv_load"] + b["prefill"] == pytest.approx(s["ttft_ms"]["mean"])
    assert b["decode"] == pytest.approx((45 + 0 + 30 + 30) / 4)
    # throughput over the window first arrival .. last token (70 ms)
    assert s["throughput_tokens_per_s"] == pytest.approx(22 / 0.070)
    assert s["throughput_requests_per_s"] == pytest.approx(4 / 0.070)
    assert s["link_utilization"] == {"pcie": pytest.approx(0.5)}
    assert s["events_per_s"] == pytest.approx(40.0)


def test_warm_up_skips_the_first_completed_requests_by_arrival_not_by_id():
    res = _result(arrival_ms=[30, 0, 20, 10, 40], first_ms=[31, 1, 21, 11, 41], last_ms=[32, 2, 22, 12, 42],
                  out=[2, 2, 2, 2, 2], completed=[True, True, False, True, True])
    assert list(measured_requests(res, 2)) == [0, 4]            # skips 1 (t=0) and 3 (t=10); 2 never finished
    s = summarize(res, warmup_requests=2)
    assert s["requests_measured"] == 2 and s["requests_completed"] == 4
    assert s["throughput_requests_per_s"] == pytest.approx(2 / 0.012)


def test_goodput_counts_requests_meeting_every_given_target():
    res = _result(arrival_ms=[0, 10, 20, 30], first_ms=[5, 30, 26, 40], last_ms=[50, 30, 56, 70], out=[10, 1, 4, 7])
    assert summarize(res)["goodput_requests_per_s"] is None
    # TTFT <= 10 ms: requests 0, 2, 3
    assert summarize(res, ttft_target_ns=10 * MS)["goodput_requests_per_s"] == pytest.approx(3 / 0.070)
    # TPOT <= 6 ms: 0 (5), 1 (one token: no TPOT), 3 (5); not 2 (10)
    assert summarize(res, tpot_target_ns=6 * MS)["goodput_requests_per_s"] == pytest.approx(3 / 0.070)
    both = summarize(res, ttft_target_ns=10 * MS, tpot_target_ns=6 * MS)["goodput_requests_per_s"]
    assert both == pytest.approx(2 / 0.070)


def test_prefix_hit_rate_is_prompt_token_weighted_overall_and_per_tier():
    # block_tokens 16: hits of 4 + 2 blocks and 0 + 6 blocks over prompts of 160 and 480 tokens
    res = _result(arrival_ms=[0, 1], first_ms=[2, 3], last_ms=[4, 5], out=[2, 2], inp=[160, 480],
                  hits=[[4, 2], [0, 6]])
    s = summarize(res)
    assert s["prefix_hit_rate"] == pytest.approx(12 * 16 / 640)
    assert s["prefix_hit_rate_by_tier"] == {"hbm": pytest.approx(64 / 640), "host_dram": pytest.approx(128 / 640)}
    assert s["tier_bytes"] == {"hbm": {"read": 0.0, "written": 8.0}, "host_dram": {"read": 4.0, "written": 2.0}}


def test_no_completed_request_gives_null_figures():
    res = _result(arrival_ms=[0], first_ms=[np.nan], last_ms=[np.nan], out=[3], completed=[False])
    s = summarize(replace(res, span_end_ns=0.0))
    assert s["ttft_ms"]["mean"] is None and s["throughput_tokens_per_s"] is None and s["prefix_hit_rate"] is None


def test_a_runs_summary_is_json_ready_and_deterministic():
    reqs = sessions(30, 3, 3.0, 800, 100, 40, 1e9, seed=2)
    sp = spec(instances=2, router="prefix", lower="host_dram", hbm_tokens=8000)
    docs = []
    for _ in range(2):
        s = summarize(simulate(reqs, sp, LinearCost()), warmup_requests=5, ttft_target_ns=200 * MS)
        s.pop("events_per_s")                          # wall-clock, the one figure that varies
        docs.append(json.dumps(s, sort_keys=True))
    assert docs[0] == docs[1]
    s = json.loads(docs[0])
    assert s["requests_completed"] == 90 and s["requests_measured"] == 85
    assert 0 < s["prefix_hit_rate"] < 1
    assert s["prefix_hit_rate"] == pytest.approx(sum(s["prefix_hit_rate_by_tier"].values()))
