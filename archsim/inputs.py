"""Every input file is opened through here, so that each kind of unreadable path is one clear error.

`check_input` refuses, naming the file: an empty path, a missing file, a symlink loop, a directory, a device
or pipe, a file that cannot be read (permissions). `read_text_input` also refuses binary data (a NUL byte
or bytes that are not UTF-8, naming the line), and `read_json_input` JSON that Python's reader accepts but
JSON does not mean (NaN, a key given twice). The error class is the caller's (ConfigError for configs,
TraceError for traces, ProgramError for programs) so the message keeps its kind.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from archsim.errors import ArchsimError

PathLike = str | os.PathLike[str]


# the files this command has opened, by (device, inode), with the path as first given: archsim.outputs refuses to
# write over any of them, also those a config names inside another (a scenario's trace, a kernel's .include).
# None: not recording
_reads: dict[tuple[int, int], str] | None = None


@contextlib.contextmanager
def recording_reads() -> Iterator[None]:
    """Record every input `check_input` passes while the block runs (one command)."""
    global _reads
    outer, _reads = _reads, {}
    try:
        yield
    finally:
        _reads = outer


def input_read(path: PathLike) -> str | None:
    """The path (as it was given) of a file read while recording that is the file at `path`, else None."""
    if not _reads:
        return None
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return _reads.get((info.st_dev, info.st_ino))


def check_input(path: PathLike, error: type[ArchsimError] = ArchsimError) -> Path:
    """The path, if it names a readable regular file; else `error` naming it."""
    text = os.fspath(path)
    if not text.strip():
        raise error("empty input path")
    if "\0" in text:  # a path from a config file can hold one; the OS takes none
        raise error("a path with a NUL character", file=text.replace("\0", "\\0"))
    try:
        info = os.stat(text)
    except FileNotFoundError:
        raise error("no such file", file=text) from None
    except OSError as exc:
        reason = "a symbolic link loop" if exc.errno == errno.ELOOP else exc.strerror
        raise error(f"cannot read: {reason}", file=text) from None
    if stat.S_ISDIR(info.st_mode):
        raise error("is a directory, not a file", file=text)
    if not stat.S_ISREG(info.st_mode):
        raise error("is not a regular file (a device, socket or pipe)", file=text)
    if not os.access(text, os.R_OK):
        raise error("cannot read: permission denied", file=text)
    if _reads is not None:
        _reads.setdefault((info.st_dev, info.st_ino), text)
    return Path(text)


def read_bytes_input(path: PathLike, error: type[ArchsimError] = ArchsimError) -> bytes:
    checked = check_input(path, error)
    try:
        return checked.read_bytes()
    except OSError as exc:
        raise error(f"cannot read: {exc.strerror}", file=os.fspath(path)) from None


def read_text_input(path: PathLike, error: type[ArchsimError] = ArchsimError, *, what: str = "text") -> str:
    """The file's text; binary contents are refused naming the first bad line."""
    data = read_bytes_input(path, error)
    bad = data.find(b"\0")
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        bad = exc.start if bad < 0 else min(bad, exc.start)
        text = ""
    if bad >= 0:
        line = data.count(b"\n", 0, bad) + 1
        raise error(f"not a {what} file (binary data)", file=os.fspath(path), where=f"line {line}")
    return text


class JSONInputError(ValueError):
    """What `parse_json` refuses, with the line of the document it is on (1 for a one-line document)."""

    def __init__(self, message: str, line: int = 1) -> None:
        super().__init__(message)
        self.line = line


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    tree: dict[str, object] = {}
    for key, value in pairs:
        if key in tree:
            raise JSONInputError(f"key {key!r} given twice in one object")
        tree[key] = value
    return tree


def _no_constant(name: str) -> None:
    raise JSONInputError(f"{name} is not JSON (write null, or a finite number)")


def parse_json(text: str) -> object:
    """`json.loads`, refusing what Python's reader lets through but JSON forbids or a tree cannot mean: NaN and
    Infinity, and a key given twice in one object (the last would silently win)."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise JSONInputError(f"not JSON: {exc.msg} (column {exc.colno})", exc.lineno) from None
    except RecursionError:  # arrays or objects nested thousands deep: no archsim tree is
        raise JSONInputError("nested deeper than a JSON reader can follow") from None


def read_json_input(path: PathLike, error: type[ArchsimError] = ArchsimError) -> object:
    """A JSON file's tree; unreadable paths, binary data and anything `parse_json` refuses name the file."""
    text = read_text_input(path, error, what="JSON")
    try:
        return parse_json(text)
    except JSONInputError as exc:
        raise error(str(exc), file=os.fspath(path), where=f"line {exc.line}") from None
