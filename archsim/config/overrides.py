"""Deep merge of preset and file mappings, and `--set dotted.key=value` overrides."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from archsim.errors import ConfigError


def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """`top` wins; nested mappings merge key by key. Neither input is modified."""
    merged = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def apply_overrides(tree: dict[str, Any], assignments: tuple[str, ...] | list[str], file: str | None) -> None:
    """Apply `a.b.c=value` strings in place. The value is read as YAML ("30ns", "4", "true").

    The parent path must exist; the leaf may be new only if its parent is a mapping, so that the strict
    loader then reports an unknown leaf with its full dotted path.
    """
    for assignment in assignments:
        if "=" not in assignment:
            # only a command line's --set gets here (a sweep file's `set` is checked where it is read)
            raise ConfigError(f"{assignment!r} is not of the form dotted.key=value", where="--set")
        dotted, text = assignment.split("=", 1)
        keys = dotted.strip().split(".")
        if not all(k and k == k.strip() for k in keys):
            raise ConfigError(f"{assignment!r}: a dotted key of non-empty parts without spaces, e.g. "
                              "memory.timing.tFAW=30ns", where="--set")
        node: Any = tree
        for depth, key in enumerate(keys[:-1]):
            if not isinstance(node, dict) or key not in node:
                raise ConfigError("no such config path", file=file, where=".".join(keys[: depth + 1]))
            node = node[key]
        if not isinstance(node, dict):
            raise ConfigError("cannot set a key inside a non-mapping", file=file, where=dotted)
        try:
            node[keys[-1]] = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"cannot read value {text!r}: {exc}", file=file, where=dotted) from None
