"""The memory section of the `archsim.stats/1` tree, computed from a replay's per-request arrays.

Every key written here has a unit and a description in STAT_DOCS; docs/stats.md is generated from it and
a test checks that the JSON carries no undocumented key.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from archsim.dram.commands import COMMAND_NAMES, RD, RDA, WR, WRA
from archsim.dram.spec import peak_bandwidth_GBps, peak_bandwidth_per_stack_GBps
from archsim.memory import ReplayResult

SCHEMA = "archsim.stats/1"

# dotted key (with <channel>/<source>/<cmd> placeholders) -> (unit, description)
STAT_DOCS: dict[str, tuple[str, str]] = {
    "schema": ("-", "schema name and version of this stats tree"),
    "sim.requests": ("requests", "requests in the replayed trace"),
    "sim.cycles": ("cycles", "memory command-clock cycles from cycle 0 to the last data beat or acceptance"),
    "sim.time_ns": ("ns", "sim.cycles x tCK"),
    "sim.wall_s": ("s", "host wall-clock time of the simulation loop, JIT compilation excluded "
                        "(0 with --reproducible)"),
    "sim.compile_s": ("s", "host time spent compiling or loading the compiled kernel, outside sim.wall_s "
                           "(0 with --reproducible)"),
    "sim.kernel_cache": ("-", "where the run's kernel variant came from: hit (numba's cache), miss (compiled), "
                              "loaded (earlier in the process); null with --reproducible"),
    "sim.requests_per_s": ("requests/s", "sim.requests / sim.wall_s: simulator speed (0 with --reproducible)"),
    "memory.standard": ("-", "DRAM preset the config starts from"),
    "memory.tCK_ns": ("ns", "command-clock period"),
    "memory.access_bytes": ("B", "bytes moved by one column command (bus width x burst length)"),
    "memory.reads": ("requests", "read requests"),
    "memory.writes": ("requests", "write requests"),
    "memory.bytes_read": ("B", "bytes read from DRAM (column reads x access_bytes)"),
    "memory.bytes_written": ("B", "bytes written to DRAM (column writes x access_bytes)"),
    "memory.bandwidth_GBps": ("GB/s", "bytes of the requests served (reads returned, writes completed, forwarded "
                                      "and merged ones included) / sim.time_ns (10^9 B/s)"),
    "memory.dram_bandwidth_GBps": ("GB/s", "bytes moved on the DRAM data buses (column commands x access_bytes) / "
                                           "sim.time_ns"),
    "memory.peak_bandwidth_GBps": ("GB/s", "every data bus busy every cycle: pseudo-channels x bus width x pin rate"),
    "memory.peak_bandwidth_per_stack_GBps": ("GB/s", "peak bandwidth of one stack"),
    "memory.bandwidth_utilization": ("fraction", "dram_bandwidth_GBps / peak_bandwidth_GBps"),
    "memory.read_latency_cycles.mean": ("cycles", "read latency, acceptance into the controller to last data beat: "
                                                  "mean"),
    "memory.read_latency_cycles.p50": ("cycles", "read latency (acceptance to data): median"),
    "memory.read_latency_cycles.p99": ("cycles", "read latency (acceptance to data): 99th percentile"),
    "memory.read_latency_cycles.max": ("cycles", "read latency (acceptance to data): maximum"),
    "memory.read_latency_ns.mean": ("ns", "read_latency_cycles.mean x tCK"),
    "memory.read_latency_ns.p50": ("ns", "read_latency_cycles.p50 x tCK"),
    "memory.read_latency_ns.p99": ("ns", "read_latency_cycles.p99 x tCK"),
    "memory.read_latency_ns.max": ("ns", "read_latency_cycles.max x tCK"),
    "memory.read_total_latency_cycles.mean": ("cycles", "read latency from the trace timestamp (injection stalls "
                                                        "included) to data: mean"),
    "memory.read_total_latency_cycles.p50": ("cycles", "read latency from the trace timestamp to data: median"),
    "memory.read_total_latency_cycles.p99": ("cycles", "read latency from the trace timestamp to data: 99th "
                                                       "percentile"),
    "memory.read_total_latency_cycles.max": ("cycles", "read latency from the trace timestamp to data: maximum"),
    "memory.injection_stall_cycles": ("cycles", "sum over requests of acceptance cycle minus timestamp "
                                                "(head-of-line blocking)"),
    "memory.row_hits": ("requests", "requests whose first command was their column command (row already "
                                    "open)"),
    "memory.row_misses": ("requests", "requests whose first command was an ACT to a closed bank"),
    "memory.row_conflicts": ("requests", "requests whose first command was a PRE of another row in their bank"),
    "memory.row_hit_rate": ("fraction", "row_hits / (row_hits + row_misses + row_conflicts)"),
    "memory.forwarded": ("requests", "reads served from, or writes merged into, a queued write to the same address"),
    "memory.bank_conflicts": ("requests", "requests that, on acceptance, found their bank open on another row, "
                                          "holding queued requests for another row, or refreshing"),
    "memory.commands.<cmd>": ("commands", "DRAM commands issued, by type (ACT, PRE, PREA, RD, WR, RDA, WRA, REF, "
                                          "REFpb)"),
    "memory.qos.row_closures.<opener>_by_<closer>": ("commands", "precharges that closed a row opened for one port "
                                                                 "(host or pnm) to serve the other or the same"),
    "memory.qos.bank_conflicts.<newcomer>_vs_<opener>": ("requests", "requests that found their bank open on another "
                                                                     "row opened for the given port"),
    "memory.qos.arbiter": ("-", "the port arbiter (shared, priority, wrr, reservation)"),
    "memory.banks.row_misses": ("requests", "row_misses per bank: a list per pseudo-channel (flat index, as "
                                            "the command log's) of one count per bank in the pseudo-channel"),
    "memory.banks.row_conflicts": ("requests", "row_conflicts per bank, laid out as memory.banks.row_misses"),
    "memory.banks.bank_conflicts": ("requests", "bank_conflicts per bank, laid out as memory.banks.row_misses"),
    "memory.channels.<channel>.requests": ("requests", "requests mapped to this channel (all its pseudo-channels)"),
    "memory.channels.<channel>.bandwidth_GBps": ("GB/s", "this channel's DRAM data bytes / sim.time_ns"),
    "memory.channels.<channel>.row_hit_rate": ("fraction", "row-hit rate of this channel's requests"),
    "memory.channels.<channel>.read_latency_cycles_mean": ("cycles", "mean read latency of this channel's reads"),
    "memory.sources.<source>.requests": ("requests", "requests from this port (host or pnm)"),
    "memory.sources.<source>.reads": ("requests", "reads from this port"),
    "memory.sources.<source>.writes": ("requests", "writes from this port"),
    "memory.sources.<source>.bandwidth_GBps": ("GB/s", "this port's DRAM data bytes / sim.time_ns"),
    "memory.sources.<source>.row_hit_rate": ("fraction", "row-hit rate of this port's requests"),
    "memory.sources.<source>.read_latency_cycles.mean": ("cycles", "read latency of this port's reads: mean"),
    "memory.sources.<source>.read_latency_cycles.p50": ("cycles", "read latency of this port's reads: median"),
    "memory.sources.<source>.read_latency_cycles.p99": ("cycles", "read latency of this port's reads: 99th percentile"),
}


def _summary(values: np.ndarray, keys: tuple[str, ...] = ("mean", "p50", "p99", "max")) -> dict[str, float]:
    if values.size == 0:
        return {k: 0.0 for k in keys}
    out = {"mean": float(values.mean()), "p50": float(np.percentile(values, 50)),
           "p99": float(np.percentile(values, 99)), "max": float(values.max())}
    return {k: round(out[k], 6) for k in keys}


def _hit_rate(klass: np.ndarray) -> float:
    dram = klass[(klass >= 0) & (klass <= 2)]
    return round(float(np.mean(dram == 0)), 6) if dram.size else 0.0


def memory_stats(result: ReplayResult, *, reproducible: bool = False) -> dict[str, Any]:
    cfg = result.config
    org, timing = cfg.organization, cfg.timing
    req = result.requests
    n = len(req)
    tck = timing.tCK_ns
    cycles = max(1, result.total_cycles)
    time_ns = cycles * tck
    is_w = req.is_write.astype(bool)
    reads = ~is_w
    klass = result.request_class
    dram_served = klass != 3
    access = org.access_bytes
    counts = result.command_counts
    bytes_read = int(counts[RD] + counts[RDA]) * access
    bytes_written = int(counts[WR] + counts[WRA]) * access
    dram_bw = (bytes_read + bytes_written) / time_ns
    bw = n * access / time_ns
    peak = peak_bandwidth_GBps(org, timing)
    lat_all = result.done_cycle - result.accept_cycle
    read_lat = lat_all[reads]
    total_lat = (result.done_cycle - req.timestamp_cycles)[reads]
    lat_cycles = _summary(read_lat)
    channel = result.pseudo_channel // org.pseudo_channels
    data_bytes = np.where(dram_served, access, 0)

    channels: dict[str, Any] = {}
    for ch in range(org.n_channels):
        sel = channel == ch
        ch_reads = sel & reads
        channels[str(ch)] = {
            "requests": int(sel.sum()),
            "bandwidth_GBps": round(float(data_bytes[sel].sum()) / time_ns, 6),
            "row_hit_rate": _hit_rate(klass[sel]),
            "read_latency_cycles_mean": round(float(lat_all[ch_reads].mean()), 6)
            if ch_reads.any() else 0.0,
        }
    sources: dict[str, Any] = {}
    for code, name in enumerate(req.sources):
        sel = req.source == code
        sources[name] = {
            "requests": int(sel.sum()),
            "reads": int((sel & reads).sum()),
            "writes": int((sel & is_w).sum()),
            "bandwidth_GBps": round(float(data_bytes[sel].sum()) / time_ns, 6),
            "row_hit_rate": _hit_rate(klass[sel]),
            "read_latency_cycles": _summary(lat_all[sel & reads], ("mean", "p50", "p99")),
        }
    wall = 0.0 if reproducible else round(result.wall_s, 6)
    return {
        "schema": SCHEMA,
        "sim": {
            "requests": n,
            "cycles": int(result.total_cycles),
            "time_ns": round(time_ns, 6),
            "wall_s": wall,
            "compile_s": 0.0 if reproducible else round(result.compile_s, 6),
            "kernel_cache": None if reproducible else (result.kernel_cache or "loaded"),
            "requests_per_s": 0.0 if reproducible else round(n / max(result.wall_s, 1e-9), 3),
        },
        "memory": {
            "standard": cfg.standard,
            "tCK_ns": tck,
            "access_bytes": access,
            "reads": int(reads.sum()),
            "writes": int(is_w.sum()),
            "bytes_read": bytes_read,
            "bytes_written": bytes_written,
            "bandwidth_GBps": round(bw, 6),
            "dram_bandwidth_GBps": round(dram_bw, 6),
            "peak_bandwidth_GBps": round(peak, 6),
            "peak_bandwidth_per_stack_GBps": round(peak_bandwidth_per_stack_GBps(org, timing), 6),
            "bandwidth_utilization": round(dram_bw / peak, 6),
            "read_latency_cycles": lat_cycles,
            "read_latency_ns": {k: round(v * tck, 6) for k, v in lat_cycles.items()},
            "read_total_latency_cycles": _summary(total_lat),
            "injection_stall_cycles": int((result.accept_cycle - req.timestamp_cycles).sum()),
            "row_hits": int((klass == 0).sum()),
            "row_misses": int((klass == 1).sum()),
            "row_conflicts": int((klass == 2).sum()),
            "row_hit_rate": _hit_rate(klass),
            "forwarded": int((klass == 3).sum()),
            "bank_conflicts": int(result.bank_conflict.sum()),
            "commands": {name: int(counts[code]) for code, name in enumerate(COMMAND_NAMES)},
            "banks": per_bank_counts(result),
            "channels": channels,
            "sources": sources,
            "qos": {
                "arbiter": cfg.controller.arbiter.impl,
                **_interference(req.sources, result.qos_counts),
            },
        },
    }


def _interference(sources: tuple[str, ...], counts: np.ndarray) -> dict[str, dict[str, int]]:
    """Row-buffer interference by port pair: rows one port opened that another closed, and requests that found
    their bank open on another port's row (`ReplayResult.qos_counts`)."""
    p = len(sources)
    return {"row_closures": {f"{sources[o]}_by_{sources[c]}": int(counts[o * p + c]) for o in range(p)
                             for c in range(p)},
            "bank_conflicts": {f"{sources[n]}_vs_{sources[o]}": int(counts[p * p + n * p + o]) for n in range(p)
                               for o in range(p)}}


def per_bank_counts(result: ReplayResult) -> dict[str, list[list[int]]]:
    """Row misses, row conflicts and bank conflicts per [pseudo-channel][bank] (the bank within its
    pseudo-channel), from the requests' classes and their decoded addresses. Their sums are the totals; the row
    openings (misses + conflicts) are fewer than the ACT commands when a refresh or a row policy closes a row a
    request had opened and it must be opened again."""
    org = result.config.organization
    bank = result.config.mapping.decode(result.requests.address).bank_in_pseudo_channel(org)
    bpp = org.banks_per_pseudo_channel
    key = result.pseudo_channel.astype(np.int64) * bpp + bank
    size = org.n_pseudo_channels * bpp

    def grid(selected: np.ndarray) -> list[list[int]]:
        return np.bincount(key[selected], minlength=size).reshape(-1, bpp).tolist()

    klass = result.request_class
    return {"row_misses": grid(klass == 1), "row_conflicts": grid(klass == 2),
            "bank_conflicts": grid(result.bank_conflict.astype(bool))}


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            out.update(flatten(value, path))
        else:
            out[path] = value
    return out


def doc_key(dotted: str) -> str:
    """Map a concrete key to its STAT_DOCS pattern (channel numbers, source and command names generalized)."""
    parts = dotted.split(".")
    if len(parts) >= 3 and parts[:2] == ["memory", "channels"]:
        parts[2] = "<channel>"
    if len(parts) >= 3 and parts[:2] == ["memory", "sources"]:
        parts[2] = "<source>"
    if len(parts) == 3 and parts[:2] == ["memory", "commands"]:
        parts[2] = "<cmd>"
    if len(parts) == 4 and parts[:3] == ["memory", "qos", "row_closures"]:
        parts[3] = "<opener>_by_<closer>"
    if len(parts) == 4 and parts[:3] == ["memory", "qos", "bank_conflicts"]:
        parts[3] = "<newcomer>_vs_<opener>"
    return ".".join(parts)
