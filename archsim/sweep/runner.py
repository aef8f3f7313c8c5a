"""Running a sweep: the missing points on local worker processes or a Dask cluster, each kept in the store.

Points run in-process through the command's own functions (archsim.sweep.commands), in tasks of points that
share memoized work (batches). A worker holds archsim's imports and the memory kernel loaded from numba's cache
once, not per point: forked from the main process after it loaded them (Linux), or loading them in its
initializer. The main process alone writes the store, one transaction per point as each task's results arrive,
so killing it at any instant loses at most the tasks still in flight, which `--resume` computes again.

Why one module of about 600 lines: the point runner, the two executors and the outputs (points, Pareto front,
replicas, sensitivity plots) all read one spec, one store and its rows in the order the spec plans them.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from archsim.errors import ArchsimError, ConfigError
from archsim.limits import check_fits_memory
from archsim.sweep.replicas import replicas_text
from archsim.sweep.spec import SweepSpec
from archsim.sweep.store import Store, point_key

ENTRY_ID = ("system", "context")
TIMING_COLUMNS = ("wall_s", "host")


class PointTimeoutError(Exception):
    pass


# what a worker process owns, at least, once it has run a point: a forked warm worker's Private_Dirty after one
# bench-200 point is 25 MiB (/proc/PID/smaps_rollup; the rest of its 106 MiB RSS is shared with the parent)
WORKER_BYTES = 25 * 2**20


def warm_worker() -> None:
    """Import archsim's system model and load the HBM3E memory kernel (the pool's) from numba's cache."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from archsim.config.memory import memory_config_from_preset
    from archsim.memory import warm_up
    from archsim.sweep.commands import commands

    commands()
    warm_up(memory_config_from_preset("HBM3E"))


@contextlib.contextmanager
def _deadline(timeout_s: float | None) -> Iterator[None]:
    """Raise PointTimeoutError in the point after `timeout_s` (a point runs on a main thread: a local worker
    process's, or a forked child's on a Dask worker, whose task threads cannot take a signal)."""
    if not timeout_s or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise PointTimeoutError

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def _memory_cap(cap_bytes: int | None) -> Iterator[None]:
    """Cap the process's address space at `cap_bytes` while the point runs (on a main thread, like the deadline:
    a limit is process-wide, so a Dask worker runs the point in a forked child); an allocation beyond it raises
    MemoryError. The old limit comes back afterwards, so the worker sends its result and goes on."""
    if not cap_bytes or threading.current_thread() is not threading.main_thread():
        yield
        return
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (min(cap_bytes, hard) if hard != resource.RLIM_INFINITY else cap_bytes,
                                            hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def run_point(command_name: str, inputs: dict[str, Any], overrides: list[str],
              timeout_s: float | None, memory_cap_bytes: int | None = None) -> dict[str, Any]:
    """One point: its status (ok / infeasible: ... / failed: ...), the command's JSON tree, wall time, host.
    Off the main thread (a Dask worker's task thread) a point with a timeout or memory cap runs in a forked
    child, whose main thread can take the deadline's signal and whose address space the cap bounds alone."""
    if (timeout_s or memory_cap_bytes) and threading.current_thread() is not threading.main_thread():
        return _run_forked(command_name, inputs, overrides, timeout_s, memory_cap_bytes)
    from archsim.sweep.commands import commands

    start = time.perf_counter()
    tree = None
    try:
        with _deadline(timeout_s), _memory_cap(memory_cap_bytes):
            tree = commands()[command_name].run(inputs, overrides)
        entries = tree.get("results", [])
        statuses = [e.get("status", "ok") for e in entries]
        status = "ok" if any(s == "ok" for s in statuses) or not statuses else statuses[0]
    except PointTimeoutError:
        status = f"failed: timeout after {timeout_s:g} s"
    except (MemoryError, ImportError) as exc:
        tree = None  # under the cap, a module that cannot be mapped in is the cap reached as well
        if isinstance(exc, ImportError) and not memory_cap_bytes:
            status = f"failed: internal error: ImportError: {_one_line(exc)}"
        else:
            status = f"failed: memory cap of {memory_cap_bytes:,} bytes exceeded" if memory_cap_bytes else \
                "failed: out of memory"
    except ConfigError as exc:  # a design the model cannot build (an SRAM below one tile, too few GPUs)
        from archsim.resources import display_path, display_paths_in

        # shipped files by their repository path: rows are the same from checkouts in other places
        located = ConfigError(display_paths_in(exc.detail), file=display_path(exc.file) if exc.file else None,
                              where=exc.where)
        status = f"infeasible: {_one_line(located)}"
    except ArchsimError as exc:
        from archsim.resources import display_paths_in

        status = f"failed: {display_paths_in(_one_line(exc))}"
    except Exception as exc:  # a bug at one point must not stop the sweep; the row says what happened
        status = f"failed: internal error: {type(exc).__name__}: {_one_line(exc)}"
    return {"status": status, "result": tree, "wall_s": round(time.perf_counter() - start, 3),
            "host": socket.gethostname()}


def run_points(command_name: str, items: list[tuple[dict[str, Any], list[str]]], timeout_s: float | None,
               memory_cap_bytes: int | None = None) -> list[dict[str, Any]]:
    """A task of several points (inputs, overrides), one after another: see batches."""
    return [run_point(command_name, inputs, overrides, timeout_s, memory_cap_bytes) for inputs, overrides in items]


def _run_forked(command_name: str, inputs: dict[str, Any], overrides: list[str], timeout_s: float | None,
                memory_cap_bytes: int | None) -> dict[str, Any]:
    """run_point in a forked child (the worker's imports and compiled kernels come along; os.fork, since a Dask
    worker is a daemonic process multiprocessing will not let have children): the child enforces the deadline
    and the cap itself; a child that dies or stops answering is the point's failure."""
    import pickle
    import select

    start = time.perf_counter()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one point, its answer down the pipe, and out without running the parent's exits
        code = 0
        try:
            os.close(read_fd)
            data = pickle.dumps(run_point(command_name, inputs, overrides, timeout_s, memory_cap_bytes))
            with os.fdopen(write_fd, "wb") as pipe:
                pipe.write(data)
        except BaseException:  # noqa: BLE001 - nothing may escape a forked child
            code = 1
        finally:
            os._exit(code)
    os.close(write_fd)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s + 30.0  # the child's own comes first
    chunks: list[bytes] = []
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([pipe], [], [], wait)[0]:
                break  # no answer in time
            chunk = pipe.read(1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    done, status = os.waitpid(pid, os.WNOHANG)
    if not done:
        os.kill(pid, signal.SIGKILL)
        done, status = os.waitpid(pid, 0)
    try:
        return pickle.loads(b"".join(chunks))
    except Exception:  # noqa: BLE001 - no whole answer: the child died or hung
        if timeout_s and deadline and time.monotonic() >= deadline:
            why = f"timeout after {timeout_s:g} s"
        elif memory_cap_bytes and os.WIFSIGNALED(status):  # native code aborting on a failed allocation
            why = (f"memory cap of {memory_cap_bytes:,} bytes exceeded (the point's process ended on signal "
                   f"{os.WTERMSIG(status)})")
        else:
            why = f"the point's process ended with status {status}"
        return {"status": f"failed: {why}", "result": None, "wall_s": round(time.perf_counter() - start, 3),
                "host": socket.gethostname()}


@dataclass(frozen=True)
class PlannedPoint:
    index: int
    point: dict[str, Any]
    inputs: dict[str, Any]
    overrides: list[str]
    key: str
    affinity: str = ""  # points alike in it share memoized work, "": none (see batches)


def plan_point(spec: SweepSpec, index: int, point: dict[str, Any]) -> PlannedPoint:
    inputs, overrides = spec.point_inputs(point)
    try:
        resolved = spec.command.resolve(inputs, overrides)
        affinity = spec.command.affinity(resolved) if spec.command.affinity else ""
    except ConfigError:  # the override lands on no key of this input (checked per axis at load): infeasible
        resolved, affinity = {"unresolved": inputs, "set": overrides}, ""
    return PlannedPoint(index, point, inputs, overrides, point_key(spec.command.name, resolved), affinity)


def plan(spec: SweepSpec) -> list[PlannedPoint]:
    """Every grid or random point of the spec with its store key (the same design twice is computed once)."""
    return [plan_point(spec, i, point) for i, point in enumerate(spec.points())]


def _entries(row: dict[str, Any]) -> list[dict[str, Any]]:
    return (row.get("result") or {}).get("results", [])


def flatten_entries(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Every result entry flattened as <system>.<context>.<key> (nested keys dotted, lists as JSON)."""
    import json

    out: dict[str, Any] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}.{k}", v)
        else:
            out[prefix] = json.dumps(node) if isinstance(node, list) else node

    for entry in entries:
        prefix = ".".join(str(entry.get(k)) for k in ENTRY_ID if k in entry)
        for key, value in entry.items():
            if key not in ENTRY_ID:
                walk(f"{prefix}.{key}", value)
    return out


def feasible(spec: SweepSpec, row: dict[str, Any]) -> bool:
    return row["status"] == "ok" and all(c.holds(_entries(row)) for c in spec.constraints)


def objective_values(spec: SweepSpec, row: dict[str, Any]) -> tuple[float, ...] | None:
    if not spec.objectives or not feasible(spec, row):
        return None
    values = tuple(o.value(_entries(row)) for o in spec.objectives)
    return None if any(v is None or math.isnan(v) for v in values) else values  # type: ignore[arg-type]


def _signed(spec: SweepSpec, values: tuple[float, ...]) -> tuple[float, ...]:
    """Objective values with maximized ones negated: smaller is better in every place."""
    return tuple(v if o.goal == "minimize" else -v for v, o in zip(values, spec.objectives, strict=True))


def _dominates(b: tuple[float, ...], a: tuple[float, ...]) -> bool:
    return all(x <= y for x, y in zip(b, a, strict=True)) and b != a


def pareto(spec: SweepSpec, rows: list[dict[str, Any]]) -> list[int]:
    """Indices of the rows no other feasible row dominates (every objective as good, one better)."""
    signed = [(i, _signed(spec, v)) for i, v in enumerate(objective_values(spec, r) for r in rows) if v is not None]
    return [i for i, a in signed if not any(_dominates(b, a) for _, b in signed)]


class BestSoFar:
    """The progress bar's note, kept up as rows arrive: the best value of the one objective, or the size of the
    Pareto front of several. A new row is compared with the front only, not with every row so far."""

    def __init__(self, spec: SweepSpec, rows: Iterable[dict[str, Any]] = ()) -> None:
        self.spec = spec
        self.front: list[tuple[float, ...]] = []  # signed values of the non-dominated rows (ties all kept)
        for row in rows:
            self.add(row)

    def add(self, row: dict[str, Any]) -> str:
        values = objective_values(self.spec, row)
        if values is not None:
            a = _signed(self.spec, values)
            if not any(_dominates(b, a) for b in self.front):
                self.front = [b for b in self.front if not _dominates(a, b)] + [a]
        return self.text()

    def text(self) -> str:
        if not self.spec.objectives:
            return ""
        if len(self.spec.objectives) > 1:
            return f"pareto {len(self.front)}"
        if not self.front:
            return "best -"
        objective = self.spec.objectives[0]
        best = self.front[0][0] if objective.goal == "minimize" else -self.front[0][0]
        return f"best {objective.key} {best:.6g}"


def best_text(spec: SweepSpec, rows: list[dict[str, Any]]) -> str:
    return BestSoFar(spec, rows).text()


def csv_text(spec: SweepSpec, planned: list[PlannedPoint], rows: dict[str, dict[str, Any]]) -> str:
    """points.csv: one row per point of the spec in its order: the axes, status, every flattened result entry
    (columns in first-seen order), then the timing and host columns."""
    records, seen = [], {}
    for p in planned:
        row = rows.get(p.key)
        if row is None:
            continue
        flat = flatten_entries(_entries(row))
        for k in flat:
            seen.setdefault(k, None)
        records.append((p, row, flat))
    header = [*spec.axis_keys, "status", *seen, *TIMING_COLUMNS]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for p, row, flat in records:
        writer.writerow([*(p.point[k] for k in spec.axis_keys), row["status"], *(flat.get(k, "") for k in seen),
                         row["wall_s"], row["host"]])
    return buf.getvalue()


# -- executors ----------------------------------------------------------------------------------------------------

BATCH_MAX = 32  # points in one task at most: what a kill loses in flight, and how often the progress bar moves


def batches(points: list[PlannedPoint], workers: int) -> list[list[PlannedPoint]]:
    """The points as tasks, largest first. Points of one affinity (sharing memoized work: a simulate point's PNM
    timed runs and pool DRAM replays) go in one task, so that work is done once, not once per worker that meets
    them, and short points spare a round trip each; a point of no affinity (serve, pnm and replay points share
    nothing) is a task alone. A group larger than BATCH_MAX, or than a quarter of each worker's share, is
    split, so every worker gets several tasks and the last ones are short."""
    size = max(1, min(BATCH_MAX, math.ceil(len(points) / (4 * max(1, workers)))))
    groups: dict[str, list[PlannedPoint]] = {}
    for p in points:
        groups.setdefault(p.affinity or p.key, []).append(p)
    tasks = []
    for group in groups.values():
        n = math.ceil(len(group) / size)
        tasks += [group[i * len(group) // n:(i + 1) * len(group) // n] for i in range(n)]
    return sorted(tasks, key=len, reverse=True)  # longest first, so the tail is short; stable: plan order


def _local_pool(workers: int) -> Any:
    """`workers` local processes, started now. On Linux, from a process running a single thread (the CLI's),
    they are forked after this process imported archsim and loaded the memory kernel (warm_worker here), so no
    worker pays for either again; elsewhere (macOS, where forking is unsafe, or a process with threads a fork
    would copy mid-lock) they are spawned and each warms itself once in its initializer."""
    import multiprocessing
    import sys
    from concurrent.futures import ProcessPoolExecutor

    fork = sys.platform == "linux" and threading.active_count() == 1
    if fork:
        warm_worker()
    context = multiprocessing.get_context("fork" if fork else "spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=warm_worker)
    if fork:
        pool.submit(int)  # forks every worker now, before this process starts any thread
    return pool


def _connect(client_type: Any, scheduler: str, connect_timeout_s: float):  # noqa: ANN202 - distributed.Client
    """A client of the scheduler at `scheduler`, or one line within the timeout. The connection runs in a thread
    the caller stops waiting for: a peer that accepts and never answers, or answers in another protocol, can hold
    distributed's handshake far past its own timeout (or make it allocate what a garbage header asks for)."""
    box: dict[str, Any] = {}

    def connect() -> None:
        try:
            box["client"] = client_type(scheduler, timeout=f"{connect_timeout_s}s")
        except BaseException as exc:  # noqa: BLE001 - whatever the peer caused, reported below as one line
            box["error"] = exc

    thread = threading.Thread(target=connect, name="dask-connect", daemon=True)
    thread.start()
    thread.join(connect_timeout_s + 1.0)  # distributed's own timeout error, if it comes, comes first
    if "client" in box:
        return box["client"]
    error = box.get("error")
    why = (_one_line(error) or type(error).__name__)[:200] if error is not None else "no answer"
    raise ConfigError(f"no Dask scheduler answered at {scheduler} within {connect_timeout_s:g} s ({why})",
                      where="--scheduler")


def _dask_client(scheduler: str, connect_timeout_s: float):  # noqa: ANN202 - distributed.Client
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ConfigError("needs Dask: pip install 'archsim[dse]'", where="--scheduler") from None
    if scheduler.startswith("local:"):
        text = scheduler.removeprefix("local:")
        if not text.isdigit() or int(text) < 1:
            raise ConfigError(f"expected local:N with N >= 1 workers, got {scheduler!r}", where="--scheduler")
        check_fits_memory(int(text), WORKER_BYTES, "Dask worker processes", where="--scheduler")
        cluster = LocalCluster(n_workers=int(text), threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(cluster)
    elif scheduler.startswith("tcp://"):
        client = _connect(Client, scheduler, connect_timeout_s)
    else:
        raise ConfigError(f"expected tcp://HOST:PORT or local:N, got {scheduler!r}", where="--scheduler")
    client.run(warm_worker)
    return client


class Executor:
    """Local worker processes, or a Dask client: computes points and records each in the store on arrival."""

    def __init__(self, spec: SweepSpec, store: Store, bar: Any, rows: dict[str, dict[str, Any]], pool: Any,
                 client: Any, workers: int) -> None:
        self.spec, self.store, self.bar, self.rows, self.pool, self.client = spec, store, bar, rows, pool, client
        self.workers = workers if client is None else max(1, sum(client.nthreads().values()))  # Dask: its threads
        self.progress = BestSoFar(spec, rows.values())
        self.computed = 0

    def _record(self, p: PlannedPoint, out: dict[str, Any]) -> None:
        self.store.put(p.key, p.point, out["status"], out["result"], out["wall_s"], out["host"])
        self.rows[p.key] = {"point": p.point, **out}
        self.computed += 1
        self.bar.update(1)
        self.bar.set_postfix_str(self.progress.add(self.rows[p.key]), refresh=False)

    def compute(self, points: list[PlannedPoint]) -> None:
        """Every point of `points` not in the store yet (each key once), in tasks of batches()."""
        todo = list({p.key: p for p in points if p.key not in self.rows}.values())
        if not todo:
            return
        args = (self.spec.command.name,)
        options = (self.spec.timeout_s, self.spec.memory_cap_bytes)
        tasks = batches(todo, self.workers)
        if self.client is None:
            from concurrent.futures import as_completed

            futures = {self.pool.submit(run_points, *args, [(p.inputs, p.overrides) for p in task], *options): task
                       for task in tasks}
        else:
            from distributed import as_completed

            futures = {self.client.submit(run_points, *args, [(p.inputs, p.overrides) for p in task], *options,
                                          key=f"sweep-{task[0].key}-{len(task)}", pure=False): task
                       for task in tasks}
        for future in as_completed(list(futures)):
            for p, out in zip(futures[future], future.result(), strict=True):
                self._record(p, out)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` on a worker (a future), or here when there is none (a resume with nothing to compute)."""
        if self.client is not None:
            return self.client.submit(fn, *args, pure=False)
        if self.pool is not None:
            return self.pool.submit(fn, *args)
        return _Done(fn(*args))

    def close(self) -> None:
        _close(self.pool, self.client)


class _Done:
    """A result computed in place, read as a future's."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self) -> Any:
        return self.value


def _close(pool: Any, client: Any) -> None:
    if pool is not None:
        pool.shutdown()
    if client is not None:
        cluster = getattr(client, "cluster", None)
        client.close()
        if cluster is not None:
            cluster.close()


def run_sweep(spec: SweepSpec, out_dir: Path, *, workers: int = 1, scheduler: str | None = None,
              resume: bool = False, connect_timeout_s: float = 10.0, quiet: bool = False) -> dict[str, Any]:
    """Compute the spec's missing points into the store in `out_dir`, then write points.csv (and pareto.csv,
    pareto.png for several objectives). Returns counts."""
    from archsim.progress import progress_bar

    searched = spec.method in ("tpe", "nsga2")
    planned = [] if searched else plan(spec)
    workers = max(1, min(workers, spec.batch if searched else len(planned)))  # more would idle
    if not scheduler:
        check_fits_memory(workers, WORKER_BYTES, "worker processes", where="--workers")
    # a cluster's client before the store, so a scheduler that does not answer leaves no DIR behind; local workers
    # after it (only when a point is left to compute: a resume of a finished sweep forks none) and before the
    # progress bar's thread, so that they can be forked
    client = _dask_client(scheduler, connect_timeout_s) if scheduler else None
    try:
        store = Store.open(out_dir, spec.identity(), resume, spec.file)
    except BaseException:
        _close(None, client)
        raise
    rows = store.rows()
    try:
        idle = not searched and all(p.key in rows for p in planned)
        pool = None if scheduler or idle else _local_pool(workers)
    except BaseException:
        store.close()
        _close(None, client)
        raise
    total = spec.count if searched else len(planned)
    bar = progress_bar(total, "point", f"sweep {spec.name}", quiet=quiet)
    executor = Executor(spec, store, bar, rows, pool, client, workers)
    try:
        if searched:
            from archsim.sweep.search import optuna_search

            seen: dict[str, PlannedPoint] = {}

            def evaluate(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
                batch = [plan_point(spec, len(seen) + i, point) for i, point in enumerate(points)]
                bar.update(sum(1 for p in batch if p.key in rows))
                executor.compute(batch)
                for p in batch:
                    seen.setdefault(p.key, p)
                return [rows[p.key] for p in batch]

            optuna_search(spec, evaluate)
            planned = list(seen.values())
        else:
            bar.update(sum(1 for p in planned if p.key in rows))
            executor.compute(planned)
        bar.close()
        _write_outputs(spec, out_dir, planned, rows, executor.submit)  # the plots drawn by the workers
    finally:
        executor.close()
        store.close()
    ordered = [rows[p.key] for p in planned if p.key in rows]
    statuses = [row["status"] for row in ordered]
    return {"points": len(planned), "computed": executor.computed, "ok": statuses.count("ok"),
            "infeasible": sum(s.startswith("infeasible") for s in statuses),
            "failed": sum(s.startswith("failed") for s in statuses), "best": best_text(spec, ordered)}


def _write_outputs(spec: SweepSpec, out_dir: Path, planned: list[PlannedPoint], rows: dict[str, dict],
                   submit: Callable[..., Any]) -> None:
    """points.csv (replicas.csv, pareto.csv), and the plots, each drawn as PNG bytes by `submit` (the workers: a
    plot takes 0.2-0.3 s, as much as the points of a quick sweep), all written at once."""
    from archsim.outputs import OutputPlan

    outputs = OutputPlan()
    text = csv_text(spec, planned, rows)
    outputs.add(out_dir / "points.csv", "points.csv")
    outputs.write(out_dir / "points.csv", lambda tmp: tmp.write_text(text))
    done = [p for p in planned if p.key in rows]
    ordered = [rows[p.key] for p in done]
    replicas = replicas_text(spec.axis_keys, [p.point for p in done], [flatten_entries(_entries(r)) for r in ordered],
                             [r["status"] for r in ordered])
    if replicas is not None:
        outputs.add(out_dir / "replicas.csv", "replicas.csv")
        outputs.write(out_dir / "replicas.csv", lambda tmp: tmp.write_text(replicas))
    if len(spec.objectives) > 1:
        front = [planned[i] for i in pareto(spec, ordered)]
        pareto_text = csv_text(spec, front, rows)
        outputs.add(out_dir / "pareto.csv", "pareto.csv")
        outputs.write(out_dir / "pareto.csv", lambda tmp: tmp.write_text(pareto_text))
        outputs.add(out_dir / "pareto.png", "pareto.png", kind="plot")
        png = submit(draw_pareto, *pareto_figure(spec, ordered))
        outputs.write(out_dir / "pareto.png", lambda tmp, png=png: tmp.write_bytes(png.result()))
    if spec.objectives and any(objective_values(spec, r) is not None for r in ordered):
        for i, key in enumerate(spec.axis_keys):
            target = out_dir / "sensitivity" / f"{i:02d}-{_file_name(key)}.png"
            outputs.add(target, f"sensitivity/{target.name}", kind="plot")
            png = submit(draw_sensitivity, *sensitivity_figure(spec, planned, rows, key))
            outputs.write(target, lambda tmp, png=png: tmp.write_bytes(png.result()))
    outputs.commit()


def _file_name(key: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in key)


def sensitivity(spec: SweepSpec, planned: list[PlannedPoint], rows: dict[str, dict], key: str,
                objective: int = 0) -> list[tuple[Any, float, float, float]]:
    """Per value of axis `key` (in axis order): the best, median and worst of one objective over the feasible
    points holding that value."""
    import statistics

    goal = spec.objectives[objective].goal
    by_value: dict[str, list[float]] = {}
    values: dict[str, Any] = {}
    axis = next(a for a in spec.axes if key in a.keys)
    for position in axis.values:
        value = position[axis.keys.index(key)]
        by_value.setdefault(str(value), [])
        values[str(value)] = value
    for p in planned:
        got = objective_values(spec, rows[p.key]) if p.key in rows else None
        if got is not None:
            by_value[str(p.point[key])].append(got[objective])
    out = []
    for text, ys in by_value.items():
        if ys:
            best, worst = (min(ys), max(ys)) if goal == "minimize" else (max(ys), min(ys))
            out.append((values[text], best, statistics.median(ys), worst))
    return out


def sensitivity_figure(spec: SweepSpec, planned: list[PlannedPoint], rows: dict[str, dict], key: str) -> tuple:
    """What `draw_sensitivity` draws for axis `key`: the first objective's best, median and worst per value."""
    objective = spec.objectives[0]
    return sensitivity(spec, planned, rows, key), key, objective.column, objective.goal, objective.key, spec.name


def draw_sensitivity(data: list[tuple[Any, float, float, float]], key: str, column: str, goal: str,
                     objective_key: str, sweep_name: str) -> bytes:
    """The first objective against one axis: best, median and worst over the rest of the design space (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = list(range(len(data)))
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for index, label, style in ((1, "best", "o-"), (2, "median", "s--"), (3, "worst", "^:")):
        ax.plot(xs, [d[index] for d in data], style, label=label)
    ax.set_xticks(xs, [str(d[0]) for d in data])
    ax.set_xlabel(key)
    ax.set_ylabel(f"{column} ({goal})")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"sweep {sweep_name}: {objective_key} against {key}\n(best, median, worst over the other axes)",
                 fontsize=9)
    return _png(fig)


def _png(fig: Any) -> bytes:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    return out.getvalue()


def pareto_figure(spec: SweepSpec, rows: list[dict[str, Any]]) -> tuple:
    """What `draw_pareto` draws: the first two objectives of every feasible point and the front among them."""
    x_obj, y_obj = spec.objectives[:2]
    values = [objective_values(spec, r) for r in rows]
    points = [tuple(v[:2]) for v in values if v is not None]
    front = sorted((tuple(values[i][:2]) for i in pareto(spec, rows)), key=lambda v: v[0])  # type: ignore[index]
    return points, front, f"{x_obj.column} ({x_obj.goal})", f"{y_obj.column} ({y_obj.goal})", spec.name


def draw_pareto(points: list[tuple[float, float]], front: list[tuple[float, float]], x_label: str, y_label: str,
                sweep_name: str) -> bytes:
    """Every feasible point, the Pareto front drawn over them (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    ax.scatter([v[0] for v in points], [v[1] for v in points], s=12, color="0.6", label="feasible points")
    ax.plot([v[0] for v in front], [v[1] for v in front], "o-", color="tab:red", label="Pareto front")
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"sweep {sweep_name}: {len(points)} feasible points, {len(front)} on the front", fontsize=9)
    return _png(fig)
