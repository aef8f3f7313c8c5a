"""The analytic bound of a timed PNM run: max(DRAM bytes / sustained bandwidth, work / peak compute).

* Memory term: every memory domain's request stream -- the very requests of the timed run, in the order
  its session received them -- replayed open loop (all stamped cycle 0, injected as fast as the
  controller accepts them) with `archsim.memory.replay`. The replay's duration is bytes / sustained
  bandwidth of that address stream on the simulated DRAM; domains run in parallel, so the device's bound
  is the slowest domain. Domains whose streams differ only by which channel group they address give the
  same replay when refresh is not staggered by rank (channels are identical and independent), so each
  such class is replayed once.
* Compute term: per unit, the busiest datapath at its peak rate -- max(MACs / macs_per_cycle, vector
  ops / vector_lanes, exponentials / exp_per_cycle) -- and the busiest unit of the device.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

import numpy as np

from archsim.config.memory import MemoryConfig
from archsim.memory import replay
from archsim.pnm.timed.address_space import channel_bit_positions
from archsim.pnm.timed.memport import MemoryDomain
from archsim.pnm.timed.unit_config import DeviceLayout, PnmConfig
from archsim.pnm.timed.workload import UnitWork


@dataclass(frozen=True)
class Roofline:
    memory_cycles: int  # unit cycles: slowest domain's open-loop replay
    compute_cycles: int  # unit cycles: busiest datapath of the busiest unit at peak rate
    dram_bytes: int  # bytes the replayed requests move (requests x access_bytes)
    sustained_bandwidth_GBps: float  # dram_bytes / the slowest domain's replay time (device level)
    replays: int  # distinct streams replayed
    wall_s: float

    @property
    def cycles(self) -> int:
        return max(self.memory_cycles, self.compute_cycles)

    @property
    def bound(self) -> str:
        return "memory" if self.memory_cycles >= self.compute_cycles else "compute"


def compute_bound_cycles(work: UnitWork, pnm: PnmConfig) -> int:
    totals = work.trace.totals()
    c = pnm.compute
    return int(max(np.ceil(totals["macs"] / c.macs_per_cycle), np.ceil(totals["vec_ops"] / c.vector_lanes),
                   np.ceil(totals["exp_ops"] / c.exp_per_cycle)))


def _group_free_key(mapping_bits: list[int], address: np.ndarray, is_write: np.ndarray, domain: int) -> str:
    """Hash of a stream with the channel-group bits replaced by their XOR with the domain's own group."""
    relabel = np.uint64(0)
    for j, bit in enumerate(mapping_bits):
        if (domain >> j) & 1:
            relabel |= np.uint64(1) << np.uint64(bit)
    digest = hashlib.sha1((address ^ relabel).tobytes())
    digest.update(is_write.tobytes())
    return digest.hexdigest()


def roofline(domains: list[MemoryDomain], works: tuple[UnitWork, ...], memory: MemoryConfig, pnm: PnmConfig,
             layout: DeviceLayout) -> Roofline:
    start = time.perf_counter()
    symmetric = layout.address_space == "channel_local" and not memory.controller.refresh.stagger
    inner = max(layout.channels_per_unit.bit_length() - 1, 0)
    group_bits = channel_bit_positions(memory.mapping)[inner:]
    cache: dict[str, int] = {}
    slowest = 0
    total_requests = 0
    for d, domain in enumerate(domains):
        if domain.n == 0:
            continue
        requests = domain.committed_requests()
        total_requests += len(requests)
        key = _group_free_key(group_bits, requests.address, requests.is_write, d) if symmetric else str(d)
        if key not in cache:
            cache[key] = replay(memory, requests).total_cycles
        slowest = max(slowest, cache[key])
    access = memory.organization.access_bytes
    dram_bytes = total_requests * access
    time_ns = slowest * memory.timing.tCK_ns
    bandwidth = dram_bytes / time_ns if time_ns else 0.0
    compute = max((compute_bound_cycles(w, pnm) for w in works), default=0)
    return Roofline(layout.clock.to_unit(slowest), compute, dram_bytes, bandwidth, len(cache),
                    time.perf_counter() - start)
