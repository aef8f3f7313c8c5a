"""Logical -> physical mapping: regions never overlap, accesses stay inside devices, bytes are conserved."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from archsim.cli import main
from archsim.errors import ConfigError
from archsim.models import load_preset
from archsim.trace.logical import KIND_K, KIND_V, KIND_WEIGHT, OP_READ, OP_WRITE, LogicalTrace
from archsim.trace.mapping import (
    REGION_WEIGHT,
    SOURCE_HOST,
    SOURCE_PNM,
    PhysicalStreams,
    PoolPlacement,
    iter_map,
    map_columns,
    map_trace,
)
from archsim.workloads import chat_trace, decode_trace, reasoning_trace

pytestmark = pytest.mark.unit

SMALL = {"channels_per_device": 4, "capacity_per_device_bytes": 1 << 24, "kv_block_tokens": 4}


@pytest.fixture(scope="module")
def chat() -> tuple[dict[str, np.ndarray], dict]:
    shape = load_preset("tiny-llama").shape()  # 2 KV heads x 16 dims x 4 B = 64 B per token and head
    generated = chat_trace(shape, batch=3, prompt_tokens=10, reply_tokens=5, turns=2, turn_tokens=6,
                           shared_prefix_tokens=8, dtype="float32")
    return generated.columns(), generated.header()


def _check_layout_invariants(streams: PhysicalStreams) -> None:
    placement, regions = streams.placement, streams.regions
    capacity = placement.capacity_per_device_bytes
    g = placement.access_granularity_bytes
    channel_size = placement.channel_capacity_bytes
    for device in range(placement.devices):
        mine = regions.device == device
        start = regions.address[mine].astype(np.int64)
        end = start + regions.size_bytes[mine]
        order = np.argsort(start)
        assert (end[order][:-1] <= start[order][1:]).all(), "two live regions overlap"
        assert (start >= 0).all() and (end <= capacity).all()
        # a region never straddles a channel boundary: it is local to one PNM unit
        channel = regions.channel[mine].astype(np.int64)
        assert (start >= channel * channel_size).all() and (end <= (channel + 1) * channel_size).all()
        assert (start % g == 0).all()
        # every access of this device lies inside one of its regions
        address = streams.address[streams.device == device].astype(np.int64)
        assert (address < capacity).all()
        slot = np.searchsorted(start[order], address, side="right") - 1
        assert (slot >= 0).all()
        assert (address + g <= end[order][slot]).all()
    assert (streams.address % np.uint64(g) == 0).all()


PLACEMENTS = [
    {"devices": 1, "layout": "head_major"},
    {"devices": 2, "layout": "head_major", "tensor_parallel": 2},
    {"devices": 2, "layout": "token_major"},
    {"devices": 1, "layout": "token_major", "tensor_parallel": 2, "weights_in": "pool"},
    {"devices": 4, "layout": "head_major", "weights_in": "pool", "prefix_sharing": True},
    {"devices": 1, "layout": "token_major", "prefix_sharing": True, "access_granularity_bytes": 64},
    {"devices": 2, "layout": "range", "weights_in": "pool"},
    {"devices": 1, "layout": "range", "tensor_parallel": 2, "access_granularity_bytes": 64},
]


@pytest.mark.parametrize("fields", PLACEMENTS, ids=lambda f: "-".join(f"{k}={v}" for k, v in f.items()))
def test_no_overlap_and_inside_devices(chat: tuple, fields: dict) -> None:
    cols, header = chat
    streams = map_columns(cols, header, PoolPlacement(**{**SMALL, **fields}))
    _check_layout_invariants(streams)
    kv = (cols["kind"] == KIND_K) | (cols["kind"] == KIND_V)
    touched = np.unique(streams.record)
    assert set(touched.tolist()) <= set(np.flatnonzero(kv | (cols["kind"] == KIND_WEIGHT)).tolist())


def test_kv_bytes_are_conserved_and_sources_follow_the_placement(chat: tuple) -> None:
    cols, header = chat
    g = 32
    for attention_on, read_source in (("pnm", SOURCE_PNM), ("host", SOURCE_HOST)):
        streams = map_columns(cols, header, PoolPlacement(**SMALL, attention_on=attention_on))
        kv = (cols["kind"] == KIND_K) | (cols["kind"] == KIND_V)
        # 64 B per token and head: every byte is covered by exactly one 32 B access
        assert len(streams) * g == int(cols["bytes"][kv].sum())
        writes = streams.is_write == 1
        assert int(writes.sum()) * g == int(cols["bytes"][kv & (cols["op"] == OP_WRITE)].sum())
        assert (streams.source[writes] == SOURCE_HOST).all()
        assert (streams.source[~writes] == read_source).all()
    # issue order follows the logical record order
    assert (np.diff(streams.record) >= 0).all()
    assert (np.diff(streams.timestamp_cycles) == 1).all()


def test_head_major_keeps_each_head_on_one_channel(chat: tuple) -> None:
    cols, header = chat
    streams = map_columns(cols, header, PoolPlacement(**SMALL, devices=2, layout="head_major"))
    r = streams.regions
    units = {}
    for layer, head, device, channel in zip(r.layer.tolist(), r.group.tolist(), r.device.tolist(),
                                            r.channel.tolist(), strict=True):
        units.setdefault((layer, head), set()).add((device, channel))
    assert all(len(places) == 1 for places in units.values())
    assert len({next(iter(p)) for p in units.values()}) == 4  # 2 layers x 2 heads on 4 different units


def test_token_major_spreads_blocks_round_robin(chat: tuple) -> None:
    cols, header = chat
    streams = map_columns(cols, header, PoolPlacement(**SMALL, devices=2, layout="token_major"))
    counts = np.bincount(streams.regions.device.astype(np.int64) * 4 + streams.regions.channel, minlength=8)
    assert counts.max() - counts.min() <= 1
    # a token-major block holds both KV heads: 4 tokens x 2 heads x 64 B
    assert set(streams.regions.size_bytes.tolist()) == {512}


def test_prefix_sharing_shares_blocks_and_drops_duplicate_writes(chat: tuple) -> None:
    cols, header = chat  # 3 requests, first 8 prompt tokens identical: 2 full blocks of 4 tokens
    private = map_columns(cols, header, PoolPlacement(**SMALL))
    shared = map_columns(cols, header, PoolPlacement(**SMALL, prefix_sharing=True))
    per_layer_head_kind = 2 * 2 * 2
    assert len(private.regions.address) - len(shared.regions.address) == 2 * 2 * per_layer_head_kind
    saved_writes = int((private.is_write == 1).sum()) - int((shared.is_write == 1).sum())
    assert saved_writes * 32 == 2 * 8 * 64 * per_layer_head_kind  # 2 extra requests x 8 tokens
    assert (shared.is_write == 0).sum() == (private.is_write == 0).sum()  # every read is still issued
    # all three requests read their prefix from the same addresses
    reads = shared.is_write == 0
    by_request = {}
    for r in range(3):
        records = np.flatnonzero((cols["request"] == r) & (cols["kind"] == KIND_K) & (cols["op"] == OP_READ)
                                 & (cols["step"] == 0))
        mask = reads & np.isin(shared.record, records)
        by_request[r] = set(shared.address[mask].tolist())
    common = by_request[0] & by_request[1] & by_request[2]
    assert len(common) * 32 == 8 * 64 * 2 * 2  # 8 tokens x 64 B x 2 heads x 2 layers


def test_weights_in_pool_interleave_over_channels(chat: tuple) -> None:
    cols, header = chat
    streams = map_columns(cols, header, PoolPlacement(**SMALL, devices=2, weights_in="pool"))
    weight = cols["kind"] == KIND_WEIGHT
    assert int(cols["bytes"][weight].sum()) <= int((streams.source == SOURCE_HOST).sum()) * 32
    regions = streams.regions
    assert (regions.what == REGION_WEIGHT).any()
    # the first weight record (an embedding gather) is read line by line across channels
    first = int(np.flatnonzero(weight)[0])
    units = (streams.device[streams.record == first].astype(np.int64) * 4
             + (streams.address[streams.record == first] // np.uint64(1 << 22)).astype(np.int64))
    assert len(set(units[:8].tolist())) == min(8, len(set(units.tolist())))


def test_chunking_does_not_change_the_mapping(tmp_path: Path, chat: tuple) -> None:
    cols, header = chat
    generated_path = tmp_path / "c.npz"
    shape = load_preset("tiny-llama").shape()
    chat_trace(shape, batch=3, prompt_tokens=10, reply_tokens=5, turns=2, turn_tokens=6, shared_prefix_tokens=8,
               dtype="float32").write(generated_path, chunk_records=97)
    placement = PoolPlacement(**SMALL, layout="token_major", prefix_sharing=True)
    whole = map_columns(cols, header, placement)
    with LogicalTrace(generated_path) as trace:
        chunked = map_trace(trace, placement)
        batches = list(iter_map(trace, placement, batch_accesses=500))
    assert len(batches) > 3
    for name in ("device", "address", "is_write", "source", "timestamp_cycles", "record"):
        np.testing.assert_array_equal(getattr(whole, name), getattr(chunked, name))
        np.testing.assert_array_equal(getattr(whole, name), np.concatenate([b[name] for b in batches]))


def test_reasoning_backtracking_rereads_ancestor_blocks() -> None:
    shape = load_preset("tiny-llama").shape()
    generated = reasoning_trace(shape, batch=1, prompt_tokens=8, depth=2, fanout=2, segment_tokens=4,
                                dtype="float32")
    streams = map_columns(generated.columns(), generated.header(), PoolPlacement(**SMALL))
    _check_layout_invariants(streams)
    reads = streams.address[streams.is_write == 0]
    _, counts = np.unique(reads, return_counts=True)
    assert counts.max() > counts.min()  # prompt blocks are revisited far more often than leaf blocks


def test_mla_latent_maps_as_one_head() -> None:
    shape = load_preset("tiny-deepseek-v2").shape()
    generated = decode_trace(shape, batch=2, context_tokens=30, dtype="float32")
    streams = map_columns(generated.columns(), generated.header(), PoolPlacement(**SMALL))
    _check_layout_invariants(streams)
    assert set(streams.regions.group.tolist()) == {0}
    with pytest.raises(ConfigError, match="tensor_parallel"):
        map_columns(generated.columns(), generated.header(), PoolPlacement(**SMALL, tensor_parallel=2))


def test_placement_errors(chat: tuple) -> None:
    cols, header = chat
    with pytest.raises(ConfigError, match="add devices or capacity") as info:
        map_columns(cols, header, PoolPlacement(channels_per_device=4, capacity_per_device_bytes=4096,
                                                kv_block_tokens=4))
    assert info.value.where == "placement.capacity_per_device_bytes"
    with pytest.raises(ConfigError) as info:
        PoolPlacement.from_dict({"devices": 2, "chanels": 4})
    assert "chanels" in str(info.value)
    with pytest.raises(ConfigError) as info:
        PoolPlacement.from_dict({"access_granularity_bytes": "48B"})
    assert info.value.where == "placement.access_granularity_bytes"
    assert PoolPlacement.from_dict({"capacity_per_device_bytes": "16GiB"}).capacity_per_device_bytes == 16 * 2**30
    with pytest.raises(ConfigError, match="tensor_parallel"):
        PoolPlacement(devices=3, tensor_parallel=2).validate()


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("convert") / "chat.npz"
    chat_trace(load_preset("tiny-llama").shape(), batch=2, prompt_tokens=6, reply_tokens=3,
               dtype="float32").write(path)
    return path


def test_convert_to_every_format(trace_file: Path, tmp_path: Path) -> None:
    text_formats = pytest.importorskip("archsim.trace.text_formats", reason="the lead's exporters are missing")
    native = pytest.importorskip("archsim.trace.native", reason="the lead's native format is missing")
    runner = CliRunner()
    placement = ["--channels", "4", "--capacity", "16MiB", "--block-tokens", "4"]
    with LogicalTrace(trace_file) as trace:
        expected = map_trace(trace, PoolPlacement(**SMALL))
    for target in ("dramsim3", "ramulator", "native"):
        out = tmp_path / f"out.{target}{'.npz' if target == 'native' else ''}"
        result = runner.invoke(main, ["trace", "convert", str(trace_file), "--to", target, "-o", str(out),
                                      *placement])
        assert result.exit_code == 0, result.output
        back = native.load_physical_trace(out) if target == "native" else text_formats.read_trace(out, target)
        np.testing.assert_array_equal(back.address, expected.address)
        np.testing.assert_array_equal(back.is_write, expected.is_write)
        if target != "ramulator":
            np.testing.assert_array_equal(back.timestamp_cycles, expected.timestamp_cycles)
        if target == "native":
            np.testing.assert_array_equal(back.source, expected.source)
            assert back.header["placement"]["kv_block_tokens"] == 4


def test_convert_selects_one_device(trace_file: Path, tmp_path: Path) -> None:
    native = pytest.importorskip("archsim.trace.native", reason="the lead's native format is missing")
    out = tmp_path / "d1.npz"
    result = CliRunner().invoke(main, ["trace", "convert", str(trace_file), "--to", "native", "-o", str(out),
                                       "--devices", "2", "--channels", "4", "--capacity", "16MiB", "--device", "1"])
    assert result.exit_code == 0, result.output
    back = native.load_physical_trace(out)
    assert len(back) > 0 and int(back.address.max()) < 16 * 2**20


def test_convert_errors_are_one_line_and_write_nothing(trace_file: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "x.trace"
    cases = [
        ["trace", "convert", str(trace_file), "--to", "dramsim3", "-o", str(out), "--capacity", "4KiB",
         "--channels", "4"],
        ["trace", "convert", str(trace_file), "--to", "dramsim3", "-o", str(out), "--granularity", "48B"],
        ["trace", "convert", str(trace_file), "--to", "dramsim3", "-o", str(out), "--device", "3"],
        ["trace", "convert", str(tmp_path / "missing.npz"), "--to", "dramsim3", "-o", str(out)],
    ]
    for args in cases:
        result = runner.invoke(main, args)
        assert result.exit_code == 2, (args, result.output)
        assert result.output.count("\n") == 1 and result.output.startswith("archsim: error:")
    assert not out.exists()
