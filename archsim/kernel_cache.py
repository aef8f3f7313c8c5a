"""Compiling the memory kernel's variants, or loading them from numba's cache: once per process and variant,
once across processes that need the same variant at the same time."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from archsim.config.memory import MemoryConfig
from archsim.controller.kernel import KernelVariant, compiled_kernel
from archsim.controller.schedulers import EXTERNAL

try:
    import fcntl
except ImportError:  # not POSIX: no compile lock
    fcntl = None  # type: ignore[assignment]

# the kernel variants compiled or loaded in this process, each with how (numba's cache "hit" or "miss")
_PREPARED: dict[KernelVariant, str] = {}


def describe_variant(cfg: MemoryConfig, variant: KernelVariant) -> str:
    """What a kernel variant is compiled for, in words, for the one-line compile notice."""
    shape = f"{variant.pseudo_channels} pseudo-channel(s) x {variant.ranks} rank(s)"
    if variant.pseudo_channels > 0:
        controller = {"plain": "the plain kernel: default controller",
                      "dramsim3": "the kernel of DRAMSim3's controller",
                      "general": "the general kernel of the shape, every built-in controller feature"}
        return f"{cfg.standard} ({controller[variant.controller]}, {shape})"
    if variant.scheduler < 0:
        return f"{cfg.standard} (the general kernel, every built-in controller feature)"
    return f"{cfg.standard} (the kernel with scheduler {EXTERNAL[variant.scheduler][0]!r})"


def prepare_kernel(variant: KernelVariant, args: tuple, what: str) -> str:
    """Compile `variant` for the types of `args` (a session's kernel arguments) or load it from numba's cache;
    "hit" or "miss". A compile says so on stderr when that is a terminal, once per variant: it takes minutes."""
    import numba

    dispatcher = compiled_kernel(variant)
    signature = tuple(numba.typeof(a) for a in args)
    if _on_disk(dispatcher):
        dispatcher.compile(signature)
    else:
        with compile_lock(dispatcher, what):
            if not _on_disk(dispatcher) and sys.stderr.isatty():
                print(f"archsim: compiling the memory kernel for {what}: first run only, 10-25 s on 2 cores; "
                      f"later runs load it from numba's cache", file=sys.stderr, flush=True)
            dispatcher.compile(signature)  # loads what a process that held the lock before us compiled
    outcome = "hit" if sum(dispatcher.stats.cache_hits.values()) else "miss"
    _PREPARED[variant] = outcome
    return outcome


@contextlib.contextmanager
def compile_lock(dispatcher: Any, what: str) -> Iterator[None]:
    """Held while this process compiles `dispatcher`: archsim processes that need the same variant at once
    (`serve --jobs`, sweep workers) compile it once, the others wait and load it from numba's cache. An
    exclusive `flock` beside numba's index file, released by the kernel even when a process dies; where the
    cache directory cannot hold it (or numba's cache internals change), no lock."""
    try:
        if fcntl is None:
            raise OSError("no flock")
        lock_path = dispatcher._cache._cache_file._index_path + ".lock"
        os.makedirs(os.path.dirname(lock_path), exist_ok=True)
        handle = open(lock_path, "a")  # noqa: SIM115 - held across the yield
    except (AttributeError, OSError):
        yield
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if sys.stderr.isatty():
                print(f"archsim: waiting for another archsim process compiling the memory kernel for {what}",
                      file=sys.stderr, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError:  # a file system without locks
            pass
        yield


def _on_disk(dispatcher: Any) -> bool:
    """Whether numba's cache has an index for this compiled function (numba's cache internals; False if they
    change)."""
    try:
        return os.path.exists(dispatcher._cache._cache_file._index_path)
    except AttributeError:
        return False


def variant_on_disk(variant: KernelVariant) -> bool:
    """Whether numba's cache holds `variant` (then preparing it loads, not compiles)."""
    return _on_disk(compiled_kernel(variant))
