"""Recreate the physical request traces shipped in traces/ (deterministic: fixed seeds).

traces/kv_decode_hbm3.npz  one decode step's attention traffic for one layer of a GQA model whose paged KV
                           cache lives in one HBM3 stack: 8 KV heads x 1024 cached tokens x head_dim 128 (fp16),
                           blocks of 16 tokens (4 KiB per head for K, as much for V); the allocator hands out
                           extents of 8 blocks (32 KiB) at random places, so a head's cache is contiguous in
                           runs; K then V of each block read in full, then the new token's K and V appended.
traces/stream_hbm2.trace   a DRAMSim3-format stream (64 B reads, one every 2 cycles, 20 % writes) for side-by-side
                           runs against DRAMSim3 with configs imported by `archsim config import-dramsim3`.
"""

from __future__ import annotations

import numpy as np

from archsim.config.memory import memory_config_from_preset
from archsim.resources import SOURCE_ROOT
from archsim.trace.native import save_physical_trace
from archsim.trace.text_formats import write_dramsim3

ROOT = SOURCE_ROOT / "traces"


def kv_decode_stream(seed: int = 7) -> dict[str, np.ndarray]:
    cfg = memory_config_from_preset("HBM3")
    access = cfg.organization.access_bytes
    kv_heads, tokens, head_dim, dtype_bytes, block_tokens = 8, 1024, 128, 2, 16
    block_bytes = block_tokens * head_dim * dtype_bytes  # one head's K (or V) for one block: 4 KiB
    blocks_per_head = tokens // block_tokens
    rng = np.random.default_rng(seed)
    extent_blocks = 8
    n_extents = cfg.organization.capacity_bytes // (block_bytes * extent_blocks)
    extents = rng.choice(n_extents, size=(kv_heads, blocks_per_head // extent_blocks, 2), replace=False)
    # page of block b of head h for K (0) or V (1): its extent's first page plus b's offset in the extent
    offset = np.arange(blocks_per_head) % extent_blocks
    pages = extents.repeat(extent_blocks, axis=1) * extent_blocks + offset[None, :, None]
    per_block = np.arange(block_bytes // access, dtype=np.uint64) * access
    reads = (pages.astype(np.uint64)[..., None] * block_bytes + per_block).reshape(-1)
    # the new token's K and V per head go into the last block, one token row each
    row_bytes = head_dim * dtype_bytes
    last = pages[:, -1, :].astype(np.uint64) * block_bytes + (block_tokens - 1) * row_bytes
    writes = (last[..., None] + np.arange(row_bytes // access, dtype=np.uint64) * access).reshape(-1)
    address = np.concatenate([reads, writes])
    is_write = np.concatenate([np.zeros(reads.size, np.uint8), np.ones(writes.size, np.uint8)])
    return {"timestamp_cycles": np.zeros(address.size, dtype=np.int64), "address": address, "is_write": is_write,
            "source": np.zeros(address.size, dtype=np.uint8)}


def dramsim3_stream(seed: int = 3, n: int = 20_000) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    address = (rng.integers(0, 2**33 // 64, n) * 64).astype(np.uint64)
    address[: n // 2] = np.arange(n // 2, dtype=np.uint64) * 64  # first half streams, second half random
    return {"timestamp_cycles": np.arange(n, dtype=np.int64) * 2, "address": address,
            "is_write": (rng.random(n) < 0.2).astype(np.uint8)}


def main() -> None:
    ROOT.mkdir(exist_ok=True)
    kv = kv_decode_stream()
    save_physical_trace(ROOT / "kv_decode_hbm3.npz", kv["timestamp_cycles"], kv["address"], kv["is_write"],
                        kv["source"], {"made_by": "scripts/make_memory_traces.py", "memory": "HBM3",
                                       "pattern": "paged KV decode, 8 KV heads x 1024 tokens x 128 fp16"})
    ds = dramsim3_stream()
    write_dramsim3(ROOT / "stream_hbm2.trace", ds["timestamp_cycles"], ds["address"], ds["is_write"])
    for path in sorted(ROOT.glob("*")):
        print(f"{path.name}: {path.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
