"""User-facing errors.

Anything the user can fix (a bad file, a bad argument, a mismatched partition)
is raised as :class:`InputError`; the command line prints its message on one
line and exits with status 2, without a traceback.

Messages quote what they found in the user's files, and a file can hold any
byte: an escape sequence would clear or recolour the terminal, a carriage
return would hide the start of the line, a newline would make two. So every
message is passed through :func:`printable`, and parsers quote a token with
:func:`quoted`, which shows it escaped and cut to a readable length.

The environment fails in ways a user fixes too: a full disk, a file name the
file system refuses, a symbolic link loop, a permission. Such an ``OSError``
that names its file is bad input as well (:func:`as_input_error`), worded with
what to do (:func:`describe_os_error`); the command line, the agreement of
ranks (:mod:`distgcn.comm.collective`) and the writers (:mod:`distgcn.io.safe_io`)
all answer it so.
"""

from __future__ import annotations

import errno
import os
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


ENVIRONMENT_ERRNOS: dict[int, str] = {
    errno.ENOSPC: "no space left on the device: free space there or write elsewhere",
    errno.EDQUOT: "disk quota exceeded: free space there or write elsewhere",
    errno.EFBIG: "file too large: over the limit of its file system or of this process (ulimit -f)",
    errno.ENAMETOOLONG: "file name too long for the file system: choose a shorter name",
    errno.ELOOP: "too many levels of symbolic links (a link loop?): fix or remove the link",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only file system: write elsewhere",
    errno.EMFILE: "too many open files: raise the limit (ulimit -n)",
    errno.ENFILE: "too many open files on this system",
    errno.EIO: "input/output error (a failing disk or network file system?)",
    errno.ESTALE: "stale file handle (the network file system lost the file)",
    errno.ENOENT: "no such file or directory",
    errno.ENOTDIR: "a part of the path is not a directory",
    errno.EISDIR: "is a directory",
    errno.ENXIO: "no such device",
    errno.ENODEV: "no such device",
}
"""The errors of the operating system that bad input or the environment causes, each with what to do.
Any other ``OSError`` (a bad file descriptor, an invalid argument) is a fault of the program."""


def describe_os_error(exc: OSError) -> str:
    """What went wrong, and what to do where that is clear (``no space left on the device: free space ...``)."""
    return ENVIRONMENT_ERRNOS.get(exc.errno or 0) or exc.strerror or str(exc)


def is_environment_error(exc: BaseException) -> bool:
    """Whether ``exc`` is an ``OSError`` that the input or the environment caused (:data:`ENVIRONMENT_ERRNOS`)."""
    return isinstance(exc, OSError) and exc.errno in ENVIRONMENT_ERRNOS


def as_input_error(exc: BaseException) -> InputError | None:
    """``exc`` as bad input for the user, or None where it is a fault of the program.

    An InputError is itself; an OSError of the environment (:func:`is_environment_error`)
    that names its file becomes one line naming that file. One without a file name
    cannot say which file it is about: the code that wrote or read it must word it.
    """
    if isinstance(exc, InputError):
        return exc
    filename = getattr(exc, "filename", None)
    if is_environment_error(exc) and isinstance(filename, (str, bytes, os.PathLike)):
        return InputError(describe_os_error(exc), path=os.fsdecode(filename))  # type: ignore[arg-type]
    return None


def lookup_failure(path: str | Path) -> str | None:
    """Why the system cannot look ``path`` up (a link loop, a name too long, a directory denied), worded as
    :func:`describe_os_error`; None if it exists or is simply absent (no such file, or a file where the path
    needs a directory). ``Path.exists`` says False for a link loop too."""
    try:
        os.stat(path)
    except OSError as exc:
        return None if exc.errno in (errno.ENOENT, errno.ENOTDIR) else describe_os_error(exc)
    return None


def resolved(path: str | Path) -> Path:
    """``Path(path).resolve()``, a symbolic link loop on the way an InputError naming ``path`` (pathlib raises
    RuntimeError for one before Python 3.13, OSError from 3.13 on)."""
    try:
        return Path(path).resolve()
    except RuntimeError:
        raise InputError(f"cannot follow it ({ENVIRONMENT_ERRNOS[errno.ELOOP]})", path=path) from None
    except OSError as exc:
        raise InputError(f"cannot follow it ({describe_os_error(exc)})", path=path) from None
