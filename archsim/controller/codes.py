"""Integer codes and parameter slots shared by the controller kernel and its Python driver (numba-friendly)."""

from __future__ import annotations

import numpy as np

ACT, PRE, PREA, RD, WR, RDA, WRA, REF, REFPB = 0, 1, 2, 3, 4, 5, 6, 7, 8
NCMD = 9
INF = np.int64(1) << np.int64(62)
NEG = -(np.int64(1) << np.int64(40))

# Integer parameters, in `prm`.
P_NCH, P_PCS, P_RANKS, P_BGS, P_BANKS, P_RQ, P_WQ, P_SCHED, P_POLICY, P_CAP, P_TIMEOUT = range(11)
P_HIGH, P_LOW, P_REFRESH, P_DELAY, P_FORWARD, P_INJCAP, P_POSTED, P_CL, P_CWL, P_BURST = range(11, 21)
P_FAW, P_REFI, P_REFIPB, P_LOGCAP, P_BQD, P_TICK = range(21, 27)
P_ARB, P_W0, P_W1, P_RSRC, P_RRATE, P_RCAP, P_AGECAP, P_IDLE, P_REFHOLD = range(27, 36)
N_PARAMS = 36

# Scalars carried between calls, in `scal`.
S_T, S_PTR, S_QUEUED, S_LAST, S_NLOG, S_LOGOVF, S_DONE, S_VISITS, S_LOOPS, S_IDLE, S_TLIMIT = range(11)
S_LASTCOL, S_STALLED = range(11, 13)  # the last column command's cycle; 1 once the watchdog fired
N_SCALARS = 13
# with requests queued, this many cycles without a column command means a scheduler livelock: stop and say so
STALL_CYCLES = 10_000_000

# Request classes.
C_HIT, C_MISS, C_CONFLICT, C_FORWARD = 0, 1, 2, 3

SCHED_FRFCFS, SCHED_FCFS, SCHED_ROUND_ROBIN = 0, 1, 2

POL_OPEN, POL_CLOSED, POL_OPEN_CAP, POL_TIMEOUT = 0, 1, 2, 3

# Host/PNM arbitration between the two request ports.
ARB_SHARED, ARB_PRIORITY_HOST, ARB_PRIORITY_PNM, ARB_WRR, ARB_RESERVE = 0, 1, 2, 3, 4
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
# in a bank queue yet; the write drain (watermarks: 1 while draining; batch drains: the writes left); the requests
# queued per kind and port (read host, read pnm, write host, write pnm) and column commands served per port;
# reservation tokens and the cycle they were updated; the cycle before which nothing can happen here; the bank
# whose turn it was last (round robin)
PC_HITS_R, PC_HITS_W, PC_CLOSED_ACT, PC_CLOSED_HEAD = 0, 1, 2, 3
PC_RQ_LEN, PC_RQ_UNMOVED, PC_WQ_LEN, PC_WQ_UNMOVED, PC_DRAINING, PC_PORT_Q = 5, 6, 7, 8, 9, 10
PC_SERVED, PC_TOKENS, PC_TOKEN_T, PC_NEXT, PC_RR_PTR = 14, 16, 17, 18, 19
PC_COLUMNS = 20

FAW_ACTS = 4  # activations a tFAW window holds: `faw[rank, slot]` keeps the cycles of the last ones
# The arrays whose dimensions after the first are constants reach the kernel flat; its source still indexes
# them `[row, column]`, which `index_lowering` compiles as `row * length + column` with the length a constant.
# A length given by name is the variable of that name where the array is indexed: the bank masks' 64-bit words
# per row, `words`, a constant in a kernel compiled for its shape (the masks' `bank_mask` inside `set_bank_bit`)
FLAT_ARRAYS = {"bstate": (BANK_COLUMNS,), "nxt_bank": (NCMD,), "nxt_bg": (NCMD,), "nxt_rank": (NCMD,),
               "nxt_pc": (NCMD,), "faw": (FAW_ACTS,), "pstate": (PC_COLUMNS,),
               "gaps": (NCMD, NCMD), "amask": ("words",), "omask": ("words",), "hmask": (2, "words"),
               "bank_mask": ("words",)}
