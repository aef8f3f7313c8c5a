"""The kernel's arguments as named records (numba types a NamedTuple of arrays field by field, with no cost at
run time): what the stages read and write is named, not a position in a tuple. `memory.MemorySession` builds
them; the layout of each state table's columns is in `codes`."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class RequestArrays(NamedTuple):
    """Per request, in trace order: arrival cycle, where it goes (pseudo-channel, bank within it, row, global bank
    and bank group, rank), write?, address and port (an index into the trace's sources: 0 host, 1 PNM in a
    two-port trace); then the requests of each port in their own order (`port_idx`, with port p's from
    `port_end[p]` to `port_end[p + 1]`)."""

    ts: np.ndarray
    pc: np.ndarray
    bank: np.ndarray
    row: np.ndarray
    write: np.ndarray
    addr: np.ndarray
    gb: np.ndarray
    bgf: np.ndarray
    rf: np.ndarray
    src: np.ndarray
    port_idx: np.ndarray
    port_end: np.ndarray


class RequestOutcomes(NamedTuple):
    """Per request: accepted, schedulable from, done (cycles); its class (`codes.C_*`); whether it met a bank
    conflict on arrival."""

    accept: np.ndarray
    ready: np.ndarray
    done: np.ndarray
    klass: np.ndarray
    bank_conflict: np.ndarray


class KernelState(NamedTuple):
    """Everything the kernel carries between calls: the earliest issue cycle of each command per bank, bank group,
    rank and pseudo-channel and the tFAW windows; the bank, pseudo-channel and per-port tables (`codes.B_*`,
    `codes.PC_*`, `codes.PP_*`), the per-bank request lists' links and the bank masks (requests queued, row open,
    row hits by kind); the transaction queues of the bank-queue mode, where each port stands in its order and its
    flags within a cycle (`codes.PF_*`); refresh due cycles and per-bank pointers; row-buffer interference counts
    by port pair; each channel's next event; commands issued by kind."""

    nxt_bank: np.ndarray
    nxt_bg: np.ndarray
    nxt_rank: np.ndarray
    nxt_pc: np.ndarray
    faw: np.ndarray
    faw_pos: np.ndarray
    bstate: np.ndarray
    pstate: np.ndarray
    pport: np.ndarray
    bnext: np.ndarray
    bprev: np.ndarray
    amask: np.ndarray
    omask: np.ndarray
    hmask: np.ndarray
    rq: np.ndarray
    wq: np.ndarray
    port_ptr: np.ndarray
    pflags: np.ndarray
    ref_due: np.ndarray
    ref_ptr: np.ndarray
    qos_counts: np.ndarray
    chan_next: np.ndarray
    cmd_count: np.ndarray


class CommandLogArrays(NamedTuple):
    """The command log, one entry per command: cycle, command, pseudo-channel, bank, row."""

    cycle: np.ndarray
    cmd: np.ndarray
    pc: np.ndarray
    bank: np.ndarray
    row: np.ndarray
