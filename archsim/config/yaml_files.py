"""Reading config YAML files and resolving preset names: one place, one kind of error."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from archsim.errors import ConfigError
from archsim.inputs import read_text_input


def _duplicate_key(node: yaml.Node, where: str = "") -> tuple[str, int, int] | None:
    """The first mapping key given twice below `node`: (dotted path, its line, the first one's line)."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[object, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            path = f"{where}.{key}" if where else str(key)
            if key is not None and key != "<<":
                line = key_node.start_mark.line + 1
                if key in seen:
                    return path, line, seen[key]
                seen[key] = line
            found = _duplicate_key(value_node, path)
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            found = _duplicate_key(item, f"{where}[{index}]")
            if found:
                return found
    return None


# parsed trees by the file's text: a sweep builds the same system, memory, energy and GPU files at every point,
# and parsing them (pure-Python YAML) was most of a simulate point's time. The file is still read each time (a
# few microseconds), so an edited file is parsed again however quickly it was rewritten.
_PARSED: dict[str, Any] = {}
_PARSED_MAX = 128  # files kept, the oldest dropped first
_PARSED_MAX_CHARS = 1 << 20  # a larger file is parsed at every read (configs are a few KB)
# libyaml's parser when PyYAML has it (the same documents, several times faster); errors are re-read with the
# Python one so every message stays as it was
_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# levels of mappings and lists a config may nest: the deepest shipped YAML nests 6; thousands of levels would
# overflow the parser's stack (libyaml's composer recurses in C: a crash, not an exception)
MAX_NESTING = 100


def _nesting(text: str) -> tuple[int, int]:
    """An upper bound on how deep `text` nests, and the line where it is reached: the block indentation levels
    open, the compact `- ` entries starting the line and the flow brackets open (quoted text and comments
    skipped)."""
    indents: list[int] = []
    flow = deepest = deepest_line = 0
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.lstrip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        if flow == 0:
            indent = len(line) - len(stripped)
            while indents and indents[-1] >= indent:
                indents.pop()
            indents.append(indent)
        dashes = len(stripped) - len(stripped.lstrip("- ")) if stripped.startswith("- ") else 0
        quote = ""
        line_flow = flow
        for k, char in enumerate(stripped):
            if quote:
                if char == quote and (quote == "'" or stripped[k - 1] != "\\"):
                    quote = ""
            elif char in "'\"":
                quote = char
            elif char == "#" and (k == 0 or stripped[k - 1] in " \t"):
                break
            elif char in "[{":
                flow += 1
                line_flow = max(line_flow, flow)
            elif char in "]}":
                flow = max(flow - 1, 0)
        depth = len(indents) + dashes // 2 + line_flow
        if depth > deepest:
            deepest, deepest_line = depth, number
    return deepest, deepest_line


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML file; unreadable files, syntax errors and duplicate keys name the file (and the line).

    YAML itself lets a repeated key silently replace the first; in a config that hides a typo or a
    merge mistake, so it is refused. The tree is the caller's own (a copy of the one parse of this text).
    """
    file = str(path)
    text = read_text_input(path, ConfigError, what="YAML")
    if len(text) > _PARSED_MAX_CHARS:
        return _parse(text, file)
    if text not in _PARSED:
        tree = _parse(text, file)
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.pop(next(iter(_PARSED)))
        _PARSED[text] = tree
    return copy.deepcopy(_PARSED[text])


def _parse(text: str, file: str) -> Any:
    depth, line = _nesting(text)
    if depth > MAX_NESTING:
        raise ConfigError(f"nested about {depth:,} levels deep; a config nests at most {MAX_NESTING}", file=file,
                          where=f"line {line}")
    try:
        try:
            return _parse_with(_FAST_LOADER, text, file)
        except yaml.YAMLError:
            if _FAST_LOADER is yaml.SafeLoader:
                raise
            return _parse_with(yaml.SafeLoader, text, file)  # the Python parser's message for the same error
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else None
        raise ConfigError(f"not valid YAML: {getattr(exc, 'problem', exc)}", file=file, where=where) from None


def _parse_with(loader_type: Any, text: str, file: str) -> Any:
    """One parse: the node tree (checked for duplicate keys), then its data."""
    loader = loader_type(text)
    try:
        node = loader.get_single_node()
        duplicate = _duplicate_key(node) if node is not None else None
        if duplicate:
            key, line, first = duplicate
            raise ConfigError(f"key {key.rsplit('.', 1)[-1]!r} given twice (first on line {first})", file=file,
                              where=f"{key} (line {line})")
        return None if node is None else loader.construct_document(node)
    finally:
        loader.dispose()


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
