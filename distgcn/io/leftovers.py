"""Leftovers: what a process makes for a while (a temporary file, a scratch directory) says whose it is.

The rule: every process removes the temporaries it made on any exit it can
catch (an exception, a stop signal, a job's abort: :func:`distgcn.runtime.signals.add_cleanup`),
and a later run removes those of a process that could not (SIGKILL, the
out-of-memory killer). For that, a temporary's name carries its maker
(:func:`owned_name`: ``distgcn-HOST-PID-RANDOM``), and :func:`remove_abandoned`
deletes, in one directory, those named so whose maker ran on this host, belongs
to this user and has ended. A live run's, another host's, another user's, a
symbolic link or a name that only looks similar stays. A partition's staging
directory records its maker in an owner file instead
(:func:`distgcn.shard.directory.remove_abandoned_staging`), with the same test of
its process (:func:`process_exists`).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import secrets
import shutil
import socket
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from distgcn.runtime import signals

OWNER = r"distgcn-(?P<host>[0-9a-f]{8})-(?P<pid>[1-9][0-9]{0,9})-[0-9a-f]{8}"
"""The part of a temporary's name that :func:`owned_name` writes: host, process id, a random tag."""


def host_tag() -> str:
    """This host, as temporaries' names carry it: 8 hex digits of the SHA-256 of its name (any host name fits)."""
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


PID_DIGITS = 7
"""The most digits of a process id (Linux's largest pid_max, 2**22, has 7)."""
OWNED_EXTRA = len("distgcn-") + 8 + len("-") + PID_DIGITS + len("-") + 8
"""The most characters :func:`owned_name` adds to its prefix and suffix."""


def owned_name(prefix: str, suffix: str = "") -> str:
    """A new name ``PREFIXdistgcn-HOST-PID-RANDOMSUFFIX``: whose it is, for :func:`remove_abandoned`."""
    return f"{prefix}distgcn-{host_tag()}-{os.getpid()}-{secrets.token_hex(4)}{suffix}"


def process_exists(pid: int) -> bool:
    """Whether a process with this id runs on this host (one of another user's counts: it is not ours to judge).

    A zombie (ended, not yet reaped by its parent) does not: it will never remove its temporaries.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def abandoned_by(path: Path, pattern: re.Pattern[str]) -> int | None:
    """The id of the process that made ``path`` and has ended, or None if it is not such a leftover.

    A leftover is named by ``pattern`` (which captures :data:`OWNER`), is no
    symbolic link, belongs to this user and was made on this host by a process
    that no longer exists. Anything else (a live run's temporary, another
    host's, a user's file of a similar name) is not.
    """
    match = pattern.fullmatch(path.name)
    if match is None or match["host"] != host_tag():
        return None
    try:
        info = path.lstat()
    except OSError:
        return None
    pid = int(match["pid"])
    if stat.S_ISLNK(info.st_mode) or info.st_uid != os.getuid() or process_exists(pid):
        return None
    return pid


def remove_abandoned(directory: Path, pattern: re.Pattern[str], what: str,
                     accept: Callable[[Path], bool] = Path.is_file) -> None:
    """Delete the leftovers in ``directory`` (:func:`abandoned_by`) that ``accept`` takes, saying so on stderr.

    ``accept``: a regular file, by default; for a directory, a check of what it holds.
    """
    try:
        entries = sorted(Path(entry.path) for entry in os.scandir(directory))
    except OSError:
        return
    for path in entries:
        pid = abandoned_by(path, pattern)
        if pid is None or not accept(path):
            continue
        why = f"{what} left by an interrupted run (process {pid} on this host has ended)"
        try:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError as exc:
            print(f"distgcn: could not remove {path}, {why}: {exc.strerror or exc}", file=sys.stderr, flush=True)
            continue
        print(f"distgcn: removed {path}: {why}", file=sys.stderr, flush=True)


def remove_tree(path: Path) -> None:
    """``shutil.rmtree`` that never fails (what cannot be removed, a later run can)."""
    shutil.rmtree(path, ignore_errors=True)


@contextmanager
def scratch_directory(kind: str) -> Iterator[Path]:
    """A new private directory ``distgcn-HOST-PID-RANDOM.KIND`` under ``TMPDIR``, removed when the block ends.

    Also removed by the stop-signal cleanups; those that killed processes left
    are removed first. OSError if it cannot be made (the caller says where
    ``TMPDIR`` points).
    """
    parent = Path(tempfile.gettempdir())
    suffix = f".{kind}"
    remove_abandoned(parent, re.compile(rf"{OWNER}{re.escape(suffix)}"), f"a {kind} scratch directory",
                     accept=lambda path: path.is_dir())
    key: int | None = None
    directory: Path | None = None
    try:
        with signals.stops_deferred():  # made and registered together
            while directory is None:
                candidate = parent / owned_name("", suffix)
                try:
                    candidate.mkdir(mode=0o700)
                except FileExistsError:
                    continue
                directory = candidate
            key = signals.add_cleanup(functools.partial(remove_tree, directory))
        yield directory
    finally:
        if directory is not None:
            remove_tree(directory)
        if key is not None:
            signals.remove_cleanup(key)
