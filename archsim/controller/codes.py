"""Integer codes and parameter slots shared by the controller kernel and its Python driver (numba-friendly)."""

from __future__ import annotations

import numpy as np

# the command codes are the command log's and the checker's (one source: dram/commands.py)
from archsim.dram.commands import ACT, PRE, PREA, RD, RDA, REF, REFPB, WR, WRA  # noqa: F401 (re-exported)
from archsim.dram.commands import N_COMMANDS as NCMD  # noqa: F401 (re-exported)

# the request ports of a two-port trace (version 1), by index: a request's `source`, the arbiters' favoured port,
# per-port statistics. A trace with a source table (version 2) names its own: N hosts and the PNM, say
SOURCES: tuple[str, ...] = ("host", "pnm")
INF = np.int64(1) << np.int64(62)
NEG = -(np.int64(1) << np.int64(40))

# Integer parameters, in `prm`.
P_NCH, P_PCS, P_RANKS, P_BGS, P_BANKS, P_RQ, P_WQ, P_SCHED, P_POLICY, P_CAP, P_TIMEOUT = range(11)
P_HIGH, P_LOW, P_REFRESH, P_DELAY, P_FORWARD, P_INJCAP, P_POSTED, P_CL, P_CWL, P_BURST = range(11, 21)
P_FAW, P_REFI, P_REFIPB, P_LOGCAP, P_BQD, P_TICK = range(21, 27)
# the arbiter, its favoured port (priority) and the number of ports; then the age cap, the drain mode, refresh hold
P_ARB, P_FAVOR, P_PORTS, P_AGECAP, P_IDLE, P_REFHOLD = range(27, 33)
# derived from the organization once (memory.kernel_params), so that no stage recomputes them: banks per rank and
# per pseudo-channel, 64-bit words of a bank mask, and log2 of pseudo-channels per channel and of banks per rank
# (-1 unless a power of two: `request_lists.quotient`)
P_BPR, P_BPP, P_WORDS, P_SH_PCS, P_SH_BPR = range(33, 38)
N_PARAMS = 38
# after them, per port (`prm[N_PARAMS + port * PORT_PARAMS + column]`): its weighted-round-robin weight, its
# reservation's tokens per cycle and bucket size (0: no reservation)
PORT_WEIGHT, PORT_RATE, PORT_CAP = range(3)
PORT_PARAMS = 3

# Scalars carried between calls, in `scal`.
S_T, S_PTR, S_QUEUED, S_LAST, S_NLOG, S_LOGOVF, S_DONE, S_VISITS, S_LOOPS, S_IDLE, S_TLIMIT = range(11)
S_LASTCOL, S_STALLED = range(11, 13)  # the last column command's cycle; 1 once the watchdog fired
N_SCALARS = 13
# with requests queued, this many cycles without a column command means a scheduler livelock: stop and say so
STALL_CYCLES = 10_000_000

# The kernel's work space, `scratch` (not carried between cycles): the channel's two command buses (`BUS_*`) while
# its pseudo-channels are evaluated; one pseudo-channel's scheduling context and choice (`PK_*`); then the list of
# channels due at a cycle.
SCR_BUS, SCR_PICK, SCR_DUE = 0, 16, 44
# a channel's buses: the column command chosen so far (its pseudo-channel, request, write?, command, priority key,
# round-robin turn after it) and the row command (pseudo-channel, request or -1, command, key, bank, refresh?, turn)
BUS_COL_PC, BUS_COL_I, BUS_COL_W, BUS_COL_CMD, BUS_COL_AGE, BUS_COL_RR = range(6)
BUS_ROW_PC, BUS_ROW_REQ, BUS_ROW_CMD, BUS_ROW_AGE, BUS_ROW_BANK, BUS_ROW_IS_REF, BUS_ROW_RR = range(6, 13)
N_BUS = 13
# a pseudo-channel's scheduling: what it may do (serving writes, favoured port, rank or bank a refresh holds,
# whether a column or row command is wanted, lists of kinds k_lo..k_hi - 1, the shared ACT bound, whether a
# refresh holds the channel's row bus, the column bounds by kind (`bank_timing.col_bound`)) and what the
# scheduler picked (column: request, key, command, write?; row: request, key, command), with round robin's
# bookkeeping (ready PREs and ACTs, the turn keys of the first ready ACT and the first two PREs, the next turn)
PK_USE_W, PK_FAVORED, PK_REF_RANK, PK_REF_BANK, PK_WANT_COL, PK_WANT_ROW, PK_K_LO, PK_K_HI, PK_AB = range(9)
PK_COL, PK_COL_KEY, PK_COL_CMD, PK_COL_W, PK_ROW, PK_ROW_KEY, PK_ROW_CMD = range(9, 16)
PK_READY_PRE, PK_READY_ACT, PK_ACT_KEY, PK_PRE_KEY, PK_PRE_KEY2, PK_RR_NEXT = range(16, 22)
PK_REF_ON_BUS, PK_CB_R, PK_CB_W = range(22, 25)
N_PICK = 25

# Request classes.
C_HIT, C_MISS, C_CONFLICT, C_FORWARD = 0, 1, 2, 3

SCHED_FRFCFS, SCHED_FCFS, SCHED_ROUND_ROBIN = 0, 1, 2

POL_OPEN, POL_CLOSED, POL_OPEN_CAP, POL_TIMEOUT = 0, 1, 2, 3

# Arbitration between the request ports (hosts and the PNM).
ARB_SHARED, ARB_PRIORITY, ARB_WRR, ARB_RESERVE = 0, 1, 2, 3
TOKEN = 1_000_000  # one column command's worth of reservation tokens
AGE_BITS = 40  # request index bits of a priority key: key = class << AGE_BITS | index

# columns of the per-bank state table, `bstate[global bank, column]`: open row (-1 closed), column commands to
# it, cycle of the last one, queued row hits by kind, requests pending, busy (refresh) until, bank-queue
# occupancy, the port that opened the row, then per kind (read, write) the head, tail and length of the
# bank's request list; last a constant, the bank's global bank-group index (a look-up, not a division)
B_OPEN, B_COLS, B_LASTCOL, B_HITS_R, B_HITS_W, B_PEND, B_BUSY, B_WIN, B_OPENER = range(9)
B_HEAD, B_TAIL, B_CNT = 9, 11, 13
B_BGF = 15
BANK_COLUMNS = 16

# columns of the per-pseudo-channel state table, `pstate[pseudo-channel, column]`: queued row hits by kind; over the
# closed banks with requests, the earliest ACT by their own timing and the oldest request at the head of their
# read and write lists (`bank_timing.recompute_closed`); read and write queue lengths and how many of each are not
# in a bank queue yet; the write drain (watermarks: 1 while draining; batch drains: the writes left); the cycle
# before which nothing can happen here; the bank whose turn it was last (round robin)
PC_HITS_R, PC_HITS_W, PC_CLOSED_ACT, PC_CLOSED_HEAD = 0, 1, 2, 3
PC_RQ_LEN, PC_RQ_UNMOVED, PC_WQ_LEN, PC_WQ_UNMOVED, PC_DRAINING, PC_NEXT, PC_RR_PTR = 5, 6, 7, 8, 9, 10, 11
PC_COLUMNS = 12
# columns of the per-pseudo-channel, per-port table, `pport[pseudo-channel, port, column]`: the port's requests
# queued by kind (read, write), its column commands served, its reservation tokens and the cycle they were updated
PP_QUEUED, PP_SERVED, PP_TOKENS, PP_TOKEN_T = 0, 2, 3, 4
PP_COLUMNS = 5
# per port, `pflags[port, column]`, within one cycle: requests injected, and whether its next one waits for room
PF_INJECTED, PF_BLOCKED = 0, 1
PF_COLUMNS = 2

FAW_ACTS = 4  # activations a tFAW window holds: `faw[rank, slot]` keeps the cycles of the last ones
# The arrays whose dimensions after the first are constants reach the kernel flat; its source still indexes
# them `[row, column]`, which `index_lowering` compiles as `row * length + column` with the length a constant.
# A length given by name is the variable of that name where the array is indexed: the bank masks' 64-bit words
# per row, `words`, a constant in a kernel compiled for its shape (the masks' `bank_mask` inside `set_bank_bit`),
# and the ports, `ports` (`prm[P_PORTS]`, a constant in a plain kernel)
FLAT_ARRAYS = {"bstate": (BANK_COLUMNS,), "nxt_bank": (NCMD,), "nxt_bg": (NCMD,), "nxt_rank": (NCMD,),
               "nxt_pc": (NCMD,), "faw": (FAW_ACTS,), "pstate": (PC_COLUMNS,), "pport": ("ports", PP_COLUMNS),
               "pflags": (PF_COLUMNS,),
               "gaps": (NCMD, NCMD), "amask": ("words",), "omask": ("words",), "hmask": (2, "words"),
               "bank_mask": ("words",)}
