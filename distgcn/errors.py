"""User-facing errors.

Anything the user can fix (a bad file, a bad argument, a mismatched partition)
is raised as :class:`InputError`; the command line prints its message on one
line and exits with status 2, without a traceback.

Messages quote what they found in the user's files, and a file can hold any
byte: an escape sequence would clear or recolour the terminal, a carriage
return would hide the start of the line, a newline would make two. So every
message is passed through :func:`printable`, and parsers quote a token with
:func:`quoted`, which shows it escaped and cut to a readable length.
"""

from __future__ import annotations

from pathlib import Path


def printable(text: str) -> str:
    """``text`` with each character a terminal would act on or not show (control characters, DEL, line and
    paragraph separators, bidirectional overrides, ...) written as Python writes it in a string literal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def quoted(token: str | bytes, limit: int = 40) -> str:
    """A token from an input file as a message shows it: decoded as UTF-8 (bad bytes replaced), cut after
    ``limit`` characters, quoted and escaped as a Python string literal (``'\\x1b[2J'``)."""
    text = token.decode("utf-8", errors="replace") if isinstance(token, (bytes, bytearray)) else token
    if len(text) > limit:
        text = text[:limit] + "..."
    return repr(text)


class InputError(Exception):
    """Bad input that the user can fix: printed as one line, exit status 2."""

    def __init__(self, message: str, *, path: str | Path | None = None, line: int | None = None):
        where = ""
        if path is not None:
            where = f"{path}"
            if line is not None:
                where += f":{line}"
            where += ": "
        super().__init__(bounded(printable(where + message)))
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
