"""The captured traces shipped in traces/: intact, small, and byte-for-byte what the generators predict.

No torch needed: this guards the files (and the generators) on every machine.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from archsim.models import load_preset
from archsim.trace.info import summarize
from archsim.trace.logical import LogicalTrace, is_logical_trace
from archsim.trace.mapping import PoolPlacement, map_trace
from archsim.workloads import chat_trace
from tests.conftest import REPO

pytestmark = pytest.mark.unit

TRACES = REPO / "traces"
SHIPPED = sorted(p for p in TRACES.glob("*.npz") if is_logical_trace(p))


def test_at_least_three_captured_traces_ship() -> None:
    assert len(SHIPPED) >= 3
    assert {"llama", "qwen2", "deepseek_v2"} <= {_header(p)["model"]["shape"]["model_type"] for p in SHIPPED}


def _header(path: Path) -> dict:
    with LogicalTrace(path) as trace:
        return trace.header


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_trace_matches_the_generator(path: Path) -> None:
    assert path.stat().st_size < 2 * 2**20
    with LogicalTrace(path) as trace:
        trace.verify()
        header, cols, names = trace.header, trace.read(), trace.operators
    assert header["source"] == "capture"
    options = header["options"]
    shape = load_preset(header["model"]["preset"]).shape().with_layers(header["model"]["layers"])
    generated = chat_trace(shape, batch=options["batch"], prompt_tokens=options["prompt_tokens"],
                           reply_tokens=options["decode_steps"], turns=options["turns"],
                           turn_tokens=options["turn_tokens"], dtype=header["dtype"])
    expected = generated.columns()

    def totals(c: dict[str, np.ndarray], ops: list[str]) -> Counter:
        out: Counter = Counter()
        for step, layer, kind, op, operator, nbytes in zip(c["step"].tolist(), c["layer"].tolist(),
                                                          c["kind"].tolist(), c["op"].tolist(),
                                                          c["operator"].tolist(), c["bytes"].tolist(), strict=True):
            out[(step, layer, kind, op, ops[operator])] += nbytes
        return out

    assert totals(cols, names) == totals(expected, generated.builder.operators)
    summary = summarize(path)
    assert summary["steps"] == len(generated.steps) and summary["records"] == len(cols["step"])


@pytest.mark.slow
@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_trace_maps_onto_a_pool(path: Path) -> None:
    with LogicalTrace(path) as trace:
        streams = map_trace(trace, PoolPlacement(devices=2, channels_per_device=16,
                                                 capacity_per_device_bytes=2**30, prefix_sharing=True))
    assert len(streams) > 0
    assert int(streams.address.max()) < 2**30
