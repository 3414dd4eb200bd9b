"""The output contract: every file and directory distgcn writes goes through this module.

1. **Nothing distgcn did not write is replaced or deleted.** Before a path is
   written, whatever already has its name must be distgcn's own earlier output
   *of the same kind*, recognised by its content (:data:`KINDS`), or the write is
   refused with an InputError naming the path. A metrics file is JSON lines
   whose first record carries the epoch keys; a weights, export or graph
   ``.npz`` carries the zip archive comment ``distgcn:KIND`` (a comment, not an
   extra array, so the arrays and ``len(npz.files)`` stay as documented); a
   checkpoint starts with its magic header; a report's ``summary.md`` starts
   with its title and its figures carry a PNG text chunk ``distgcn=report`` (or,
   written before the marker, are linked from that summary); a partition
   directory holds a ``meta.json`` with distgcn's keys and nothing but the
   files ``partition`` writes. ``train`` and ``report`` replace their own output
   of the same kind at the same path (a re-run); ``partition --out`` needs
   ``--force`` for that. A file of another kind is always refused.
2. **Protected paths.** A directory output is never the working directory or
   one of its ancestors, nor an input of the run or a directory containing one,
   with or without ``--force``.
3. **Atomic replacement.** A file is written under a temporary name in its
   own directory (created ``O_EXCL|O_NOFOLLOW``), fsynced and renamed over the
   final name; a failure (a full disk, a signal turned into an exception)
   removes the temporary and leaves the old file whole. A growing file (the
   metrics) is renamed into place once its first record is written, then
   appended to a record at a time; a record that cannot be written whole is
   cut off again, so the file always ends on a whole record
   (:class:`GrowingFile`). A directory is built under a temporary name; an
   old one is renamed aside, the new one renamed in, and only then the old
   one deleted. An output whose temporary name the file system would refuse
   (too long) is refused before anything is written.
4. **No symlinks.** An output file, or a directory distgcn replaces, that is a
   symbolic link is refused. A directory the user names to hold outputs
   (checkpoints, a report, exports) may be a symlink: that is the user's
   choice of place (scratch space often is one), not a planted redirection.
5. **Errors of the environment name the output.** A full disk, a quota, a
   link loop: one line naming the path and what to do (an InputError,
   :func:`distgcn.errors.describe_os_error`), never a traceback.
6. **One run per checkpoint directory.** :func:`lock_directory` holds an
   ``flock`` on a lock file in the directory for the life of the process; a
   second run that wants it is refused (:mod:`distgcn.io.checkpoint`).
7. **No leftovers.** A temporary's name says which process on which host made
   it (:mod:`distgcn.io.leftovers`). Its maker removes it on every exit it can
   catch (an exception, a stop signal, a job's abort); what a SIGKILL leaves,
   the next write into the same directory removes once that process has ended.
8. **One writer per output.** :func:`claimed` holds an ``flock`` on a lock
   file beside an output (``.NAME.distgcn-lock``, naming the holder) while a
   command writes it; a second distgcn process that wants the same output is
   refused at its start, naming the holder, instead of renaming its file over
   the first one's.
9. **Nothing inside a partition directory.** ``partition --force`` replaces
   such a directory as a whole and refuses one holding files it did not write,
   so no other output (a metrics file, a checkpoint or report directory,
   another partition) may be placed in one, nor use one as its directory.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import re
import socket
import sys
import zipfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO

import numpy as np

from distgcn.errors import InputError, describe_os_error, lookup_failure, resolved
from distgcn.io.leftovers import (
    OWNED_EXTRA,
    OWNER,
    owned_name,
    remove_abandoned,
    remove_tree,
)
from distgcn.runtime import signals
from distgcn.runtime.faults import inject_slow_write

SNIFF_BYTES = 1 << 20
"""How much of a file is read to recognise it (a metrics file's first record, with its run header, fits)."""


@dataclass(frozen=True)
class Kind:
    """A kind of output, and how distgcn recognises its own earlier output of that kind."""

    name: str
    recognise: Callable[[Path], bool]
    npz_label: str | None = None
    """For a ``.npz`` kind: the zip comment ``distgcn:LABEL`` that marks it."""


def _head(path: Path, size: int = SNIFF_BYTES) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(size)
    except OSError:
        return b""


def _is_metrics(path: Path) -> bool:
    first = _head(path).split(b"\n", 1)[0]
    try:
        record = json.loads(first)
    except (ValueError, RecursionError):  # RecursionError: nested too deeply to be ours
        return False
    return isinstance(record, dict) and {"epoch", "loss", "epoch_s"} <= record.keys()


def _npz_comment(path: Path) -> bytes | None:
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.comment
    except (OSError, zipfile.BadZipFile, ValueError):
        return None


def _npz_kind(name: str, label: str) -> Kind:
    return Kind(name, lambda path: _npz_comment(path) == f"distgcn:{label}".encode(), label)


REPORT_TITLE = "# distgcn report\n"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_MARKER = {"distgcn": "report"}
"""The PNG text chunk every report figure carries (:func:`distgcn.report.figures`)."""


def _is_report_summary(path: Path) -> bool:
    return _head(path, len(REPORT_TITLE)) == REPORT_TITLE.encode()


def _is_report_figure(path: Path) -> bool:
    head = _head(path, 1 << 16)
    if not head.startswith(PNG_SIGNATURE):
        return False
    if b"tEXtdistgcn\x00report" in head:
        return True
    summary = path.with_name("summary.md")  # a figure of a report written before the marker existed
    return _is_report_summary(summary) and f"]({path.name})" in summary.read_text(errors="replace")


PARTITION_FILE = re.compile(r"^(meta\.json|parts\.npy|shard-\d{5,}\.npz)$")


def _is_partition(path: Path) -> bool:
    """meta.json with distgcn's keys, and only files ``partition`` writes."""
    try:
        names = [entry.name for entry in path.iterdir()]
        meta = json.loads((path / "meta.json").read_text())
    except (OSError, ValueError, RecursionError):
        return False
    return (isinstance(meta, dict) and {"format_version", "partition_id", "parts", "shards"} <= meta.keys()
            and all(PARTITION_FILE.match(name) for name in names))


METRICS = Kind("metrics file", _is_metrics)
WEIGHTS = _npz_kind("weights file", "weights")
EXPORT = _npz_kind("predictions export", "export")
GRAPH = _npz_kind("graph .npz", "graph")
CHECKPOINT = Kind("checkpoint", lambda path: _head(path, 19) == b"DISTGCN-CHECKPOINT-")
REPORT_SUMMARY = Kind("report summary", _is_report_summary)
REPORT_FIGURE = Kind("report figure", _is_report_figure)
PARTITION = Kind("partition directory", _is_partition)
CALIBRATION = Kind("calibration file", lambda path: b'"format": "distgcn-calibration"' in _head(path, 256))
KINDS = (METRICS, WEIGHTS, EXPORT, GRAPH, CHECKPOINT, REPORT_SUMMARY, REPORT_FIGURE, PARTITION, CALIBRATION)


def is_output(path: Path, kind: Kind) -> bool:
    """True if ``path`` is distgcn's own output of ``kind`` (a regular file or directory, no symlink)."""
    if path.is_symlink():
        return False
    wanted = path.is_dir() if kind is PARTITION else path.is_file()
    return wanted and kind.recognise(path)


PARTITION_KEYS = frozenset({"format_version", "partition_id", "parts", "shards"})


def enclosing_partition(path: Path, *, itself: bool = False) -> Path | None:
    """The partition directory that ``path`` lies inside (any level up; with ``itself``, ``path`` too), or None.

    A directory counts if its meta.json is a JSON object with distgcn's keys, whatever else it holds.
    """
    real = Path(os.path.realpath(path))
    for ancestor in (real, *real.parents) if itself else real.parents:
        meta = ancestor / "meta.json"
        if not meta.is_file():
            continue
        try:
            with open(meta, "rb") as fh:
                found = json.loads(fh.read(SNIFF_BYTES))
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(found, dict) and PARTITION_KEYS <= found.keys():
            return ancestor
    return None


def refuse_inside_partition(path: Path, what: str, *, itself: bool = False) -> None:
    """Refuse an output inside a partition directory (with ``itself``: or that is one, a directory that would
    hold outputs), which ``partition --force`` replaces as a whole."""
    home = enclosing_partition(path, itself=itself)
    if home is not None:
        where = "is" if home == Path(os.path.realpath(path)) else "would lie inside"
        raise InputError(f"the {what} {where} the partition directory {home}, which distgcn replaces as a whole: "
                         "choose a place outside it", path=path)


def prepare_output_dir(path: Path, what: str = "output directory") -> Path:
    """Create ``path`` (and its parents) if needed; refuse an unwritable directory or one inside a partition."""
    _check_reachable(path, what)
    if path.exists() and not path.is_dir():
        raise InputError(f"{what} is not a directory", path=path)
    refuse_inside_partition(path, what, itself=True)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if path.is_symlink():
            raise InputError(f"{what} is a symbolic link to a directory that does not exist", path=path) from None
        raise InputError(f"cannot create {what} ({exc.strerror})", path=path) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise InputError(f"{what} is not writable", path=path)
    return path


def _check_reachable(path: Path, what: str) -> None:
    """Refuse a path the system cannot look up: behind a link loop, a name too long, a directory denied
    (``Path.exists`` would call it absent, and the write would fail later with a less clear error)."""
    failure = lookup_failure(path)
    if failure is not None:
        raise InputError(f"cannot use the {what} ({failure})", path=path)


HIDDEN_NAME_EXTRA = len(".") + len(".") + OWNED_EXTRA + len(".tmp")
"""How much longer than an output's name the names are under which it is built, at most: a file's temporary
``.NAME.distgcn-HOST-PID-RANDOM.tmp`` (:func:`_temporary`); a partition's staging ``.NAME.xxxxxxxx``, the old one
set aside (:func:`replace_directory`) and an output's lock file ``.NAME.distgcn-lock`` are shorter."""


def name_max(directory: Path) -> int:
    """The longest file name (in bytes) the file system of ``directory`` (or of its nearest existing
    ancestor) allows; 255, the common limit, where it cannot be asked."""
    for candidate in (directory, *directory.parents):
        try:
            return os.pathconf(candidate, "PC_NAME_MAX")
        except (OSError, ValueError):
            continue
    return 255


def check_name_length(path: Path, flag: str | None = None) -> None:
    """Refuse an output whose name, or the hidden name it is built under, is longer than its file system allows:
    before anything is written, rather than a failure half-way (a 250-byte name is legal, its temporary's is
    not). ``flag`` names the option that gave the path, for the advice."""
    length = len(os.fsencode(path.name))
    limit = name_max(path.parent)
    if length + HIDDEN_NAME_EXTRA > limit:
        choose = f"give {flag} a shorter name" if flag else "choose a shorter name"
        hidden = "" if length > limit else f", and distgcn builds it under a hidden name {HIDDEN_NAME_EXTRA} " \
            "bytes longer"
        raise InputError(f"file name too long: {length} bytes{hidden}; this file system allows {limit}: {choose} "
                         f"(at most {limit - HIDDEN_NAME_EXTRA} bytes)", path=path)


def check_target(path: Path, kind: Kind) -> Path:
    """Refuse to write ``path`` unless it is free or holds distgcn's own ``kind``; create its directory."""
    path = Path(path)
    _check_reachable(path.parent, "directory of the output file")
    check_name_length(path)
    if path.is_symlink():
        raise InputError("output file is a symbolic link; refusing to write through it", path=path)
    if path.exists() and not is_output(path, kind):
        raise InputError(f"exists and is not a distgcn {kind.name}; distgcn never replaces what it did not "
                         "write: move it away or choose another name", path=path)
    if path.parent.exists() and not path.parent.is_dir():
        raise InputError(f"cannot write: {path.parent} is not a directory", path=path)
    refuse_inside_partition(path, kind.name)
    prepare_output_dir(path.parent, what="directory of the output file")
    return path


TEMPORARY_FILE = re.compile(rf"\..+\.{OWNER}\.tmp")
"""A temporary file of :func:`write_file`: ``.NAME.distgcn-HOST-PID-RANDOM.tmp`` beside ``NAME``."""


def remove_abandoned_temporaries(directory: Path) -> None:
    """Delete the temporary files of :func:`write_file` in ``directory`` whose writer was killed."""
    remove_abandoned(directory, TEMPORARY_FILE, "a temporary file")


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


@contextmanager
def _temporary(path: Path) -> Iterator[tuple[Path, BinaryIO]]:
    """A new file beside ``path``, named after this process, never through a symlink; removed if the block fails.

    Registered with the stop-signal cleanups while the block runs (a job's abort
    unwinds nothing); what a SIGKILL leaves, the next write into the directory
    removes (:func:`remove_abandoned_temporaries`).
    """
    temporary = path.with_name(owned_name(f".{path.name}.", ".tmp"))
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fh: BinaryIO | None = None
    key: int | None = None
    try:
        with signals.stops_deferred():  # a stop between making the file and owning it would leave it
            try:
                fh = os.fdopen(os.open(temporary, flags, 0o644), "w+b")
            except OSError as exc:
                raise InputError(f"cannot write ({describe_os_error(exc)})", path=path) from None
            key = signals.add_cleanup(functools.partial(_unlink, temporary))
        inject_slow_write()
        yield temporary, fh
    except BaseException:
        if fh is not None:
            fh.close()
            _unlink(temporary)
        raise
    finally:
        if key is not None:
            signals.remove_cleanup(key)


def _install(temporary: Path, fh: IO, path: Path, kind: Kind) -> None:
    """Make ``temporary`` durable and rename it over ``path`` (checked again: it may have changed)."""
    fh.flush()
    os.fsync(fh.fileno())
    check_target(path, kind)
    os.replace(temporary, path)
    fsync_directory(path.parent)


def write_file(path: Path, kind: Kind, fill: Callable[[BinaryIO], None]) -> Path:
    """Write ``path`` atomically with ``fill(fh)``; the old file stays whole if anything fails."""
    path = check_target(Path(path), kind)
    remove_abandoned_temporaries(path.parent)
    with _temporary(path) as (temporary, fh):
        try:
            with fh:
                fill(fh)
                _install(temporary, fh, path, kind)
        except OSError as exc:
            raise InputError(f"cannot write the {kind.name} ({describe_os_error(exc)})", path=path) from None
    return path


def write_text(path: Path, kind: Kind, text: str) -> Path:
    """``text`` as UTF-8; a file name in it that is not UTF-8 on disk (undecodable bytes, which Python
    carries as surrogate escapes) is written with those bytes as ``\\xNN``."""
    return write_file(path, kind, lambda fh: fh.write(utf8(text)))


def utf8(text: str) -> bytes:
    """``text`` in UTF-8, each byte that a file name held undecoded (a surrogate escape) shown as ``\\xNN``."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace").encode("utf-8")


def write_npz(path: Path, kind: Kind, *args: np.ndarray, **arrays: np.ndarray) -> Path:
    """``numpy.savez`` atomically, marked as ``kind`` in the zip comment (np.load does not see it)."""
    assert kind.npz_label is not None, kind

    def fill(fh: BinaryIO) -> None:
        np.savez(fh, *args, **arrays)
        fh.seek(0)
        with zipfile.ZipFile(fh, "a") as archive:
            archive.comment = f"distgcn:{kind.npz_label}".encode()

    return write_file(path, kind, fill)


class GrowingFile:
    """An output that grows by whole records (the metrics, one JSON line per epoch), appended unbuffered.

    Each :meth:`write` is one or more whole records. One that cannot be written
    whole (a full disk, a quota) is cut off again, so the file always ends on a
    whole record; the file is closed and the failure is an InputError naming it.
    """

    def __init__(self, fh: BinaryIO, path: Path, kind: Kind):
        fh.flush()
        self._fh = fh
        self._fd = fh.fileno()
        self._end = os.lseek(self._fd, 0, os.SEEK_END)
        self.path = path
        self.kind = kind

    def write(self, records: bytes) -> None:
        """Append ``records`` (whole records) to the file, or leave it as it was and raise InputError."""
        view = memoryview(records)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError as exc:
            os.ftruncate(self._fd, self._end)
            self._fh.close()  # the run stops here: nothing more will be written
            raise InputError(f"cannot write the {self.kind.name} ({describe_os_error(exc)}); it ends with the "
                             "last record written whole", path=self.path) from None
        self._end += len(records)

    def flush(self) -> None:
        """Nothing to do: every :meth:`write` reached the file (unbuffered)."""

    def close(self) -> None:
        self._fh.close()


def start_growing_file(path: Path, kind: Kind, first: bytes) -> GrowingFile:
    """Write ``first`` atomically over ``path`` and return the file open for appending what follows.

    Until ``first`` is complete, the old file is untouched; afterwards the open
    descriptor keeps writing to the renamed file, a whole record at a time (:class:`GrowingFile`).
    """
    path = check_target(Path(path), kind)
    remove_abandoned_temporaries(path.parent)
    with _temporary(path) as (temporary, fh):
        try:
            fh.write(first)
            _install(temporary, fh, path, kind)
        except OSError as exc:
            raise InputError(f"cannot write the {kind.name} ({describe_os_error(exc)})", path=path) from None
    return GrowingFile(fh, path, kind)


def remove_output(path: Path, kind: Kind) -> None:
    """Delete ``path`` only if it is distgcn's own ``kind`` (what is not ours stays)."""
    if is_output(path, kind):
        path.unlink(missing_ok=True)


def check_directory_target(out: Path, kind: Kind, *, force: bool, inputs: Iterable[Path] = (),
                           flag: str = "--out") -> Path:
    """Refuse a directory output that is protected, not ours, or (without ``force``) an earlier output."""
    out = Path(out)
    _check_reachable(out.parent, f"parent directory of {flag}")
    if out.is_symlink():
        raise InputError(f"output is a symbolic link; distgcn never writes through one: give {flag} a directory "
                         "that is not a link", path=out)
    if out.exists() and not out.is_dir():
        raise InputError("output exists and is not a directory; refusing to replace it", path=out)
    check_name_length(out, flag)
    target = resolved(out)
    cwd = resolved(Path.cwd())
    if target == cwd or target in cwd.parents:
        raise InputError("output is the working directory or one of its parents; distgcn never replaces it, "
                         "even with --force: choose a new directory", path=out)
    for given in inputs:
        source = resolved(given)
        if source == target or target in source.parents:
            raise InputError(f"output is or contains the input {given}; distgcn never replaces an input, even "
                             "with --force: choose another directory", path=out)
    if out.exists() and any(out.iterdir()):
        if not is_output(out, kind):
            raise InputError(f"exists and is not a distgcn {kind.name} (it holds files distgcn did not write); "
                             "distgcn never replaces it, even with --force: choose another directory", path=out)
        if not force:
            raise InputError(f"exists and holds an earlier {kind.name} (pass --force to replace it)", path=out)
    refuse_inside_partition(out, kind.name)
    prepare_output_dir(out.parent, what=f"parent directory of {flag}")
    return out


def aside_pattern(out: Path) -> re.Pattern[str]:
    """The names :func:`replace_directory` gives an old ``out`` while it swaps in the new one."""
    return re.compile(rf"\.{re.escape(out.name)}\.{OWNER}\.old")


def replace_directory(staging: Path, out: Path, kind: Kind, *, force: bool, inputs: Iterable[Path] = ()) -> None:
    """Rename the finished ``staging`` to ``out``; an old ``out`` is renamed aside first, deleted last.

    The old one is deleted with a stop signal held back (and by the stop-signal
    cleanups in a job); what a SIGKILL leaves of it, the next write of ``out``
    removes (:func:`aside_pattern`).
    """
    check_directory_target(out, kind, force=force, inputs=inputs)
    aside = None
    if out.exists():
        aside = out.with_name(owned_name(f".{out.name}.", ".old"))
        os.rename(out, aside)
    try:
        os.rename(staging, out)
    except BaseException:
        if aside is not None:
            os.rename(aside, out)
        raise
    fsync_directory(out.parent)
    if aside is not None:
        key = signals.add_cleanup(functools.partial(remove_tree, aside))
        try:
            with signals.stops_deferred():  # the new one is in place: a stop now would leave the old one half gone
                remove_tree(aside)
        finally:
            signals.remove_cleanup(key)


def fsync_directory(directory: Path) -> None:
    """Make a rename durable: the directory entry itself must reach the disk."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


LOCK_NAME = ".distgcn.lock"
_held: dict[Path, int] = {}
"""Directories this process has locked: file descriptors kept open until the process ends."""


def lock_directory(directory: Path, what: str) -> None:
    """Hold an exclusive lock on ``directory`` for this process; refuse if another process holds it.

    The lock file stays after the run (deleting it would let two runs lock different files); while held, it
    names the holder (:func:`holder_line`), which a refused run quotes.
    """
    key = resolved(directory)
    if key in _held:
        return
    fd, holder = _try_lock(key / LOCK_NAME, what)
    if fd is None:
        named = f" ({holder})" if holder else ""
        raise InputError(f"the {what} is in use by another run{named}; wait for it to end or choose another "
                         "directory", path=directory)
    _held[key] = fd


CLAIM_SUFFIX = ".distgcn-lock"


def claim_path(output: Path) -> Path:
    """The lock file of an output: beside it, so that it outlives the renames that replace the output."""
    return output.with_name(f".{output.name}{CLAIM_SUFFIX}")


def holder_line() -> str:
    """Who holds a claim, as its lock file records it: process, host and command."""
    command = " ".join(os.path.basename(arg) if index == 0 else arg for index, arg in enumerate(sys.argv))
    return f"process {os.getpid()} on {socket.gethostname()}: {command[:200]}"


@contextmanager
def claimed(outputs: Iterable[tuple[Path, str]]) -> Iterator[None]:
    """Hold every ``(path, what)`` output for the block; refuse at once if another process holds one.

    Each claim is an exclusive ``flock`` on :func:`claim_path`, whose text names the holder. The lock file is
    removed on release while still locked, and a claim checks after locking that the file it locked is
    still the one at that name, so two processes can never both hold one output. A process killed with
    SIGKILL leaves its lock file unlocked; the next claim reuses it.
    """
    taken: list[tuple[Path, int, int]] = []
    try:
        for path, what in outputs:
            key = Path(os.path.realpath(path))
            try:
                key.parent.mkdir(parents=True, exist_ok=True)
            except OSError:
                continue  # nothing can be written there: the command's own checks say why, in its words
            if len(os.fsencode(claim_path(key).name)) > name_max(key.parent):
                continue  # a name too long to build the output under: the command's own check says so, with its flag
            fd = _lock_claim(Path(path), key, what)
            # a job's abort at a stop signal unwinds nothing: the lock file is removed before it
            taken.append((key, fd, signals.add_cleanup(functools.partial(_unlink, claim_path(key)))))
        yield
    finally:
        for key, fd, cleanup in reversed(taken):
            _unlink(claim_path(key))
            os.close(fd)
            signals.remove_cleanup(cleanup)


def _lock_claim(path: Path, key: Path, what: str) -> int:
    lock = claim_path(key)
    while True:
        fd, holder = _try_lock(lock, what)
        if fd is None:
            raise InputError(f"the {what} is being written by another distgcn run ({holder or 'another process'}); "
                             "wait for it to end or choose another name", path=path)
        try:
            current = os.stat(lock, follow_symlinks=False)
        except FileNotFoundError:
            current = None
        locked = os.fstat(fd)
        if current is not None and (current.st_dev, current.st_ino) == (locked.st_dev, locked.st_ino):
            return fd
        os.close(fd)  # its holder released and removed it between our open and our lock: take the new one


def _try_lock(lock: Path, what: str) -> tuple[int | None, str]:
    """An exclusive flock on ``lock`` (created if needed): (its descriptor, "") with this process recorded in it
    as the holder, or (None, the holder's line) when another process holds it."""
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        raise InputError(f"cannot create the lock file of the {what} ({exc.strerror or exc})", path=lock) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.read(fd, 512).decode(errors="replace").strip()
        os.close(fd)
        return None, holder
    os.ftruncate(fd, 0)
    os.pwrite(fd, (holder_line() + "\n").encode(errors="backslashreplace"), 0)  # argv may hold any bytes
    return fd, ""
