"""Timing model of the PNM unit: the numbers of issue 3, the closed-loop machinery, stats and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from archsim.cli import main
from archsim.config.memory import load_memory_config
from archsim.errors import ConfigError
from archsim.memory import Requests, replay
from archsim.pnm.cli import pnm as pnm_group
from archsim.pnm.problem.placement import place_decode_attention
from archsim.pnm.problem.shape import parse_shape
from archsim.pnm.timed import timing
from archsim.pnm.timed.address_space import channel_local_to_physical
from archsim.pnm.timed.memport import MemoryDomain
from archsim.pnm.timed.simulate import run_pnm
from archsim.pnm.timed.stats import PNM_CONTRACT, PNM_STAT_DOCS, pnm_doc_key, pnm_stats, render_pnm_stats_table
from archsim.pnm.timed.unit_config import ClockRatio, device_layout, load_pnm_config
from archsim.report.memory_stats import flatten
from tests.conftest import REPO

pytestmark = pytest.mark.component

GQA = REPO / "isa" / "kernels" / "gqa_decode.s"
HBM3 = REPO / "configs" / "memory" / "hbm3.yaml"
DEFAULT_SHAPE = "heads=32,kv_heads=8,head_dim=128,context=8192,batch=1"

if "pnm" not in main.commands:  # until archsim/cli.py registers it
    main.add_command(pnm_group)


@pytest.fixture(scope="module")
def memory():
    return load_memory_config(HBM3)


@pytest.fixture(scope="module")
def pnm_cfg():
    return load_pnm_config()


@pytest.fixture(scope="module")
def long_decode(memory, pnm_cfg):
    """The issue's default problem on one HBM3 stack, one unit per channel controller: 8K tokens."""
    run = run_pnm(GQA, DEFAULT_SHAPE, memory, pnm_cfg)
    return run, pnm_stats(run, reproducible=True)


def _cycles(memory, pnm_cfg, shape, units, **compute):
    cfg = load_pnm_config(None, [f"pnm.compute.{k}={v}" for k, v in compute.items()]) if compute else pnm_cfg
    run = run_pnm(GQA, shape, memory, cfg, units=units)
    return run.timing.cycles, run.roofline


# ---------------------------------------------------------------- the numbers of issue 3
@pytest.mark.slow
def test_long_context_decode_is_within_10_percent_of_the_roofline(long_decode):
    run, stats = long_decode
    p = stats["pnm"]
    assert p["roofline"]["bound"] == "memory"
    assert p["roofline_cycles"] == run.roofline.cycles
    assert 0.97 <= p["cycles"] / p["roofline_cycles"] <= 1.10, p["roofline_ratio"]


def test_one_unit_per_controller_sustains_80_percent_of_peak_bandwidth(long_decode):
    _, stats = long_decode
    mem = stats["memory"]
    assert stats["pnm"]["units"] == 16 and stats["pnm"]["address_space"] == "channel_local"
    assert mem["bandwidth_GBps"] / mem["peak_bandwidth_GBps"] >= 0.80, mem["bandwidth_utilization"]
    assert stats["pnm"]["sim"]["late_requests"] == 0


def test_compute_starved_unit_follows_the_flop_count(memory, pnm_cfg):
    starved = {"macs_per_cycle": 16, "vector_lanes": 4, "exp_per_cycle": 1}
    short, bound_short = _cycles(memory, pnm_cfg, "heads=4,kv_heads=1,context=1024", 1, **starved)
    long, bound_long = _cycles(memory, pnm_cfg, "heads=4,kv_heads=1,context=2048", 1, **starved)
    assert bound_short.bound == bound_long.bound == "compute"
    assert bound_long.compute_cycles == 2 * bound_short.compute_cycles  # twice the FLOPs
    assert long / short == pytest.approx(2.0, rel=0.03)  # ... twice the cycles
    assert 1.0 <= long / bound_long.compute_cycles <= 1.3  # in-order issue: the chain's latencies add


def _crossover_group(memory, pnm_cfg, **compute) -> int:
    """Smallest GQA group whose decode no longer hides compute under the memory stream."""
    for group in (1, 2, 4, 8, 16, 32):
        cycles, bound = _cycles(memory, pnm_cfg, f"heads={group},kv_heads=1,context=1024", 1, **compute)
        if cycles > 1.2 * bound.memory_cycles:
            return group
    return 64


def test_compute_memory_crossover_moves_with_lanes(memory, pnm_cfg):
    narrow = _crossover_group(memory, pnm_cfg, macs_per_cycle=32, vector_lanes=4, exp_per_cycle=1)
    wide = _crossover_group(memory, pnm_cfg, macs_per_cycle=128, vector_lanes=16, exp_per_cycle=4)
    assert narrow < wide, (narrow, wide)
    assert wide == 4 * narrow  # 4x the datapath moves the crossover by 4x the arithmetic intensity


def test_short_contexts_fall_short_of_the_roofline_by_a_fixed_cost(memory, pnm_cfg):
    short, bound_short = _cycles(memory, pnm_cfg, "heads=4,kv_heads=1,context=256", 1)
    long, bound_long = _cycles(memory, pnm_cfg, "heads=4,kv_heads=1,context=2048", 1)
    assert short / bound_short.cycles > long / bound_long.cycles
    gap_short, gap_long = short - bound_short.cycles, long - bound_long.cycles
    assert 0 < gap_long <= 1.25 * gap_short  # 8x the tiles, no more cost: prologue / epilogue, not per tile


# ---------------------------------------------------------------- the closed-loop machinery
@pytest.mark.parametrize("space", ["channel_local", "interleaved"])
def test_lookahead_horizon_changes_no_result(memory, monkeypatch, space):
    """Several units per domain (split-K partners, or the whole device) against one closed-loop memory."""
    shape = "heads=8,kv_heads=2,head_dim=128,context=2048"
    cfg = load_pnm_config(None, [f"pnm.units.address_space={space}"])
    fast = run_pnm(GQA, shape, memory, cfg, units=4)
    monkeypatch.setattr(timing.UnitTimer, "next_push_bound", lambda self: 0)
    slow = run_pnm(GQA, shape, memory, cfg, units=4)
    assert slow.timing.horizon_steps > 2 * fast.timing.horizon_steps
    assert fast.timing.cycles == slow.timing.cycles
    assert np.array_equal(fast.timing.memory.done_cycle, slow.timing.memory.done_cycle)
    assert [t.stats.stalls for t in fast.timing.timers] == [t.stats.stalls for t in slow.timing.timers]
    assert sum(d.late_requests for d in fast.timing.domains) == 0


def test_late_bound_domain_matches_an_open_loop_replay(memory):
    rng = np.random.default_rng(3)
    streams = [(rng.integers(0, 2**22, 300) * 32).astype(np.uint64) for _ in range(3)]
    writes = [(rng.random(300) < 0.2).astype(np.uint8) for _ in range(3)]
    domain = MemoryDomain(memory, [0, 1, 2], streams, writes)
    for unit in range(3):  # each unit releases its requests in three bursts
        for k in range(3):
            lo, hi = 100 * k, 100 * (k + 1)
            domain.push(unit, lo, hi, 40 * k + unit + np.arange(100) // 2)
    for horizon in (30, 60, 90, 200):
        domain.commit(horizon)
        domain.run_until(horizon)
    domain.finish()
    closed = domain.result()
    reference = replay(memory, Requests(closed.requests.timestamp_cycles.copy(), closed.requests.address.copy(),
                                        closed.requests.is_write.copy(), closed.requests.source.copy()))
    assert np.array_equal(closed.done_cycle, reference.done_cycle)
    assert sorted(closed.requests.address.tolist()) == sorted(np.concatenate(streams).tolist())
    for unit in range(3):
        assert domain.completion(unit, 0, 300) is not None


@pytest.mark.slow
def test_channel_local_addresses_stay_in_their_channel_group(memory):
    local = np.arange(0, 1 << 24, 32, dtype=np.uint64)
    for per_unit in (1, 2, 4):
        group = 3
        physical = channel_local_to_physical(memory.mapping, local, group, per_unit)
        channel = memory.mapping.decode(physical).channel
        assert set(np.unique(channel // per_unit).tolist()) == {group}
        assert np.unique(physical).size == local.size


def test_interleaved_layout_aliases_every_stream_onto_the_same_banks(memory, pnm_cfg):
    """Why the interleaved view falls short (docs/pnm.md): every KV stream starts on the same bank."""
    shape = parse_shape(DEFAULT_SHAPE, GQA)
    spec = shape.spec
    head_bytes = spec.max_context * spec.qk_dim * spec.kv_element_bytes
    assert head_bytes % (1 << 20) == 0  # head (and split) strides are multiples of the 1 MiB bank span
    k_addr = int(place_decode_attention(spec).defines["K_ADDR"])
    starts = np.array([k_addr + h * head_bytes + s * head_bytes // 2 for h in range(8) for s in range(2)],
                      dtype=np.uint64)
    decoded = memory.mapping.decode(starts)
    assert np.unique(decoded.bank).size == np.unique(decoded.rank).size == 1
    assert np.unique(decoded.row).size == starts.size  # same bank, different rows: conflicts


def test_clock_ratio_rounds_up_both_ways():
    ratio = ClockRatio.between(1.0, 0.625)
    assert (ratio.num, ratio.den) == (8, 5)
    assert ratio.to_memory(5) == 8 and ratio.to_memory(6) == 10
    assert ratio.to_unit(8) == 5 and ratio.to_unit(9) == 6


# ---------------------------------------------------------------- stats and CLI
def test_stats_keys_are_documented_and_the_contract_is_present(long_decode):
    _, stats = long_decode
    keys = {pnm_doc_key(k) for k in flatten(stats) if k.startswith("pnm.")}
    assert keys <= set(PNM_STAT_DOCS), sorted(keys - set(PNM_STAT_DOCS))
    flat = flatten(stats)
    assert set(flat) >= PNM_CONTRACT
    assert "memory.bandwidth_GBps" in flat and stats["schema"] == "archsim.stats/1"
    for unit, description in PNM_STAT_DOCS.values():
        assert unit and len(description) > 10
    assert render_pnm_stats_table() in (REPO / "docs" / "pnm.md").read_text(), "update the table in docs/pnm.md"


def test_a_device_of_several_memory_domains_keeps_its_two_ports(long_decode):
    """The domains' results merged into one device keep the ports' names once (host, pnm): interference is
    counted per port pair, not per domain's copy of the names (which indexed past the counters)."""
    run, stats = long_decode
    assert len(run.timing.domains) > 1 and run.timing.memory.requests.sources == ("host", "pnm")
    closures = stats["memory"]["qos"]["row_closures"]
    assert set(closures) == {"host_by_host", "host_by_pnm", "pnm_by_host", "pnm_by_pnm"}
    assert closures["pnm_by_pnm"] > 0 and closures["host_by_host"] == 0  # the units' own streams, no host


def test_cli_run_prints_a_report_and_writes_deterministic_json(tmp_path):
    runner = CliRunner()
    outputs = []
    for name in ("a.json", "b.json"):
        result = runner.invoke(main, ["pnm", "run", "--kernel", str(GQA), "--memory", str(HBM3), "--pnm",
                                      str(REPO / "configs" / "pnm" / "default.yaml"), "--shape",
                                      "heads=8,kv_heads=2,head_dim=128,context=512,batch=2", "--units", "4",
                                      "--json", str(tmp_path / name), "--reproducible", "-D", "TILE=32"])
        assert result.exit_code == 0, result.output
        outputs.append((tmp_path / name).read_bytes())
    assert outputs[0] == outputs[1]
    assert "roofline" in result.output and "stalls" in result.output
    tree = json.loads(outputs[0])
    assert tree["pnm"]["units"] == 4 and tree["pnm"]["host_bytes_out"] == 2 * 8 * 128 * 4


@pytest.mark.parametrize(("kernel", "shape"), [
    ("paged_gqa_decode.s", "heads=8,kv_heads=2,context=600,block=16,batch=2"),
    ("mla_decode.s", "heads=16,context=500,kv_lora_rank=128,rope_dim=32"),
    ("gqa_decode.s", "heads=4,kv_heads=4,context=700,kv_dtype=int8,scale_group=32,window=256"),
])
def test_every_shipped_kernel_runs_timed(memory, pnm_cfg, kernel, shape):
    run = run_pnm(REPO / "isa" / "kernels" / kernel, shape, memory, pnm_cfg, units=4)
    stats = pnm_stats(run, reproducible=True)
    assert stats["pnm"]["cycles"] >= stats["pnm"]["roofline_cycles"] * 0.9
    assert stats["pnm"]["bytes_loaded"] > 0 and stats["pnm"]["sim"]["late_requests"] == 0


@pytest.mark.parametrize(("shape", "group"), [("heads=8,kv_heads=8,context=1024", 1),
                                            ("heads=32,kv_heads=4,context=1024", 8)])
def test_sram_hit_rate_is_counted_from_the_datapath_reads(memory, pnm_cfg, shape, group):
    # MHA: every K/V byte the DMA brings in is read once by the datapath (no reuse); GQA: by each of the
    # group's query heads (1 - 1/group of its reads hit bytes already in SRAM)
    run = run_pnm(GQA, shape, memory, pnm_cfg, units=4)
    sram = pnm_stats(run, reproducible=True)["pnm"]["sram"]
    loaded = pnm_stats(run, reproducible=True)["pnm"]["bytes_loaded"]
    assert sram["kv_read_bytes"] == run.workload.units[0].trace.totals()["macs"] * 2 * 4  # fp16, 4 units
    assert sram["reuse_factor"] == pytest.approx(sram["kv_read_bytes"] / loaded, rel=1e-5)
    assert sram["reuse_factor"] == pytest.approx(group, rel=0.01)
    assert sram["hit_rate"] == pytest.approx(1 - 1 / group, abs=0.01)


def _error(args):
    result = CliRunner().invoke(main, ["pnm", "run", "--kernel", str(GQA), *args])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line]
    assert len(lines) == 1, result.output
    return lines[0]


def test_unknown_opcode_in_the_kernel_is_one_line_with_file_and_line(tmp_path):
    source = (GQA.read_text()).replace("    HALT\n", "    HALTX\n")
    (tmp_path / "bad.s").write_text(source)
    for include in ("common.inc", "contiguous.inc"):
        (tmp_path / include).write_text((GQA.parent / include).read_text())
    result = CliRunner().invoke(main, ["pnm", "run", "--kernel", str(tmp_path / "bad.s"), "--shape",
                                       "heads=4,context=64"])
    assert result.exit_code == 2
    assert "bad.s: line" in result.output and "HALTX" in result.output and len(result.output.splitlines()) == 1


def test_unknown_shape_key_is_one_line_with_exit_2():
    line = _error(["--shape", "heads=32,kv_heads=8,contxt=8192"])
    assert "--shape contxt" in line and "unknown shape key" in line


def test_program_needing_more_sram_than_configured_names_the_instruction():
    line = _error(["--shape", "heads=32,kv_heads=8,context=1024", "--set", "pnm.sram.capacity=16KiB"])
    assert "gqa_decode.s" in line and "line" in line and "SRAM region" in line and "16384-byte" in line


def test_loads_beyond_capacity_name_the_instruction():
    line = _error(["--shape", "heads=4,kv_heads=4,context=1024", "--units", "4", "-D", "K_ADDR=0x3ffffff000"])
    assert "gqa_decode.s" in line and "line" in line and "beyond the configured" in line


def test_kv_cache_larger_than_a_channel_group_is_an_error():
    line = _error(["--shape", "heads=8,kv_heads=8,context=4194304", "--units", "8"])
    assert "--shape" in line and "does not fit" in line


def test_bad_pnm_config_names_the_dotted_path(tmp_path):
    bad = tmp_path / "pnm.yaml"
    bad.write_text((REPO / "configs" / "pnm" / "default.yaml").read_text().replace("vector_lanes:", "lanes:"))
    with pytest.raises(ConfigError, match="pnm.compute"):
        load_pnm_config(bad)
    line = _error(["--shape", "heads=4,context=64", "--pnm", str(bad)])
    assert "pnm.yaml" in line and "pnm.compute" in line


def test_channels_per_unit_must_divide_the_channels(memory):
    cfg = load_pnm_config(None, ["pnm.units.channels_per_unit=32"])
    with pytest.raises(ConfigError, match="channels_per_unit"):
        device_layout(cfg, memory)
    pairs = device_layout(load_pnm_config(None, ["pnm.units.channels_per_unit=2"]), memory)
    assert pairs.units == 8 and pairs.unit_capacity_bytes == memory.organization.capacity_bytes // 8
    memory_clock = device_layout(load_pnm_config(None, ["pnm.clock=memory"]), memory)
    assert memory_clock.clock.num == memory_clock.clock.den


def test_shape_errors():
    with pytest.raises(ConfigError, match="multiple of kv_heads"):
        parse_shape("heads=6,kv_heads=4,context=64", GQA)
    with pytest.raises(ConfigError, match="block"):
        parse_shape("heads=4,context=64,block=16", GQA)
