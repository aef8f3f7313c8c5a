"""Reading config YAML files and resolving preset names: one place, one kind of error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from archsim.errors import ConfigError


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML file; unreadable files and syntax errors name the file (and the line)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=str(path)) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else None
        raise ConfigError(f"not valid YAML: {getattr(exc, 'problem', exc)}", file=str(path), where=where) from None


def resolve_preset(name_or_path: str | Path, presets_dir: Path, kind: str) -> Path:
    """A file path, or the name of a preset in `presets_dir` (`g25` -> presets_dir/g25.yaml)."""
    path = Path(name_or_path)
    if path.exists() or path.suffix:
        return path
    preset = presets_dir / f"{name_or_path}.yaml"
    if not preset.exists():
        known = ", ".join(sorted(p.stem for p in presets_dir.glob("*.yaml")))
        raise ConfigError(f"no {kind} file or preset {str(name_or_path)!r} (presets: {known})")
    return preset
