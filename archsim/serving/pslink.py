"""Processor-sharing links: the transfers active on one link share its bandwidth equally, so two loads that
start together each take twice as long as one alone; each transfer also pays the link's latency once, after
its bytes (propagation, which takes no bandwidth)."""

from __future__ import annotations

import heapq


class PSLink:
    def __init__(self, name: str, bandwidth_GBps: float, latency_ns: float) -> None:
        self.name = name
        self.bytes_per_ns = float(bandwidth_GBps)      # 1 GB/s = 1 byte/ns
        self.latency_ns = float(latency_ns)
        self.served = 0.0            # bytes each active transfer has received since the link's epoch
        self.t_ns = 0.0
        self.active: list[tuple[float, int, object]] = []   # (served at finish, order, tag)
        self.order = 0
        self.bytes_total = 0.0
        self.busy_ns = 0.0

    def _advance(self, t_ns: float) -> None:
        n = len(self.active)
        if n and t_ns > self.t_ns:
            self.served += (t_ns - self.t_ns) * self.bytes_per_ns / n
            self.busy_ns += t_ns - self.t_ns
        self.t_ns = max(self.t_ns, t_ns)

    def start(self, t_ns: float, size_bytes: float, tag: object) -> list[tuple[object, float]]:
        """Add a transfer at `t_ns`; returns the transfers that finished by then (see pop_finished)."""
        done = self.pop_finished(t_ns)
        heapq.heappush(self.active, (self.served + size_bytes, self.order, tag))
        self.order += 1
        self.bytes_total += size_bytes
        return done

    def next_finish_ns(self) -> float | None:
        """When the transfer closest to done gets its last byte, if nothing else joins meanwhile."""
        if not self.active:
            return None
        return self.t_ns + (self.active[0][0] - self.served) * len(self.active) / self.bytes_per_ns

    def next_wake_ns(self, wakes) -> float | None:
        """When the first transfer whose tag satisfies `wakes` gets its last byte, if nothing joins meanwhile
        (the transfers finishing before it speed it up; a write nobody waits for needs no event)."""
        t, served, n = self.t_ns, self.served, len(self.active)
        for finish, _, tag in sorted(self.active):
            t += (finish - served) * n / self.bytes_per_ns
            served, n = finish, n - 1
            if wakes(tag):
                return t
        return None

    def pop_finished(self, t_ns: float) -> list[tuple[object, float]]:
        """Advance to `t_ns` and return (tag, time of its last byte) of the transfers done by then, in order."""
        done = []
        while self.active:
            finish = self.next_finish_ns()
            if finish > t_ns * (1 + 1e-12) + 1e-9:
                break
            self._advance(finish)
            self.served = max(self.served, self.active[0][0])
            done.append((heapq.heappop(self.active)[2], finish))
        self._advance(t_ns)
        return done

    def alone_ns(self, size_bytes: float) -> float:
        """A transfer's time on an idle link."""
        return self.latency_ns + size_bytes / self.bytes_per_ns
