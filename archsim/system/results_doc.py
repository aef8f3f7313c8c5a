"""docs/results.md, written from simulator runs: every number and every "who wins" in it comes from here.

    python -m archsim.system.results_doc [--out docs/results.md]

The comparison table is also checked by tests/test_system_results.py, so the document cannot drift from
the tool.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from archsim.resources import SOURCE_ROOT
from archsim.system.config import SystemConfig, load_system_config
from archsim.system.decode import StepResult, simulate_step
from archsim.system.report import render_table, run_comparison
from archsim.system.workload import Workload, load_workload
from archsim.units import parse_size_bytes

DOC = SOURCE_ROOT / "docs" / "results.md"  # docs/ is not shipped in the wheel
SYSTEMS = ("g25", "g15", "g25-nopnm", "g15-nopnm", "gpu-hbm", "host-dram", "nvme", "rdma-pool")
WORKLOAD = "llama3-70b-b16"
POLICIES = (("shared", "shared"), ("priority, PNM first", {"impl": "priority", "favor": "pnm"}),
            ("priority, host first", {"impl": "priority", "favor": "host"}),
            ("WRR host 1 : PNM 3", {"impl": "wrr", "weights": {"host": 1, "pnm": 3}}),
            ("reservation: PNM 60 %", {"impl": "reservation", "source": "pnm", "share": 0.6}),
            ("shared + age cap 2000 cycles", "shared"))


def comparison_table(results: Sequence[StepResult]) -> str:
    return "```\n" + render_table(results) + "\n```"


def _ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.2f} ms"


def _pick(results: Sequence[StepResult], system: str, context: int) -> StepResult:
    return next(r for r in results if r.system == system and r.context == context)


def _qo(r: StepResult) -> float:
    return r.term_ns('link_queries') + r.term_ns('link_outputs')


def _why(results: Sequence[StepResult], contexts: Sequence[int]) -> list[str]:
    out: list[str] = []
    lo, hi = contexts[0], contexts[-1]
    for tier, pnm, nopnm in (("G2.5", "g25", "g25-nopnm"), ("G1.5", "g15", "g15-nopnm")):
        a, b = _pick(results, pnm, hi), _pick(results, nopnm, hi)
        gains = ", ".join(f"{_pick(results, nopnm, c).decode_step_ns / _pick(results, pnm, c).decode_step_ns:.1f}x"
                          f" at {c // 1024}K" for c in contexts)
        out.append(
            f"* **PNM on {tier}** ({gains}). Without PNM every step moves the whole KV over the link: "
            f"{b.gpu_link_bytes / 1e9:,.0f} GB at {hi // 1024}K, against {a.gpu_link_bytes / 1e6:.0f} MB of queries, "
            f"outputs and appended K/V with PNM ({b.gpu_link_bytes / a.gpu_link_bytes:,.0f}x less). The fetch takes "
            f"{_ms(b.term_ns('link_fetch'))} on the link (max-min shared by the 8 GPUs) while the pool DRAM "
            f"runs at {100 * b.dram_utilization:.1f} % of its peak; with PNM the same KV is read beside the "
            f"controllers at {100 * a.dram_utilization:.0f} % of peak in {_ms(a.term_ns('pnm'))}.")
    g25, g15 = _pick(results, "g25", hi), _pick(results, "g15", hi)
    out.append(
        f"* **G1.5 vs G2.5 with PNM**: {_ms(g15.decode_step_ns)} vs {_ms(g25.decode_step_ns)} at {hi // 1024}K. "
        f"Only queries and outputs cross the link ({_ms(_qo(g25))} per step on CXL, {_ms(_qo(g15))} on the scale-up "
        f"fabric, {100 * _qo(g25) / g25.decode_step_ns:.1f} % and {100 * _qo(g15) / g15.decode_step_ns:.1f} % of "
        "the step), so the fabric decides little once attention runs in the pool; the PNM's "
        f"{_ms(g25.term_ns('pnm'))}, the GPUs' non-attention kernels ({_ms(g25.term_ns('gpu_weights'))}) and "
        f"their all-reduces ({_ms(g25.term_ns('allreduce'))} on G2.5's NVLink, {_ms(g15.term_ns('allreduce'))} on "
        "G1.5's scale-up fabric, which the pool's traffic shares) dominate.")
    n25, n15 = _pick(results, "g25-nopnm", hi), _pick(results, "g15-nopnm", hi)
    out.append(
        f"* **G1.5 vs G2.5 without PNM**: {n25.decode_step_ns / n15.decode_step_ns:.1f}x in favour of G1.5 at "
        f"{hi // 1024}K: the scale-up ports move the KV "
        f"{n25.term_ns('link_fetch') / n15.term_ns('link_fetch'):.0f}x faster than CXL x16. Even so G1.5 "
        f"without PNM stays {n15.decode_step_ns / g15.decode_step_ns:.1f}x behind G1.5 with PNM: the GPUs must also "
        "stage the fetched KV in their HBM (write, then read).")
    g1_ok = [c for c in contexts if _pick(results, "gpu-hbm", c).ok]
    g1_no = [c for c in contexts if not _pick(results, "gpu-hbm", c).ok]
    if g1_ok:
        c = g1_ok[-1]
        g1, p = _pick(results, "gpu-hbm", c), _pick(results, "g15", c)
        faster = g1.decode_step_ns < p.decode_step_ns
        g15_cfg, g1_cfg = load_system_config("g15"), load_system_config("gpu-hbm")
        assert g15_cfg.pool is not None
        org, timing = g15_cfg.pool.memory.organization, g15_cfg.pool.memory.timing
        pool_peak = g15_cfg.pool.devices * org.n_pseudo_channels * org.bus_width_bits * timing.data_rate_gbps / 8
        gpus_peak = g1_cfg.gpus.count * g1_cfg.gpus.hbm_bandwidth_GBps
        reason = ("attention reads the KV at the GPUs' own HBM bandwidth, with no link round trips per layer"
                  if faster else
                  f"the pool's stacks read the KV at up to {pool_peak / 1e3:.1f} TB/s beside their controllers, the "
                  f"GPUs' HBM at {gpus_peak / 1e3:.1f} TB/s shared with the weights, which outweighs the per-layer "
                  "query/output round trips")
        out.append(
            f"* **G1 (KV in GPU HBM)** is {'faster' if faster else 'slower'} than G1.5 with PNM while the KV fits "
            f"({_ms(g1.decode_step_ns)} vs {_ms(p.decode_step_ns)} at {c // 1024}K): {reason}. "
            + (f"At {', '.join(f'{x // 1024}K' for x in g1_no)} it does not fit "
               f"({_pick(results, 'gpu-hbm', g1_no[0]).status.removeprefix('infeasible: ')}): the pool is where "
               f"the KV has to go, and PNM is what keeps it fast there." if g1_no else ""))
    e_p, e_n = _pick(results, "g25", hi), _pick(results, "g25-nopnm", hi)
    top_n = sorted(e_n.energy_breakdown_pJ_per_token.items(), key=lambda kv: -kv[1])[:3]
    out.append(
        f"* **Energy per token** at {hi // 1024}K: {e_p.energy_pJ_per_token / 1e9:,.0f} mJ (G2.5 PNM) vs "
        f"{e_n.energy_pJ_per_token / 1e9:,.0f} mJ (G2.5 without). Without PNM the largest terms are "
        + ", ".join(f"{k} {v / 1e9:,.0f} mJ" for k, v in top_n)
        + ": SerDes bits, staging the KV in GPU HBM, and pool background power over a step that lasts "
          f"{_ms(e_n.decode_step_ns)}. With PNM the in-die DRAM read path dominates and the interposer and link "
          "terms vanish.")
    slow = [(s, _pick(results, s, lo)) for s in ("host-dram", "rdma-pool", "nvme")]
    out.append("* **Offload baselines** at " + f"{lo // 1024}K: " + ", ".join(
        f"{s} {_ms(r.decode_step_ns)}" for s, r in slow) + ": each is bound by its narrowest shared link (8 DDR5 "
        "channels behind PCIe, one 400G NIC port, one NVMe drive), which every step must stream the KV through.")
    return out


# (label, numerator system, denominator system, context index): a step-time ratio the sections above quote
HEADLINES = (("PNM gain on G2.5 (g25-nopnm / g25)", "g25-nopnm", "g25", -1),
             ("PNM gain on G1.5 (g15-nopnm / g15)", "g15-nopnm", "g15", -1),
             ("G2.5 / G1.5 with PNM", "g25", "g15", -1),
             ("G2.5 / G1.5 without PNM", "g25-nopnm", "g15-nopnm", -1),
             ("G1 / G1.5 with PNM", "gpu-hbm", "g15", 1),
             ("host-dram / G2.5", "host-dram", "g25", 0))


def _calibration_section(systems: Sequence[SystemConfig], workload: Workload,
                         results: Sequence[StepResult]) -> list[str]:
    """The headline ratios with the calibrated GPU against an ideal roofline GPU without all-reduces."""
    roofline = run_comparison([replace(s, gpus=replace(s.gpus, preset=None)) for s in systems], workload)
    contexts = workload.contexts
    rows = ["| ratio of step times | context | roofline GPU | calibrated GPU |", "|---|---|---|---|"]
    for label, num, den, index in HEADLINES:
        c = contexts[index]
        ratios = []
        for res in (roofline, results):
            a, b = _pick(res, num, c), _pick(res, den, c)
            ratios.append(f"{a.decode_step_ns / b.decode_step_ns:.2f}x" if a.ok and b.ok else "-")
        rows.append(f"| {label} | {c // 1024}K | {ratios[0]} | {ratios[1]} |")
    lo = contexts[0]
    cal, ideal = _pick(results, "g25", lo), _pick(roofline, "g25", lo)
    added = cal.decode_step_ns - ideal.decode_step_ns
    rows += ["", f"The calibrated GPU (docs/gpu.md) adds {_ms(added)} to G2.5's {lo // 1024}K step "
             f"({_ms(ideal.decode_step_ns)} with a roofline GPU): its non-attention kernels take "
             f"{_ms(cal.term_ns('gpu_weights'))} against the roofline's {_ms(ideal.term_ns('gpu_weights'))} (launch "
             "costs, tile and wave quantization at 16 tokens), and the two all-reduces per layer "
             f"{_ms(cal.term_ns('allreduce'))}, which the roofline left out. That GPU time is the same in every "
             "system, so ratios between systems whose pool side is short shrink towards 1 and ratios set by a KV "
             "fetch of hundreds of milliseconds barely move. On G1.5 the all-reduces share the scale-up fabric "
             "with the pool's traffic (`allreduce` "
             f"{_ms(_pick(results, 'g15', contexts[-1]).term_ns('allreduce'))} at {contexts[-1] // 1024}K against "
             f"{_ms(_pick(results, 'g25', contexts[-1]).term_ns('allreduce'))} on G2.5, whose collectives run on "
             "the GPUs' own NVLink)."]
    return rows


def _qos_section(workload: Workload, context: int) -> list[str]:
    base = load_system_config("g25-qos")
    rows = ["| policy | PNM slowdown | host slowdown | Jain | PNM share | host share | host p99 ns | violations |",
            "|---|---|---|---|---|---|---|---|"]
    measured: dict[str, dict] = {}
    for label, policy in POLICIES:
        overrides = [f"system.qos.policy={policy if isinstance(policy, str) else _flow(policy)}"]
        if "age cap" in label:
            overrides.append("system.qos.age_cap_cycles=2000")
        q = simulate_step(load_system_config(base.file, overrides), workload, context).qos
        assert q is not None
        measured[label] = q
        src = q["sources"]
        rows.append(f"| {label} | {q['slowdown']['pnm']:.2f} | {q['slowdown'].get('host', 1):.2f} | "
                    f"{q['jain_fairness']:.3f} | {100 * src['pnm']['share_of_peak']:.1f} % | "
                    f"{100 * src['host']['share_of_peak']:.1f} % | {src['host']['read_latency_ns_p99']:.0f} | "
                    f"{len(q['violations'])} |")
    shared = measured["shared"]["slowdown"]
    best = min(measured, key=lambda k: measured[k]["slowdown"]["pnm"])
    host_first = measured["priority, host first"]["slowdown"]
    clean = [k for k, q in measured.items() if not q["violations"]]
    rows += ["", f"Under the shared order the host's random rows stretch the PNM's streaming attention "
             f"{shared['pnm']:.2f}x (host reads {shared['host']:.2f}x slower). The best policy for the PNM here, "
             f"{best}, cuts its stretch to {measured[best]['slowdown']['pnm']:.2f}x and raises the host's to "
             f"{measured[best]['slowdown']['host']:.2f}x; putting the host first gives "
             f"{host_first['pnm']:.2f}x / {host_first['host']:.2f}x. "
             + (f"Policies meeting every target: {', '.join(clean)}." if clean else
                "No policy meets every target at this load (the channel is oversubscribed): the arbiter only "
                "decides which port pays.")]
    return rows


def _dse_section(workload: Workload, context: int) -> list[str]:
    """The G2.5 design-space table, built from the store of the shipped sweep configs/sweeps/design-space.yaml
    (run here into a scratch directory): PNM time per MAC count and SRAM size, and what the grid says."""
    import tempfile

    from archsim.sweep.runner import run_sweep
    from archsim.sweep.spec import load_spec
    from archsim.sweep.store import STORE_NAME, Store

    spec = load_spec("design-space")
    if spec.inputs.get("workload") != workload.name or spec.inputs.get("contexts") != f"{context // 1024}K":
        raise ValueError("configs/sweeps/design-space.yaml no longer matches the results' workload and context")
    with tempfile.TemporaryDirectory() as tmp:
        run_sweep(spec, Path(tmp) / "store", quiet=True)
        store = Store(Path(tmp) / "store" / STORE_NAME)
        try:
            rows = list(store.rows().values())
        finally:
            store.close()
    lanes_key, sram_key = "system.pool.pnm.macs_per_cycle", "system.pool.pnm.sram"
    cells: dict[tuple[int, str], dict] = {}
    for row in rows:
        entry = row["result"]["results"][0]
        cells[(row["point"][lanes_key], row["point"][sram_key])] = entry
    lanes = sorted({k[0] for k in cells})
    srams = sorted({k[1] for k in cells}, key=parse_size_bytes)

    def pnm_ns(entry: dict) -> float:
        parts = entry["breakdown_ns"]
        return parts.get("critical", {}).get("pnm", parts.get("overlapped", {}).get("pnm", 0.0))

    out = [f"PNM time per decode step (G2.5 step, SRAM hit rate) from the {len(cells)} points of "
           "`archsim sweep configs/sweeps/design-space.yaml`:", "",
           "| MACs/cycle | " + " | ".join(srams) + " |", "|---|" + "---|" * len(srams)]
    for n in lanes:
        out.append(f"| {n} | " + " | ".join(
            f"{_ms(pnm_ns(cells[(n, m)]))} ({_ms(cells[(n, m)]['decode_step_ns'])}, "
            f"{100 * (cells[(n, m)]['sram_hit_rate'] or 0):.1f} %)" for m in srams) + " |")
    g25 = load_system_config(str(spec.inputs["system"]))
    default, full = g25.pool.pnm.macs_per_cycle if g25.pool and g25.pool.pnm else 512, srams[-1]
    lane_ns = {n: pnm_ns(cells[(n, full)]) for n in lanes}
    saturated = next((a for a, b in zip(lanes, lanes[1:], strict=False) if lane_ns[a] / lane_ns[b] < 1.05), lanes[-1])
    sram_ns = {m: pnm_ns(cells[(default, m)]) for m in srams}
    best = min(sram_ns.values())
    enough = next(m for m in srams if sram_ns[m] <= best * 1.001)
    halve, double = lane_ns[default // 2] / lane_ns[default], lane_ns[default] / lane_ns[default * 2]
    out += ["", f"At {full}, halving the MACs from {default} to {default // 2} stretches the PNM time {halve:.2f}x and "
            f"doubling them gains {double:.2f}x; beyond {saturated} MACs per cycle more gain under 5 %: the unit is "
            f"then bound by its channel's DRAM. At {default} MACs, below {enough} the SRAM cannot hold the "
            "double-buffered K/V tiles next to the whole query group, so the unit re-reads the KV per sub-group "
            f"(up to {max(sram_ns.values()) / best:.2f}x the time). configs/sweeps/dse-pnm.yaml is the larger grid "
            "(both pool systems, every link's bandwidth)."]
    return out


def _flow(tree: dict) -> str:
    import yaml

    return yaml.safe_dump(tree, default_flow_style=True).strip()


def render(systems: Sequence[SystemConfig], workload: Workload, results: Sequence[StepResult]) -> str:
    # the serving layer sits above the system model: imported here, so `system` does not import `serving`
    from archsim.serving.results_doc import fabric_rows, serving_reading
    from archsim.serving.results_doc import rows as serving_rows
    from archsim.serving.servers_doc import REQUESTS_PER_SERVER, servers_section
    from archsim.serving.slow_thinking_doc import pool_l2_section, speculative_section, tree_section

    contexts = workload.contexts
    lines = [
        "# Results: where each placement wins",
        "",
        "Generated by `python -m archsim.system.results_doc` from simulator runs; do not edit by hand",
        "(`tests/test_system_results.py` checks the comparison table against the tool).",
        "",
        f"Workload `{workload.name}`: {workload.shape.name}, batch {workload.batch}, tensor parallel "
        f"{workload.tensor_parallel} on 8 GPUs, contexts {', '.join(f'{c // 1024}K' for c in contexts)}. Systems: "
        + ", ".join(f"`{s.name}` ({s.tier})" for s in systems) + ". Configs and the source of every default: "
        "docs/systems.md. Command:",
        "",
        f"    archsim compare {' '.join(SYSTEMS)} --workload {workload.name} --plot results.png",
        "",
        "## Decode step per system and context",
        "",
        comparison_table(results),
        "",
        f"`step ms` is one decode step of all {workload.batch} sequences (`Mcycles`: the same in millions of GPU "
        f"clock cycles at {systems[0].gpus.clock_GHz:g} GHz); `attn ms` attention on the step's critical path and "
        "`(hidden)` attention work overlapped with other work (a prefetched KV fetch hides the GPUs' staged "
        "attention; JSON `breakdown_ns.critical` sums to the step); `GPU-link MB` the bytes on the GPUs' own links "
        "per step (both directions); `bank confl` and `row hit` the pool DRAM's, scaled from the sampled channel "
        f"(sampling: one layer, the busiest channel, a {systems[0].sampling.window_requests}-request window; the "
        "`sampling` block of each JSON entry says what was replayed).",
        "",
        "## Why each placement wins where it wins",
        "",
        *_why(results, contexts),
        "",
        "## How the GPU calibration moved the headline ratios",
        "",
        *_calibration_section(systems, workload, results),
        "",
        "## Serving: the design source's request-level results",
        "",
        "`archsim serve` runs of the shipped scenarios (configs/scenarios/, every parameter cited there) on "
        "Llama-3.1-70B at tensor parallelism 8, one instance per system. Each row: the result the design source "
        "reports, the scenario and systems that measure it here, archsim's ratio, and the run's own breakdown "
        "(mean TTFT split into queueing, KV load and prefill; decode time per request; prompt tokens found per "
        "tier). Requests per run are small (20-1000) to keep the document's generation short.",
        "",
        *serving_rows(),
        "",
        serving_reading(),
        "",
        "G1.5 against G2.5 per scenario (the fabric's share of TTFT is its KV loads, the prefill's KV write "
        "and, with PNM, the queries and outputs of prefix attention):",
        "",
        *fabric_rows(),
        "",
        f"## Host traffic at the pool controllers (`g25-qos`, {contexts[0] // 1024}K)",
        "",
        "Other host traffic (30 % of a channel's peak requested, random, 80 % reads; alone a random stream is "
        "activation-bound below that) shares the PNM's channel. Slowdowns against each source alone; shares over "
        "each source's own active window; violations of the targets in configs/systems/g25-qos.yaml:",
        "",
        *_qos_section(workload, contexts[0]),
        "",
        f"## Design space ({contexts[1] // 1024}K, G2.5)",
        "",
        *_dse_section(workload, contexts[1]),
        "",
        "## One pool, many servers (`g25-16s`, `g15-16s`)",
        "",
        f"`shared-prefix` served by 1 to 16 servers of 8 GPUs sharing one 3 TiB PNM pool (the 16-server presets "
        f"cut to N servers: their GPUs, their ports, the pool side their routes reach), {REQUESTS_PER_SERVER} "
        "requests per server at the scenario's recorded rate spread over 16 servers (0.244 requests/s per "
        "server, so each server's load is the same at every N), with the requests' prefixes shared and with "
        "every block private (no sharing). The presets keep shared blocks coherent in software (`pool.coherence`, "
        "a CXL 2.0 pool's only choice); `G2.5 back-invalidation` is G2.5 with CXL 3.0's back-invalidation "
        "instead, and `coherence stall` what all servers waited for it per request (docs/serving.md). `PNM "
        "queueing` is the mean wait of an iteration's attention job at the pool's shared PNM units (fair share). "
        "`pool side busy` is the shared side's busy share towards and away "
        "from the GPUs; fairness is Jain's index over the servers' token throughputs. archsim/serving/servers_doc.py:",
        "",
        *servers_section(),
        "",
        "## Slow thinking: tree search, speculative decoding and the caches",
        "",
        *tree_section(),
        "",
        *pool_l2_section(),
        "",
        *speculative_section(),
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    out = Path(args[args.index("--out") + 1]) if "--out" in args else DOC
    start = time.perf_counter()
    systems = [load_system_config(s) for s in SYSTEMS]
    workload = load_workload(WORKLOAD)
    results = run_comparison(systems, workload)
    text = render(systems, workload, results)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(text)
    tmp.replace(out)
    print(f"wrote {out} in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
