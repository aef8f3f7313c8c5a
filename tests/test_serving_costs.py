"""The serving cost table against the mixed-batch step model at the batch mixes a real run produced."""

from __future__ import annotations

import numpy as np
import pytest

from archsim.serving.build import cost_table, serving_spec, serving_workload
from archsim.serving.engine import simulate
from archsim.serving.run import model_limits
from archsim.serving.scenario import load_scenario
from archsim.system.config import load_system_config
from archsim.system.mixed import decode_terms, mixed_step

pytestmark = pytest.mark.system


class Recording:
    """Passes iterations to the table and keeps the mixes the engine asked for."""

    def __init__(self, table) -> None:
        self.table = table
        self.mixes: list[tuple[np.ndarray, np.ndarray]] = []

    def iteration_ns(self, cached: np.ndarray, new: np.ndarray) -> float:
        self.mixes.append((np.array(cached, dtype=np.int64), np.array(new, dtype=np.int64)))
        return self.table.iteration_ns(cached, new)


def _run(name: str, overrides: list[str], requests: int):
    scenario = load_scenario("multiturn")
    system = load_system_config(name, overrides)
    shape, dtype, max_context = model_limits(scenario)
    workload = serving_workload(system, shape, dtype, max_context, scenario.name)
    spec = serving_spec(system, workload, max_context)
    table = cost_table(system, workload, spec)
    recording = Recording(table)
    simulate(scenario.requests(n_requests=requests, seed=3, block_tokens=spec.block_tokens), spec, recording)
    return system, workload, table, recording.mixes


def _off_grid(table, mixes, count: int):
    """`count` distinct off-grid iterations, a third of them (where the run has them) with prefill chunks."""
    pure, mixed, seen = [], [], set()
    for cached, new in mixes:
        decoding = new == 1
        key = (int(decoding.sum()), int(cached[decoding].sum()), int(new[~decoding].sum()))
        if key[0] and key not in seen and key[0] not in table.seq_grid and key[1] not in table.token_grid:
            seen.add(key)
            (mixed if key[2] else pure).append((cached, new))
    mixed = mixed[:: max(1, len(mixed) // (count // 3))][: count // 3]
    pure = pure[:: max(1, len(pure) // (count - len(mixed)))][: count - len(mixed)]
    return mixed + pure


@pytest.mark.slow
@pytest.mark.parametrize(("name", "overrides"), [("g25", []), ("g25-nopnm", ["system.kv.decode=stream"])])
def test_interpolated_iterations_match_the_step_model(name, overrides):
    # g25-nopnm as it ships (decode: load) reads its KV from HBM, a roofline: its table is exact with no grid
    # point and replays no DRAM (tests/test_serving_system.py holds it to that). Its DRAM-replayed path is decode:
    # stream, every step fetching the KV from the pool over CXL, which this test draws from
    system, workload, table, mixes = _run(name, overrides, 400)
    picked = _off_grid(table, mixes, 100)
    assert len(picked) == 100
    assert sum(bool((new > 1).any()) for _, new in picked) == 33  # prefill chunks beside decode tokens
    errors = []
    for cached, new in picked:
        exact = mixed_step(system, workload, cached, new).time_ns
        errors.append(abs(table.iteration_ns(cached, new) - exact) / exact)
    assert max(errors) <= 0.03, max(errors)
    # the table's own check at the run's iterations agrees with the bound it declares
    assert table.declaration()["max_rel_error_measured"] <= 0.03
    # the grid points were real decode-step runs with the pool's DRAM replayed
    assert table.tabulated and table.grid_points >= 4
    d, n = next(iter(table._terms))
    terms = decode_terms(system, workload, d, n // d)
    assert terms.step is not None and terms.step.sampling["replayed_requests"] > 0
    assert terms.step.bank_conflicts is not None and terms.step.dram_utilization > 0
