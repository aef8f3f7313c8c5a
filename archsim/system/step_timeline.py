"""The `archsim simulate/compare --timeline` view of decode steps (Chrome trace-event JSON,
archsim/report/timeline.py).

One process per system, and per context a `critical path` thread and one thread per overlapped term. The step
model prices a step as L identical layers plus per-step terms (the epilogue, the latency a prefetch leaves
exposed), so the critical thread lays each layer's critical terms (the step's breakdown over L) end to end,
layer after layer, then the per-step terms: the slices add up to `decode_step_ns`. The model prices the sum
of a layer's terms, not their order; they are drawn in the order the work happens in a layer
(`LAYER_ORDER`: weights and projections, the queries out, the KV fetch, attention, the outputs back, the
all-reduces). Each overlapped term (work hidden under the critical path: the pool's DRAM under the PNM's
attention, a prefetched fetch under the GPUs' work) runs from each layer's start on its own thread, cut where
the next layer starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from archsim.report.timeline import Timeline, Window, _span_us

PER_STEP = ("epilogue", "exposed_latency")  # terms of the whole step, not of each layer
LAYER_ORDER = ("gpu_weights", "link_queries", "kv_fetch", "link_fetch", "gpu_attention", "pnm", "pool_dram",
               "link_outputs", "allreduce")


def _ordered(terms: dict[str, float]) -> list[str]:
    rank = {name: k for k, name in enumerate(LAYER_ORDER)}
    return sorted(terms, key=lambda name: (rank.get(name, len(LAYER_ORDER)), name))


def _context(tokens: int) -> str:
    return f"{tokens // 1024}K" if tokens % 1024 == 0 else str(tokens)


class _Slices:
    """Slices of one thread, cut to the window, written as complete events."""

    def __init__(self, t: Timeline, pid: int, tid: int, window: Window) -> None:
        self.t, self.pid, self.tid, self.window = t, pid, tid, window
        self.omitted = 0

    def add(self, name: str, start_ns: float, end_ns: float, args: str) -> None:
        a, b = max(start_ns, self.window.start_ns), min(end_ns, self.window.end_ns)
        if b <= a:
            self.omitted += 1
            return
        (ts,), (dur,) = _span_us([a], [b])
        self.t.events.append(f'{{"ph":"X","name":"{name}","pid":{self.pid},"tid":{self.tid},"ts":{ts:.6f},'
                             f'"dur":{dur:.6f},"args":{{{args}}}}}')


def step_timeline(results: Sequence[Any], layers: int, window: Window, source: str = "") -> Timeline:
    """The decode steps of `results` (archsim.system.decode.StepResult), `layers` decoder layers each."""
    t = Timeline(metadata={"source": source, "kind": "decode step", "layers": layers, "window": window.as_dict(),
                           "layer_order": list(LAYER_ORDER), "per_step_terms": list(PER_STEP)})
    systems = list(dict.fromkeys(r.system for r in results))
    omitted = 0
    tid_of: dict[tuple[str, int], int] = {}
    for pid, system in enumerate(systems, start=1):
        t.name_process(pid, system, pid)
    for r in results:
        pid = systems.index(r.system) + 1
        base = 100 * sum(1 for key in tid_of if key[0] == r.system)
        tid_of[(r.system, r.context)] = base
        if not r.ok:
            t.name_thread(pid, base, f"{_context(r.context)}: {r.status}")
            continue
        t.name_thread(pid, base, f"{_context(r.context)}: critical path ({r.decode_step_ns / 1e6:.3f} ms)")
        omitted += _draw_step(t, pid, base, r, layers, window)
    t.omitted["slices_outside_window"] = omitted
    return t


def _draw_step(t: Timeline, pid: int, base: int, r: Any, layers: int, window: Window) -> int:
    critical = r.breakdown_ns.get("critical", {})
    per_layer = {k: v / layers for k, v in critical.items() if k not in PER_STEP and v > 0}
    layer_ns = sum(per_layer.values())
    path = _Slices(t, pid, base, window)
    hidden = {name: _Slices(t, pid, base + 1 + k, window)
              for k, name in enumerate(_ordered(r.breakdown_ns.get("overlapped", {})))}
    for name, lane in hidden.items():
        t.name_thread(pid, lane.tid, f"{_context(r.context)}: overlapped {name}")
    for layer in range(layers):
        at = layer * layer_ns
        for name in _ordered(per_layer):
            path.add(name, at, at + per_layer[name], f'"layer":{layer}')
            at += per_layer[name]
        for name, lane in hidden.items():
            length = min(r.breakdown_ns["overlapped"][name] / layers, layer_ns)
            lane.add(name, layer * layer_ns, layer * layer_ns + length, f'"layer":{layer}')
    at = layers * layer_ns
    for name in PER_STEP:
        if critical.get(name, 0) > 0:
            path.add(name, at, at + critical[name], '"layer":-1')
            at += critical[name]
    return path.omitted + sum(lane.omitted for lane in hidden.values())


__all__ = ["step_timeline", "LAYER_ORDER", "PER_STEP"]
