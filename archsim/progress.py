"""Progress bars: one rule for every command. Shown on stderr only when it is a terminal, only after 2 s (a
quick run shows nothing), never with --quiet; otherwise a bar that does nothing, so callers need no branches."""

from __future__ import annotations

import sys
from typing import Any


class _Silent:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass

    def set_postfix_str(self, text: str = "", refresh: bool = True) -> None:
        pass

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def progress_bar(total: int | None, unit: str, desc: str, quiet: bool = False) -> Any:
    """A tqdm bar of `total` `unit`s titled `desc`, or a silent stand-in (see the module docstring)."""
    if quiet or not sys.stderr.isatty():
        return _Silent()
    from tqdm import tqdm

    return tqdm(total=total, unit=unit, desc=desc, mininterval=0.5, delay=2.0, leave=False, unit_scale=True,
                file=sys.stderr)
