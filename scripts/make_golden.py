"""The golden command-log cases: every kernel change must replay them to the same digests.

Each case is a memory configuration (a preset with `--set` overrides, or the imported DRAMSim3 HBM2 config that
ships in tests/data/) and a request stream from a generator here with a seed. Its digest is the SHA-256 of the
command log (cycle, command, pseudo-channel, bank, row), the done cycles and the accept cycles, so any change of
what the controller issues, or when, shows. The streams use their own integer hash (splitmix64), not numpy's
random generators, so the digests do not move with the numpy version.

    python scripts/make_golden.py            # write tests/golden/digests.json (at a commit whose logs are right)
    python scripts/make_golden.py --check    # replay every case and compare; exit 1 on a difference

tests/test_golden.py replays the same cases and pins the digest file's own hash.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from archsim.resources import SOURCE_ROOT

ROOT = SOURCE_ROOT  # the repository (archsim.resources: the one place that knows)
DIGESTS = ROOT / "tests" / "golden" / "digests.json"
DRAMSIM3_INI = ROOT / "tests" / "data" / "dramsim3" / "HBM2_8Gb_x128.ini"

# The controller features of tests/test_event_driven.py: each alone, and a few together
FEATURES: dict[str, tuple[str, ...]] = {
    "default": (),
    "fcfs": ("memory.controller.scheduler=fcfs",),
    "closed": ("memory.controller.row_policy=closed",),
    "open_cap": ("memory.controller.row_policy={impl: open_cap, cap: 2}",),
    "timeout": ("memory.controller.row_policy={impl: timeout, timeout_cycles: 30}",),
    "per_bank": ("memory.controller.refresh=per_bank",),
    "bankq4": ("memory.controller.bank_queue_depth=4",),
    "inject1": ("memory.frontend.max_injections_per_cycle=1", "memory.frontend.posted_writes=false"),
    "priority_pnm": ("memory.controller.arbiter={impl: priority, favor: pnm}",),
    "wrr_agecap": ("memory.controller.arbiter={impl: wrr, weights: {host: 1, pnm: 3}}",
                   "memory.controller.age_cap_cycles=400"),
    "reservation": ("memory.controller.arbiter={impl: reservation, source: host, share: 0.3}",),
    "drain_idle": ("memory.controller.write_drain={high_watermark: 24, low_watermark: 0, idle_threshold: 8}",),
    "bankq8_drain": ("memory.controller.bank_queue_depth=8",
                     "memory.controller.write_drain={high_watermark: 32, low_watermark: 0, idle_threshold: 8}"),
    "rr_cap_hold": ("memory.controller.scheduler=round_robin", "memory.controller.row_policy={impl: open_cap, cap: 4}",
                    "memory.controller.refresh={impl: per_bank, hold_columns: true}"),
    "fcfs_hold": ("memory.controller.scheduler=fcfs", "memory.controller.refresh={impl: all_bank, hold_columns: true}"),
    "rr_bankq_drain_hold": ("memory.controller.scheduler=round_robin", "memory.controller.bank_queue_depth=8",
                            "memory.controller.write_drain={high_watermark: 32, low_watermark: 0, idle_threshold: 8}",
                            "memory.controller.refresh={impl: all_bank, hold_columns: true}"),
}
PRESETS = ("HBM2", "HBM3", "HBM3E")
# more than 64 banks per pseudo-channel: the bank masks span two words (the plain kernel that reads its shape)
WIDE = ("memory.organization.ranks=4", "memory.organization.bankgroups=8", "memory.organization.capacity=64GiB")


def _hash64(seed: int, n: int, salt: int) -> np.ndarray:
    """n pseudo-random uint64 from splitmix64 of (seed, salt, index): stable across numpy versions."""
    with np.errstate(over="ignore"):
        x = np.arange(n, dtype=np.uint64) + np.uint64((seed * 0x9E3779B97F4A7C15 + salt * 0xBF58476D1CE4E5B9)
                                                      % 2**64)
        x = x * np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _below(seed: int, n: int, salt: int, bound: int) -> np.ndarray:
    return (_hash64(seed, n, salt) % np.uint64(bound)).astype(np.int64)


def _fraction(seed: int, n: int, salt: int) -> np.ndarray:
    return (_hash64(seed, n, salt) >> np.uint64(11)).astype(np.float64) / float(2**53)


def mixed(org, n: int, seed: int) -> tuple:
    """Half hot rows, half random; bursts and lulls (saturated queues and idle gaps); 30 % writes; both ports."""
    ab = org.access_bytes
    hot_rows = _below(seed, 40, 1, org.capacity_bytes // (ab * 64)) * ab * 64
    hot = hot_rows[_below(seed, n, 2, 40)] + _below(seed, n, 3, 8) * ab
    cold = _below(seed, n, 4, org.capacity_bytes // ab) * ab
    address = np.where(_fraction(seed, n, 5) < 0.5, hot, cold)
    gaps = np.where(_fraction(seed, n, 6) < 0.9, 0, 1 + _below(seed, n, 7, 400))
    return np.cumsum(gaps), address, _fraction(seed, n, 8) < 0.3, _fraction(seed, n, 9) < 0.5


def random_saturating(org, n: int, seed: int) -> tuple:
    """Random 64 B-aligned reads and 20 % writes, all at cycle 0 (the queues stay full), host port only."""
    ab = org.access_bytes
    address = _below(seed, n, 1, org.capacity_bytes // ab) * ab
    return np.zeros(n, dtype=np.int64), address, _fraction(seed, n, 2) < 0.2, np.zeros(n, dtype=bool)


def sequential(org, n: int, seed: int) -> tuple:
    """A streaming read from a seeded start, one request every 2 cycles, every 8th a write."""
    ab = org.access_bytes
    start = int(_below(seed, 1, 1, org.capacity_bytes // ab // 2)[0])
    address = (start + np.arange(n, dtype=np.int64)) * ab
    return 2 * np.arange(n, dtype=np.int64), address, np.arange(n) % 8 == 7, np.zeros(n, dtype=bool)


def strided(org, n: int, seed: int) -> tuple:
    """Reads a row apart on the PNM port (row conflicts in few banks), open-loop every cycle."""
    row_stride = org.capacity_bytes // org.rows
    start = int(_below(seed, 1, 1, org.rows // 2)[0]) * row_stride
    address = (start + np.arange(n, dtype=np.int64) * row_stride) % org.capacity_bytes
    return np.arange(n, dtype=np.int64), address, np.zeros(n, dtype=bool), np.ones(n, dtype=bool)


def sparse(org, n: int, seed: int) -> tuple:
    """Requests spread over many refresh intervals (refresh, timeouts and idle write drains between them)."""
    ab = org.access_bytes
    address = _below(seed, n, 1, org.capacity_bytes // ab) * ab
    gaps = 50 + _below(seed, n, 2, 3000)
    return np.cumsum(gaps), address, _fraction(seed, n, 3) < 0.4, _fraction(seed, n, 4) < 0.5


def one_bank_rows(org, n: int, seed: int) -> tuple:
    """One bank, a new row for every request, all at once: ACTs tRC apart behind full bank queues."""
    row_stride = org.capacity_bytes // org.rows
    order = np.argsort(_hash64(seed, n, 1), kind="stable")
    return np.zeros(n, dtype=np.int64), order * row_stride, np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)


GENERATORS: dict[str, Callable] = {f.__name__: f for f in (mixed, random_saturating, sequential, strided, sparse,
                                                           one_bank_rows)}


@dataclass(frozen=True)
class Case:
    name: str
    memory: str  # a preset name, or "dramsim3" for the imported tests/data config
    overrides: tuple[str, ...]
    stream: str  # a GENERATORS name
    requests: int
    seed: int


def cases() -> list[Case]:
    out = []
    for preset in PRESETS:
        for feature, overrides in FEATURES.items():
            out.append(Case(f"{preset}-{feature}-mixed", preset, overrides, "mixed", 2500, 11))
        for feature in ("default", "fcfs", "closed", "bankq8_drain", "rr_cap_hold", "wrr_agecap"):
            out.append(Case(f"{preset}-{feature}-random", preset, FEATURES[feature], "random_saturating", 3000, 5))
        for stream in ("sequential", "strided", "sparse"):
            out.append(Case(f"{preset}-default-{stream}", preset, (), stream, 3000, 7))
        out.append(Case(f"{preset}-closed-sequential", preset, FEATURES["closed"], "sequential", 3000, 7))
        out.append(Case(f"{preset}-per_bank-sparse", preset, FEATURES["per_bank"], "sparse", 2000, 9))
    for stream in ("mixed", "random_saturating", "sequential", "strided", "sparse"):
        out.append(Case(f"dramsim3-{stream}", "dramsim3", (), stream, 3000, 13))
    out.append(Case("dramsim3-fcfs-mixed", "dramsim3", FEATURES["fcfs"], "mixed", 3000, 13))
    out.append(Case("HBM3-wide-mixed", "HBM3", WIDE, "mixed", 3000, 11))
    out.append(Case("HBM3-wide-random", "HBM3", WIDE, "random_saturating", 3000, 5))
    out.append(Case("HBM2-bankq2-one_bank_rows", "HBM2", ("memory.controller.bank_queue_depth=2",),
                    "one_bank_rows", 600, 3))
    out.append(Case("HBM3-default-one_bank_rows", "HBM3", (), "one_bank_rows", 600, 3))
    return out


def memory_config(case: Case):
    from archsim.config.dramsim3_import import import_dramsim3
    from archsim.config.memory import build_memory_config, memory_config_from_preset, resolve_memory_tree

    if case.memory != "dramsim3":
        return memory_config_from_preset(case.memory, list(case.overrides))
    tree = import_dramsim3(DRAMSIM3_INI).tree
    return build_memory_config(resolve_memory_tree(tree, str(DRAMSIM3_INI), case.overrides), str(DRAMSIM3_INI))


def replay_case(case: Case):
    from archsim.memory import Requests, replay

    cfg = memory_config(case)
    ts, address, is_write, pnm = GENERATORS[case.stream](cfg.organization, case.requests, case.seed)
    requests = Requests.build(ts, np.asarray(address, dtype=np.uint64), is_write.astype(np.uint8),
                              pnm.astype(np.uint8))
    return replay(cfg, requests, command_log=True)


def digest(result) -> dict:
    """SHA-256 of the command log, done and accept cycles (little-endian, fixed widths), with readable counts."""
    log = result.command_log
    h = hashlib.sha256()
    for array, dtype in ((log.cycle, "<i8"), (log.command, "<i1"), (log.pseudo_channel, "<i4"), (log.bank, "<i4"),
                         (log.row, "<i8"), (result.done_cycle, "<i8"), (result.accept_cycle, "<i8")):
        h.update(np.ascontiguousarray(array, dtype=dtype).tobytes())
    return {"sha256": h.hexdigest(), "commands": int(len(log.cycle)), "total_cycles": int(result.total_cycles)}


def compute_all(progress: bool = False) -> dict[str, dict]:
    out = {}
    for k, case in enumerate(cases()):
        out[case.name] = digest(replay_case(case))
        if progress:
            print(f"[{k + 1}/{len(cases())}] {case.name}: {out[case.name]['commands']} commands", file=sys.stderr)
    return out


def golden_text(digests: dict[str, dict]) -> str:
    return json.dumps({"schema": "archsim.golden/1", "cases": digests}, indent=1, sort_keys=True) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with tests/golden/digests.json")
    args = parser.parse_args()
    digests = compute_all(progress=True)
    if args.check:
        stored = json.loads(DIGESTS.read_text())["cases"]
        bad = [name for name in digests if stored.get(name) != digests[name]]
        missing = sorted(set(stored) - set(digests))
        for name in bad + missing:
            print(f"differs: {name}")
        print(f"{len(digests) - len(bad)} of {len(digests)} cases equal the golden digests")
        return 1 if bad or missing else 0
    DIGESTS.parent.mkdir(parents=True, exist_ok=True)
    DIGESTS.write_text(golden_text(digests))
    print(f"wrote {len(digests)} digests to {DIGESTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
