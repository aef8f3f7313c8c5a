"""The `pnm` section of the `archsim.stats/1` tree, its documentation, and the terminal report.

Every key written here has a unit and a description in PNM_STAT_DOCS (docs/pnm.md carries the same
table); `<unit>` stands for a unit index, `<cause>` for a stall cause, `<class>` for an instruction class.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from archsim.isa.table import load_table
from archsim.pnm.timed.simulate import PnmRun
from archsim.pnm.timed.timing import EXEC_UNITS, STALL_CAUSES
from archsim.report.memory_stats import memory_stats

PNM_STAT_DOCS: dict[str, tuple[str, str]] = {
    "pnm.kernel": ("-", "kernel source file the units ran"),
    "pnm.shape": ("-", "the --shape string of the run"),
    "pnm.units": ("units", "PNM units that ran (one per channel group of the device)"),
    "pnm.head_groups": ("groups", "KV-head groups the units form (gcd of kv_heads and units)"),
    "pnm.splits": ("units", "context splits per head group (flash-decoding split-K)"),
    "pnm.address_space": ("-", "channel_local (a unit addresses its own channel group) or interleaved"),
    "pnm.clock_GHz": ("GHz", "clock frequency of the units"),
    "pnm.cycles": ("cycles", "unit-clock cycles from the start until the last unit halted"),
    "pnm.time_ns": ("ns", "pnm.cycles x unit clock period"),
    "pnm.macs": ("MACs", "multiply-accumulates of all units"),
    "pnm.flops": ("FLOP", "2 x MACs + vector element operations + exponentials"),
    "pnm.vec_ops": ("ops", "vector-unit element operations of all units"),
    "pnm.exp_ops": ("ops", "exponentials of all units"),
    "pnm.bytes_loaded": ("B", "bytes the units' DMA loads read from DRAM (payload, all units)"),
    "pnm.bytes_stored": ("B", "bytes the units' DMA stores wrote to DRAM (payload, all units)"),
    "pnm.host_bytes_in": ("B", "bytes received over the units' host ports (queries)"),
    "pnm.host_bytes_out": ("B", "bytes sent over the units' host ports (attention outputs)"),
    "pnm.instructions.total": ("instructions", "executed instructions of all units"),
    "pnm.instructions.<class>": ("instructions", "executed instructions by class (control, configuration, "
                                                 "scalar, data_movement, compute)"),
    "pnm.sram.capacity_bytes": ("B", "scratchpad capacity of one unit"),
    "pnm.sram.high_water_bytes": ("B", "highest scratchpad byte any unit wrote, plus one"),
    "pnm.sram.read_bytes": ("B", "scratchpad bytes read, all units"),
    "pnm.sram.write_bytes": ("B", "scratchpad bytes written, all units"),
    "pnm.sram.kv_read_bytes": ("B", "KV operand bytes the MAC datapath reads from the scratchpad: one K or V "
                                    "element per QK / PV multiply-accumulate, all units"),
    "pnm.sram.hit_rate": ("fraction", "1 - pnm.bytes_loaded / pnm.sram.kv_read_bytes, counted over the run: the "
                                      "share of the datapath's KV reads served by bytes already in SRAM (a DMA "
                                      "load brings every byte in once). MHA decode ~0 (no reuse), GQA ~1 - 1/group"),
    "pnm.sram.reuse_factor": ("reads/B", "pnm.sram.kv_read_bytes / pnm.bytes_loaded: datapath reads per byte "
                                         "brought into SRAM (the query group for GQA, ~1 for MHA)"),
    "pnm.stalls.<cause>": ("unit-cycles", "issue stall cycles summed over units, by cause: memory (DRAM data, "
                                          "drains, outstanding-load limit), dependency (register results, "
                                          "pipeline latency, buffers still read), compute (busy datapath or a "
                                          "compute producer still streaming), host (host port), barrier (other "
                                          "units)"),
    "pnm.stall_fraction.<cause>": ("fraction", "pnm.stalls.<cause> / (pnm.units x pnm.cycles)"),
    "pnm.utilization.<exec>": ("fraction", "busy cycles of an execution unit (mac, vec, sfu, dma, host) / "
                                           "(pnm.units x pnm.cycles)"),
    "pnm.utilization.issue": ("fraction", "instructions / (pnm.units x pnm.cycles x issue width)"),
    "pnm.utilization.compute": ("fraction", "compute roofline cycles / pnm.cycles: the busiest datapath's "
                                            "share of the run"),
    "pnm.utilization.dram": ("fraction", "DRAM bytes moved / pnm.time_ns / peak bandwidth of the channels the "
                                         "units own"),
    "pnm.roofline_cycles": ("cycles", "analytic bound of the same run: max(roofline.memory_cycles, "
                                      "roofline.compute_cycles)"),
    "pnm.roofline.memory_cycles": ("cycles", "the run's DRAM requests replayed open loop per memory domain "
                                             "(slowest domain), in unit cycles: bytes / sustained bandwidth"),
    "pnm.roofline.compute_cycles": ("cycles", "max over units of max(MACs / macs_per_cycle, vector ops / "
                                              "vector_lanes, exponentials / exp_per_cycle)"),
    "pnm.roofline.dram_bytes": ("B", "bytes of the replayed requests (requests x access_bytes)"),
    "pnm.roofline.sustained_bandwidth_GBps": ("GB/s", "roofline.dram_bytes / the slowest domain's open-loop "
                                                      "replay time"),
    "pnm.roofline.bound": ("-", "memory or compute: the larger roofline term"),
    "pnm.roofline_ratio": ("ratio", "pnm.cycles / pnm.roofline_cycles (1 = at the bound)"),
    "pnm.per_unit.<unit>.cycles": ("cycles", "cycle this unit halted"),
    "pnm.per_unit.<unit>.head0": ("head", "first KV head (index in the whole problem) the unit handles"),
    "pnm.per_unit.<unit>.kv_heads": ("heads", "KV heads the unit handles"),
    "pnm.per_unit.<unit>.split": ("index", "the unit's context split (0 merges the partial results)"),
    "pnm.per_unit.<unit>.instructions": ("instructions", "instructions the unit executed"),
    "pnm.per_unit.<unit>.bytes_loaded": ("B", "bytes the unit's loads read"),
    "pnm.per_unit.<unit>.stalls.<cause>": ("cycles", "the unit's issue stalls by cause"),
    "pnm.sim.wall_s": ("s", "host time of the whole PNM run (0 with --reproducible)"),
    "pnm.sim.functional_wall_s": ("s", "host time of placement, assembly and the functional traces "
                                       "(0 with --reproducible)"),
    "pnm.sim.timing_wall_s": ("s", "host time of the timed run (0 with --reproducible)"),
    "pnm.sim.roofline_wall_s": ("s", "host time of the roofline replays (0 with --reproducible)"),
    "pnm.sim.memory_steps": ("steps", "run_until calls of the closed-loop memory domains"),
    "pnm.sim.memory_domains": ("domains", "MemorySessions the units ran against"),
    "pnm.sim.roofline_replays": ("replays", "distinct open-loop streams replayed for the roofline"),
    "pnm.sim.late_requests": ("requests", "requests released after the memory had passed their cycle "
                                          "(must be 0: the horizon is conservative)"),
}


# Stable keys (issue 3): later versions keep their name, unit and meaning.
PNM_CONTRACT: frozenset[str] = frozenset({
    "pnm.cycles", "pnm.time_ns", "pnm.macs", "pnm.bytes_loaded", "pnm.bytes_stored", "pnm.roofline_cycles",
    "pnm.stalls.memory", "pnm.stalls.dependency", "pnm.stalls.compute"})


def render_pnm_stats_table() -> str:
    """The markdown table of PNM_STAT_DOCS that docs/pnm.md carries (a test keeps it current)."""
    rows = ["| key | unit | description |", "|---|---|---|"]
    for key, (unit, description) in PNM_STAT_DOCS.items():
        mark = " *contract*" if key in PNM_CONTRACT else ""
        if key == "pnm.stalls.<cause>":
            mark = " *contract* for memory, dependency, compute"
        rows.append(f"| `{key}` | {unit} | {description}{mark} |")
    return "\n".join(rows) + "\n"


def _r(x: float) -> float:
    return round(float(x), 6)


def sram_reuse(works: Any, kv_dtype: str) -> tuple[int, float, float]:
    """KV reuse in the scratchpad counted over executed instructions: (KV bytes the datapath read, hit rate,
    reuse factor). Every QK / PV multiply-accumulate reads one KV element from SRAM; every byte there came in
    by a DMA load (pnm.bytes_loaded), so hit rate = 1 - loaded / read and reuse = read / loaded."""
    from archsim.pnm.machine.dtypes import ELEMENT_BYTES

    macs = sum(w.trace.totals()["macs"] for w in works)
    loaded = sum(w.trace.totals()["dram_read_bytes"] for w in works)
    read = macs * ELEMENT_BYTES[kv_dtype]
    if not read or not loaded:
        return read, 0.0, 0.0
    return read, _r(max(0.0, 1.0 - loaded / read)), _r(read / loaded)


def pnm_section(run: PnmRun, *, reproducible: bool = False) -> dict[str, Any]:
    table = load_table()
    timing, works = run.timing, run.workload.units
    layout = run.layout
    units = len(works)
    cycles = max(1, timing.cycles)
    period = layout.unit_period_ns
    totals = {name: 0 for name in works[0].trace.counter_names}
    classes = {name: 0 for name in table.classes}
    for w in works:
        for name, value in w.trace.totals().items():
            totals[name] += value
        codes, counts = np.unique(w.trace.opcode, return_counts=True)
        for code, count in zip(codes.tolist(), counts.tolist(), strict=True):
            classes[table.by_code[code].group] += count
    stalls = [sum(t.stats.stalls[i] for t in timing.timers) for i in range(len(STALL_CAUSES))]
    busy = [sum(t.stats.busy[i] for t in timing.timers) for i in range(len(EXEC_UNITS))]
    unit_cycles = units * cycles
    dram_bytes = run.roofline.dram_bytes
    org, t = run.memory.organization, run.memory.timing
    owned_channels = min(org.n_channels, units * layout.channels_per_unit)
    owned_peak_GBps = owned_channels * org.pseudo_channels * org.bus_width_bits * t.data_rate_gbps / 8.0
    bound = run.roofline
    per_unit: dict[str, Any] = {}
    for w, timer in zip(works, timing.timers, strict=True):
        a = w.assignment
        per_unit[str(w.unit)] = {
            "cycles": timer.stats.finish_cycle, "head0": a.head0,
            "kv_heads": a.nheads, "split": a.split, "instructions": len(w.trace),
            "bytes_loaded": int(w.trace.totals()["dram_read_bytes"]),
            "stalls": dict(zip(STALL_CAUSES, timer.stats.stalls, strict=True)),
        }
    wall = 0.0 if reproducible else _r(run.functional_wall_s + timing.wall_s + bound.wall_s)
    kv_read, hit_rate, reuse = sram_reuse(works, run.shape.spec.kv_dtype)
    return {
        "kernel": run.kernel.name, "shape": run.shape.text, "units": units,
        "head_groups": run.workload.groups, "splits": run.workload.splits, "address_space": layout.address_space,
        "clock_GHz": _r(1.0 / period),
        "cycles": timing.cycles, "time_ns": _r(timing.cycles * period),
        "macs": totals["macs"], "flops": 2 * totals["macs"] + totals["vec_ops"] + totals["exp_ops"],
        "vec_ops": totals["vec_ops"], "exp_ops": totals["exp_ops"],
        "bytes_loaded": totals["dram_read_bytes"], "bytes_stored": totals["dram_write_bytes"],
        "host_bytes_in": totals["host_in_bytes"], "host_bytes_out": totals["host_out_bytes"],
        "instructions": {"total": sum(classes.values()), **classes},
        "sram": {"capacity_bytes": run.pnm.sram.capacity_bytes,
                 "high_water_bytes": max(w.sram_high_water_bytes for w in works),
                 "read_bytes": totals["sram_read_bytes"], "write_bytes": totals["sram_write_bytes"],
                 "kv_read_bytes": kv_read, "hit_rate": hit_rate, "reuse_factor": reuse},
        "stalls": dict(zip(STALL_CAUSES, stalls, strict=True)),
        "stall_fraction": {c: _r(s / unit_cycles) for c, s in zip(STALL_CAUSES, stalls, strict=True)},
        "utilization": {
            **{e: _r(b / unit_cycles) for e, b in zip(EXEC_UNITS, busy, strict=True)
               if e in ("mac", "vec", "sfu", "dma", "host")},
            "issue": _r(sum(len(w.trace) for w in works) / (unit_cycles * run.pnm.issue_width)),
            "compute": _r(bound.compute_cycles / cycles),
            "dram": _r(dram_bytes / (timing.cycles * period) / owned_peak_GBps) if timing.cycles else 0.0,
        },
        "roofline_cycles": bound.cycles,
        "roofline": {"memory_cycles": bound.memory_cycles, "compute_cycles": bound.compute_cycles,
                     "dram_bytes": dram_bytes, "sustained_bandwidth_GBps": _r(bound.sustained_bandwidth_GBps),
                     "bound": bound.bound},
        "roofline_ratio": _r(timing.cycles / max(1, bound.cycles)),
        "per_unit": per_unit,
        "sim": {
            "wall_s": wall,
            "functional_wall_s": 0.0 if reproducible else _r(run.functional_wall_s),
            "timing_wall_s": 0.0 if reproducible else _r(timing.wall_s),
            "roofline_wall_s": 0.0 if reproducible else _r(bound.wall_s),
            "memory_steps": timing.horizon_steps, "memory_domains": sum(1 for d in timing.domains if d.n),
            "roofline_replays": bound.replays,
            "late_requests": sum(d.late_requests for d in timing.domains),
        },
    }


def pnm_stats(run: PnmRun, *, reproducible: bool = False) -> dict[str, Any]:
    """The whole stats tree of a PNM run: schema, sim and memory sections of the memory core, plus pnm."""
    tree = memory_stats(run.timing.memory, reproducible=reproducible)
    tree["pnm"] = pnm_section(run, reproducible=reproducible)
    return tree


def pnm_doc_key(dotted: str) -> str:
    """Map a concrete pnm key to its PNM_STAT_DOCS pattern."""
    parts = dotted.split(".")
    if len(parts) >= 3 and parts[:2] == ["pnm", "per_unit"]:
        parts[2] = "<unit>"
        if len(parts) == 5 and parts[3] == "stalls":
            parts[4] = "<cause>"
    elif len(parts) == 3 and parts[1] in ("stalls", "stall_fraction"):
        parts[2] = "<cause>"
    elif len(parts) == 3 and parts[1] == "instructions" and parts[2] != "total":
        parts[2] = "<class>"
    elif len(parts) == 3 and parts[1] == "utilization" and parts[2] in EXEC_UNITS:
        parts[2] = "<exec>"
    return ".".join(parts)


def pnm_summary_rows(stats: dict[str, Any]) -> list[tuple[str, str]]:
    p, mem = stats["pnm"], stats["memory"]
    stalls = ", ".join(f"{c} {100 * f:.1f} %" for c, f in p["stall_fraction"].items() if f)
    util = p["utilization"]
    roof = p["roofline"]
    inst = p["instructions"]
    return [
        ("kernel / shape", f"{p['kernel']}  {p['shape']}"),
        ("units", f"{p['units']} ({p['head_groups']} head groups x {p['splits']} splits, {p['address_space']}, "
                  f"{p['clock_GHz']:g} GHz)"),
        ("time", f"{p['cycles']:,} cycles = {p['time_ns'] / 1000:,.3f} us"),
        ("roofline", f"{p['roofline_cycles']:,} cycles ({roof['bound']}-bound: memory {roof['memory_cycles']:,}, "
                     f"compute {roof['compute_cycles']:,}); run / roofline = {p['roofline_ratio']:.3f}"),
        ("sustained DRAM", f"{roof['sustained_bandwidth_GBps']:,.1f} GB/s open loop on the same requests"),
        ("DRAM bandwidth", f"{mem['bandwidth_GBps']:,.1f} GB/s of {mem['peak_bandwidth_GBps']:,.1f} GB/s peak "
                           f"({100 * mem['bandwidth_utilization']:.1f} %), row hits {100 * mem['row_hit_rate']:.1f} %"),
        ("work", f"{p['macs']:,} MACs, {p['vec_ops']:,} vector ops, {p['exp_ops']:,} exps"),
        ("data", f"{p['bytes_loaded']:,} B loaded, {p['bytes_stored']:,} B stored, host {p['host_bytes_in']:,} B in "
                 f"/ {p['host_bytes_out']:,} B out"),
        ("instructions", f"{inst['total']:,}: " + ", ".join(f"{k} {v:,}" for k, v in inst.items()
                                                            if k != "total" and v)),
        ("SRAM", f"high water {p['sram']['high_water_bytes']:,} B of {p['sram']['capacity_bytes']:,} B"),
        ("utilization", f"MAC {100 * util['mac']:.1f} %, vector {100 * util['vec']:.1f} %, SFU "
                        f"{100 * util['sfu']:.1f} %, issue {100 * util['issue']:.1f} %, "
                        f"DRAM {100 * util['dram']:.1f} %"),
        ("stalls", stalls or "none"),
        ("simulator", f"{p['sim']['wall_s']:.2f} s (functional {p['sim']['functional_wall_s']:.2f}, timed "
                      f"{p['sim']['timing_wall_s']:.2f}, roofline {p['sim']['roofline_wall_s']:.2f}); "
                      f"{p['sim']['memory_steps']:,} memory steps"),
    ]
