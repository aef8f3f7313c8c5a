"""A strict reader over one YAML mapping: every key is consumed or reported, errors carry the dotted path."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

from archsim.errors import ConfigError
from archsim.limits import INT64_MAX

T = TypeVar("T")
_MISSING: Any = object()



class Section:
    """Wraps a mapping at dotted `path` of `file`; `done()` rejects keys nobody asked for."""

    def __init__(self, data: object, path: str, file: str | None) -> None:
        if not isinstance(data, dict):
            raise ConfigError(f"expected a mapping, got {type(data).__name__}", file=file, where=path)
        self.data: dict[str, Any] = data
        self.path = path
        self.file = file
        self._used: set[str] = set()

    def where(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError(message, file=self.file, where=self.where(key))

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        self._used.add(key)
        if key not in self.data:
            if default is _MISSING:
                raise self.error(key, "missing required key")
            return default
        return self.data[key]

    def parsed(self, key: str, parser: Callable[[object, str], T], default: Any = _MISSING) -> T:
        value = self.raw(key, default)
        if value is default and default is not _MISSING:
            return value
        try:
            return parser(value, self.where(key))
        except ConfigError as exc:
            raise exc.located(self.file) from None

    def int(self, key: str, default: Any = _MISSING, *, minimum: int | None = 0, maximum: int = INT64_MAX) -> int:
        """An integer in [minimum, maximum]; by default at most what an int64 (numpy, the kernels) holds."""
        value = self.raw(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"expected an integer, got {value!r}")
        if minimum is not None and value < minimum:
            raise self.error(key, f"must be >= {minimum}, got {value}")
        if value > maximum:
            raise self.error(key, f"must be <= {maximum:,}, got {value:,}")
        return value

    def float(self, key: str, default: Any = _MISSING) -> float:
        """A finite number (YAML's .nan and .inf are no value of any config key)."""
        value = self.raw(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(key, f"expected a number, got {value!r}")
        try:
            number = float(value)
        except OverflowError:  # an integer beyond a float's range
            raise self.error(key, "is beyond the largest number a float holds (about 1.8e308)") from None
        if not math.isfinite(number):
            raise self.error(key, f"expected a finite number, got {value!r}")
        return number

    def bool(self, key: str, default: Any = _MISSING) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {value!r}")
        return value

    def str(self, key: str, default: Any = _MISSING) -> str:
        value = self.raw(key, default)
        if not isinstance(value, str):
            raise self.error(key, f"expected a string, got {value!r}")
        return value

    def name(self, key: str, default: Any = _MISSING) -> str:
        """A name shown in tables and JSON: a string with something printable in it, on one line."""
        value = self.str(key, default)
        if not value.strip() or not value.isprintable():
            raise self.error(key, f"expected a name (printable, not blank), got {value!r}")
        return value

    def choice(self, key: str, options: tuple[str, ...], default: Any = _MISSING) -> str:
        value = self.str(key, default)
        if value not in options:
            raise self.error(key, f"unknown value {value!r} (choose one of {', '.join(options)})")
        return value

    def sub(self, key: str, default: Any = _MISSING) -> Section:
        value = self.raw(key, default)
        return Section(value, self.where(key), self.file)

    def done(self) -> None:
        unknown = sorted(set(self.data) - self._used)
        if unknown:
            raise ConfigError(
                f"unknown key {unknown[0]!r}" + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""),
                file=self.file,
                where=self.where(unknown[0]),
            )
