"""The on-disk store of decode-step results: a stored value comes back bit for bit, any change of inputs or of
the package's files misses, and a store that is off, unwritable or corrupt only costs the computation."""

from __future__ import annotations

import pickle

import networkx as nx
import pytest

from archsim import step_store
from archsim.serving.build import cost_table, serving_spec, serving_workload
from archsim.serving.run import model_limits
from archsim.serving.scenario import load_scenario
from archsim.step_store import remembered
from archsim.system.config import load_system_config

pytestmark = pytest.mark.component


class Counted:
    def __init__(self, value: object) -> None:
        self.value, self.calls = value, 0

    def __call__(self) -> object:
        self.calls += 1
        return self.value


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv(step_store.CACHE_ENV, str(tmp_path / "store"))
    return tmp_path / "store"


def test_a_stored_result_comes_back_without_computing(store) -> None:
    compute = Counted({"ns": 0.1 + 0.2, "parts": [1.0 / 3.0]})
    first = remembered("kind", ("sys", 4, 1024), compute)
    again = remembered("kind", ("sys", 4, 1024), compute)
    assert compute.calls == 1 and again == first and again is not first
    assert pickle.dumps(again) == pickle.dumps(compute.value)   # every float's bits
    assert len(list(store.rglob("*.pkl"))) == 1 and not list(store.rglob("*.tmp"))


def test_other_inputs_kinds_and_package_files_miss(store, monkeypatch) -> None:
    compute = Counted(1.5)
    remembered("kind", ("sys", 4, 1024), compute)
    remembered("kind", ("sys", 4, 2048), compute)
    remembered("other", ("sys", 4, 1024), compute)
    assert compute.calls == 3
    monkeypatch.setattr(step_store, "package_digest", lambda: "an edited package")
    remembered("kind", ("sys", 4, 1024), compute)
    assert compute.calls == 4


def test_off_unwritable_or_corrupt_stores_only_cost_the_computation(tmp_path, monkeypatch) -> None:
    compute = Counted(2.5)
    monkeypatch.setenv(step_store.CACHE_ENV, "")
    assert remembered("kind", (1,), compute) == 2.5 and remembered("kind", (1,), compute) == 2.5
    assert compute.calls == 2 and step_store.store_dir() is None
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(step_store.CACHE_ENV, str(blocker))
    assert remembered("kind", (1,), compute) == 2.5 and compute.calls == 3
    monkeypatch.setenv(step_store.CACHE_ENV, str(tmp_path / "store"))
    remembered("kind", (1,), compute)
    (kept,) = (tmp_path / "store").rglob("*.pkl")
    kept.write_bytes(b"half a pick")
    assert remembered("kind", (1,), compute) == 2.5 and compute.calls == 5
    assert remembered("kind", (1,), compute) == 2.5 and compute.calls == 5    # rewritten whole


def _g25_multiturn() -> tuple:
    """The README main job's G2.5 system, its serving workload and spec."""
    scenario = load_scenario("multiturn")
    system = load_system_config("g25", [])
    shape, dtype, max_context = model_limits(scenario)
    workload = serving_workload(system, shape, dtype, max_context, scenario.name)
    return system, workload, serving_spec(system, workload, max_context)


def test_the_cost_tables_grid_points_are_the_same_from_the_store(store) -> None:
    system, workload, spec = _g25_multiturn()
    cold = cost_table(system, workload, spec)
    warm = cost_table(system, workload, spec)
    points = [(1, 1024), (2, 4096), (3, 5000)]
    computed = [pickle.dumps(cold.decode_part(d, n)) for d, n in points]
    assert len(list(store.rglob("*.pkl"))) >= 4
    assert [pickle.dumps(warm.decode_part(d, n)) for d, n in points] == computed
    assert warm.iteration_ns([1500, 2500], [1, 1]) == cold.iteration_ns([1500, 2500], [1, 1])


def test_a_systems_key_is_its_definition_not_the_routes_a_run_asked_for() -> None:
    # the store's key is the pickled system: the topology's memo of routes found (filled as a run asks) must not
    # enter it, or a warm run misses every decode step computed after a route was first asked for (it did: one
    # step-model run, a second or more, in every warm multi-server serve)
    system = load_system_config("g25-16s", ["system.servers=4", "system.gpus.count=32"])
    before = pickle.dumps(system)
    topology = system.topology
    graph = pickle.loads(before).topology.graph      # (a copy: the key must not depend on what asks the graph)
    src, dst = next((a, b) for a in sorted(topology.endpoints) for b in sorted(nx.descendants(graph, a))
                    if b in topology.endpoints and (a, b) not in topology._routes)
    route = topology.route(src, dst)
    assert route.hops and (src, dst) in topology._routes
    assert pickle.dumps(system) == before
    assert pickle.loads(before).topology.route(src, dst) == route


def test_a_cost_table_unpickled_finds_what_the_original_stored(store, monkeypatch) -> None:
    # `serve`'s workers send their cost tables back pickled and the parent checks them: the copy's keys must be
    # the original's, though a config's pickle changes in a round trip (which equal strings are one object)
    from archsim.serving import costs

    system, workload, spec = _g25_multiturn()
    original = cost_table(system, workload, spec)
    copy = pickle.loads(pickle.dumps(cost_table(system, workload, spec)))
    assert step_store.canonical((copy.system, copy.workload)) == step_store.canonical((system, workload))
    computed: list[tuple] = []
    real = costs.decode_terms
    monkeypatch.setattr(costs, "decode_terms", lambda *args: computed.append(args[2:]) or real(*args))
    original.decode_part(3, 5000)
    assert computed
    stored = len(computed)
    assert pickle.dumps(copy.decode_part(3, 5000)) == pickle.dumps(original.decode_part(3, 5000))
    assert len(computed) == stored                  # every point the copy needed came from the store
