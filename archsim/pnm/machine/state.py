"""The plain records of a unit's state that the executor and the opcode semantics share.

They live apart from the executor so that the semantics modules can import them while the executor
imports the semantics' handler tables: the dependency runs one way, executor -> semantics -> state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

KIB = 1024


@dataclass(frozen=True)
class UnitConfig:
    """Resources of one PNM unit as the functional model sees them."""

    sram_size_bytes: int = 512 * KIB
    dram_capacity_bytes: int = 16 * KIB**3
    max_instructions: int = 20_000_000  # guard against runaway loops in a broken program


@dataclass
class DatapathConfig:
    """Configuration registers; the values below are the reset state."""

    qk_dim: int = 0  # 0 = CFG.SHAPE not executed yet
    v_dim: int = 0
    v_pitch: int = 0
    group: int = 0
    kv_dtype: str = "fp16"
    scale_group: int = 0
    io_dtype: str = "fp32"
    softmax_scale: np.float32 = field(default_factory=lambda: np.float32(1.0))
    window_tokens: int = 0
    block_tokens: int = 0  # 0 = CFG.PAGE not executed yet


@dataclass
class Transfer:
    """An outstanding DMA transfer and the SRAM / DRAM ranges it still owns."""

    is_load: bool
    sram_lo: int
    sram_hi: int
    dram_lo: int = 0
    dram_hi: int = 0


class ExecutionError(Exception):
    """Raised by semantics; the executor turns it into a ProgramError at the instruction."""
