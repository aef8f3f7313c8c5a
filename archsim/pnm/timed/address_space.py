"""From a unit's DMA accesses to physical DRAM requests on the memory's pnm port.

Every contiguous access of the functional trace becomes the access_bytes-sized requests that cover it.
Their addresses are then made physical:

* interleaved: the unit's addresses already are physical addresses of the device.
* channel_local: a unit addresses only the DRAM of its channel group, with local addresses. A local
  address becomes physical by depositing its bits, from the least significant up, into every address
  bit that is not one of the group's fixed channel bits, and the group index into those channel bits
  (the unit owns channels [group * channels_per_unit, (group + 1) * channels_per_unit)). Local
  addresses therefore keep the memory's own interleaving over pseudo-channels, bank groups, banks and
  the channels inside the group. Data another unit of the same head group stored (split-K partial
  records) lives in the storing unit's channels: a load overlapping such a store is routed there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from archsim.dram.address_map import AddressMapping
from archsim.pnm.machine.trace import ProgramTrace
from archsim.pnm.timed.unit_config import DeviceLayout
from archsim.pnm.timed.workload import UnitWork


@dataclass(frozen=True)
class UnitRequests:
    """A unit's DRAM requests in program order."""

    instr: np.ndarray  # int64: dynamic instruction index that issued the request
    address: np.ndarray  # uint64 physical byte address (access-aligned)
    is_write: np.ndarray  # uint8
    first: np.ndarray  # int64 [instructions + 1]: requests of instruction i are [first[i], first[i+1])
    domain: np.ndarray  # int64: memory domain (controller group) serving each request

    def __len__(self) -> int:
        return int(self.address.size)


def split_accesses(trace: ProgramTrace, access_bytes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                      np.ndarray]:
    """(instr, local address, is_write, access index) per request: every access_bytes-aligned block an
    access touches, in program order."""
    address, size = trace.access_address, trace.access_bytes
    lo = (address // access_bytes) * access_bytes
    hi = -(-(address + size) // access_bytes) * access_bytes
    count = (hi - lo) // access_bytes
    which = np.repeat(np.arange(address.size), count)
    starts = np.repeat(np.cumsum(count) - count, count)
    offset = (np.arange(which.size) - starts) * access_bytes
    return (trace.access_instr[which], (lo[which] + offset).astype(np.uint64),
            trace.access_is_write[which].astype(np.uint8), which)


def channel_bit_positions(mapping: AddressMapping) -> list[int]:
    """Address bit positions of the channel field, least significant first."""
    return [mapping.offset_bits + i for i, name in enumerate(mapping.order) if name == "ch"]


def channel_local_to_physical(mapping: AddressMapping, local: np.ndarray, group: np.ndarray | int,
                              channels_per_unit: int) -> np.ndarray:
    """Physical addresses of `local` addresses of channel group `group` (see the module docstring)."""
    local = np.asarray(local, dtype=np.uint64)
    channel_bits = channel_bit_positions(mapping)
    inner = max(channels_per_unit.bit_length() - 1, 0)  # channel bits that stay inside the group
    fixed = channel_bits[inner:]
    width = mapping.offset_bits + len(mapping.order)
    free = [b for b in range(width) if b not in fixed]
    out = np.zeros_like(local)
    one = np.uint64(1)
    for j, bit in enumerate(free):
        out |= ((local >> np.uint64(j)) & one) << np.uint64(bit)
    out |= (local >> np.uint64(len(free))) << np.uint64(width)  # a non-power-of-two top field
    group_bits = np.asarray(group, dtype=np.uint64)
    for j, bit in enumerate(fixed):
        out |= ((group_bits >> np.uint64(j)) & one) << np.uint64(bit)
    return out


def unit_requests(works: tuple[UnitWork, ...], layout: DeviceLayout, mapping: AddressMapping,
                  access_bytes: int) -> list[UnitRequests]:
    """Physical requests of every unit (indexed like `works`)."""
    split = [split_accesses(w.trace, access_bytes) for w in works]
    stores = [(w, local[is_write.astype(bool)]) for w, (_, local, is_write, _) in zip(works, split, strict=True)]
    out: list[UnitRequests] = []
    for w, (instr, local, is_write, _) in zip(works, split, strict=True):
        if layout.address_space == "channel_local":
            owner = _owners(w, local, is_write, stores)  # unit u owns channel group u (its own controllers)
            physical = channel_local_to_physical(mapping, local, owner, layout.channels_per_unit)
        else:
            owner = np.zeros(local.size, dtype=np.int64)  # one domain: the whole device
            physical = local
        first = np.searchsorted(instr, np.arange(len(w.trace) + 1), side="left").astype(np.int64)
        out.append(UnitRequests(instr.astype(np.int64), physical, is_write, first, owner))
    return out


def _owners(work: UnitWork, local: np.ndarray, is_write: np.ndarray,
            stores: list[tuple[UnitWork, np.ndarray]]) -> np.ndarray:
    """Unit whose channels hold each request of `work`: its own, unless a unit of its domain stored there."""
    owner = np.full(local.size, work.unit, dtype=np.int64)
    loads = is_write == 0
    for other, stored in stores:
        if other.unit == work.unit or other.domain != work.domain or stored.size == 0:
            continue
        hit = loads & np.isin(local, stored)
        owner[hit] = other.unit
    return owner
