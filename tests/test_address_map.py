"""Unified addressing of the pool (archsim.system.address_map): HDM-decoder interleaving over devices, then the
memory's own mapping. Round trips, no overlaps and full coverage for every shipped pool and for 3-, 6- and
12-way interleaves; bad maps are one line naming the key."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from archsim.cli import main
from archsim.system import load_system_config
from archsim.system.address_map import build_address_map

pytestmark = pytest.mark.component

POOLED = ("g25", "g15", "g25-nopnm", "g15-nopnm", "g25-qos")


def _round_trip(amap, rng: np.random.Generator) -> None:
    handles = np.concatenate([rng.integers(0, amap.capacity_bytes, 20_000), [0, amap.capacity_bytes - 1]])
    device, dpa = amap.to_device(handles)
    assert device.min() >= 0 and device.max() < amap.devices and dpa.min() >= 0 and dpa.max() < amap.device_bytes
    assert np.array_equal(amap.to_handle(device, dpa), handles)
    fields = amap.mapping.decode(dpa.astype(np.uint64))
    access = 1 << amap.mapping.offset_bits  # the DRAM fields name an access; the bytes inside it are its offset
    assert np.array_equal(amap.mapping.encode(fields).astype(np.int64), dpa - dpa % access)  # DPA -> DRAM -> DPA
    for server in range(len(amap.windows)):  # every server's window reaches the same place for a handle
        d, a, _ = amap.resolve(server, amap.hpa(server, handles))
        assert np.array_equal(d, device) and np.array_equal(a, dpa)


@pytest.mark.parametrize("name", POOLED)
def test_every_shipped_pool_round_trips(name):
    amap = load_system_config(name).pool.address_map
    assert amap.ways == amap.devices and amap.capacity_bytes == load_system_config(name).pool.capacity_bytes
    _round_trip(amap, np.random.default_rng(0))


@pytest.mark.parametrize(("devices", "ways"), [(3, 3), (6, 3), (6, 6), (12, 12), (12, 4), (12, 6), (16, 16)])
def test_interleaves_cover_every_chunk_once(devices, ways):
    """Over a small pool, every chunk of every device is reached by exactly one handle (full coverage, no
    overlap), consecutive chunks go to consecutive devices of a set, and the real g25 mapping round-trips."""
    mapping = load_system_config("g25").pool.memory.mapping
    g, chunks = 256, 24
    amap = build_address_map(devices, chunks * g, mapping, ways=ways, granularity_bytes=g, servers=3)
    handles = np.arange(0, amap.capacity_bytes, g)
    device, dpa = amap.to_device(handles)
    places = device * amap.device_bytes + dpa
    assert len(np.unique(places)) == len(handles) == devices * chunks  # a bijection on chunks
    assert np.array_equal(device[:ways], np.arange(ways)) and (dpa[:ways] == 0).all()
    windows = sorted((w.base, w.end) for w in amap.windows)
    assert all(a[1] <= b[0] for a, b in zip(windows, windows[1:], strict=False))  # windows never overlap
    big = load_system_config("g25", [f"system.pool.devices={devices}",
                                     f"system.pool.address_map={{ways: {ways}}}"]).pool.address_map
    _round_trip(big, np.random.default_rng(devices * 100 + ways))


def test_a_handle_resolves_outside_no_window():
    amap = load_system_config("g25").pool.address_map
    with pytest.raises(ValueError, match="outside"):
        amap.resolve(0, np.array([amap.windows[0].end]))


@pytest.mark.parametrize(("value", "key", "words"), [
    ("{ways: 5}", "ways", "CXL interleaves"),
    ("{ways: 3}", "ways", "do not divide"),
    ("{granularity: 3000B}", "granularity", "power of two"),
    ("{granularity: 64KiB}", "granularity", "power of two"),
    ("{servers: 2, window_stride: 4096}", "window_stride", "overlap"),
    ("{servers: 0}", "servers", ">= 1"),
    ("{wayz: 2}", "wayz", "unknown key"),
])
def test_bad_maps_are_one_line(value, key, words):
    result = CliRunner().invoke(main, ["config", "show", "--system", "g25", "--address-map", "--set",
                                       f"system.pool.address_map={value}"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and f"system.pool.address_map.{key}" in lines[0] and words in lines[0], lines[0]


def test_config_show_prints_the_map():
    result = CliRunner().invoke(main, ["config", "show", "--system", "g25", "--address-map", "--set",
                                       "system.pool.address_map={servers: 2}"])
    assert result.exit_code == 0, result.output
    assert "8 ways x 4096 B" in result.output and "server 1:" in result.output
    assert "-> device 1, DPA 0x0000000000" in result.output  # the second chunk: the next device
