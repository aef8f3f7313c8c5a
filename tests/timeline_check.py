"""A validator of Chrome trace-event JSON (object form) for the timeline tests (not a test module)."""

from __future__ import annotations

from numbers import Real
from typing import Any

PHASES = {"X", "B", "E", "C", "i", "M", "s", "f"}
REQUIRED = {  # fields each ph needs besides ph, pid and tid
    "X": ("name", "ts", "dur"), "B": ("name", "ts"), "E": ("ts",), "C": ("name", "ts", "args"),
    "i": ("name", "ts"), "M": ("name", "args"), "s": ("name", "ts", "id"), "f": ("name", "ts", "id"),
}
METADATA_NAMES = {"process_name", "process_sort_index", "thread_name", "thread_sort_index", "process_labels"}


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def validate(tree: Any) -> list[str]:
    """Every problem found, as one line each (empty: a valid file)."""
    problems: list[str] = []
    if not isinstance(tree, dict) or not isinstance(tree.get("traceEvents"), list):
        return ["not the object form: no traceEvents list"]
    if tree.get("displayTimeUnit") not in ("ms", "ns"):
        problems.append(f"displayTimeUnit {tree.get('displayTimeUnit')!r} is not ms or ns")
    stacks: dict[tuple[int, int], list[tuple[str | None, float]]] = {}
    for k, e in enumerate(tree["traceEvents"]):
        where = f"event {k}"
        ph = e.get("ph") if isinstance(e, dict) else None
        if ph not in PHASES:
            problems.append(f"{where}: ph {ph!r} not among {sorted(PHASES)}")
            continue
        for key in ("pid", "tid", *REQUIRED[ph]):
            if key not in e:
                problems.append(f"{where} ({ph}): no {key}")
        if not (_int(e.get("pid")) and _int(e.get("tid"))):
            problems.append(f"{where}: pid/tid not integers")
        if "ts" in e and not (_number(e["ts"]) and e["ts"] >= 0):
            problems.append(f"{where}: ts {e['ts']!r} not a non-negative number of microseconds")
        if ph == "X" and not (_number(e.get("dur")) and e["dur"] >= 0):
            problems.append(f"{where}: dur {e.get('dur')!r} negative or not a number")
        if ph == "C" and not (isinstance(e.get("args"), dict) and all(_number(v) for v in e["args"].values())):
            problems.append(f"{where}: counter args are not numbers")
        if ph == "M" and e.get("name") not in METADATA_NAMES:
            problems.append(f"{where}: unknown metadata {e.get('name')!r}")
        if ph in ("B", "E") and _number(e.get("ts")):
            stack = stacks.setdefault((e.get("pid"), e.get("tid")), [])
            if ph == "B":
                stack.append((e.get("name"), e["ts"]))
            elif not stack:
                problems.append(f"{where}: E without a B on its thread")
            else:
                name, ts = stack.pop()
                if e.get("name") not in (None, name) or e["ts"] < ts:
                    problems.append(f"{where}: E does not close the B {name!r} at {ts}")
    problems += [f"thread {key}: {len(s)} B without E" for key, s in stacks.items() if s]
    return problems


def slices_overlap(tree: dict) -> list[tuple[int, int]]:
    """Threads whose X slices overlap without nesting (Perfetto draws such slices wrongly)."""
    by_thread: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in tree["traceEvents"]:
        if e["ph"] == "X":
            by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    bad = []
    for key, spans in by_thread.items():
        spans.sort()
        if any(b[0] < a[1] - 1e-6 for a, b in zip(spans, spans[1:], strict=False)):  # 1 ps: the files' resolution
            bad.append(key)
    return bad
