"""The slow-thinking section of docs/results.md: tree search and speculative decoding served on GPU attention
(`gpu-hbm`) and PNM attention (`g25`), with the caches' hit rates, from runs. Called by archsim.system.results_doc.

Every row is an `archsim serve` run of a shipped scenario (configs/scenarios/tree-search.yaml, speculative.yaml)
with one knob changed by `--set`; nothing here is tuned to a claim. The articles' falling L2 hit rate is tested
on the runs' own numbers and the verdict written from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from archsim.serving.run import SystemRun, requests_source, run_system
from archsim.serving.scenario import load_scenario
from archsim.serving.speculative import expected_tokens
from archsim.system.config import load_system_config

SYSTEMS = ("gpu-hbm", "g25")
TREE_REQUESTS = 300
TREE_KNOBS: tuple[tuple[str, Sequence[object]], ...] = (
    ("scenario.tree.width", (2, 4, 8)),
    ("scenario.tree.backtrack", (0.0, 0.3, 0.6, 0.9)),
    ("scenario.tree.depth", (4, 8, 16)),
    ("scenario.input.value", (70, 4096, 16384)),
)
SPEC_REQUESTS = 16
SPEC_GRID = ((0.5, 2), (0.7, 4), (0.9, 8), (0.7, 2), (0.7, 8))


def _serve(scenario: str, sets: Sequence[str], requests: int) -> dict[str, SystemRun]:
    loaded = load_scenario(scenario, list(sets))
    source = requests_source(loaded, requests, None, 0)
    return {name: run_system(load_system_config(name), loaded, source, warmup=0) for name in SYSTEMS}


def _pct(value: Any) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def _tree_row(knob: str, value: object, runs: dict[str, SystemRun]) -> tuple[str, dict[str, Any]]:
    """One table row and what the verdict needs: the 50 MB hit rate, the sweep and the largest reuse distance."""
    gpu, pnm = (runs[s].metrics or {} for s in SYSTEMS)
    l2 = gpu["cache_reuse"]["gpu_l2"] or {}
    sweep = l2.get("kv_hit_rate_by_capacity") or {}
    distance = l2.get("reuse_distance_bytes") or {}
    name = knob.removeprefix("scenario.")
    row = (f"| `{name}={value}` | {gpu['tpot_ms']['mean']:.2f} | {pnm['tpot_ms']['mean']:.2f} "
           f"| {_pct(gpu['prefix_hit_rate'])} | {_pct(l2.get('kv_hit_rate'))} | "
           f"{' / '.join(_pct(v) for v in sweep.values())} | "
           f"{distance.get('p50', 0) / 1e6:.2f} / {distance.get('max', 0) / 1e6:.2f} | "
           f"{_pct(pnm['cache_reuse']['pnm_sram_kv_hit_rate'])} | "
           f"{gpu['kv_read_bytes_per_token'] / 1e6:.1f} / {pnm['kv_read_bytes_per_token'] / 1e6:.1f} |")
    return row, {"l2": l2.get("kv_hit_rate"), "sweep": list(sweep.values()), "max_distance": distance.get("max", 0.0),
                 "capacity": l2.get("capacity_bytes", 0)}


def tree_section() -> list[str]:
    lines = ["Tree search (`tree-search`: 70-token questions, 256-token steps, width 4, depth 8, backtracking 0.3, "
             "16-token verifier prompts, 16 closed-loop users; "
             f"{TREE_REQUESTS} requests), one knob moved per row; GPU attention `gpu-hbm`, PNM attention `g25`:", "",
             "| knob | TPOT ms GPU | TPOT ms PNM | prefix hits (GPU) | GPU L2 KV hits, 50 MB | L2 at 25 / 50 / 100 / "
             "200 MB | L2 reuse distance p50 / max MB | PNM SRAM KV hits | KV MB read per token GPU / PNM |",
             "|---|---|---|---|---|---|---|---|---|"]
    trends: dict[str, list[dict[str, Any]]] = {}
    for knob, values in TREE_KNOBS:
        for value in values:
            row, rates = _tree_row(knob, value, _serve("tree-search", [f"{knob}={value}"], TREE_REQUESTS))
            lines.append(row)
            trends.setdefault(knob, []).append(rates)
    lines += ["", "The articles' falling L2 hit rate (about 85 % to about 55 % under tree search), tested at the "
              "H100's datasheet 50 MB:", "", *_verdict(trends), "", _why(trends)]
    return lines


def _verdict(trends: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The articles' claim, on these runs: does the L2 hit rate fall monotonically, by 10 points or more, as
    backtracking or tree width grows?"""
    out = []
    for knob in ("scenario.tree.backtrack", "scenario.tree.width"):
        l2 = [t["l2"] for t in trends[knob]]
        falls = all(b < a for a, b in zip(l2, l2[1:], strict=False)) and l2[0] - l2[-1] >= 0.10
        out.append(f"* {knob.removeprefix('scenario.')}: GPU L2 KV hit rate {' -> '.join(_pct(v) for v in l2)}: "
                   + ("falls monotonically by 10 points or more, as the articles report." if falls else
                      "does not fall by 10 points; the reuse distances say why (below)."))
    return out


def _hierarchy() -> dict[str, float]:
    """The numbers of the explanation, from the tree-search model on `gpu-hbm`: per GPU and layer its weights,
    its query heads per KV head and one token's KV."""
    from archsim.kvlayout import kv_geometry
    from archsim.models import dtype_bytes
    from archsim.models.presets import load_preset
    from archsim.system.gpu import gpu_work

    preset = load_preset(load_scenario("tree-search").model)
    shape, tp = preset.shape(), load_system_config(SYSTEMS[0]).serving.tensor_parallel
    geo = kv_geometry(shape, preset.dtype, 1, 0)
    weights = gpu_work(shape, preset.dtype, 1, dtype_bytes(preset.dtype)).weight_bytes / shape.num_layers / tp
    kv_per_gpu = max(1, geo.kv_heads // tp)
    return {"weights": weights, "group": max(1, geo.kv_heads * geo.query_group // tp) // kv_per_gpu,
            "token": kv_per_gpu * geo.row_bytes, "tp": tp, "model": preset.name}


def _why(trends: dict[str, list[dict[str, Any]]]) -> str:
    """The reuse distances behind the verdict, from the same runs."""
    every = [t for rates in trends.values() for t in rates]
    longest = max(t["max_distance"] for t in every)
    flat = all(len(set(t["sweep"])) == 1 for t in every)
    capacity = every[0]["capacity"]
    h = _hierarchy()
    g = int(h["group"])
    return ("Why, from the simulated reuse distances: the L2 sees KV reuse only inside one layer's attention of "
            f"one iteration (between two layers a GPU streams that layer's weights, {h['weights'] / 1e6:.0f} MB for "
            f"{h['model']} at tensor parallelism {h['tp']}, {h['weights'] / capacity:.1f}x the L2, and the next read "
            f"of a block comes an iteration later). Inside it, each of a GPU's {g} query heads per KV head re-reads "
            f"that head's blocks ({g - 1} of {g} reads hit whatever the tree does) and branches that share a "
            "parent re-read "
            f"the parent's blocks; the longest reuse distance in any of these runs is {longest / 1e6:.1f} MB, below "
            f"the smallest size swept ({capacity / 2e6:.0f} MB), so "
            + ("the hit rate is the same at every size and " if flat else "")
            + "every miss is a block's first read in the layer. Backtracking moves which node a branch continues, "
            "not how far apart one iteration's reads of a block are, and a wider tree shares more blocks, so neither "
            f"lowers the hit rate; a context long enough to push one sequence's layer past the L2 (about "
            f"{capacity / h['token'] / 1e3:.0f}K tokens at {h['token']:.0f} B per token and layer on a GPU) would.")


POOL_SYSTEM = "g25-nopnm"
POOL_L2_MiB = (16, 64, 256)  # per pool device: a sweep, since no shipped pool has an L2 to cite
POOL_L2 = "{{capacity: {}MiB, line_size: 128B, ways: 16, replacement: lru, hit_latency_cycles: 20, mshrs: 64}}"
POOL_KNOBS: tuple[tuple[str, Sequence[object]], ...] = (
    ("scenario.tree.width", (1, 2, 4, 8)),
    ("scenario.tree.backtrack", (0.0, 0.3, 0.9)),
    ("scenario.input.value", (70, 4096)),
)


def pool_l2_section() -> list[str]:
    """The pool's host-path L2 under tree search, when the GPUs stream their KV from a pool without PNM."""
    sizes = " / ".join(f"{m}" for m in POOL_L2_MiB)
    lines = [f"The pool's L2 on its host path: `{POOL_SYSTEM}` re-reading every sequence's KV from the pool each "
             f"iteration (`kv.decode: stream`), `tree-search` as above ({TREE_REQUESTS} requests), an L2 of "
             f"{sizes} MiB per pool device (8 devices; 128 B lines, 16 ways, LRU: assumptions of the sweep, no "
             "shipped pool has one), its sampled KV hit rate (archsim/serving/pool_l2.py):", "",
             f"| knob | pool L2 KV hits at {sizes} MiB per device | KV GB an iteration reads (p50) | TPOT ms |",
             "|---|---|---|---|"]
    flat, warm = True, []
    for knob, values in POOL_KNOBS:
        for value in values:
            rates, metrics = [], {}
            for mib in POOL_L2_MiB:
                loaded = load_scenario("tree-search", [f"{knob}={value}"])
                system = load_system_config(POOL_SYSTEM, [f"system.pool.l2={POOL_L2.format(mib)}",
                                                          "system.kv.decode=stream"])
                run = run_system(system, loaded, requests_source(loaded, TREE_REQUESTS, None, 0), warmup=0)
                metrics = run.metrics or {}
                rates.append(metrics["cache_reuse"]["pool_l2"]["kv_hit_rate"])
            pool = metrics["cache_reuse"]["pool_l2"]
            flat = flat and len(set(rates)) == 1
            name = f"{knob.removeprefix('scenario.')}={value}"
            if pool["warm_samples"]:
                warm.append(f"`{name}` ({pool['warm_samples']} of {pool['sampled_iterations']})")
            lines.append(f"| `{name}` | {' / '.join(_pct(r) for r in rates)} | "
                         f"{pool['iteration_read_bytes']['p50'] / 1e9:.1f} | {metrics['tpot_ms']['mean']:.2f} |")
    lines += ["", "A branch's reads of its ancestors' blocks hit where a sibling read them earlier in the same layer "
              "of the iteration; a path of its own (width 1) shares nothing. "
              + ("The rate is the same at every size: one layer's reads of an iteration fit the smallest slice, so "
                 "every miss is a block's first read in the layer. " if flat else "")
              + "A sample starts warm when the previous iteration's reads of every layer fit the L2 (so a stream's "
              "blocks can hit from one iteration to the next): "
              + (f"at {POOL_L2_MiB[-1]} MiB, {', '.join(warm)} of the sampled iterations did." if warm else
                 "no run had one; every iteration reads more than the largest L2, so none survives to the next.")]
    return lines


def _draft_share(metrics: dict[str, Any]) -> str:
    parts = metrics["energy_breakdown_mJ_per_token"]
    draft = sum(v for k, v in parts.items() if k.startswith("draft."))
    return _pct(draft / sum(parts.values()))


def speculative_section() -> list[str]:
    lines = ["Speculative decoding (`speculative`: 15,325-token prompts, 149-token answers, Llama-3.2-1B drafting "
             f"for Llama-3.1-70B, 8 users, {SPEC_REQUESTS} requests); KV read per emitted token against the "
             "verification step's KV over E[tokens] = (1 - a^(k+1)) / (1 - a):", "",
             "| acceptance a | draft k | tokens per step (E) | KV MB per token (step / E) | TPOT ms GPU | "
             "TPOT ms PNM | rejected KV MB | J per token GPU / PNM (draft's share) |",
             "|---|---|---|---|---|---|---|---|"]
    slower = []
    for a, k in SPEC_GRID:
        runs = _serve("speculative", [f"scenario.speculative.acceptance={a}", f"scenario.speculative.k={k}"],
                      SPEC_REQUESTS)
        gpu, pnm = (runs[s].metrics or {} for s in SYSTEMS)
        slower.append(pnm["tpot_ms"]["mean"] > gpu["tpot_ms"]["mean"])
        sp = gpu["speculative"]
        analytic_MB = sp["kv_read_bytes_per_step"] / expected_tokens(k, a) / 1e6
        lines.append(f"| {a} | {k} | {sp['tokens_per_step']:.2f} ({expected_tokens(k, a):.2f}) | "
                     f"{sp['kv_read_bytes_per_token'] / 1e6:.0f} ({analytic_MB:.0f}) | "
                     f"{gpu['tpot_ms']['mean']:.2f} | {pnm['tpot_ms']['mean']:.2f} | "
                     f"{sp['rejected_kv_bytes'] / 1e6:.0f} | {gpu['energy_J_per_token']:.2f} / "
                     f"{pnm['energy_J_per_token']:.2f} ({_draft_share(gpu)}) |")
    lines += ["", f"PNM attention is slower than GPU attention in {sum(slower)} of {len(slower)} rows: a verification "
              "step's k + 1 query tokens times the query heads per KV head make the pool units' MAC array, not their "
              "DRAM, the bound (docs/pnm.md, the multi-token table), while the GPUs verify from HBM at their own "
              "FLOPs."]
    return lines
