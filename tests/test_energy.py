"""Energy = counts x table: hand-computed breakdowns, the PNM-vs-host identity, table validation, doc sync."""

from __future__ import annotations

import math
import re

import pytest

from archsim.energy import DEFAULT_TABLE, EnergyTable, energy_breakdown, energy_by_action, total_energy_pJ
from archsim.errors import ConfigError
from archsim.interconnect import Flow, Topology, simulate_flows
from tests.conftest import REPO

pytestmark = pytest.mark.unit

SCALE = (7 / 45) * (0.75 / 0.9) ** 2


@pytest.fixture(scope="module")
def table() -> EnergyTable:
    return EnergyTable.load()


def test_derived_entries(table):
    assert table.pJ("dram.act") == pytest.approx(0.11 * 8192, rel=1e-15)  # 901.12 pJ per 1 KiB row
    assert table.pJ("dram.read_bit.in_die") == pytest.approx(0.44 + 1.01 + 1.23 + 0.5, rel=1e-15)
    assert table.pJ("dram.read_bit.host") + 0.11 == pytest.approx(3.59, rel=1e-15)  # the "~3.6" host path
    assert table.pJ("pnm.fp16_mult") == pytest.approx(1.1 * SCALE, rel=1e-15)
    assert table.pJ("pnm.mac") == pytest.approx(1.5 * SCALE, rel=1e-15)
    assert table.pJ("pnm.exp") == pytest.approx(4 * 1.5 * SCALE, rel=1e-15)
    assert table.pJ("l2.line") == pytest.approx(100 / 64 * 512 * SCALE, rel=1e-15)
    assert table.pJ("dram.ref") == pytest.approx(1.2 * (250 - 55) * 260, rel=1e-15)


def test_hand_computed_breakdown(table):
    counts = {"dram.act": 10, "dram.read_bit.host": 8192, "dram.read_bit.pnm": 4096, "pnm.mac": 1000,
              "link.cxl.bit": 1e6, "dram.background.active_standby": 500}
    got = energy_breakdown(counts, table)
    expected = {
        "dram.act": 10 * 901.12,
        "dram.cell": 0.44 * 12288,
        "dram.column_path": 1.01 * 12288,
        "dram.global_io_path": 1.23 * 12288,
        "dram.tsv": 0.5 * 12288,
        "interposer.io": 0.3 * 8192,  # only the host-port bits cross the interposer
        "dram.background.active_standby": 66 * 500,
        "pnm.fp16_add": 1000 * 0.4 * SCALE,
        "pnm.fp16_mult": 1000 * 1.1 * SCALE,
        "link.cxl.bit": 5.5e6,
    }
    assert list(got) == [k for k in table.entries if k in expected]  # table order
    assert got == pytest.approx(expected, rel=1e-12)
    by_action = energy_by_action(counts, table)
    assert by_action["dram.read_bit.host"] == pytest.approx(8192 * 3.48, rel=1e-12)
    assert total_energy_pJ(counts, table) == pytest.approx(math.fsum(expected.values()), rel=1e-12)


def test_missing_action_is_an_error_naming_the_key(table):
    with pytest.raises(ConfigError) as err:
        energy_breakdown({"dram.act": 1, "dram.rd_bit": 8}, table)
    assert err.value.where == "energy.actions.dram.rd_bit"
    assert err.value.file == str(DEFAULT_TABLE)
    with pytest.raises(ValueError, match="finite"):
        energy_by_action({"dram.act": -1}, table)


@pytest.mark.parametrize(("link", "hops"), [("link.cxl.bit", 2), ("link.nvlink.bit", 2), ("link.pcie.bit", 1)])
def test_pnm_saves_exactly_the_interposer_and_link_terms(table, link, hops):
    host = total_energy_pJ({"dram.read_bit.host": 1, link: hops}, table)
    pnm = total_energy_pJ({"dram.read_bit.pnm": 1}, table)
    saved = table.pJ("interposer.io") + hops * table.pJ(link)
    assert pnm < host
    assert host - pnm == pytest.approx(saved, abs=1e-12)
    # and not a single in-die term: the components the PNM read pays are all in the host read too
    assert energy_breakdown({"dram.read_bit.host": 1}, table).keys() - {"interposer.io"} == \
        energy_breakdown({"dram.read_bit.pnm": 1}, table).keys()


def test_flow_schedule_counts_price_like_the_links(table):
    topo = Topology.load("cxl2_switch")
    sched = simulate_flows(topo, [Flow("pool", f"gpu{i}", 1 << 20) for i in range(8)])
    counts = sched.wire_bits_by_protocol()
    assert total_energy_pJ(counts, table) == pytest.approx(sum(u.energy_pJ for u in sched.links), rel=1e-12)
    # 8 MiB of payload over two CXL hops with 68 B flits and 128b/130b coding
    assert counts["link.cxl.bit"] == pytest.approx(2 * 8 * (8 << 20) / 0.9265, rel=1e-12)


@pytest.mark.parametrize("preset", sorted(p.stem for p in (REPO / "configs" / "interconnect").glob("*.yaml")))
def test_interconnect_presets_agree_with_the_energy_table(table, preset):
    for link in Topology.load(preset).links:
        assert link.energy_pJ_per_bit == table.pJ(f"link.{link.protocol}.bit"), link.name


def test_every_default_entry_is_documented(table):
    doc = (REPO / "docs" / "energy.md").read_text()
    for name in table.entries:
        assert f"`{name}`" in doc, name
    for name in table.scales:
        assert f"`{name}`" in doc, name


def entry(**fields):
    return {"per": "bit", "source": "test", **fields}


@pytest.mark.parametrize(
    ("actions", "where", "message"),
    [
        ({"a": entry(energy_pJ=1, sum_of=["b"]), "b": entry(energy_pJ=1)}, "energy.actions.a", "exactly one"),
        ({"a": entry(sum_of={"nope": 2})}, "energy.actions.a.sum_of.nope", "unknown entry"),
        ({"a": entry(sum_of=["b"]), "b": entry(sum_of=["a"])}, "energy.actions.", "cycle"),
        ({"a": {"per": "bit", "energy_pJ": 1}}, "energy.actions.a.source", "missing"),
        ({"a": entry(energy_pJ=1, source=" ")}, "energy.actions.a.source", "source"),
        ({"a": entry(energy_pJ=1, scale="tiny")}, "energy.actions.a.scale", "unknown scale"),
        ({"a": entry(pJ_per_bit=1)}, "energy.actions.a.size", "missing"),
        ({"a": entry(energy_pJ=-1)}, "energy.actions.a.energy_pJ", ">= 0"),
        ({"a": entry(energy_pJ=1, colour="red")}, "energy.actions.a.colour", "unknown key"),
    ],
)
def test_table_errors_name_the_dotted_path(actions, where, message):
    with pytest.raises(ConfigError) as err:
        EnergyTable.from_mapping({"actions": actions})
    assert err.value.where.startswith(where)
    assert re.search(message, str(err.value))


def test_scale_needs_positive_numbers():
    bad = {"s": {"from_node_nm": 45, "from_vdd_V": 0.9, "to_node_nm": 0, "to_vdd_V": 0.7, "source": "x"}}
    with pytest.raises(ConfigError) as err:
        EnergyTable.from_mapping({"scales": bad, "actions": {"a": entry(energy_pJ=1)}})
    assert err.value.where == "energy.scales.s.to_node_nm"
