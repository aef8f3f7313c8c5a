"""The sweep's resumable store: one SQLite file in --out DIR, one row per point, append-only.

A point's key is the SHA-256 of its fully resolved inputs (the command's YAML trees after overrides and the
contents of the files they name by path), the
archsim version and a hash of the package's sources and shipped configs: the same design reached by another
spec, or by an axis that grew, is the same row; a changed simulator is a new one. Each point is committed in
its own transaction in WAL mode with synchronous=FULL, so a SIGKILL at any instant leaves every committed
point whole and no half-written one. `spec.json` beside it records the spec identity (command and base
inputs); a run of another spec on the same DIR is refused before anything is opened for writing.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from archsim.errors import ConfigError

STORE_NAME = "points.sqlite"
IDENTITY_NAME = "spec.json"
SCHEMA = """CREATE TABLE IF NOT EXISTS points (
    key TEXT PRIMARY KEY, point TEXT NOT NULL, status TEXT NOT NULL, result TEXT, wall_s REAL, host TEXT)"""


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


@functools.cache
def archsim_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("archsim")
    except PackageNotFoundError:
        return "unknown"


@functools.cache
def sources_hash() -> str:
    """SHA-256 over the package's .py files and the shipped configs (paths and contents, in sorted order)."""
    import archsim
    from archsim.resources import data_path

    digest = hashlib.sha256()
    roots = [Path(archsim.__file__).parent, Path(data_path("configs"))]
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".py", ".yaml", ".csv")):
            if "sweeps" in path.relative_to(root).parts:
                continue  # the sweep specs themselves do not change a point's result
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def point_key(command: str, resolved: dict[str, Any]) -> str:
    text = canonical({"command": command, "resolved": resolved, "archsim": archsim_version(),
                      "sources": sources_hash()})
    return hashlib.sha256(text.encode()).hexdigest()


class Store:
    """Open with `Store.open`; `put` commits one point; `rows` reads them back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn = sqlite3.connect(path, timeout=30, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute(SCHEMA)

    @staticmethod
    def open(out_dir: Path, identity: dict[str, Any], resume: bool, spec_file: str) -> Store:
        """The store of `out_dir`: new, or (with resume) the existing one if `identity` matches; refuses an
        existing DIR without --resume and a store of another spec, touching nothing."""
        ident_path = out_dir / IDENTITY_NAME
        if out_dir.exists() and not out_dir.is_dir():
            raise ConfigError("is not a directory", file=str(out_dir), where="--out")
        if out_dir.exists() and any(out_dir.iterdir()):
            if not resume:
                raise ConfigError("exists: give --resume to continue its sweep, or another --out", file=str(out_dir),
                                  where="--out")
            if not ident_path.is_file() or not (out_dir / STORE_NAME).is_file():
                raise ConfigError(f"holds no sweep store ({IDENTITY_NAME} and {STORE_NAME})", file=str(out_dir),
                                  where="--out")
            try:
                stored = json.loads(ident_path.read_text())
            except (OSError, ValueError) as exc:
                raise ConfigError(f"unreadable store identity: {exc}", file=str(ident_path)) from None
            for part in ("command", "inputs", "set"):
                if canonical(stored.get(part)) != canonical(identity[part]):
                    raise ConfigError(f"the store in {out_dir} was written by another spec ({part} was "
                                      f"{canonical(stored.get(part))}); use another --out", file=spec_file,
                                      where=f"sweep.{'command' if part == 'command' else 'inputs'}")
            return Store(out_dir / STORE_NAME)
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            tmp = ident_path.with_suffix(".json.tmp")
            tmp.write_text(canonical(identity) + "\n")
            os.replace(tmp, ident_path)
        except OSError as exc:
            raise ConfigError(f"cannot write: {exc.strerror}", file=str(out_dir), where="--out") from None
        return Store(out_dir / STORE_NAME)

    def keys(self) -> set[str]:
        return {row[0] for row in self.conn.execute("SELECT key FROM points")}

    def put(self, key: str, point: dict[str, Any], status: str, result: dict[str, Any] | None, wall_s: float,
            host: str) -> None:
        """One point, one transaction: it is in the store whole, or not at all."""
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute("INSERT OR IGNORE INTO points VALUES (?, ?, ?, ?, ?, ?)",
                          (key, canonical(point), status, None if result is None else canonical(result), wall_s, host))
        self.conn.execute("COMMIT")

    def rows(self) -> dict[str, dict[str, Any]]:
        out = {}
        for key, point, status, result, wall_s, host in self.conn.execute("SELECT * FROM points"):
            out[key] = {"point": json.loads(point), "status": status,
                        "result": None if result is None else json.loads(result), "wall_s": wall_s, "host": host}
        return out

    def close(self) -> None:
        self.conn.close()
