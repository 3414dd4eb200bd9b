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
        super().__init__(where + message)
        self.path = path
        self.line = line
