"""Request-level metrics of a serving run (issue 19): TTFT, TPOT and end-to-end latency with mean and numpy's
linear percentiles over the completed requests after a warm-up, TTFT split into queueing / KV load / prefill,
throughput, goodput under SLO targets, prefix-cache hit rates, bytes per tier and link, link utilization.

* TTFT = first token - arrival; TPOT = (last - first token) / (output tokens - 1), over requests with more
  than one output token; E2E = last token - arrival.
* Warm-up: the first `warmup_requests` completed requests in arrival order are left out of every figure.
* Throughput and goodput are over the measured requests' window: first arrival to last token among them.
* Goodput counts the measured requests meeting every given target (TTFT, and TPOT where defined); None
  without targets.
* Prefix hit rate: hit prompt tokens over prompt tokens (full blocks found at admission), overall and per tier.
"""

from __future__ import annotations

import numpy as np

from archsim.serving.engine import ServingResult

PERCENTILES = (50, 90, 99)


def distribution_ms(values_ns: np.ndarray) -> dict[str, float | None]:
    """{mean, p50, p90, p99} in ms (numpy linear percentiles); every value None without samples."""
    if not len(values_ns):
        return {"mean": None, **{f"p{p}": None for p in PERCENTILES}}
    ms = np.asarray(values_ns, dtype=np.float64) / 1e6
    points = np.percentile(ms, PERCENTILES)
    return {"mean": float(ms.mean()), **{f"p{p}": float(v) for p, v in zip(PERCENTILES, points, strict=True)}}


def measured_requests(result: ServingResult, warmup_requests: int = 0) -> np.ndarray:
    """Ids of the completed requests after the first `warmup_requests` completed ones by arrival (then id)."""
    done = np.flatnonzero(result.completed)
    order = np.lexsort((done, result.arrival_ns[done]))
    return np.sort(done[order][max(int(warmup_requests), 0):])


def summarize(result: ServingResult, *, warmup_requests: int = 0, ttft_target_ns: float | None = None,
              tpot_target_ns: float | None = None) -> dict:
    """The run's figures as a JSON-ready dict (times in ms, rates per second)."""
    ids = measured_requests(result, warmup_requests)
    first, last, out = result.first_token_ns[ids], result.last_token_ns[ids], result.output_tokens[ids]
    ttft, tpot, e2e, window_s = _latencies(result, ids)

    def per_s(count: float) -> float | None:
        return count / window_s if window_s > 0 else None

    return {
        "requests_completed": int(result.completed.sum()),
        "requests_measured": int(len(ids)),
        "requests_rejected": int((result.rejected > 0).sum()),
        "requests_streamed": int(result.streamed.sum()),
        "preemptions": int(result.preemptions.sum()),
        "ttft_ms": distribution_ms(ttft),
        "tpot_ms": distribution_ms(tpot),
        "e2e_ms": distribution_ms(e2e),
        "breakdown_ms": _breakdown_ms(result, ids),
        "throughput_tokens_per_s": per_s(float(out.sum())),
        "throughput_requests_per_s": per_s(float(len(ids))),
        "goodput_requests_per_s": _goodput(ttft, out, first, last, ttft_target_ns, tpot_target_ns, per_s),
        "prefix_hit_rate": _hit_rate(result, ids),
        "prefix_hit_rate_by_tier": _hit_rate_by_tier(result, ids),
        "tier_bytes": {tier.name: {"read": float(result.tier_read_bytes[t]),
                                   "written": float(result.tier_write_bytes[t])}
                       for t, tier in enumerate(result.spec.tiers)},
        "link_bytes": dict(result.link_bytes),
        "link_utilization": _utilization(result.link_busy_ns, result),
        "link_write_utilization": _utilization(result.link_write_busy_ns or {}, result),
        "utilization_over_time": result.utilization,
        "iterations": int(result.iterations),
        "events": int(result.events),
        "events_per_s": float(result.events / result.wall_s) if result.wall_s > 0 else None,
        "mean_in_flight": float(result.mean_inflight),
        **_servers(result, ids),
        # swap asked, but a preempted sequence's KV lived in the last tier (streamed, or placed in the pool)
        **({"preemptions_recomputed": result.swap_recomputes} if result.spec.preemption == "swap" else {}),
    }


def _latencies(result: ServingResult, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """TTFT, TPOT (requests of more than one output token) and E2E in ns of the requests `ids`, and their
    window in s: the first arrival to the last token."""
    arrival, first, last = result.arrival_ns[ids], result.first_token_ns[ids], result.last_token_ns[ids]
    out = result.output_tokens[ids]
    several = out > 1
    window_s = (last.max() - arrival.min()) / 1e9 if len(ids) else 0.0
    return first - arrival, (last[several] - first[several]) / (out[several] - 1), last - arrival, window_s


def _servers(result: ServingResult, ids: np.ndarray) -> dict:
    """With several servers: each server's requests' figures (by the instance that served them last), and Jain's
    fairness index over the servers' token throughputs (1: equal; 1/servers: one server has it all)."""
    spec = result.spec
    if spec.servers == 1:
        return {}
    server = spec.server_of(result.instance[ids])
    entries = []
    for s in range(spec.servers):
        mine = ids[server == s]
        ttft, tpot, e2e, window_s = _latencies(result, mine)
        out = float(result.output_tokens[mine].sum())
        entries.append({"server": s, "requests_measured": int(len(mine)), "ttft_ms": distribution_ms(ttft),
                        "tpot_ms": distribution_ms(tpot), "e2e_ms": distribution_ms(e2e),
                        "throughput_tokens_per_s": out / window_s if window_s > 0 else None})
    rates = np.array([e["throughput_tokens_per_s"] or 0.0 for e in entries])
    jain = float(rates.sum() ** 2 / (len(rates) * (rates ** 2).sum())) if rates.any() else None
    out: dict = {"servers": entries, "server_fairness": jain}
    # the shared pool's blocks (the coherence scheme's traffic and stalls) and PNM units (the attention jobs'
    # queueing), in all and each server's
    for key in ("coherence", "pnm_units"):
        shared = getattr(result, key)
        if shared is not None:
            out[key] = {k: v for k, v in shared.items() if k != "servers"}
            for entry, mine in zip(entries, shared["servers"], strict=True):
                entry[key] = mine
    return out


def _breakdown_ms(result: ServingResult, ids: np.ndarray) -> dict[str, float | None]:
    if not len(ids):
        return {"queueing": None, "kv_load": None, "prefill": None, "decode": None}
    decode = result.last_token_ns[ids] - result.first_token_ns[ids]
    return {"queueing": float(result.queueing_ns[ids].mean() / 1e6),
            "kv_load": float(result.kv_load_ns[ids].mean() / 1e6),
            "prefill": float(result.prefill_ns[ids].mean() / 1e6), "decode": float(decode.mean() / 1e6)}


def _goodput(ttft: np.ndarray, out: np.ndarray, first: np.ndarray, last: np.ndarray, ttft_target_ns: float | None,
             tpot_target_ns: float | None, per_s) -> float | None:
    if ttft_target_ns is None and tpot_target_ns is None:
        return None
    good = np.ones(len(ttft), dtype=bool)
    if ttft_target_ns is not None:
        good &= ttft <= ttft_target_ns
    if tpot_target_ns is not None:
        tpot = np.where(out > 1, (last - first) / np.maximum(out - 1, 1), 0.0)
        good &= tpot <= tpot_target_ns
    return per_s(float(good.sum()))


def _hit_rate(result: ServingResult, ids: np.ndarray) -> float | None:
    prompt = float(result.input_tokens[ids].sum())
    if not prompt:
        return None
    return float(result.hit_blocks[ids].sum() * result.spec.block_tokens / prompt)


def _hit_rate_by_tier(result: ServingResult, ids: np.ndarray) -> dict[str, float | None]:
    prompt = float(result.input_tokens[ids].sum())
    hits = result.hit_blocks[ids].sum(axis=0) * result.spec.block_tokens
    return {tier.name: (float(hits[t] / prompt) if prompt else None) for t, tier in enumerate(result.spec.tiers)}


def _utilization(busy_ns: dict[str, float], result: ServingResult) -> dict[str, float | None]:
    """Each link's busy fraction of the run's span, in one direction."""
    span = result.span_end_ns - result.span_start_ns
    return {name: (float(busy / span) if span > 0 else None) for name, busy in busy_ns.items()}
