"""Independent protocol checker: replays an issued command log and verifies every JEDEC constraint.

It shares no timing code with the scheduler: the rules are in checker_rules.py, written from the
standards' definitions. Everything is vectorized: each scope (bank, bank group, rank, pseudo-channel)
sorts the log once by (scope key, log position), and each rule then finds, for every command it
constrains, the most recent command of the rule's first kind in the same scope with a running maximum.

Semantics worth knowing (the protocol-checker section of the docs has the full rule list and sources):
- Order within a cycle is the log's order: a command logged later is issued after the earlier ones.
- State follows the commands as issued: an illegal ACT still opens the bank, so one bug gives one record.
- PRE to a closed bank is legal JEDEC (a NOP) and is reported as a warning, never a violation; its timing
  is still checked like a PRE's (conservative). PREA closes every bank of the rank; for banks that were
  already closed it only starts tRP.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from archsim.dram.checker_rules import (
    COLUMNS,
    GAP_RULES,
    MAX_POSTPONED_REFRESHES,
    PREA_IDLE,
    READS,
    REFRESH_MODES,
    REFRESH_RULE,
    SPECIAL_RULES,
    STATE_RULES,
    GapRule,
)
from archsim.dram.commands import ACT, N_COMMANDS, PRE, PREA, RDA, REF, REFPB, WRA, CommandLog
from archsim.dram.spec import Organization, Timing


@dataclass(frozen=True)
class Violation:
    """One broken rule: the earlier command of the pair, the offending one, and the gaps in cycles."""

    rule: str
    first_index: int  # log index of the earlier command of the pair; -1 when there is none
    second_index: int  # log index of the offending command; -1 for "end of log" (a refresh never came)
    first_cycle: int
    second_cycle: int
    required_gap_cycles: int | None  # None for state rules
    actual_gap_cycles: int | None
    detail: str

    def __str__(self) -> str:
        gap = "" if self.required_gap_cycles is None else (
            f": gap {self.actual_gap_cycles} cycles, required {self.required_gap_cycles}")
        return (f"{self.rule} between command #{self.first_index} (cycle {self.first_cycle}) and "
                f"#{self.second_index} (cycle {self.second_cycle}){gap} [{self.detail}]")


@dataclass(frozen=True)
class CheckResult:
    violations: list[Violation]  # the first `max_violations`, ordered by the offending command's index
    warnings: list[Violation]
    checked_commands: int
    rules_checked: tuple[str, ...]
    violation_counts: dict[str, int]  # every violation per rule, including those beyond max_violations
    warning_counts: dict[str, int]

    @property
    def ok(self) -> bool:
        return not self.violation_counts

    def summary(self) -> str:
        if self.ok:
            return f"{self.checked_commands} commands, {len(self.rules_checked)} rules: no violations"
        lines = [f"{sum(self.violation_counts.values())} violations in {self.checked_commands} commands "
                 f"({', '.join(f'{k}: {v}' for k, v in sorted(self.violation_counts.items()))})"]
        lines += [f"  {v}" for v in self.violations[:20]]
        return "\n".join(lines)


class _Collector:
    """Violation arrays per rule; Violation objects are built only for the few that are reported."""

    def __init__(self, cycle: np.ndarray) -> None:
        self.cycle = cycle
        self.parts: list[tuple[str, str | list[str], np.ndarray, np.ndarray, np.ndarray | None, np.ndarray,
                               np.ndarray, np.ndarray]] = []

    def add(self, rule: str, detail: str | list[str], first: np.ndarray, second: np.ndarray,
            required: np.ndarray | int | None = None, actual: np.ndarray | None = None,
            first_cycle: np.ndarray | None = None, second_cycle: np.ndarray | None = None) -> None:
        """`required` None marks a state rule (no gap); index -1 needs its cycle passed explicitly."""
        first, second = np.asarray(first, np.int64), np.asarray(second, np.int64)
        if second.size == 0:
            return
        if first_cycle is None:
            first_cycle = np.where(first >= 0, self.cycle[np.maximum(first, 0)], 0)
        if second_cycle is None:
            second_cycle = self.cycle[second]
        req = None if required is None else np.broadcast_to(np.asarray(required, np.int64), second.shape)
        act = np.broadcast_to(np.asarray(-1 if actual is None else actual, np.int64), second.shape)
        self.parts.append((rule, detail, first, second, req, act, np.asarray(first_cycle, np.int64),
                           np.asarray(second_cycle, np.int64)))

    def build(self, max_records: int) -> tuple[list[Violation], dict[str, int]]:
        counts: dict[str, int] = {}
        rows: list[tuple[int, int, int]] = []  # (offending index, part, position); end-of-log sorts last
        for p, part in enumerate(self.parts):
            counts[part[0]] = counts.get(part[0], 0) + int(part[3].size)
            head = part[3][:max_records]
            key = np.where(head >= 0, head, np.iinfo(np.int64).max)
            rows += [(int(k), p, i) for i, k in enumerate(key)]
        rows.sort()
        records = []
        for _, p, i in rows[:max_records]:
            rule, detail, first, second, req, act, fc, sc = self.parts[p]
            text = detail if isinstance(detail, str) else detail[i]
            timed = req is not None
            records.append(Violation(rule, int(first[i]), int(second[i]), int(fc[i]), int(sc[i]),
                                     int(req[i]) if timed else None, int(act[i]) if timed else None, text))
        return records, counts


def _is(cmd: np.ndarray, codes: tuple[int, ...]) -> np.ndarray:
    """`np.isin` for small command codes via a lookup table (several times faster on big logs)."""
    table = np.zeros(PREA_IDLE + 1, dtype=bool)
    table[list(codes)] = True
    return table[np.clip(cmd, 0, PREA_IDLE)]


@dataclass(frozen=True)
class _Stream:
    """Commands of one scope sorted by (scope key, log position); `idx` maps back into the log."""

    idx: np.ndarray
    cmd: np.ndarray
    cycle: np.ndarray
    key: np.ndarray


def _sorted_stream(idx: np.ndarray, cmd: np.ndarray, cycle: np.ndarray, key: np.ndarray,
                   scope: str) -> _Stream:
    """The commands some rule of `scope` looks at, sorted by key; idx ascends, so each key keeps log order."""
    used = tuple({c for r in GAP_RULES if r.scope == scope for c in (*r.first, *r.second)} | {ACT, REF})
    keep = np.nonzero(_is(cmd, used))[0]
    order = keep[np.argsort(key[keep], kind="stable")]
    return _Stream(idx[order], cmd[order], cycle[order], key[order])


def _last_before(mask: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Per position: the position of the most recent earlier `mask` entry with the same key, else -1."""
    pos = np.arange(mask.size)
    last = np.maximum.accumulate(np.where(mask, pos, -1)) if mask.size else pos
    prev = np.concatenate(([-1], last[:-1])) if mask.size else pos
    same = prev >= 0
    same[same] = key[prev[same]] == key[same]
    return np.where(same, prev, -1)


def _gap_rule(s: _Stream, rule: GapRule, timing: Timing, out: _Collector) -> None:
    first_mask = _is(s.cmd, rule.first)
    if not first_mask.any():
        return
    prev = _last_before(first_mask, s.key)
    second = np.nonzero(_is(s.cmd, rule.second) & (prev >= 0))[0]
    gap = s.cycle[second] - s.cycle[prev[second]]
    required = rule.gap_cycles(timing)
    bad = second[gap < required]
    out.add(rule.name, rule.meaning, s.idx[prev[bad]], s.idx[bad], required, gap[gap < required])


def _bank_stream(idx: np.ndarray, cmd: np.ndarray, cycle: np.ndarray, pc: np.ndarray, bank: np.ndarray,
                 row: np.ndarray, org: Organization, out: _Collector, warn: _Collector) -> _Stream:
    """Per-bank command stream with PREA/REF expanded; checks the bank state machine on the way."""
    bpr = org.banks_per_rank
    wide = (cmd == PREA) | (cmd == REF)
    reps = np.where(wide, bpr, 1)
    e = np.repeat(np.arange(idx.size), reps)
    offset = np.arange(e.size) - np.repeat(np.cumsum(reps) - reps, reps)
    ebank = np.where(wide[e], bank[e] // bpr * bpr + offset, bank[e])
    key = pc[e] * org.banks_per_pseudo_channel + ebank  # the global bank index
    order = np.argsort(key, kind="stable")  # e ascends, so each bank keeps log order
    e = e[order]
    s = _Stream(idx[e], cmd[e], cycle[e], key[order])
    erow = row[e]
    # The open/closed state before each command is set by the last ACT (opens) or PRE/PREA/RDA/WRA
    # (closes) to the same bank; RD/WR/REF/REFpb leave it as it is.
    setter = _is(s.cmd, (ACT, PRE, PREA, RDA, WRA))
    prev = _last_before(setter, s.key)
    has_prev = prev >= 0
    safe = np.where(has_prev, prev, 0)
    is_open = has_prev & (s.cmd[safe] == ACT)
    who = np.where(has_prev, s.idx[safe], -1)  # log index of the command that set the state
    column = _is(s.cmd, COLUMNS)
    for rule, mask, detail in (
        ("state:ACT_to_open_bank", (s.cmd == ACT) & is_open, "ACT to a bank whose row is still open"),
        ("state:column_to_closed_bank", column & ~is_open, "column command to a closed bank"),
        ("state:column_wrong_row", column & is_open & (erow != erow[safe]),
         "column command's row is not the open row"),
        ("state:REFpb_to_open_bank", (s.cmd == REFPB) & is_open, "REFpb to an open bank"),
    ):
        out.add(rule, detail, who[mask], s.idx[mask])
    ref_open = np.nonzero((s.cmd == REF) & is_open)[0]
    _, first_of_ref = np.unique(s.idx[ref_open], return_index=True)  # one record per REF
    ref_open = ref_open[first_of_ref]
    out.add("state:REF_with_open_bank", "REF while a bank of the rank is open", who[ref_open],
            s.idx[ref_open])
    pre_closed = (s.cmd == PRE) & ~is_open
    warn.add("state:PRE_to_closed_bank", "PRE to a closed bank (a JEDEC NOP)", who[pre_closed],
             s.idx[pre_closed])
    cmd_eff = np.where((s.cmd == PREA) & ~is_open, PREA_IDLE, s.cmd).astype(np.int64)
    return _Stream(s.idx, cmd_eff, s.cycle, s.key)


def _faw(s: _Stream, timing: Timing, out: _Collector) -> None:
    """No more than four ACTs per rank in any tFAW window: ACT_i - ACT_(i-4) >= tFAW."""
    act = np.nonzero(s.cmd == ACT)[0]
    if act.size < 5:
        return
    a, b = act[:-4], act[4:]
    gap = s.cycle[b] - s.cycle[a]
    bad = (s.key[a] == s.key[b]) & (gap < timing.tFAW)
    out.add("tFAW", "fifth ACT in one rank within tFAW of the first", s.idx[a[bad]], s.idx[b[bad]],
            timing.tFAW, gap[bad])


def _data_bus(idx: np.ndarray, cmd: np.ndarray, cycle: np.ndarray, pc: np.ndarray, rank: np.ndarray,
              timing: Timing, out: _Collector) -> None:
    """Bursts on one pseudo-channel's data bus never overlap; a change of rank also needs tRTRS."""
    col = _is(cmd, COLUMNS)
    idx, pc, rank = idx[col], pc[col], rank[col]
    start = cycle[col] + np.where(_is(cmd[col], READS), timing.CL, timing.CWL)
    order = np.lexsort((idx, start, pc))  # equal-length bursts: only neighbours in start order can clash
    idx, pc, rank, start = idx[order], pc[order], rank[order], start[order]
    required = timing.tBURST + np.where(rank[1:] != rank[:-1], timing.tRTRS, 0)
    gap = start[1:] - start[:-1]
    bad = np.nonzero((pc[1:] == pc[:-1]) & (gap < required))[0]
    out.add("data_bus", "data bursts overlap on the pseudo-channel's data bus (gap between burst starts)",
            idx[bad], idx[bad + 1], required[bad], gap[bad])


def _command_buses(idx: np.ndarray, cmd: np.ndarray, cycle: np.ndarray, channel: np.ndarray,
                   out: _Collector) -> None:
    """The pseudo-channels of a channel share its row and column command buses: one command each per cycle."""
    is_col = _is(cmd, COLUMNS)
    for rule, mask in (("row_bus", ~is_col), ("column_bus", is_col)):
        i, c, ch = idx[mask], cycle[mask], channel[mask]
        order = np.lexsort((i, c, ch))
        i, c, ch = i[order], c[order], ch[order]
        bad = np.nonzero((ch[1:] == ch[:-1]) & (c[1:] == c[:-1]))[0]
        out.add(rule, f"two commands on one channel's {rule.replace('_', ' ')} in one cycle", i[bad],
                i[bad + 1], 1, c[bad + 1] - c[bad])


def refresh_labels(keys: np.ndarray, n_done: np.ndarray, per_key: int, what: str, timing: Timing) -> list[str]:
    """What a late or missing refresh record says: which refresh of which rank or bank was due by when."""
    slack = MAX_POSTPONED_REFRESHES + 1
    return [f"refresh #{d} of pseudo-channel {q // per_key} {what} {q % per_key} is due by "
            f"{(d + slack) * timing.tREFI} (tREFI x (n + 9)); required gap = latest allowed"
            for q, d in zip(keys.tolist(), n_done.tolist(), strict=True)]


def _refresh_deadlines(s: _Stream, refresh_cmds: tuple[int, ...], n_keys: int, per_key: int, what: str,
                       end_cycle: int, timing: Timing, out: _Collector) -> None:
    """Refresh k (0-based) of each rank / bank must issue by (k + 1 + 8) * tREFI (8 may be postponed).

    Keys are the scope's flat index (pseudo-channel * per_key + rank or bank); `what` names the unit.
    """
    pos = np.nonzero(_is(s.cmd, refresh_cmds))[0]
    key, cyc, idx = s.key[pos], s.cycle[pos], s.idx[pos]  # sorted by key, log order inside a key
    k = np.arange(pos.size) - np.searchsorted(key, key, side="left")
    slack = MAX_POSTPONED_REFRESHES + 1
    deadline = (k + slack) * timing.tREFI
    prev_idx = np.where(k > 0, np.concatenate(([-1], idx[:-1])), -1)
    prev_cyc = np.where(k > 0, np.concatenate(([0], cyc[:-1])), 0)
    late = np.nonzero(cyc > deadline)[0]

    def label(keys: np.ndarray, n_done: np.ndarray) -> list[str]:
        return refresh_labels(keys, n_done, per_key, what, timing)

    out.add(REFRESH_RULE, label(key[late], k[late]), prev_idx[late], idx[late],
            (deadline - prev_cyc)[late], (cyc - prev_cyc)[late], prev_cyc[late], cyc[late])
    # A rank / bank whose next refresh never came although the log runs past its deadline.
    count = np.bincount(key, minlength=n_keys)
    last = np.searchsorted(key, np.arange(n_keys), side="right") - 1
    missing = np.nonzero(end_cycle > (count + slack) * timing.tREFI)[0]
    has = count[missing] > 0
    p_idx = np.where(has, idx[np.maximum(last[missing], 0)], -1) if idx.size else np.full(missing.size, -1)
    p_cyc = np.where(has, cyc[np.maximum(last[missing], 0)], 0) if idx.size else np.zeros(missing.size, int)
    out.add(REFRESH_RULE, label(missing, count[missing]), p_idx, np.full(missing.size, -1),
            (count[missing] + slack) * timing.tREFI - p_cyc, end_cycle - p_cyc, p_cyc,
            np.full(missing.size, end_cycle))


def malformed(cmd: np.ndarray, pc: np.ndarray, bank: np.ndarray, row: np.ndarray, org: Organization) -> np.ndarray:
    """Commands whose code, pseudo-channel, bank or row is out of range (reported once, checked no further)."""
    has_row = _is(cmd, (ACT, *COLUMNS))
    return ((cmd < 0) | (cmd >= N_COMMANDS) | (pc < 0) | (pc >= org.n_pseudo_channels) | (bank < 0)
            | (bank >= org.banks_per_pseudo_channel) | (has_row & ((row < 0) | (row >= org.rows))))


def rules_checked(refresh_mode: str) -> tuple[str, ...]:
    rules = [*SPECIAL_RULES, *STATE_RULES, *(r.name for r in GAP_RULES)]
    return (*rules, REFRESH_RULE) if refresh_mode != "none" else tuple(rules)


def scope_streams(idx: np.ndarray, cmd: np.ndarray, cycle: np.ndarray, pc: np.ndarray, bank: np.ndarray,
                  row: np.ndarray, org: Organization, out: _Collector, warn: _Collector) -> dict[str, _Stream]:
    """The valid commands sorted by each scope's key (the bank state machine checked on the way)."""
    rank = bank // org.banks_per_rank
    return {
        "bank": _bank_stream(idx, cmd, cycle, pc, bank, row, org, out, warn),
        "bankgroup": _sorted_stream(idx, cmd, cycle, pc * org.ranks * org.bankgroups + bank // org.banks_per_group,
                                    "bankgroup"),
        "rank": _sorted_stream(idx, cmd, cycle, pc * org.ranks + rank, "rank"),
        "pseudo_channel": _sorted_stream(idx, cmd, cycle, pc, "pseudo_channel"),
    }


def refresh_scope(refresh_mode: str, org: Organization) -> tuple[str, tuple[int, ...], int, int, str]:
    """Where refresh deadlines are kept: the scope, the commands that count, keys, keys per pseudo-channel, unit."""
    if refresh_mode == "all_bank":
        return "rank", (REF,), org.n_pseudo_channels * org.ranks, org.ranks, "rank"
    # a REF refreshes every bank of its rank, so it counts for each of them
    return "bank", (REF, REFPB), org.n_banks, org.banks_per_pseudo_channel, "bank"


def check_rules(log: CommandLog, org: Organization, timing: Timing, refresh_mode: str = "none", *,
                whole: bool = True) -> tuple[_Collector, _Collector, dict[str, _Stream], np.ndarray]:
    """Every rule on `log`: the violations and warnings collected, the scopes' streams and the valid commands'
    log positions. `whole` False leaves out the two rules a streaming check keeps across stretches of the log
    (data bus bursts, refresh deadlines: archsim/dram/checker_stream.py)."""
    if refresh_mode not in REFRESH_MODES:
        raise ValueError(f"refresh_mode must be one of {REFRESH_MODES}, got {refresh_mode!r}")
    cycle = np.asarray(log.cycle, np.int64)
    cmd = np.asarray(log.command, np.int64)
    pc = np.asarray(log.pseudo_channel, np.int64)
    bank = np.asarray(log.bank, np.int64)
    row = np.asarray(log.row, np.int64)
    out, warn = _Collector(cycle), _Collector(cycle)
    back = np.nonzero(cycle[1:] < cycle[:-1])[0]
    out.add("cycle_order", "cycles must not decrease in issue order", back, back + 1, 0,
            cycle[back + 1] - cycle[back])
    bad = malformed(cmd, pc, bank, row, org)
    out.add("malformed", "command code, pseudo-channel, bank or row out of range",
            np.full(int(bad.sum()), -1), np.nonzero(bad)[0])
    idx = np.nonzero(~bad)[0]  # malformed commands are reported once and left out of everything else
    cmd, cycle_v, pc, bank, row = cmd[idx], cycle[idx], pc[idx], bank[idx], row[idx]
    scopes = scope_streams(idx, cmd, cycle_v, pc, bank, row, org, out, warn)
    for rule in GAP_RULES:
        _gap_rule(scopes[rule.scope], rule, timing, out)
    _faw(scopes["rank"], timing, out)
    if whole:
        _data_bus(idx, cmd, cycle_v, pc, bank // org.banks_per_rank, timing, out)
    _command_buses(idx, cmd, cycle_v, pc // org.pseudo_channels, out)
    if whole and refresh_mode != "none" and idx.size:
        scope, codes, n_keys, per_key, what = refresh_scope(refresh_mode, org)
        _refresh_deadlines(scopes[scope], codes, n_keys, per_key, what, int(cycle_v.max()), timing, out)
    return out, warn, scopes, idx


def check_command_log(log: CommandLog, org: Organization, timing: Timing, refresh_mode: str = "none",
                      max_violations: int = 100) -> CheckResult:
    """Verify every command of `log` against the JEDEC state and timing rules; see the module docstring."""
    out, warn, _scopes, _idx = check_rules(log, org, timing, refresh_mode)
    violations, counts = out.build(max_violations)
    warnings, warning_counts = warn.build(max_violations)
    return CheckResult(violations, warnings, int(len(log.cycle)), rules_checked(refresh_mode), counts,
                       warning_counts)


__all__ = ["check_command_log", "CheckResult", "Violation"]
