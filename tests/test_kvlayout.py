"""The one KV layout (archsim/kvlayout.py): a logical trace mapped with the `range` layout places its KV exactly where
the decode-step model's channel streams put it, for any model, batch, context and pool size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from archsim.config.memory import memory_config_from_preset
from archsim.errors import ConfigError, TraceError
from archsim.kvlayout import RangeLayout, channel_share, kv_bytes_per_token, kv_geometry, range_bounds
from archsim.models import load_preset
from archsim.trace.logical import KIND_K, KIND_V, OP_WRITE, LogicalTrace
from archsim.trace.mapping import PoolPlacement, RangeRows, TraceMapper, map_columns, map_trace
from archsim.workloads import chat_trace, decode_trace

pytestmark = pytest.mark.component

HBM3 = memory_config_from_preset("HBM3")


def _placement(devices: int, **fields) -> PoolPlacement:
    org = HBM3.organization
    return PoolPlacement(devices=devices, channels_per_device=org.n_channels,
                         capacity_per_device_bytes=org.capacity_bytes, access_granularity_bytes=org.access_bytes,
                         layout="range", **fields)


def _step_model_offsets(geo, channels: int, channel: int, layers: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted channel-local offsets of the step model's reads and appends on one channel, every layer."""
    from archsim.system.kvstream import channel_stream

    share = channel_share(geo, channels, channel)
    reads, writes = [], []
    for layer in range(layers):
        s = channel_stream(HBM3, geo, share, "pnm", tile_tokens=64, interleave_bytes=256, window=0, layer=layer)
        local = s.local.astype(np.int64)
        reads.append(local[s.is_write == 0])
        writes.append(local[s.is_write == 1])
    return np.sort(np.concatenate(reads)), np.sort(np.concatenate(writes))


CASES = [  # model, batch, context, devices: head contexts split over channels and devices, MLA, layers of < 64 tokens
    ("llama-2-7b", 2, 1000, 1),
    ("llama-3.1-70b", 7, 333, 2),
    ("deepseek-v2-lite", 4, 900, 1),
    ("qwen2.5-0.5b", 2, 50, 1),
]


@pytest.mark.parametrize("model, batch, context, devices", CASES, ids=[c[0] for c in CASES])
def test_a_decode_trace_lands_where_the_step_model_streams_it(model: str, batch: int, context: int,
                                                              devices: int) -> None:
    shape = load_preset(model).shape().with_layers(2)
    generated = decode_trace(shape, batch=batch, context_tokens=context, steps=1)
    placement = _placement(devices)
    streams = map_columns(generated.columns(), generated.header(), placement)
    geo = kv_geometry(shape, generated.header()["dtype"], batch, context)
    cap, per_device = placement.channel_capacity_bytes, placement.channels_per_device
    address = streams.address.astype(np.int64)
    for unit in range(devices * per_device):
        device, channel = divmod(unit, per_device)
        mine = (streams.device == device) & (address // cap == channel)
        local = address[mine] - channel * cap
        write = streams.is_write[mine] == 1
        reads, writes = _step_model_offsets(geo, devices * per_device, unit, shape.num_layers)
        np.testing.assert_array_equal(np.sort(local[~write]), reads, err_msg=f"unit {unit} reads")
        np.testing.assert_array_equal(np.sort(local[write]), writes, err_msg=f"unit {unit} appends")


def test_equal_lengths_cut_as_the_decode_step() -> None:
    geo = kv_geometry(load_preset("llama-3.1-8b").shape(), "bfloat16", 5, 777)
    channels = 24
    layout = RangeLayout(np.full(geo.head_contexts, geo.tokens), channels, geo.k_row_bytes, geo.v_row_bytes, geo.layers)
    assert layout.region_bytes == channel_share(geo, channels, 0).region_bytes
    heads = np.arange(geo.head_contexts)
    k = layout.pieces(heads, np.zeros_like(heads), np.full_like(heads, geo.tokens), np.zeros_like(heads),
                      np.zeros_like(heads))
    for c in range(channels):
        share = channel_share(geo, channels, c)
        on = k["channel"] == c
        assert [(int(h), int(n)) for h, n in zip(heads[k["owner"][on]], k["length"][on] // geo.k_row_bytes,
                                                 strict=True)] == [(ch.head, ch.tokens) for ch in share.chunks]
        np.testing.assert_array_equal(k["block"][on], share.chunk_bases(geo))


def test_range_bounds_are_within_one_token_and_keep_a_tile_per_channel() -> None:
    for total, channels in ((10_007, 32), (1_000, 32), (63, 8), (0, 4)):
        b = range_bounds(total, channels)
        sizes = np.diff(b)[: max(1, min(channels, total // 64))]
        assert b[0] == 0 and b[-1] == total
        assert sizes.max() - sizes.min() <= 1
        assert total < 64 or sizes.min() >= 64


def test_kv_bytes_per_token_counts_every_layer_and_head() -> None:
    shape = load_preset("llama-3.1-70b").shape()  # 80 layers x 8 KV heads x (128 + 128) bf16 elements
    assert kv_bytes_per_token(shape, "bfloat16") == 80 * 8 * 256 * 2 == 327_680
    mla = load_preset("deepseek-v2").shape()  # one latent head: 512 + 64 elements per layer
    assert kv_bytes_per_token(mla, "bfloat16") == mla.num_layers * (512 + 64) * 2


@pytest.fixture(scope="module")
def chat() -> tuple[dict[str, np.ndarray], dict]:
    shape = load_preset("tiny-llama").shape()  # 2 KV heads x 16 dims x 4 B = 64 B per token and head
    generated = chat_trace(shape, batch=3, prompt_tokens=70, reply_tokens=9, turns=2, turn_tokens=30,
                           dtype="float32")
    return generated.columns(), generated.header()


def test_requests_of_different_lengths_fill_the_channels_evenly(chat: tuple) -> None:
    cols, header = chat
    placement = PoolPlacement(devices=2, channels_per_device=4, capacity_per_device_bytes=1 << 24, layout="range",
                              weights_in="pool")
    streams = map_columns(cols, header, placement)
    kv = (cols["kind"] == KIND_K) | (cols["kind"] == KIND_V)
    kv_access = kv[streams.record]  # 64 B rows: every KV byte is covered by exactly one 32 B access
    assert int(kv_access.sum()) * 32 == int(cols["bytes"][kv].sum())
    written = kv_access & (streams.is_write == 1)
    assert int(written.sum()) * 32 == int(cols["bytes"][kv & (cols["op"] == OP_WRITE)].sum())
    assert int((~kv_access).sum()) > 0  # the weights' reads, above the KV on every channel
    r = streams.regions
    kv_regions = r.what < 2
    start = r.address.astype(np.int64) + r.device.astype(np.int64) * placement.capacity_per_device_bytes
    order = np.argsort(start)
    end = start + r.size_bytes
    assert (end[order][:-1] <= start[order][1:]).all(), "two regions overlap"
    # every channel holds the same number of tokens of a layer, within one (K region bytes / 64 B per token)
    per_unit = np.bincount((r.device.astype(np.int64) * 4 + r.channel)[kv_regions & (r.what == 0) & (r.layer == 0)],
                           weights=r.size_bytes[kv_regions & (r.what == 0) & (r.layer == 0)] / 64, minlength=8)
    rows = RangeRows.scan([cols])
    assert per_unit.sum() == rows.tokens.sum() * 2  # two KV heads
    assert per_unit.max() - per_unit.min() <= 1


def test_chunked_trace_maps_as_the_whole(tmp_path: Path, chat: tuple) -> None:
    cols, header = chat
    path = tmp_path / "c.npz"
    chat_trace(load_preset("tiny-llama").shape(), batch=3, prompt_tokens=70, reply_tokens=9, turns=2, turn_tokens=30,
               dtype="float32").write(path, chunk_records=97)
    placement = PoolPlacement(channels_per_device=4, capacity_per_device_bytes=1 << 24, layout="range")
    whole = map_columns(cols, header, placement)
    with LogicalTrace(path) as trace:
        chunked = map_trace(trace, placement)
    for name in ("device", "address", "is_write", "source", "record"):
        np.testing.assert_array_equal(getattr(whole, name), getattr(chunked, name))


def test_range_errors(chat: tuple) -> None:
    cols, header = chat
    with pytest.raises(ConfigError, match="prefix_sharing") as info:
        PoolPlacement(layout="range", prefix_sharing=True).validate()
    assert info.value.where == "placement.layout"
    with pytest.raises(ConfigError, match="add devices or capacity"):
        map_columns(cols, header, PoolPlacement(channels_per_device=4, capacity_per_device_bytes=4096, layout="range"))
    with pytest.raises(ConfigError, match="whole 128 B accesses") as info:
        map_columns(cols, header, PoolPlacement(channels_per_device=4, capacity_per_device_bytes=1 << 24,
                                                access_granularity_bytes=128, layout="range"))
    assert info.value.where == "placement.access_granularity_bytes"
    mapper = TraceMapper(PoolPlacement(channels_per_device=4, capacity_per_device_bytes=1 << 24, layout="range"),
                         kv_heads=2, range_rows=RangeRows(np.array([0]), np.array([10]), 64, 64, 2))
    with pytest.raises(TraceError, match="outside the requests"):
        mapper.map_chunk(cols)


def test_trace_convert_with_the_range_layout(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from archsim.cli import main
    from archsim.trace.native import load_physical_trace

    path, out = tmp_path / "d.npz", tmp_path / "d.phys.npz"
    decode_trace(load_preset("tiny-llama").shape(), batch=3, context_tokens=200, dtype="float32").write(path)
    placement = PoolPlacement(devices=2, channels_per_device=4, capacity_per_device_bytes=1 << 24, layout="range")
    with LogicalTrace(path) as trace:
        expected = map_trace(trace, placement)
    args = ["trace", "convert", str(path), "--to", "native", "-o", str(out), "--devices", "2", "--channels", "4",
            "--capacity", "16MiB", "--layout", "range"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    back = load_physical_trace(out)
    np.testing.assert_array_equal(back.address, expected.flat_address())
    assert back.header["placement"]["layout"] == "range"
    # 3 requests x 2 heads x 201 tokens = 1,206 tokens a layer, cut over all 8 channels of both devices
    unit = expected.device.astype(np.int64) * 4 + expected.address.astype(np.int64) // placement.channel_capacity_bytes
    assert np.bincount(unit, minlength=8).min() > 0
    bad = CliRunner().invoke(main, [*args, "--prefix-sharing", "-o", str(tmp_path / "x.npz")])
    assert bad.exit_code == 2 and "--layout" in bad.output and "Traceback" not in bad.output
    assert not (tmp_path / "x.npz").exists()


def test_records_of_no_tokens_place_nothing(chat: tuple) -> None:
    cols, header = chat
    empty = {name: column.copy() for name, column in cols.items()}
    kv = (empty["kind"] == KIND_K) | (empty["kind"] == KIND_V)
    empty["token_count"][kv] = 0
    empty["bytes"][kv] = 0
    streams = map_columns(empty, header, PoolPlacement(channels_per_device=4, capacity_per_device_bytes=1 << 24,
                                                       layout="range"))
    assert len(streams) == 0 and len(streams.regions.address) == 0
