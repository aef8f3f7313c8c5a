"""Every file a command writes goes through here: checked before the run, written at the end, all or none.

    plan = OutputPlan(inputs=[trace, memory_path])      # what the command reads
    plan.add(json_path, "--json")                       # checked now (None: not asked for)
    ... run the simulation ...
    plan.write(json_path, lambda tmp: write_json(tmp, stats))
    plan.commit()                                       # every writer runs, then every file moves into place

`add` refuses, as one ArchsimError naming the path and the option: an empty path; a path that is one of the
inputs (compared by device and inode, so a symlink or hard link to an input counts, and by resolved path);
two outputs on one path; an existing directory or non-regular file; a directory that cannot be created or
written (a probe file is created and removed at once); a plot suffix matplotlib has no writer for; a suffix
that is not the output's format (`kind`: SUFFIXES).
`commit` first refuses a target that is a file the command read while it ran (archsim.inputs records every
input a CLI command opens: also a trace a scenario names, a kernel's .include), then runs each writer on a temp
file beside its target (same directory, so the rename is atomic), gives it mode 0666 less the umask (mkstemp's
0600 would hide results from other users), then renames them all; if any writer or rename fails, or Ctrl-C
arrives, the targets already replaced get their old contents back, new ones are removed, and no temp file or
created directory remains. Nothing is written before `commit`, so a
command that fails or is interrupted earlier leaves nothing either. Every command with a file output, present
or future (serve, plan, sweep, report, timelines), writes through a plan; tests/test_outputs.py finds them all.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from archsim.errors import ArchsimError
from archsim.inputs import input_read

PathLike = str | os.PathLike[str]
Writer = Callable[[Path], Any]


# an output's kind -> the file name suffixes it may have: a name that says another format is a mistake (`--json
# out.png`, `report -o r.png`), and readers that tell formats apart by suffix (scenarios naming a trace, `trace
# info`) would misread it. "file" (no check) for free-form text; "plot" is checked against matplotlib's writers.
SUFFIXES = {"json": (".json",), "jsonl": (".jsonl", ".ndjson"), "npz": (".npz",), "yaml": (".yaml", ".yml"),
            "html": (".html", ".htm")}
KIND_NAMES = {"json": "JSON", "jsonl": "JSON lines", "npz": "a NumPy zip archive", "yaml": "YAML", "html": "HTML"}


def _umask() -> int:
    mask = os.umask(0o022)  # os.umask only reads by setting; put it straight back
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode a new file gets from open(): 0666 less the umask (0644 under the usual 022)."""
    return 0o666 & ~_umask()


def _temp_beside(path: Path) -> Path:
    # the target's suffix stays last so that writers choosing a format by suffix (savefig) see it
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    os.close(fd)
    return Path(name)


def atomic_write(path: PathLike, writer: Callable[[BinaryIO], Any]) -> None:
    """Write one file outside a plan: `writer(handle)` on a temp file beside `path`, then rename it over it."""
    plan = OutputPlan()
    plan.add(path, "output")

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as handle:
            writer(handle)

    plan.write(path, write)
    plan.commit()


def atomic_write_bytes(path: PathLike, data: bytes) -> None:
    atomic_write(path, lambda handle: handle.write(data))


def plot_suffixes() -> frozenset[str]:
    """File suffixes matplotlib can save (its own registry, so a new backend counts)."""
    from matplotlib.backend_bases import FigureCanvasBase

    return frozenset(f".{ext}" for ext in FigureCanvasBase.get_supported_filetypes())


def _same_file(a: Path, b: Path) -> bool:
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _same_path(a: Path, b: Path) -> bool:
    """One file: the same inode (a symlink or hard link to it too), or the same resolved path."""
    return _same_file(a, b) or _resolved(a) == _resolved(b)


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a symlink loop resolves to nothing
        return path.absolute()


@dataclass
class _Output:
    path: Path
    option: str
    writer: Writer | None = None
    missing_dirs: list[Path] = field(default_factory=list)


class OutputPlan:
    """The files one command writes; see the module docstring."""

    def __init__(self, inputs: Iterable[PathLike | None] = ()) -> None:
        self.inputs = [Path(p) for p in inputs if p]
        self._outputs: dict[Path, _Output] = {}

    # ---- before the run
    def add(self, path: PathLike | None, option: str, *, kind: str = "file") -> Path | None:
        """Check that `path` can be written as this command's `option` output; None (not asked for) passes."""
        if path is None:
            return None
        text = os.fspath(path)
        if not text.strip():
            raise ArchsimError("empty output path", where=option)
        if "\0" in text:
            raise ArchsimError("a path with a NUL character", file=text.replace("\0", "\\0"), where=option)
        target = Path(text)

        def refuse(reason: str) -> ArchsimError:
            return ArchsimError(reason, file=text, where=option)

        for source in self.inputs:
            if _same_path(source, target):
                raise refuse(f"is the input {os.fspath(source)}; refusing to overwrite an input")
        for other in self._outputs.values():
            if _same_path(other.path, target):
                raise refuse(f"is also the {other.option} output")
        try:
            info = os.stat(target)
        except FileNotFoundError:
            info = None
        except OSError as exc:  # a symlink loop, a path through a file
            raise refuse(f"cannot write: {exc.strerror}") from None
        if info is not None and stat.S_ISDIR(info.st_mode):
            raise refuse("is a directory")
        if info is not None and not stat.S_ISREG(info.st_mode):
            raise refuse("is not a regular file (a device, socket or pipe)")
        if kind == "plot" and target.suffix.lower() not in plot_suffixes():
            known = ", ".join(sorted(plot_suffixes()))
            raise refuse(f"matplotlib cannot write a {target.suffix or 'suffix-less'} file (suffixes: {known})")
        if kind in SUFFIXES and target.suffix.lower() not in SUFFIXES[kind]:
            raise refuse(f"this output is {KIND_NAMES[kind]}: give a file name ending in "
                         f"{' or '.join(SUFFIXES[kind])}, not {target.suffix or 'no suffix'}")
        missing = self._missing_dirs(target, refuse)
        self._probe(missing[-1].parent if missing else target.parent, refuse)
        self._outputs[_resolved(target)] = _Output(target, option, missing_dirs=missing)
        return target

    def add_inputs(self, inputs: Iterable[PathLike | None]) -> None:
        """Inputs known only once the outputs were added (a scenario's trace): an output that is one is refused."""
        found = [Path(p) for p in inputs if p]
        for out in self._outputs.values():
            for source in found:
                if _same_path(source, out.path):
                    raise ArchsimError(f"is the input {os.fspath(source)}; refusing to overwrite an input",
                                       file=os.fspath(out.path), where=out.option)
        self.inputs += found

    @staticmethod
    def _missing_dirs(target: Path, refuse: Callable[[str], ArchsimError]) -> list[Path]:
        """The directories `commit` must create, innermost first; an ancestor that is a file is refused."""
        missing: list[Path] = []
        parent = target.parent
        while not parent.exists():
            if parent.is_symlink():
                raise refuse(f"directory {parent} is a broken symbolic link")
            missing.append(parent)
            if parent == parent.parent:
                break
            parent = parent.parent
        if not parent.is_dir():
            raise refuse(f"{parent} is not a directory")
        return missing

    @staticmethod
    def _probe(directory: Path, refuse: Callable[[str], ArchsimError]) -> None:
        """Create and remove a file in `directory`: the only test that knows about read-only mounts and /proc."""
        try:
            fd, name = tempfile.mkstemp(prefix=".archsim-probe.", dir=directory)
        except OSError as exc:
            raise refuse(f"cannot write in {directory}: {exc.strerror}") from None
        os.close(fd)
        os.unlink(name)

    # ---- after the run
    def write(self, path: PathLike | None, writer: Writer) -> None:
        """Set the writer of an added output: `writer(tmp_path)` fills a temp file when `commit` runs."""
        if path is None:
            return
        self._outputs[_resolved(Path(path))].writer = writer

    def commit(self) -> None:
        """Run every writer, then move every file into place: all of them, or none (old contents restored)."""
        for out in self._outputs.values():  # an input found while running (a file another one names)
            read = input_read(out.path)
            if read is not None:
                raise ArchsimError(f"is the input {read}, read by this command; refusing to overwrite an input",
                                   file=os.fspath(out.path), where=out.option)
        staged: list[tuple[_Output, Path]] = []
        created: list[Path] = []
        replaced: list[tuple[Path, Path | None]] = []  # (target, backup of its old contents or None)
        try:
            for out in self._outputs.values():
                if out.writer is None:
                    raise RuntimeError(f"output {out.path} ({out.option}) was added but never written")
                for directory in reversed(out.missing_dirs):
                    if not directory.exists():
                        directory.mkdir()
                        created.append(directory)
                tmp = _temp_beside(out.path)
                staged.append((out, tmp))
                out.writer(tmp)
                os.chmod(tmp, file_mode())
                with open(tmp, "rb") as handle:
                    os.fsync(handle.fileno())
            for out, tmp in staged:
                backup = None
                if out.path.is_file():
                    backup = _temp_beside(out.path)
                    os.unlink(backup)
                    try:  # a second name for the old contents, in case of a rollback
                        os.link(out.path, backup)
                    except OSError:  # a file system without hard links
                        shutil.copy2(out.path, backup)
                replaced.append((out.path, backup))
                os.replace(tmp, out.path)
        except BaseException:
            for target, backup in reversed(replaced):
                with contextlib.suppress(OSError):
                    if backup is not None:
                        os.replace(backup, target)
                    else:
                        os.unlink(target)
            for _out, tmp in staged:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            for directory in reversed(created):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            raise
        for _target, backup in replaced:
            if backup is not None:
                with contextlib.suppress(OSError):
                    os.unlink(backup)
