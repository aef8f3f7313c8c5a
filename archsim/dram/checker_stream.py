"""The protocol checker on a command log handed over in stretches (a streaming replay's): the same violations as
`check_command_log` on the whole log, in memory bounded by a stretch and the context carried between them.

Each stretch is checked together with a context of earlier commands (`checker.check_rules` on the two), and only
the violations whose offending command lies in the stretch count. The context is what any rule can look back
to: per scope key (bank, bank group, rank, pseudo-channel) the last command of each kind, the last four ACTs of
each rank (tFAW), the last command (cycle order) and every command of the last cycle (command buses). Two rules
look further and are kept across stretches instead: data bursts (neighbours in order of burst start, which a
later command may still come between until the log has passed its start: `_BurstOrder`), and refresh deadlines
(a count of refreshes per rank or bank from the log's start: `_RefreshCounts`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from archsim.dram.checker import (
    CheckResult,
    Violation,
    _Collector,
    _is,
    check_rules,
    refresh_labels,
    refresh_scope,
    rules_checked,
)
from archsim.dram.checker_rules import COLUMNS, GAP_RULES, MAX_POSTPONED_REFRESHES, READS, WARNING_RULES
from archsim.dram.commands import ACT, CommandLog
from archsim.dram.spec import Organization, Timing

# the order check_rules adds its rules in: records of one offending command are listed in this order
RULE_ORDER = {name: k for k, name in enumerate((
    "cycle_order", "malformed", "state:ACT_to_open_bank", "state:column_to_closed_bank", "state:column_wrong_row",
    "state:REFpb_to_open_bank", "state:REF_with_open_bank", *WARNING_RULES, *(r.name for r in GAP_RULES), "tFAW",
    "data_bus", "row_bus", "column_bus", "tREFI"))}
_LAST = np.iinfo(np.int64).max  # an end-of-log record (offending index -1) sorts last


@dataclass
class _Records:
    """Violation counts per rule, and the first `cap` records by offending command."""

    cap: int
    counts: dict[str, int] = field(default_factory=dict)
    rows: list[tuple[int, int, int, Violation]] = field(default_factory=list)

    def add(self, rule: str, detail: str | list[str], first: np.ndarray, second: np.ndarray,
            required: np.ndarray | None, actual: np.ndarray, first_cycle: np.ndarray,
            second_cycle: np.ndarray) -> None:
        if second.size == 0:
            return
        self.counts[rule] = self.counts.get(rule, 0) + int(second.size)
        keys = np.where(second >= 0, second, _LAST)
        worst = self.rows[-1][0] if len(self.rows) >= self.cap else _LAST
        candidates = np.flatnonzero(keys <= worst)
        for i in candidates[np.argsort(keys[candidates], kind="stable")][:self.cap].tolist():
            text = detail if isinstance(detail, str) else detail[i]
            timed = required is not None
            record = Violation(rule, int(first[i]), int(second[i]), int(first_cycle[i]), int(second_cycle[i]),
                               int(required[i]) if timed else None, int(actual[i]) if timed else None, text)
            self.rows.append((int(keys[i]), RULE_ORDER.get(rule, len(RULE_ORDER)), i, record))
        self.rows.sort(key=lambda row: row[:3])
        del self.rows[self.cap:]

    def take(self, collector: _Collector, to_global: np.ndarray, first_new: int) -> None:
        """The collector's records whose offending command is at or after `first_new` (of the checked log)."""
        for rule, detail, first, second, req, act, fc, sc in collector.parts:
            keep = second >= first_new
            if not keep.any():
                continue
            texts = detail if isinstance(detail, str) else [detail[i] for i in np.flatnonzero(keep).tolist()]
            self.add(rule, texts, np.where(first[keep] >= 0, to_global[np.maximum(first[keep], 0)], -1),
                     to_global[second[keep]], None if req is None else req[keep], act[keep], fc[keep], sc[keep])

    def records(self) -> list[Violation]:
        return [row[3] for row in self.rows]


class _BurstOrder:
    """The data-bus rule across stretches: column commands by (pseudo-channel, burst start, log position); a pair
    of neighbours is checked once the log is past its second's start (no later command can come between)."""

    def __init__(self, timing: Timing) -> None:
        self.timing = timing
        self.held = {name: np.zeros(0, dtype=np.int64) for name in ("idx", "cycle", "pc", "rank", "start")}

    def add(self, idx: np.ndarray, cmd: np.ndarray, cycle: np.ndarray, pc: np.ndarray, rank: np.ndarray,
            horizon: int, out: _Records) -> None:
        """New commands (global positions); every later command's burst starts at or after `horizon`."""
        col = _is(cmd, COLUMNS)
        start = cycle[col] + np.where(_is(cmd[col], READS), self.timing.CL, self.timing.CWL)
        new = {"idx": idx[col], "cycle": cycle[col], "pc": pc[col], "rank": rank[col], "start": start}
        held = {name: np.concatenate([self.held[name], new[name]]) for name in self.held}
        order = np.lexsort((held["idx"], held["start"], held["pc"]))
        held = {name: values[order] for name, values in held.items()}
        if order.size == 0:
            return
        final = held["start"] < horizon
        self._pairs(held, final[1:], out)
        # keep the commands not final yet, and each pseudo-channel's last final one (the next pair's first)
        last_final = final & np.concatenate([held["pc"][1:] != held["pc"][:-1], [True]]) | (
            final & np.concatenate([~final[1:], [True]]))
        keep = ~final | last_final
        self.held = {name: values[keep] for name, values in held.items()}

    def flush(self, out: _Records) -> None:
        self._pairs(self.held, np.ones(max(self.held["idx"].size - 1, 0), dtype=bool), out)

    def _pairs(self, held: dict[str, np.ndarray], second_final: np.ndarray, out: _Records) -> None:
        t = self.timing
        pc, rank, start = held["pc"], held["rank"], held["start"]
        required = t.tBURST + np.where(rank[1:] != rank[:-1], t.tRTRS, 0)
        gap = start[1:] - start[:-1]
        bad = np.flatnonzero(second_final & (pc[1:] == pc[:-1]) & (gap < required))
        out.add("data_bus", "data bursts overlap on the pseudo-channel's data bus (gap between burst starts)",
                held["idx"][bad], held["idx"][bad + 1], required[bad], gap[bad], held["cycle"][bad],
                held["cycle"][bad + 1])


class _RefreshCounts:
    """Refresh deadlines across stretches: refreshes so far and the last one, per rank (all-bank) or bank."""

    def __init__(self, refresh_mode: str, org: Organization, timing: Timing) -> None:
        self.scope, self.codes, n_keys, self.per_key, self.what = refresh_scope(refresh_mode, org)
        self.timing = timing
        self.count = np.zeros(n_keys, dtype=np.int64)
        self.last_idx = np.full(n_keys, -1, dtype=np.int64)
        self.last_cycle = np.zeros(n_keys, dtype=np.int64)

    def add(self, key: np.ndarray, idx: np.ndarray, cycle: np.ndarray, out: _Records) -> None:
        """New refreshes sorted by key, log order within a key (global positions)."""
        group_start = np.searchsorted(key, key, side="left")
        within = np.arange(key.size) - group_start
        k = self.count[key] + within
        prev_idx = np.where(within > 0, np.concatenate(([-1], idx[:-1])), self.last_idx[key])
        prev_cycle = np.where(within > 0, np.concatenate(([0], cycle[:-1])), self.last_cycle[key])
        prev_cycle = np.where(k > 0, prev_cycle, 0)
        deadline = (k + MAX_POSTPONED_REFRESHES + 1) * self.timing.tREFI
        late = np.flatnonzero(cycle > deadline)
        out.add("tREFI", refresh_labels(key[late], k[late], self.per_key, self.what, self.timing), prev_idx[late],
                idx[late], (deadline - prev_cycle)[late], (cycle - prev_cycle)[late], prev_cycle[late], cycle[late])
        ends = np.flatnonzero(np.concatenate([key[1:] != key[:-1], [True]])) if key.size else key
        np.add.at(self.count, key, 1)
        self.last_idx[key[ends]] = idx[ends]
        self.last_cycle[key[ends]] = cycle[ends]

    def missing(self, end_cycle: int, out: _Records) -> None:
        """Ranks or banks whose next refresh never came although the log runs past its deadline."""
        slack = MAX_POSTPONED_REFRESHES + 1
        keys = np.flatnonzero(end_cycle > (self.count + slack) * self.timing.tREFI)
        p_cycle = self.last_cycle[keys]
        out.add("tREFI", refresh_labels(keys, self.count[keys], self.per_key, self.what, self.timing),
                self.last_idx[keys], np.full(keys.size, -1), (self.count[keys] + slack) * self.timing.tREFI - p_cycle,
                end_cycle - p_cycle, p_cycle, np.full(keys.size, end_cycle))


class StreamingChecker:
    """`check_command_log` fed stretch by stretch (`add`, or as a streaming replay's sink); `result()` at the
    end. Memory: a stretch, the context (module docstring) and the bursts not yet final."""

    wants_commands = True

    def __init__(self, org: Organization, timing: Timing, refresh_mode: str = "none",
                 max_violations: int = 100) -> None:
        self.org, self.timing, self.refresh_mode = org, timing, refresh_mode
        self.out, self.warn = _Records(max_violations), _Records(max_violations)
        self.context = CommandLog(*(np.zeros(0, dtype=d) for d in (np.int64, np.int8, np.int32, np.int32, np.int64)))
        self.context_idx = np.zeros(0, dtype=np.int64)
        self.bursts = _BurstOrder(timing)
        self.refresh = _RefreshCounts(refresh_mode, org, timing) if refresh_mode != "none" else None
        self.seen = 0
        self.end_cycle: int | None = None  # the last valid command's cycle

    def retire(self, fields: dict[str, np.ndarray]) -> None:
        pass

    def commands(self, log: CommandLog) -> None:
        self.add(log)

    def add(self, log: CommandLog) -> None:
        n, k = int(len(log.cycle)), int(self.context_idx.size)
        if n == 0:
            return
        both = CommandLog(*(np.concatenate([getattr(self.context, f.name), getattr(log, f.name)])
                            for f in fields(CommandLog)))
        to_global = np.concatenate([self.context_idx, self.seen + np.arange(n, dtype=np.int64)])
        out, warn, scopes, valid = check_rules(both, self.org, self.timing, self.refresh_mode, whole=False)
        self.out.take(out, to_global, k)
        self.warn.take(warn, to_global, k)
        new = valid[valid >= k]
        cycle = np.asarray(both.cycle, np.int64)
        if new.size:
            self.end_cycle = max(self.end_cycle or 0, int(cycle[new].max()))
            horizon = int(cycle[new].max()) + min(self.timing.CL, self.timing.CWL)
            bank = np.asarray(both.bank, np.int64)[new]
            self.bursts.add(to_global[new], np.asarray(both.command, np.int64)[new], cycle[new],
                            np.asarray(both.pseudo_channel, np.int64)[new], bank // self.org.banks_per_rank,
                            horizon, self.out)
        if self.refresh is not None:
            s = scopes[self.refresh.scope]
            pick = np.flatnonzero((s.idx >= k) & _is(s.cmd, self.refresh.codes))
            self.refresh.add(s.key[pick], to_global[s.idx[pick]], s.cycle[pick], self.out)
        keep = _context(scopes, cycle)
        self.context = CommandLog(*(getattr(both, f.name)[keep] for f in fields(CommandLog)))
        self.context_idx = to_global[keep]
        self.seen += n

    def result(self) -> CheckResult:
        self.bursts.flush(self.out)
        if self.refresh is not None and self.end_cycle is not None:
            self.refresh.missing(self.end_cycle, self.out)
            self.refresh = None
        return CheckResult(self.out.records(), self.warn.records(), self.seen, rules_checked(self.refresh_mode),
                           dict(self.out.counts), dict(self.warn.counts))


def _context(scopes: dict, cycle: np.ndarray) -> np.ndarray:
    """Log positions of what a later stretch's rules may look back to (module docstring)."""
    keep = [np.array([cycle.size - 1]), np.flatnonzero(cycle == cycle[-1])]
    for s in scopes.values():
        if s.idx.size == 0:
            continue
        combo = s.key * 16 + s.cmd  # command codes (PREA_IDLE included) are below 16
        _, last_reversed = np.unique(combo[::-1], return_index=True)
        keep.append(s.idx[s.idx.size - 1 - last_reversed])
    rank = scopes["rank"]
    acts = np.flatnonzero(rank.cmd == ACT)
    from_end = np.searchsorted(rank.key[acts], rank.key[acts], side="right") - 1 - np.arange(acts.size)
    keep.append(rank.idx[acts[from_end < 4]])
    return np.unique(np.concatenate(keep))
