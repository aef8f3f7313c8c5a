"""Action counts of one decode step, priced by the energy table (archsim.energy): pJ per component.

Counts (whole step, every model instance):
* gpu.hbm_bit: weights read; KV read and appended in HBM (G1); KV fetched from elsewhere is staged in HBM
  (written by the copy engine, read by the attention kernel: 2 x its bits).
* gpu.flop: matrix FLOPs of every layer and the lm_head; attention FLOPs when attention runs on the GPU.
* link.<protocol>.bit: wire bits per hop from the flow schedules (archsim.interconnect).
* pool DRAM: dram.act per activation (replayed, scaled), dram.read_bit.pnm for the PNM's KV reads (every
  SRAM pass), dram.read_bit.host for KV fetched through the host port, dram.write_bit.host for appends,
  dram.ref per GiB refreshed (the whole pool once per tREFI over the step), and
  dram.background.precharge_standby per channel-ns of the step.
* l2.line per L2 lookup, fill and write-back on the pool's host path (when the pool has an L2).
* PNM: pnm.mac, pnm.exp, sram.byte (KV written into and read from the scratchpad, queries, outputs).
* KV stores outside the pool (`kv.device`): host_dram.bit per bit read (the fetched KV) or written (appends)
  in DDR5 (host DRAM, the RDMA memory server); nvme.byte per byte read or written on the SSD; nic.bit per
  payload bit through an RDMA NIC (a NIC ends every Ethernet hop, so the Ethernet hops' payload bits).
An action missing from the table is a ConfigError naming `energy.actions.<action>` in the table's file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from archsim.energy import energy_breakdown
from archsim.system.placements import placement_of

if TYPE_CHECKING:
    from archsim.kvlayout import KvGeometry
    from archsim.system.attention import PoolAttentionTime
    from archsim.system.config import SystemConfig
    from archsim.system.gpu import GpuWork
    from archsim.system.links import LayerTraffic
    from archsim.system.pooldram import PoolDram
    from archsim.system.workload import Workload


def step_counts(system: SystemConfig, workload: Workload, geo: KvGeometry, work: GpuWork, instances: int,
                step_ns: float, traffic: LayerTraffic | None, dram: PoolDram | None,
                pnm: PoolAttentionTime | None) -> dict[str, float]:
    L = geo.layers
    kv_step = geo.layer_bytes * L
    append_step = geo.append_layer_bytes * L
    hbm_bytes = work.weight_bytes * instances
    flops = (work.layer_flops * L + work.epilogue_flops) * instances
    placement = placement_of(system)
    hbm_bytes += placement.staged_hbm_bytes(kv_step, append_step)
    if placement.gpu_attends:
        flops += 2 * geo.layer_macs * L
    counts: dict[str, float] = {"gpu.hbm_bit": 8.0 * hbm_bytes, "gpu.flop": float(flops)}
    if traffic is not None:
        for key, bits in traffic.wire_bits().items():
            counts[key] = counts.get(key, 0.0) + bits * L
    if dram is not None and system.pool is not None:
        pool = system.pool
        timing = pool.memory.timing
        passes = pnm.sram.passes if pnm is not None else 1
        counts["dram.act"] = dram.commands.get("ACT", 0.0) * L * passes
        counts["dram.pre"] = (dram.commands.get("PRE", 0.0) + dram.commands.get("PREA", 0.0)) * L * passes
        counts[placement.dram_read_action] = 8.0 * kv_step * passes
        counts["dram.write_bit.host"] = 8.0 * append_step
        # the table prices a refresh of a 1 GiB channel (DRAMSim3 HBM2 channel_size 1024 MB): refresh energy
        # follows the cells refreshed, so the count is the pool's GiB refreshed once per tREFI over the step
        counts["dram.ref"] = pool.capacity_bytes / 2**30 * step_ns / (timing.tREFI * timing.tCK_ns)
        counts["dram.background.precharge_standby"] = pool.channels * step_ns
        if dram.l2_lines:
            counts["l2.line"] = dram.l2_lines * L
    store_bytes = float(kv_step + append_step)
    if system.kv_device == "ddr5":
        counts["host_dram.bit"] = 8.0 * store_bytes
    elif system.kv_device == "nvme":
        counts["nvme.byte"] = store_bytes
    if traffic is not None and traffic.payload_bits("ethernet"):
        counts["nic.bit"] = traffic.payload_bits("ethernet") * L
    if pnm is not None:
        counts["pnm.mac"] = float(pnm.macs * L)
        counts["pnm.exp"] = float(pnm.exps * L)
        counts["sram.byte"] = float(pnm.sram.traffic_bytes * L)
    return counts


def step_energy(system: SystemConfig, workload: Workload, geo: KvGeometry, work: GpuWork, instances: int,
                step_ns: float, traffic: LayerTraffic | None, dram: PoolDram | None,
                pnm: PoolAttentionTime | None) -> dict[str, float]:
    """pJ per component for the whole step (divide by the tokens it produces for pJ per token)."""
    counts = step_counts(system, workload, geo, work, instances, step_ns, traffic, dram, pnm)
    return energy_breakdown(counts, system.energy)
