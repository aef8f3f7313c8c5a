"""The one exception family the CLI turns into a single line and exit code 2."""

from __future__ import annotations


class ArchsimError(Exception):
    """Bad user input: the message names the file and the dotted config path or line number."""

    def __init__(self, message: str, *, file: str | None = None, where: str | None = None) -> None:
        self.file = file
        self.where = where
        self.detail = message
        super().__init__(self.render())

    def __reduce__(self) -> tuple:
        # keyword-only fields: the default reduce would rebuild from the rendered message alone (and fail), so
        # an error raised in a worker process (`serve --jobs`, sweeps) reaches the parent whole
        return _rebuild, (type(self), self.detail, self.file, self.where)

    def located(self, file: str | None) -> ArchsimError:
        """The same error with `file` filled in when the raiser did not know it."""
        if self.file or not file:
            return self
        return type(self)(self.detail, file=file, where=self.where)

    def render(self) -> str:
        location = ""
        if self.file and self.where:
            location = f"{self.file}: {self.where}: "
        elif self.file:
            location = f"{self.file}: "
        elif self.where:
            location = f"{self.where}: "
        return f"{location}{self.detail}"


def _rebuild(cls: type[ArchsimError], detail: str, file: str | None, where: str | None) -> ArchsimError:
    return cls(detail, file=file, where=where)


class ConfigError(ArchsimError):
    """A config value is unknown, missing, badly typed or inconsistent (`where` is the dotted path)."""


class TraceError(ArchsimError):
    """A trace file does not parse, is truncated or corrupted (`where` is `line N` or a column)."""


# the one message for a trace without requests, whichever reader or format detection finds it
EMPTY_TRACE = "the trace holds no requests"


class ProgramError(ArchsimError):
    """A PNM program is malformed (`where` is `line N`)."""
