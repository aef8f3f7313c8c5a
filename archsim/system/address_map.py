"""Unified addressing of a memory pool: host physical addresses (HPA) -> device -> channel, bank, row, column.

Each server sees the pool through a window of its host physical address space (`base`, the pool's size), decoded
as a CXL 2.0 host-managed device memory (HDM) decoder does (CXL 2.0 section 8.2.5.12, "HDM Decoder Capability"):
the window is interleaved over the pool's devices `ways` at a time in chunks of `granularity` bytes (256 B to
16 KiB, a power of two; ways 1, 2, 4, 8 or 16, and 3, 6 or 12, which CXL allows for modulo-3 sets). With D
devices and W ways the devices form D / W interleave sets, one after another in the window; inside a set, chunk
c of the set goes to the set's device c mod W at device physical address (DPA) (c div W) x granularity + the
offset in the chunk. A device's DPA then decodes by the memory's own address mapping (channel, pseudo-channel,
rank, bank group, bank, row, column; archsim.dram.address_map). The PNM units address their device's DPAs.

A KV block is referred to by a global handle: its byte offset in the pool (0 .. capacity), the same for every
server; server s reaches it at HPA base_s + handle, and every server's window resolves it to the same device and
DPA. `archsim config show --system NAME --address-map` prints the map.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from archsim.dram.address_map import AddressMapping, Decoded
from archsim.errors import ConfigError

CXL_WAYS = (1, 2, 3, 4, 6, 8, 12, 16)
MIN_GRANULARITY, MAX_GRANULARITY = 256, 16 * 1024


@dataclass(frozen=True)
class Window:
    """One server's HDM decoder over the whole pool."""

    server: int
    base: int           # its first HPA
    size_bytes: int     # the pool's capacity

    @property
    def end(self) -> int:
        return self.base + self.size_bytes


@dataclass(frozen=True)
class PoolAddressMap:
    devices: int
    device_bytes: int
    ways: int
    granularity_bytes: int
    windows: tuple[Window, ...]
    mapping: AddressMapping  # one device's DPA -> DRAM fields

    @property
    def capacity_bytes(self) -> int:
        return self.devices * self.device_bytes

    @property
    def set_bytes(self) -> int:
        return self.ways * self.device_bytes  # one interleave set's span of the pool

    def to_device(self, handle: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Global handles (pool offsets) -> (device, DPA)."""
        h = np.asarray(handle, dtype=np.int64)
        if h.size and (h.min() < 0 or h.max() >= self.capacity_bytes):
            raise ValueError(f"a handle lies outside the pool's {self.capacity_bytes} B")
        group, inside = np.divmod(h, self.set_bytes)
        chunk, offset = np.divmod(inside, self.granularity_bytes)
        row, way = np.divmod(chunk, self.ways)  # chunk c: device c mod W, the (c div W)-th chunk on it
        return group * self.ways + way, row * self.granularity_bytes + offset

    def to_handle(self, device: np.ndarray, dpa: np.ndarray) -> np.ndarray:
        """(device, DPA) -> global handles: the inverse of to_device."""
        dev, d = np.asarray(device, dtype=np.int64), np.asarray(dpa, dtype=np.int64)
        group, way = np.divmod(dev, self.ways)
        row, offset = np.divmod(d, self.granularity_bytes)
        return group * self.set_bytes + (row * self.ways + way) * self.granularity_bytes + offset

    def window(self, server: int) -> Window:
        return self.windows[server]

    def resolve(self, server: int, hpa: np.ndarray) -> tuple[np.ndarray, np.ndarray, Decoded]:
        """A server's HPAs -> (device, DPA, the DPA's DRAM fields); ValueError outside its window."""
        w = self.windows[server]
        a = np.asarray(hpa, dtype=np.int64)
        if a.size and (a.min() < w.base or a.max() >= w.end):
            raise ValueError(f"an address lies outside server {server}'s window [{w.base:#x}, {w.end:#x})")
        device, dpa = self.to_device(a - w.base)
        return device, dpa, self.mapping.decode(dpa.astype(np.uint64))

    def hpa(self, server: int, handle: np.ndarray) -> np.ndarray:
        return self.windows[server].base + np.asarray(handle, dtype=np.int64)


def build_address_map(devices: int, device_bytes: int, mapping: AddressMapping, *, servers: int = 1,
                      ways: int | None = None, granularity_bytes: int = 4096, window_base: int = 1 << 40,
                      window_stride: int | None = None, where: str = "system.pool.address_map",
                      file: str | None = None) -> PoolAddressMap:
    """The pool's map, every input checked as a ConfigError at `where`.<key>. Windows: server s at
    window_base + s x window_stride (default: the pool's size rounded up to a power of two)."""
    ways = devices if ways is None else ways
    if ways not in CXL_WAYS:
        raise ConfigError(f"CXL interleaves 1, 2, 3, 4, 6, 8, 12 or 16 ways, not {ways}", file=file,
                          where=f"{where}.ways")
    if devices % ways:
        raise ConfigError(f"{ways} ways do not divide the pool's {devices} devices into whole interleave sets",
                          file=file, where=f"{where}.ways")
    g = granularity_bytes
    if g < MIN_GRANULARITY or g > MAX_GRANULARITY or g & (g - 1):
        raise ConfigError(f"granularity must be a power of two from 256 B to 16 KiB, not {g} B", file=file,
                          where=f"{where}.granularity")
    if device_bytes % g:
        raise ConfigError(f"a device's {device_bytes} B is not a whole number of {g} B chunks", file=file,
                          where=f"{where}.granularity")
    size = devices * device_bytes
    stride = window_stride if window_stride is not None else 1 << (size - 1).bit_length()
    if servers < 1:
        raise ConfigError(f"must be at least 1, got {servers}", file=file, where=f"{where}.servers")
    if stride < size and servers > 1:
        raise ConfigError(f"windows {stride:#x} apart overlap: each spans the pool's {size:#x} B", file=file,
                          where=f"{where}.window_stride")
    if window_base < 0 or window_base % g or stride % g:
        raise ConfigError(f"windows must start on a {g} B boundary", file=file, where=f"{where}.window_base")
    windows = tuple(Window(s, window_base + s * stride, size) for s in range(servers))
    return PoolAddressMap(devices, device_bytes, ways, g, windows, mapping)


def describe(amap: PoolAddressMap) -> list[str]:
    """The map as text lines: windows, interleave, a device's DPA layout, and a few handles resolved."""
    gib = 2**30
    lines = [f"pool: {amap.devices} devices x {amap.device_bytes / gib:g} GiB = {amap.capacity_bytes / gib:g} GiB",
             f"interleave: {amap.ways} ways x {amap.granularity_bytes} B, {amap.devices // amap.ways} set(s) of "
             f"{amap.set_bytes / gib:g} GiB",
             "windows (host physical addresses, one HDM decoder per server):"]
    lines += [f"  server {w.server}: [{w.base:#014x}, {w.end:#014x})" for w in amap.windows]
    lines.append(f"device address (DPA) -> DRAM: {amap.mapping.description} (LSB first above the "
                 f"{1 << amap.mapping.offset_bits} B access: {' '.join(amap.mapping.order)})")
    lines.append("examples (global handle -> device, DPA, channel/pc/bank group/bank/row/column):")
    g = amap.granularity_bytes
    for handle in (0, g, amap.ways * g, amap.capacity_bytes // 2, amap.capacity_bytes - 64):
        device, dpa, f = amap.resolve(0, amap.hpa(0, np.array([handle])))
        lines.append(f"  {handle:#014x} -> device {int(device[0])}, DPA {int(dpa[0]):#012x}, ch {int(f.channel[0])} "
                     f"pc {int(f.pseudo_channel[0])} bg {int(f.bankgroup[0])} ba {int(f.bank[0])} "
                     f"row {int(f.row[0])} col {int(f.column[0])}")
    return lines
