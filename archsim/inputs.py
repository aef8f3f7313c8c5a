"""Every input file is opened through here, so that each kind of unreadable path is one clear error.

`check_input` refuses, naming the file: an empty path, a missing file, a symlink loop, a directory, a device
or pipe, a file that cannot be read (permissions). `read_text_input` also refuses binary data (a NUL byte
or bytes that are not UTF-8, naming the line). The error class is the caller's (ConfigError for configs,
TraceError for traces, ProgramError for programs) so the message keeps its kind.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from archsim.errors import ArchsimError

PathLike = str | os.PathLike[str]


def check_input(path: PathLike, error: type[ArchsimError] = ArchsimError) -> Path:
    """The path, if it names a readable regular file; else `error` naming it."""
    text = os.fspath(path)
    if not text.strip():
        raise error("empty input path")
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
