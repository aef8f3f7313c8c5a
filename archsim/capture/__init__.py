"""Capture logical traces from real PyTorch/transformers model runs (needs the `capture` extra).

`CaptureOptions` imports without torch; `capture_trace` / `run_uncaptured` import torch on first use so
that `archsim --help` and the analytic generators work on machines without the extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from archsim.capture.options import CaptureOptions
from archsim.errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path

    from archsim.capture.runner import CaptureResult

__all__ = ["CaptureOptions", "capture_trace", "require_capture_extra", "run_uncaptured"]


def require_capture_extra() -> None:
    """Raise a one-line ConfigError when torch or transformers is missing."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            f"capture needs the capture extra (pip install 'archsim[capture]'): {exc}", where="capture"
        ) from None


def capture_trace(options: CaptureOptions, out: str | Path, **kwargs: Any) -> CaptureResult:
    require_capture_extra()
    from archsim.capture.runner import capture_trace as run

    return run(options, out, **kwargs)


def run_uncaptured(options: CaptureOptions) -> CaptureResult:
    require_capture_extra()
    from archsim.capture.runner import run_uncaptured as run

    return run(options)
