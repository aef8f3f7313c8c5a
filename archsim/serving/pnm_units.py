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
"""

from __future__ import annotations

import math

from archsim.system.serving_config import PNM_SCHEDULING


class PnmUnits:
    """The shared units and the jobs at them; see the module docstring."""

    def __init__(self, servers: int, scheduling: str) -> None:
        if scheduling not in PNM_SCHEDULING:
            raise ValueError(f"unknown PNM scheduling {scheduling!r} (choose one of {', '.join(PNM_SCHEDULING)})")
        self.servers, self.scheduling = servers, scheduling
        self.now_ns = 0.0
        self._next_id = 0
        self._left: dict[int, float] = {}        # jobs at the units: work left (ns alone), in arrival order
        self._rate: dict[int, float] = {}
        self._job: dict[int, tuple[int, float, float]] = {}   # id -> (server, arrival ns, work ns)
        self._shared: set[int] = set()           # jobs that ever ran below the units' full rate
        self._per_server: dict[int, int] = {}    # jobs at the units from each server with any
        self._clear_ns = -1.0                    # advanced to here, nothing more done by then
        self.jobs = [0] * servers
        self.queueing_ns = [0.0] * servers
        self.max_queueing_ns = [0.0] * servers
        self.busy_ns = 0.0

    def __len__(self) -> int:
        return len(self._left)

    def start(self, work_ns: float, server: int, now_ns: float) -> int:
        """A job of `work_ns` (> 0) from `server` arrives now; returns its id. The caller `advance`s to now first:
        a job finishing by now must be handed over, not finished unseen here."""
        if not work_ns > 0:
            raise ValueError(f"a job's work must be positive, got {work_ns} ns")
        if now_ns != self._clear_ns and self._run(now_ns):
            raise RuntimeError(f"jobs finished by {now_ns} ns were not advanced to before a new one started")
        jid = self._next_id
        self._next_id += 1
        self._left[jid] = float(work_ns)
        self._job[jid] = (server, now_ns, float(work_ns))
        self._per_server[server] = self._per_server.get(server, 0) + 1
        self._rerate()
        return jid

    def next_completion(self) -> tuple[float, int] | None:
        """(time_ns, id) of the next job to finish at the current rates; None with no job."""
        best_ns, best = math.inf, -1
        now, rates = self.now_ns, self._rate
        for jid, left in self._left.items():     # ids ascend: a tie keeps the earlier job, as (time, id) order
            rate = rates[jid]
            if rate > 0:
                done = now + left / rate
                if done < best_ns:
                    best_ns, best = done, jid
        return (best_ns, best) if best >= 0 else None

    def advance(self, now_ns: float) -> list[tuple[float, int]]:
        """Move the clock to now_ns; the jobs finished by then as (time_ns, id), in that order."""
        return self._run(now_ns)

    def ran_alone(self, server: int, starts_ns: list[float], works_ns: list[float]) -> None:
        """Count jobs that ran alone at the units, each starting at its `starts_ns` (the serving engine's decode
        stretch runs them without events): what start and advance would have counted, bit for bit."""
        for start, work in zip(starts_ns, works_ns, strict=True):
            self.busy_ns += (start + work) - start
            self.jobs[server] += 1

    def _run(self, until_ns: float) -> list[tuple[float, int]]:
        if not until_ns >= self.now_ns:
            raise ValueError(f"time runs backwards: {until_ns} ns after {self.now_ns} ns")
        done = []
        while True:
            nxt = self.next_completion()
            if nxt is None or nxt[0] > until_ns:
                break
            t, jid = nxt
            self._elapse(t)
            del self._left[jid], self._rate[jid]
            server, arrival, work = self._job.pop(jid)
            left = self._per_server[server] - 1
            if left:
                self._per_server[server] = left
            else:
                del self._per_server[server]
            wait = max(0.0, t - arrival - work) if jid in self._shared else 0.0
            self._shared.discard(jid)
            self.jobs[server] += 1
            self.queueing_ns[server] += wait
            self.max_queueing_ns[server] = max(self.max_queueing_ns[server], wait)
            done.append((t, jid))
            self._rerate()
        self._elapse(until_ns)
        self._clear_ns = until_ns
        return done

    def _elapse(self, t_ns: float) -> None:
        dt = t_ns - self.now_ns
        if dt > 0 and self._left:
            left = self._left
            for jid, rate in self._rate.items():
                if rate > 0:
                    x = left[jid] - rate * dt
                    left[jid] = x if x > 0.0 else 0.0      # max(0.0, x), without the call
            self.busy_ns += dt
        if t_ns > self.now_ns:
            self.now_ns = t_ns

    def _rerate(self) -> None:
        if self.scheduling == "fifo":            # the oldest job alone (ids grow with arrivals)
            head = min(self._left, default=None)
            self._rate = {jid: 1.0 if jid == head else 0.0 for jid in self._left}
        else:
            job, per_server = self._job, self._per_server
            hosts = len(per_server)
            self._rate = {jid: 1.0 / (hosts * per_server[job[jid][0]]) for jid in self._left}
        if len(self._rate) > 1:        # a job alone runs at the full rate, under either discipline
            self._shared.update(jid for jid, rate in self._rate.items() if rate < 1.0)

    def summary(self, span_ns: float) -> dict[str, object]:
        """The run's jobs and their queueing delays, per server and in all; the units' busy share of `span_ns`."""
        servers = [{"jobs": self.jobs[s], "queueing_ms_total": self.queueing_ns[s] / 1e6,
                    "queueing_ms_mean": self.queueing_ns[s] / self.jobs[s] / 1e6 if self.jobs[s] else None,
                    "queueing_ms_max": self.max_queueing_ns[s] / 1e6} for s in range(self.servers)]
        jobs, total = sum(self.jobs), sum(self.queueing_ns)
        return {"scheduling": self.scheduling, "jobs": jobs, "queueing_ms_total": total / 1e6,
                "queueing_ms_mean": total / jobs / 1e6 if jobs else None,
                "busy_fraction": self.busy_ns / span_ns if span_ns > 0 else None, "servers": servers}


__all__ = ["PnmUnits"]
