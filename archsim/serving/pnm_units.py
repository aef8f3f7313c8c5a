"""The pool's PNM units shared by several servers (issue 25): each iteration of a model instance whose decode
attention runs in the pool is a job at the units, and jobs from several servers queue there.

A job's work is the time the units take for it alone (ns). The engine's cost table prices an iteration with
every instance of the system attending at once (the decode-step model's symmetric-instance rule), so its PNM
attention time S holds all `instances` instances' attention; one instance's alone is S / instances (the units
read every instance's KV from all their channels, so the busiest channel's share grows with the instances).
Two disciplines (`system.pool.pnm.scheduling`):

* `fifo`: one job at a time at the units' full rate, in arrival order (ties by arrival id);
* `fair_share`: the units' rate split equally among the servers with jobs there, and a server's share equally
  among its jobs (processor sharing per host, as a CXL multi-logical device shares its bandwidth among the
  hosts it serves). With every instance's job arriving together each then ends after S: the table's price.

The interface is the links' (archsim.serving.transfers.LinkSharing): `start` a job now, `next_completion`
(exact if nothing else starts first), `advance` to a time (the jobs done by then, in (time, id) order). Each
job's queueing delay is its time at the units beyond its work; per server `summary` gives the jobs, their
total and mean delay and the largest, and the units' busy time. Rates change only at arrivals and departures,
so a job alone ends exactly `work` after it starts.

The jobs live in arrays in arrival order and the clock's work is compiled (numba): every event updates each job's
work left, as processor sharing must, and an iteration of the serving engine is two such events.
"""

from __future__ import annotations

import numpy as np

from archsim.jit import njit
from archsim.system.serving_config import PNM_SCHEDULING

# the clock's scalars, kept in one float array the compiled functions update: its time, the busy time, and the
# next completion at the current rates (time and job id; id -1 with no job), set whenever the jobs change
NOW, BUSY, NEXT_NS, NEXT_ID = range(4)
# rows of the jobs' arrays (slots in arrival order): floats F, ints I; and per server, floats S and ints C. A job
# carries its owner's (the serving engine's instance) time after it (REST); the DONE rows list the jobs a run finished
LEFT, RATE, ARRIVAL, WORK, REST, DONE_NS, DONE_REST = range(7)
JID, SERVER, SHARED, OWNER, DONE_ID, DONE_OWNER = range(6)
QUEUEING, MAX_QUEUEING = range(2)
JOBS, AT_UNITS = range(2)


@njit(cache=True)
def _next(clock: np.ndarray, F: np.ndarray, n: int) -> tuple[float, int]:
    """(time, slot) of the next job to finish at the current rates; slot -1 with none. Slots are in arrival
    order: a tie keeps the earlier job, as (time, id) order."""
    best_ns, best = np.inf, -1
    now = clock[NOW]
    for k in range(n):
        rate = F[RATE, k]
        if rate > 0:
            done = now + F[LEFT, k] / rate
            if done < best_ns:
                best_ns, best = done, k
    return best_ns, best


@njit(cache=True)
def _elapse(clock: np.ndarray, F: np.ndarray, n: int, t_ns: float) -> None:
    dt = t_ns - clock[NOW]
    if dt > 0 and n:
        for k in range(n):
            rate = F[RATE, k]
            if rate > 0:
                x = F[LEFT, k] - rate * dt
                F[LEFT, k] = x if x > 0.0 else 0.0
        clock[BUSY] += dt
    if t_ns > clock[NOW]:
        clock[NOW] = t_ns


@njit(cache=True)
def _rerate(fifo: bool, F: np.ndarray, I: np.ndarray, C: np.ndarray, n: int) -> None:
    """FIFO: the oldest job alone; fair share: the rate split equally among the servers with jobs, a server's
    share equally among its jobs. A job ever below the full rate is marked shared (a job alone runs at 1)."""
    hosts = 0
    for s in range(C.shape[1]):
        if C[AT_UNITS, s]:
            hosts += 1
    for k in range(n):
        if fifo:
            F[RATE, k] = 1.0 if k == 0 else 0.0
        else:
            F[RATE, k] = 1.0 / (hosts * C[AT_UNITS, I[SERVER, k]])
        if n > 1 and F[RATE, k] < 1.0:
            I[SHARED, k] = 1


@njit(cache=True)
def _run(clock: np.ndarray, F: np.ndarray, I: np.ndarray, S: np.ndarray, C: np.ndarray, n: int, until_ns: float,
         fifo: bool) -> tuple[int, int]:
    """Move the clock to until_ns, finishing the jobs due by then in (time, id) order: each one's server counts
    it and its queueing delay (its time beyond its work, if it ever shared the units). Returns (jobs left, jobs
    finished); the finished ones' (time, id) are in the DONE rows."""
    finished = 0
    while True:
        t, k = _next(clock, F, n)
        if k < 0 or t > until_ns:
            break
        _elapse(clock, F, n, t)
        s = I[SERVER, k]
        beyond = t - F[ARRIVAL, k] - F[WORK, k]
        wait = beyond if I[SHARED, k] and beyond > 0.0 else 0.0     # (Python's max(0.0, x), to the bit)
        C[JOBS, s] += 1
        S[QUEUEING, s] += wait
        if wait > S[MAX_QUEUEING, s]:
            S[MAX_QUEUEING, s] = wait
        C[AT_UNITS, s] -= 1
        F[DONE_NS, finished], I[DONE_ID, finished] = t, I[JID, k]
        F[DONE_REST, finished], I[DONE_OWNER, finished] = F[REST, k], I[OWNER, k]
        finished += 1
        for m in range(k, n - 1):                 # the rest keep their arrival order
            F[:DONE_NS, m] = F[:DONE_NS, m + 1]
            I[:DONE_ID, m] = I[:DONE_ID, m + 1]
        n -= 1
        _rerate(fifo, F, I, C, n)
    _elapse(clock, F, n, until_ns)
    _note_next(clock, F, I, n)
    return n, finished


@njit(cache=True)
def _note_next(clock: np.ndarray, F: np.ndarray, I: np.ndarray, n: int) -> None:
    t, k = _next(clock, F, n)
    clock[NEXT_NS], clock[NEXT_ID] = t, I[JID, k] if k >= 0 else -1


@njit(cache=True)
def _add(clock: np.ndarray, F: np.ndarray, I: np.ndarray, C: np.ndarray, n: int, job_id: int, work_ns: float,
         server: int, now_ns: float, fifo: bool, owner: int, rest_ns: float) -> None:
    """A job in slot n (after the n there), then the rates."""
    F[LEFT, n], F[ARRIVAL, n], F[WORK, n], F[REST, n] = work_ns, now_ns, work_ns, rest_ns
    I[JID, n], I[SERVER, n], I[SHARED, n], I[OWNER, n] = job_id, server, 0, owner
    C[AT_UNITS, server] += 1
    _rerate(fifo, F, I, C, n + 1)
    _note_next(clock, F, I, n + 1)


@njit(cache=True)
def _run_and_add(clock: np.ndarray, F: np.ndarray, I: np.ndarray, S: np.ndarray, C: np.ndarray, n: int,
                 now_ns: float, fifo: bool, job_id: int, work_ns: float, server: int, owner: int,
                 rest_ns: float) -> int:
    """_run to now, then _add a job: one call for the serving engine's every iteration. Returns jobs finished."""
    n, finished = _run(clock, F, I, S, C, n, now_ns, fifo)
    _add(clock, F, I, C, n, job_id, work_ns, server, now_ns, fifo, owner, rest_ns)
    return finished


class PnmUnits:
    """The shared units and the jobs at them; see the module docstring."""

    def __init__(self, servers: int, scheduling: str) -> None:
        if scheduling not in PNM_SCHEDULING:
            raise ValueError(f"unknown PNM scheduling {scheduling!r} (choose one of {', '.join(PNM_SCHEDULING)})")
        self.servers, self.scheduling = servers, scheduling
        self._fifo = scheduling == "fifo"
        self._clock = np.array([0.0, 0.0, np.inf, -1.0])
        self._next_id = 0
        self._n = 0                              # jobs at the units, in slots [0, n) in arrival order
        self._F = np.zeros((7, 8), dtype=np.float64)
        self._I = np.zeros((6, 8), dtype=np.int64)
        self._S = np.zeros((2, servers), dtype=np.float64)
        self._C = np.zeros((2, servers), dtype=np.int64)
        self._clear_ns = -1.0                    # advanced to here, nothing more done by then

    def __len__(self) -> int:
        return self._n

    def _reserve(self, jobs: int) -> None:
        """Room for `jobs` jobs at once, keeping those there."""
        while self._F.shape[1] < jobs:
            self._F = np.concatenate([self._F, np.zeros_like(self._F)], axis=1)
            self._I = np.concatenate([self._I, np.zeros_like(self._I)], axis=1)

    @property
    def now_ns(self) -> float:
        return float(self._clock[NOW])

    @property
    def busy_ns(self) -> float:
        return float(self._clock[BUSY])

    @property
    def jobs(self) -> list[int]:
        return self._C[JOBS].tolist()

    @property
    def queueing_ns(self) -> list[float]:
        return self._S[QUEUEING].tolist()

    @property
    def max_queueing_ns(self) -> list[float]:
        return self._S[MAX_QUEUEING].tolist()

    def start(self, work_ns: float, server: int, now_ns: float, owner: int = -1, rest_ns: float = 0.0) -> int:
        """A job of `work_ns` (> 0) from `server` arrives now; returns its id. The caller `advance`s to now first:
        a job finishing by now must be handed over, not finished unseen here. `owner` and `rest_ns` come back
        with it from `advance_owned`."""
        if now_ns != self._clear_ns and self._run(now_ns):
            raise RuntimeError(f"jobs finished by {now_ns} ns were not advanced to before a new one started")
        jid = self._next_id
        self.start_owned(work_ns, server, now_ns, owner, rest_ns)   # (advanced to now: it finishes none)
        return jid

    def start_owned(self, work_ns: float, server: int, now_ns: float, owner: int, rest_ns: float) \
            -> list[tuple[float, int, float]]:
        """advance_owned(now_ns), then start the job (its id is not needed): the jobs finished by now."""
        if not work_ns > 0:
            raise ValueError(f"a job's work must be positive, got {work_ns} ns")
        if not now_ns >= self._clock.item(NOW):
            raise ValueError(f"time runs backwards: {now_ns} ns after {self.now_ns} ns")
        if self._n == self._F.shape[1]:
            self._reserve(self._n + 1)
        finished = _run_and_add(self._clock, self._F, self._I, self._S, self._C, self._n, now_ns, self._fifo,
                                self._next_id, float(work_ns), server, owner, rest_ns)
        self._n += 1 - finished
        self._next_id += 1
        self._clear_ns = now_ns
        return self._owned(finished)

    def next_completion(self) -> tuple[float, int] | None:
        """(time_ns, id) of the next job to finish at the current rates; None with no job."""
        t_ns, jid = self._clock[NEXT_NS:].tolist()
        return (t_ns, int(jid)) if jid >= 0 else None

    def advance(self, now_ns: float) -> list[tuple[float, int]]:
        """Move the clock to now_ns; the jobs finished by then as (time_ns, id), in that order."""
        finished = self._run(now_ns)
        if not finished:
            return []
        return list(zip(self._F[DONE_NS, :finished].tolist(), self._I[DONE_ID, :finished].tolist(), strict=True))

    def advance_owned(self, now_ns: float) -> list[tuple[float, int, float]]:
        """advance, each finished job as (time_ns, owner, rest_ns) as `start` was given them."""
        return self._owned(self._run(now_ns))

    def _owned(self, finished: int) -> list[tuple[float, int, float]]:
        """The last run's `finished` jobs as (time_ns, owner, rest_ns)."""
        if finished < 2:               # (the engine's common case: one job a call, read without slicing)
            return [(self._F.item(DONE_NS, 0), self._I.item(DONE_OWNER, 0), self._F.item(DONE_REST, 0))] \
                if finished else []
        return list(zip(self._F[DONE_NS, :finished].tolist(), self._I[DONE_OWNER, :finished].tolist(),
                        self._F[DONE_REST, :finished].tolist(), strict=True))

    def ran_alone(self, server: int, starts_ns: list[float], works_ns: list[float]) -> None:
        """Count jobs that ran alone at the units, each starting at its `starts_ns` (the serving engine's decode
        stretch runs them without events): what start and advance would have counted, bit for bit."""
        busy = float(self._clock[BUSY])
        for start, work in zip(starts_ns, works_ns, strict=True):
            busy += (start + work) - start
        self._clock[BUSY] = busy
        self._C[JOBS, server] += len(starts_ns)

    def _run(self, until_ns: float) -> int:
        """Advance to until_ns; the number of jobs finished (their rows DONE_*)."""
        if not until_ns >= self._clock[NOW]:
            raise ValueError(f"time runs backwards: {until_ns} ns after {self.now_ns} ns")
        if not self._n:                          # nothing to finish: the clock alone moves
            if until_ns > self._clock[NOW]:
                self._clock[NOW] = until_ns
            self._clear_ns = until_ns
            return 0
        self._n, finished = _run(self._clock, self._F, self._I, self._S, self._C, self._n, until_ns, self._fifo)
        self._clear_ns = until_ns
        return finished

    def summary(self, span_ns: float) -> dict[str, object]:
        """The run's jobs and their queueing delays, per server and in all; the units' busy share of `span_ns`."""
        jobs, queueing, max_queueing = self.jobs, self.queueing_ns, self.max_queueing_ns
        servers = [{"jobs": jobs[s], "queueing_ms_total": queueing[s] / 1e6,
                    "queueing_ms_mean": queueing[s] / jobs[s] / 1e6 if jobs[s] else None,
                    "queueing_ms_max": max_queueing[s] / 1e6} for s in range(self.servers)]
        total_jobs, total = sum(jobs), sum(queueing)
        return {"scheduling": self.scheduling, "jobs": total_jobs, "queueing_ms_total": total / 1e6,
                "queueing_ms_mean": total / total_jobs / 1e6 if total_jobs else None,
                "busy_fraction": self.busy_ns / span_ns if span_ns > 0 else None, "servers": servers}


__all__ = ["PnmUnits"]
