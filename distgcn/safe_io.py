"""Opening output files without following a symlink planted at the file's name.

A symlink at an output name (metrics, weights, a checkpoint's temporary file)
would redirect the write onto an unrelated file, perhaps one the user cannot
get back. Writers go through these helpers, which refuse a symlink as the last
path component (``O_NOFOLLOW``) and turn OS errors into one-line InputErrors.
Directories the user names may be symlinks (scratch space often is): those
are the user's choice, not a planted redirection.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, BinaryIO

from .errors import InputError


def prepare_output_dir(path: Path, what: str = "output directory") -> Path:
    """Create ``path`` (and its parents) if needed; refuse an unwritable directory."""
    if path.exists() and not path.is_dir():
        raise InputError(f"{what} is not a directory", path=path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create {what} ({exc.strerror})", path=path) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise InputError(f"{what} is not writable", path=path)
    return path


def open_new_file(path: Path) -> BinaryIO:
    """A fresh file for writing; fails if anything (file or symlink) already has the name."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    return os.fdopen(os.open(path, flags, 0o644), "wb")


def check_output_path(path: Path) -> None:
    """Make sure ``path`` can be written later: its directory exists (created) and it is no symlink."""
    if path.is_symlink():
        raise InputError("output file is a symbolic link; refusing to write through it", path=path)
    if path.exists() and not path.is_file():
        raise InputError("output exists and is not a regular file", path=path)
    if path.parent.exists() and not path.parent.is_dir():
        raise InputError(f"cannot write: {path.parent} is not a directory", path=path)
    prepare_output_dir(path.parent, what="directory of the output file")


def open_output(path: Path, *, binary: bool = False, append: bool = False) -> IO:
    """Open an output file for (over)writing or appending, never through a symlink at its name."""
    check_output_path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    try:
        return os.fdopen(os.open(path, flags, 0o644), ("a" if append else "w") + ("b" if binary else ""))
    except OSError as exc:
        raise InputError(f"cannot write ({exc.strerror})", path=path) from None
