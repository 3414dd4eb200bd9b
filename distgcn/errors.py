"""User-facing errors.

Anything the user can fix (a bad file, a bad argument, a mismatched partition)
is raised as :class:`InputError`; the command line prints its message on one
line and exits with status 2, without a traceback.
"""

from __future__ import annotations

from pathlib import Path


class InputError(Exception):
    """Bad input that the user can fix: printed as one line, exit status 2."""

    def __init__(self, message: str, *, path: str | Path | None = None, line: int | None = None):
        where = ""
        if path is not None:
            where = f"{path}"
            if line is not None:
                where += f":{line}"
            where += ": "
        super().__init__(bounded(where + message))
        self.path = path
        self.line = line


MESSAGE_CHARS = 1000
"""The longest error line printed whole; a library's text quoted in one (zipfile quotes raw headers) can be far
longer, and is then shown by its start and its end."""


def bounded(message: str) -> str:
    """``message`` if it has at most MESSAGE_CHARS characters, else its start and end around ' [...] '."""
    if len(message) <= MESSAGE_CHARS:
        return message
    return message[:MESSAGE_CHARS * 3 // 4] + " [...] " + message[-(MESSAGE_CHARS // 4):]
