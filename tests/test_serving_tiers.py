"""`system.kv.tiers` (docs/design-serving.md): explicit tiers, `kv.location` as their shorthand, and every bad tier list
as one ConfigError at its dotted key."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import yaml

from archsim.errors import ConfigError
from archsim.system.config import system_config_from_mapping
from tests.conftest import REPO

pytestmark = pytest.mark.unit


def _tree(name: str) -> dict:
    return yaml.safe_load((REPO / f"configs/systems/{name}.yaml").read_text())


def _with_tiers(name: str, tiers: list[dict]) -> dict:
    tree = copy.deepcopy(_tree(name))
    kv = tree["system"]["kv"]
    for key in ("location", "endpoint", "capacity", "device"):
        kv.pop(key, None)
    kv["tiers"] = tiers
    return tree


POOL_PNM = [{"name": "hbm", "kind": "hbm"}, {"name": "pool", "kind": "pool", "endpoint": "pool", "compute": "pnm"}]
NVME = [{"kind": "hbm"}, {"name": "nvme", "kind": "nvme", "endpoint": "nvme", "capacity": "15.36TB"}]


@pytest.mark.parametrize("name, tiers", [("g25", POOL_PNM), ("nvme", NVME), ("gpu-hbm", [{"kind": "hbm"}])],
                         ids=["pool-pnm", "nvme", "hbm-only"])
def test_the_shorthand_is_the_tiers_it_names(name: str, tiers: list[dict]) -> None:
    short = system_config_from_mapping(_tree(name))
    explicit = system_config_from_mapping(_with_tiers(name, tiers))
    assert explicit.kv_tiers == short.kv_tiers
    # the decode-step model sees the same system (topology and energy table are loaded objects without ==)
    for f in dataclasses.fields(short):
        if f.name not in ("topology", "energy"):
            assert getattr(explicit, f.name) == getattr(short, f.name), f.name


def test_three_tiers_keep_their_order_and_capacities() -> None:
    tiers = [*POOL_PNM, {"name": "ssd", "kind": "nvme", "endpoint": "pool", "capacity": "2TB"}]
    cfg = system_config_from_mapping(_with_tiers("g25", tiers))
    assert [(t.name, t.kind, t.compute) for t in cfg.kv_tiers] == [
        ("hbm", "hbm", "none"), ("pool", "pool", "pnm"), ("ssd", "nvme", "none")]
    assert cfg.kv_tiers[2].capacity_bytes == 2 * 10**12
    # derived: the HBM room after the weights, the modelled pool
    assert cfg.kv_tiers[0].capacity_bytes is None and cfg.kv_tiers[1].capacity_bytes is None


BAD = [
    ("g25", [POOL_PNM[1], POOL_PNM[0]], "system.kv.tiers[0].kind", "only tier 0"),
    ("g25", [*POOL_PNM, {"kind": "hbm"}], "system.kv.tiers[2].kind", "only tier 0"),
    ("g25", [*POOL_PNM, {"kind": "nvme", "endpoint": "pool", "capacity": "1TB", "compute": "pnm"}],
     "system.kv.tiers[2].compute", "only a `pool` tier"),
    ("g25", [*POOL_PNM, {"name": "pool", "kind": "nvme", "endpoint": "pool", "capacity": "1TB"}],
     "system.kv.tiers", "names must differ"),
    ("g25", [*POOL_PNM, {"name": "p2", "kind": "pool", "endpoint": "pool"}], "system.kv.tiers", "at most one"),
    ("g25", [POOL_PNM[0], {"kind": "pool", "endpoint": "pool"}], "system.kv.tiers", "needs a pool tier"),
    ("g25", [*POOL_PNM, {"kind": "nvme", "endpoint": "pool", "capacity": "0B"}], "system.kv.tiers[2].capacity",
     "must be positive"),
    ("g25", [*POOL_PNM, {"kind": "tape", "endpoint": "pool"}], "system.kv.tiers[2].kind", "tape"),
    ("g25", [*POOL_PNM, {"kind": "nvme", "endpoint": "pool", "capacity": "1TB", "speed": 3}],
     "system.kv.tiers[2]", "speed"),
    ("g25", [*POOL_PNM, {"kind": "nvme", "endpoint": "nowhere", "capacity": "1TB"}], "system.kv.tiers[2].endpoint",
     "nowhere"),
    ("g25", [], "system.kv.tiers", "non-empty list"),
]


@pytest.mark.parametrize("name, tiers, where, words", BAD, ids=[f"{i}-{b[3]}" for i, b in enumerate(BAD)])
def test_a_bad_tier_list_is_one_error_at_its_key(name: str, tiers: list[dict], where: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        system_config_from_mapping(_with_tiers(name, tiers))
    assert info.value.where.startswith(where), info.value.where
    assert words in str(info.value) and "\n" not in str(info.value)


def test_location_and_tiers_together_are_an_error() -> None:
    tree = _with_tiers("g25", POOL_PNM)
    tree["system"]["kv"]["location"] = "pool"
    with pytest.raises(ConfigError, match="not both") as info:
        system_config_from_mapping(tree)
    assert info.value.where == "system.kv.location"


def test_the_serving_spec_holds_every_tier_with_its_capacity_and_link() -> None:
    from archsim.serving.build import serving_spec, serving_workload
    from archsim.serving.run import model_limits
    from archsim.serving.scenario import load_scenario

    tiers = [*POOL_PNM, {"name": "ssd", "kind": "nvme", "endpoint": "pool", "capacity": "2TB"}]
    system = system_config_from_mapping(_with_tiers("g25", tiers))
    shape, dtype, max_context = model_limits(load_scenario("multiturn"))
    spec = serving_spec(system, serving_workload(system, shape, dtype, max_context, "multiturn"), max_context)
    assert [(t.name, t.kind, t.compute) for t in spec.tiers] == [
        ("hbm", "hbm", "none"), ("pool", "pool", "pnm"), ("ssd", "nvme", "none")]
    assert spec.tiers[1].capacity_bytes == system.pool.capacity_bytes and spec.tiers[2].capacity_bytes == 2 * 10**12
    assert spec.tiers[2].link_GBps == spec.tiers[1].link_GBps > 0  # both behind the pool's endpoint
    assert spec.kv_home == 1  # attention in the pool: running sequences' KV lives in the PNM tier
