"""Results of slow, deterministic computations kept on disk between runs: the serving engine's cost table runs
a few dozen decode steps per system (DRAM and PNM replayed), and serving that system again asks for the same
ones. A result is keyed by SHA-256 over the package's own files and its shipped data (any edit of a source, a
config or a PNM program is a miss) and the pickled inputs, and kept as one small pickle under
`$ARCHSIM_CACHE_DIR` (default `$XDG_CACHE_HOME/archsim`, else `~/.cache/archsim`), written to a temporary file
and renamed, so a concurrent run never reads half of one. An empty ARCHSIM_CACHE_DIR turns the store off; a
store that cannot be read or written is as if empty. Loading gives back the computed value exactly (pickle keeps
every float's bits), so a run's results do not depend on what the store held."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from archsim.resources import DATA_DIRS, data_root

CACHE_ENV = "ARCHSIM_CACHE_DIR"
PACKAGE = Path(__file__).resolve().parent

T = TypeVar("T")


def store_dir() -> Path | None:
    """Where results are kept, or None when the store is off."""
    value = os.environ.get(CACHE_ENV)
    if value is not None:
        return Path(value) if value else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "archsim"


@functools.cache
def package_digest() -> str:
    """SHA-256 over every file of the package and of its shipped data (`configs/`, `isa/`, `traces/`, which a
    source checkout keeps beside the package): relative path and bytes, compiled caches left out."""
    h = hashlib.sha256()
    roots = [PACKAGE, *(data_root() / name for name in DATA_DIRS)]
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            h.update(path.relative_to(root.parent).as_posix().encode())
            h.update(b"\0")
            h.update(path.read_bytes())
            h.update(b"\0")
    return h.hexdigest()


def canonical(value: object) -> bytes:
    """The pickle of `value` as it comes out of a pickle round trip. A pickle's bytes depend on which of its equal
    strings are one object, which differs between a config as loaded and the same config unpickled (in a worker's
    parent, say); after one round trip they no longer change, so equal values give equal bytes (a key's inputs)."""
    return pickle.dumps(pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)),
                        protocol=pickle.HIGHEST_PROTOCOL)


def remembered(kind: str, inputs: tuple, compute: Callable[[], T]) -> T:
    """compute(), or what it returned before for these `inputs` (picklable) under this package's files."""
    root = store_dir()
    if root is None:
        return compute()
    key = hashlib.sha256(package_digest().encode() + kind.encode() + pickle.dumps(inputs)).hexdigest()
    path = root / kind / key[:2] / f"{key}.pkl"
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, IndexError, TypeError):
        pass                          # absent, unreadable or from a layout this code no longer has
    value = compute()
    tmp = path.with_name(f"{key}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError:                   # a read-only or full disk: the result simply is not kept
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    return value


__all__ = ["CACHE_ENV", "canonical", "package_digest", "remembered", "store_dir"]
