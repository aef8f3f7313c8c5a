"""The memory section of the `archsim.stats/1` tree: a replay's requests folded (in one piece or chunk by chunk, the
same figures either way) into counts, exact sums and exact latency histograms (`histogram.IntHistogram`).

Every key written here has a unit and a description in STAT_DOCS; docs/stats.md is generated from it and
a test checks that the JSON carries no undocumented key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from archsim.config.memory import SOURCES, MemoryConfig
from archsim.dram.commands import COMMAND_NAMES, RD, RDA, WR, WRA
from archsim.dram.spec import peak_bandwidth_GBps, peak_bandwidth_per_stack_GBps
from archsim.errors import ConfigError
from archsim.memory import ReplayResult
from archsim.report.histogram import IntHistogram, exact_sum

SCHEMA = "archsim.stats/1"

# dotted key (with <channel>/<source>/<cmd> placeholders) -> (unit, description)
STAT_DOCS: dict[str, tuple[str, str]] = {
    "schema": ("-", "schema name and version of this stats tree"),
    "sim.requests": ("requests", "requests in the replayed trace"),
    "sim.cycles": ("cycles", "memory command-clock cycles from cycle 0 to the last data beat or acceptance"),
    "sim.time_ns": ("ns", "sim.cycles x tCK"),
    "sim.wall_s": ("s", "host wall-clock time of the simulation loop (the kernel and, in a streaming replay, its "
                        "request window), JIT compilation, trace reading and stats excluded (0 with --reproducible)"),
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
                                                                 "(a host or the pnm) to serve another or the same"),
    "memory.qos.bank_conflicts.<newcomer>_vs_<opener>": ("requests", "requests that found their bank open on another "
                                                                     "row opened for the given port"),
    "memory.qos.arbiter": ("-", "the port arbiter (shared, priority, wrr, reservation)"),
    "memory.qos.ports.<source>.share_of_served": ("fraction", "this port's requests served over every port's (with "
                                                             "--alone, qos_targets or more than two ports)"),
    "memory.qos.ports.<source>.read_total_latency_cycles.mean": ("cycles", "this port's read latency from its "
                                                                           "trace timestamp (front-end queueing "
                                                                           "included): mean"),
    "memory.qos.ports.<source>.read_total_latency_cycles.p50": ("cycles", "this port's read latency from its "
                                                                          "trace timestamp: median"),
    "memory.qos.ports.<source>.read_total_latency_cycles.p99": ("cycles", "this port's read latency from its "
                                                                          "trace timestamp: 99th percentile"),
    "memory.qos.ports.<source>.read_total_latency_ns.mean": ("ns", "read_total_latency_cycles.mean x tCK"),
    "memory.qos.ports.<source>.read_total_latency_ns.p50": ("ns", "read_total_latency_cycles.p50 x tCK"),
    "memory.qos.ports.<source>.read_total_latency_ns.p99": ("ns", "read_total_latency_cycles.p99 x tCK"),
    "memory.qos.ports.<source>.alone_read_total_latency_cycles_mean": ("cycles", "with --alone: the same mean "
                                                                                 "with this port's requests "
                                                                                 "replayed alone"),
    "memory.qos.ports.<source>.slowdown": ("ratio", "with --alone: read_total_latency_cycles.mean / "
                                                    "alone_read_total_latency_cycles_mean"),
    "memory.qos.ports.<source>.target_p99_ns": ("ns", "controller.qos_targets: the p99 this port should stay "
                                                      "under"),
    "memory.qos.ports.<source>.target_met": ("-", "read_total_latency_ns.p99 <= target_p99_ns"),
    "memory.qos.fairness_jain": ("ratio", "with --alone: Jain's index over the ports' 1 / slowdown, (sum x)^2 / "
                                          "(n sum x^2), 1 when all slow down alike; else null"),
    "memory.qos.violations": ("-", "ports whose target_met is false"),
    "memory.banks.row_misses": ("requests", "row_misses per bank: a list per pseudo-channel (flat index, as "
                                            "the command log's) of one count per bank in the pseudo-channel"),
    "memory.banks.row_conflicts": ("requests", "row_conflicts per bank, laid out as memory.banks.row_misses"),
    "memory.banks.bank_conflicts": ("requests", "bank_conflicts per bank, laid out as memory.banks.row_misses"),
    "memory.channels.<channel>.requests": ("requests", "requests mapped to this channel (all its pseudo-channels)"),
    "memory.channels.<channel>.bandwidth_GBps": ("GB/s", "this channel's DRAM data bytes / sim.time_ns"),
    "memory.channels.<channel>.row_hit_rate": ("fraction", "row-hit rate of this channel's requests"),
    "memory.channels.<channel>.read_latency_cycles_mean": ("cycles", "mean read latency of this channel's reads"),
    "memory.sources.<source>.requests": ("requests", "requests from this port (a host or the pnm: the trace's "
                                                     "sources)"),
    "memory.sources.<source>.reads": ("requests", "reads from this port"),
    "memory.sources.<source>.writes": ("requests", "writes from this port"),
    "memory.sources.<source>.bandwidth_GBps": ("GB/s", "this port's DRAM data bytes / sim.time_ns"),
    "memory.sources.<source>.row_hit_rate": ("fraction", "row-hit rate of this port's requests"),
    "memory.sources.<source>.read_latency_cycles.mean": ("cycles", "read latency of this port's reads: mean"),
    "memory.sources.<source>.read_latency_cycles.p50": ("cycles", "read latency of this port's reads: median"),
    "memory.sources.<source>.read_latency_cycles.p99": ("cycles", "read latency of this port's reads: 99th percentile"),
}


@dataclass(frozen=True)
class RunFigures:
    """What a replay reports besides its requests: the run's length, commands by kind, row-buffer interference
    counts by port (`ReplayResult.qos_counts`), host timing and where the kernel came from."""

    total_cycles: int
    command_counts: np.ndarray
    qos_counts: np.ndarray
    wall_s: float
    compile_s: float
    kernel_cache: str | None


class MemoryStatsAccumulator:
    """The per-request side of the stats tree, folded chunk by chunk (any split of the requests gives the same
    figures): counts by bank, port, kind, class and bank conflict (every count of the tree is a sum of these),
    exact latency sums and exact latency histograms."""

    def __init__(self, cfg: MemoryConfig, sources: tuple[str, ...] = SOURCES, *, per_port: bool = False) -> None:
        org = cfg.organization
        self.cfg = cfg
        self.per_port = per_port  # also each port's latency from its trace timestamps (`port_qos`)
        self.injection_stall = 0
        self.read_latency = IntHistogram()  # acceptance to data
        self.read_total_latency = IntHistogram()  # trace timestamp to data
        self.channel_latency = [0] * org.n_channels  # reads' latency sum per channel
        self._allocate(sources)

    def begin(self, sources: tuple[str, ...]) -> None:
        """The trace's ports (`sources`, by index), before any request is folded (a streaming replay's sink is
        told them when the trace is open); a QoS target for a port the trace has not is refused now, before the
        run."""
        self._allocate(sources)
        for name, _target in self.cfg.controller.qos_targets:
            if name not in self.sources:
                raise ConfigError(f"a QoS target for port {name!r}, which the trace has not (its ports: "
                                  f"{', '.join(self.sources)})", file=self.cfg.source_file,
                                  where=f"memory.controller.qos_targets.{name}")

    def _allocate(self, sources: tuple[str, ...]) -> None:
        self.sources = tuple(sources)
        self.per_port = self.per_port or len(self.sources) > 2  # several hosts: the QoS among them is the point
        # requests by [global bank, port, write?, class + 1 (-1 none, hit, miss, conflict, forwarded), bank conflict?]
        self.counts = np.zeros((self.cfg.organization.n_banks, len(sources), 2, 5, 2), dtype=np.int64)
        self.source_latency = [IntHistogram() for _ in sources]  # acceptance to data, per port
        # trace timestamp to data, per port (a saturated trace's hold a value per cycle: kept only when asked)
        self.source_total_latency = [IntHistogram() for _ in sources] if self.per_port else None

    def add(self, *, timestamp_cycles: np.ndarray, source: np.ndarray, is_write: np.ndarray,
            pseudo_channel: np.ndarray, global_bank: np.ndarray, accept_cycle: np.ndarray, done_cycle: np.ndarray,
            request_class: np.ndarray, bank_conflict: np.ndarray) -> None:
        """Fold done requests (any order, any split): their port, kind, pseudo-channel, bank (pseudo-channel x banks
        per pseudo-channel + bank), acceptance and done cycles, class and bank conflict."""
        org = self.cfg.organization
        write = np.asarray(is_write) != 0
        src = np.asarray(source)
        # the flat index into `counts`, built in place: a streaming replay folds every request here
        key = np.asarray(global_bank, dtype=np.int64) * len(self.sources)
        key += src
        key *= 2
        key += write
        key *= 5
        key += np.asarray(request_class)
        key += 1
        key *= 2
        key += np.asarray(bank_conflict) != 0
        self.counts += np.bincount(key, minlength=self.counts.size).reshape(self.counts.shape)
        accept, done = np.asarray(accept_cycle, np.int64), np.asarray(done_cycle, np.int64)
        trace_ts = np.asarray(timestamp_cycles, np.int64)
        self.injection_stall += exact_sum(accept - trace_ts)
        reads = ~write
        latency = (done - accept)[reads]
        self.read_latency.add(latency)
        total = (done - trace_ts)[reads]
        self.read_total_latency.add(total)
        read_src = src[reads]
        per_port = np.bincount(read_src, minlength=len(self.sources))
        for code in np.flatnonzero(per_port).tolist():
            # the reads of one port: all of them, without a mask, when one port sent them all
            mine = slice(None) if per_port[code] == read_src.size else read_src == code
            self.source_latency[code].add(latency[mine])
            if self.source_total_latency is not None:
                self.source_total_latency[code].add(total[mine])
        channel = np.asarray(pseudo_channel)[reads]
        if org.pseudo_channels > 1:
            channel = channel // org.pseudo_channels
        if latency.size and int(np.abs(latency).max()) * latency.size < 2**53:  # float64 weights sum exactly
            sums = np.bincount(channel, weights=latency, minlength=org.n_channels)
            for ch in np.flatnonzero(sums).tolist():
                self.channel_latency[ch] += int(sums[ch])
        else:
            for ch in np.unique(channel).tolist():
                self.channel_latency[ch] += exact_sum(latency[channel == ch])

    def by(self, axis: str) -> np.ndarray:
        """Counts per channel or per port: [key, write?, class + 1]."""
        org = self.cfg.organization
        per_bank = self.counts.sum(axis=4)  # [bank, port, write, class]
        if axis == "port":
            return per_bank.sum(axis=0)
        per_channel = per_bank.sum(axis=1).reshape(org.n_channels, -1, 2, 5)
        return per_channel.sum(axis=1)

    wants_commands = False  # as a streaming replay's sink (archsim/replay_stream.py): requests only

    def retire(self, fields: dict[str, np.ndarray]) -> None:
        """Fold the done requests a streaming replay hands over (`replay_stream.Sink`)."""
        self.add(timestamp_cycles=fields["trace_ts"], source=fields["src"], is_write=fields["write"],
                 pseudo_channel=fields["pc"], global_bank=fields["gb"], accept_cycle=fields["accept"],
                 done_cycle=fields["done"], request_class=fields["klass"], bank_conflict=fields["conflict"])

    def add_result(self, result: ReplayResult) -> None:
        """Fold every request of a whole replay."""
        org = self.cfg.organization
        bank = self.cfg.mapping.decode(result.requests.address).bank_in_pseudo_channel(org)
        req = result.requests
        self.add(timestamp_cycles=req.timestamp_cycles, source=req.source, is_write=req.is_write,
                 pseudo_channel=result.pseudo_channel,
                 global_bank=result.pseudo_channel.astype(np.int64) * org.banks_per_pseudo_channel + bank,
                 accept_cycle=result.accept_cycle, done_cycle=result.done_cycle, request_class=result.request_class,
                 bank_conflict=result.bank_conflict)


def _summary(hist: IntHistogram, keys: tuple[str, ...] = ("mean", "p50", "p99", "max")) -> dict[str, float]:
    if hist.n == 0:
        return {k: 0.0 for k in keys}
    out = {"mean": hist.mean(), "p50": hist.percentile(50), "p99": hist.percentile(99), "max": float(hist.max())}
    return {k: round(out[k], 6) for k in keys}


def _hit_rate(hits: int, dram: int) -> float:
    """Row hits over the requests the DRAM served (forwarded ones left out); 0 without any."""
    return round(hits / dram, 6) if dram else 0.0


def memory_stats(result: ReplayResult, *, reproducible: bool = False) -> dict[str, Any]:
    acc = MemoryStatsAccumulator(result.config, result.requests.sources)
    acc.add_result(result)
    figures = RunFigures(int(result.total_cycles), result.command_counts, result.qos_counts, result.wall_s,
                         result.compile_s, result.kernel_cache)
    return stats_tree(acc, figures, reproducible=reproducible)


def stats_tree(acc: MemoryStatsAccumulator, run: RunFigures, *, reproducible: bool = False) -> dict[str, Any]:
    """The `archsim.stats/1` tree of a replay from its folded requests and its run figures."""
    cfg = acc.cfg
    org, timing = cfg.organization, cfg.timing
    tck = timing.tCK_ns
    cycles = max(1, run.total_cycles)
    time_ns = cycles * tck
    access = org.access_bytes
    counts = run.command_counts
    bytes_read = int(counts[RD] + counts[RDA]) * access
    bytes_written = int(counts[WR] + counts[WRA]) * access
    dram_bw = (bytes_read + bytes_written) / time_ns
    peak = peak_bandwidth_GBps(org, timing)
    lat_cycles = _summary(acc.read_latency)
    total = acc.counts.sum(axis=(0, 1, 4))  # [write, class + 1]
    klass = total.sum(axis=0)[1:]  # hit, miss, conflict, forwarded
    n = int(total.sum())
    writes = int(total[1].sum())
    bw = n * access / time_ns

    def figures(table: np.ndarray) -> tuple[int, int, int, int, int, int]:
        """From [write?, class + 1]: requests, reads, writes, with data on the DRAM bus (not forwarded), row hits,
        served by the DRAM (hit, miss or conflict)."""
        return (int(table.sum()), int(table[0].sum()), int(table[1].sum()), int(table.sum() - table[:, 4].sum()),
                int(table[:, 1].sum()), int(table[:, 1:4].sum()))

    channels: dict[str, Any] = {}
    for ch, table in enumerate(acc.by("channel")):
        requests, reads, _writes, served, hits, dram = figures(table)
        channels[str(ch)] = {
            "requests": requests,
            "bandwidth_GBps": round(float(served * access) / time_ns, 6),
            "row_hit_rate": _hit_rate(hits, dram),
            "read_latency_cycles_mean": round(float(acc.channel_latency[ch]) / reads, 6) if reads else 0.0,
        }
    sources: dict[str, Any] = {}
    for code, table in enumerate(acc.by("port")):
        requests, reads, writes_, served, hits, dram = figures(table)
        sources[acc.sources[code]] = {
            "requests": requests,
            "reads": reads,
            "writes": writes_,
            "bandwidth_GBps": round(float(served * access) / time_ns, 6),
            "row_hit_rate": _hit_rate(hits, dram),
            "read_latency_cycles": _summary(acc.source_latency[code], ("mean", "p50", "p99")),
        }
    wall = 0.0 if reproducible else round(run.wall_s, 6)
    bpp = org.banks_per_pseudo_channel
    per_bank = acc.counts.sum(axis=(1, 2, 4))  # [bank, class + 1]
    qos = run.qos_counts
    return {
        "schema": SCHEMA,
        "sim": {
            "requests": n,
            "cycles": int(run.total_cycles),
            "time_ns": round(time_ns, 6),
            "wall_s": wall,
            "compile_s": 0.0 if reproducible else round(run.compile_s, 6),
            "kernel_cache": None if reproducible else (run.kernel_cache or "loaded"),
            "requests_per_s": 0.0 if reproducible else round(n / max(run.wall_s, 1e-9), 3),
        },
        "memory": {
            "standard": cfg.standard,
            "tCK_ns": tck,
            "access_bytes": access,
            "reads": n - writes,
            "writes": writes,
            "bytes_read": bytes_read,
            "bytes_written": bytes_written,
            "bandwidth_GBps": round(bw, 6),
            "dram_bandwidth_GBps": round(dram_bw, 6),
            "peak_bandwidth_GBps": round(peak, 6),
            "peak_bandwidth_per_stack_GBps": round(peak_bandwidth_per_stack_GBps(org, timing), 6),
            "bandwidth_utilization": round(dram_bw / peak, 6),
            "read_latency_cycles": lat_cycles,
            "read_latency_ns": {k: round(v * tck, 6) for k, v in lat_cycles.items()},
            "read_total_latency_cycles": _summary(acc.read_total_latency),
            "injection_stall_cycles": acc.injection_stall,
            "row_hits": int(klass[0]),
            "row_misses": int(klass[1]),
            "row_conflicts": int(klass[2]),
            "row_hit_rate": _hit_rate(int(klass[0]), int(klass[:3].sum())),
            "forwarded": int(klass[3]),
            "bank_conflicts": int(acc.counts[..., 1].sum()),
            "commands": {name: int(counts[code]) for code, name in enumerate(COMMAND_NAMES)},
            "banks": {"row_misses": per_bank[:, 2].reshape(-1, bpp).tolist(),
                      "row_conflicts": per_bank[:, 3].reshape(-1, bpp).tolist(),
                      "bank_conflicts": acc.counts[..., 1].sum(axis=(1, 2, 3)).reshape(-1, bpp).tolist()},
            "channels": channels,
            "sources": sources,
            "qos": {
                "arbiter": cfg.controller.arbiter.impl,
                **_interference(acc.sources, qos),
            },
        },
    }


def port_qos(acc: MemoryStatsAccumulator, alone: dict[str, float] | None = None) -> dict[str, Any]:
    """QoS among the ports that shared the memory (`memory.qos.ports`, `fairness_jain`, `violations`): each port's
    share of the requests served and its reads' latency from their trace timestamps (queueing in the front end
    included); with `alone` (each port's mean of that latency when it ran alone), its slowdown and Jain's
    fairness index over 1 / slowdown; against the config's `qos_targets` (p99, ns), whether each port met its."""
    assert acc.source_total_latency is not None, "the accumulator keeps per-port latency only when asked"
    tck = acc.cfg.timing.tCK_ns
    targets = dict(acc.cfg.controller.qos_targets)
    by_port = acc.by("port")  # [port, write?, class + 1]
    served = by_port[:, :, 1:].sum(axis=(1, 2))
    ports: dict[str, Any] = {}
    for code, name in enumerate(acc.sources):
        if not by_port[code].sum():
            continue
        hist = acc.source_total_latency[code]
        total = _summary(hist, ("mean", "p50", "p99"))
        entry: dict[str, Any] = {"share_of_served": round(float(served[code] / max(served.sum(), 1)), 6),
                                 "read_total_latency_cycles": total,
                                 "read_total_latency_ns": {k: round(v * tck, 6) for k, v in total.items()}}
        if alone is not None:
            base = alone.get(name, 0.0)
            entry["alone_read_total_latency_cycles_mean"] = round(base, 6)
            entry["slowdown"] = round(total["mean"] / base, 6) if base > 0 and hist.n else None
        if name in targets:
            entry["target_p99_ns"] = targets[name]
            entry["target_met"] = bool(total["p99"] * tck <= targets[name])
        ports[name] = entry
    slowdowns = [p["slowdown"] for p in ports.values() if p.get("slowdown")]
    fairness = round(jain_index([1 / s for s in slowdowns]), 6) if alone is not None and slowdowns else None
    missing = sorted(set(targets) - set(ports))
    if missing:
        raise ConfigError(f"a QoS target for port {missing[0]!r}, which sent no request (ports: "
                          f"{', '.join(ports)})", file=acc.cfg.source_file,
                          where=f"memory.controller.qos_targets.{missing[0]}")
    return {"ports": ports, "fairness_jain": fairness,
            "violations": [name for name, p in ports.items() if p.get("target_met") is False]}


def jain_index(values: list[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 when all equal, 1/n when one takes everything."""
    x = np.asarray(values, dtype=float)
    return float(x.sum() ** 2 / (len(x) * (x**2).sum())) if len(x) and (x**2).sum() > 0 else 1.0


def _interference(sources: tuple[str, ...], counts: np.ndarray) -> dict[str, dict[str, int]]:
    """Row-buffer interference by port pair: rows one port opened that another closed, and requests that found
    their bank open on another port's row (`ReplayResult.qos_counts`)."""
    p = len(sources)
    return {"row_closures": {f"{sources[o]}_by_{sources[c]}": int(counts[o * p + c]) for o in range(p)
                             for c in range(p)},
            "bank_conflicts": {f"{sources[n]}_vs_{sources[o]}": int(counts[p * p + n * p + o]) for n in range(p)
                               for o in range(p)}}


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
    if len(parts) >= 4 and parts[:3] == ["memory", "qos", "ports"]:
        parts[3] = "<source>"
    if len(parts) == 3 and parts[:2] == ["memory", "commands"]:
        parts[2] = "<cmd>"
    if len(parts) == 4 and parts[:3] == ["memory", "qos", "row_closures"]:
        parts[3] = "<opener>_by_<closer>"
    if len(parts) == 4 and parts[:3] == ["memory", "qos", "bank_conflicts"]:
        parts[3] = "<newcomer>_vs_<opener>"
    return ".".join(parts)
