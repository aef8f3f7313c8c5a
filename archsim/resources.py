"""Where archsim's shipped data lives: the one place that knows.

The repository keeps `configs/`, `isa/` and `traces/` at its top level. A wheel (or a plain, non-editable
`pip install .`) carries them inside the package as `archsim/_data/{configs,isa,traces}` (setup.py's build
step copies them there); a source checkout or an editable install reads them where they are. Every module
that needs a shipped file asks here instead of counting `parent.parent` from its own `__file__`.
"""

from __future__ import annotations

import functools
import os
from importlib import resources
from pathlib import Path

DATA_DIRS: tuple[str, ...] = ("configs", "isa", "traces")
# the source checkout: archsim/resources.py -> archsim/ -> the repository
SOURCE_ROOT = Path(__file__).resolve().parent.parent
PACKAGED = "_data"


@functools.cache
def data_root() -> Path:
    """The directory holding `configs/`, `isa/` and `traces/`: the packaged copy, else the source checkout."""
    packaged = Path(str(resources.files("archsim"))) / PACKAGED
    if (packaged / "configs").is_dir():
        return packaged
    return SOURCE_ROOT


def data_path(*parts: str) -> Path:
    """A shipped file or folder, e.g. data_path("configs", "memory", "hbm3.yaml")."""
    if not parts or parts[0] not in DATA_DIRS:
        raise ValueError(f"shipped data lives under one of {DATA_DIRS}, got {parts!r}")
    return data_root().joinpath(*parts)


def display_path(path: str | os.PathLike[str]) -> str:
    """How outputs name a file: a shipped one by its path inside the data root (`configs/memory/hbm3.yaml`,
    the same from every checkout and install); any other one as given, made relative to the working
    directory when it lies below it."""
    text = os.fspath(path)
    resolved = Path(text).resolve()
    for root in {data_root(), SOURCE_ROOT}:
        try:
            relative = resolved.relative_to(root.resolve())
        except ValueError:
            continue
        if relative.parts and relative.parts[0] in DATA_DIRS:
            return relative.as_posix()
    if os.path.isabs(text):
        try:
            return resolved.relative_to(Path.cwd().resolve()).as_posix()
        except ValueError:
            return text
    return text


def display_paths_in(text: str) -> str:
    """`text` (a message) with every shipped file it names by absolute path named as display_path names it."""
    for root in {data_root(), SOURCE_ROOT}:
        for name in DATA_DIRS:
            text = text.replace(f"{root.resolve()}{os.sep}{name}{os.sep}", f"{name}/")
    return text
