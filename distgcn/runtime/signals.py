"""Signals end the whole job: one line on stderr, exit status 128 + the signal's number, nothing left behind.

SIGINT, SIGTERM and SIGHUP stop a command at once. SIGUSR1 is the warning a
scheduler sends before a time limit or a pre-emption (``sbatch --signal``):
``train`` finishes the epoch it is in, writes a checkpoint when it has a
--checkpoint-dir, and every rank exits together (see :func:`warning_received`);
any other command stops at once, as for the other three.

A Python signal handler runs only in the main thread, between bytecodes: a
rank blocked in an MPI wait would never run it while its peers wait for it.
So the C-level handler also writes the signal's number to a pipe
(``signal.set_wakeup_fd``), and a watcher thread reading it acts whatever the
main thread is doing:

- one process (no job attached): the Python handler raises
  :class:`Interrupted` in the main thread, so ``finally`` blocks and
  ``except BaseException`` cleanups (a partition's staging directory) run and
  :func:`distgcn.cli.main.main` prints the line; the watcher exits the process hard
  if that has not happened within :data:`GRACE_S` seconds (the main thread
  stuck in a C call that releases the GIL).
- a job of several ranks (:func:`attach_job`): the watcher prints the line and
  aborts the job (MPI_Abort where MPI runs, which ends every rank). A launcher
  forwards its signal to every rank: the ranks of a node race for one name
  (:func:`_first_on_node`), the winner reports and aborts at once, the others
  abort after :data:`PEER_DELAY_S`: one line per node, whichever rank or
  launcher was signalled.

Neither a job's abort nor the hard exit unwinds the main thread, so what it
was writing (a temporary file, a staging or scratch directory) is removed
first by the cleanups registered for it (:func:`add_cleanup`), and a rank
about to abort the job waits for those of the other ranks of its node
(:func:`_wait_for_peers`).

A C call that holds the GIL (rare; none of MPI's or torch's waits) delays all
of this until it returns.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import signal
import socket
import stat
import struct
import termios
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
WARNING_SIGNAL = signal.SIGUSR1
GRACE_S = 5.0
"""How long a single process may take to unwind (clean up) after a signal before it is ended hard."""
PEER_DELAY_S = 1.0
"""How long a rank that does not report waits before aborting, so that the rank that reports has printed."""
DRAIN_S = 1.0
"""How long a rank waits at most for its launcher to read its last line before it aborts the job."""
BROKEN_PIPE_EXIT = 128 + signal.SIGPIPE
"""Exit status when stdout is closed early (``distgcn stats DIR | head -1``): what a program killed by SIGPIPE gives."""


def exit_code(signum: int) -> int:
    """The documented exit status for a run ended by ``signum``: 128 + its number, as a shell reports it."""
    return 128 + signum


def describe(signum: int) -> str:
    return signal.Signals(signum).name


class Interrupted(BaseException):
    """Raised in the main thread of a single process on a stop signal (a BaseException: not 'unexpected')."""

    def __init__(self, signum: int):
        super().__init__(describe(signum))
        self.signum = signum


@dataclass
class _Job:
    rank: int
    size: int
    abort: Callable[[int], NoReturn]
    """Ends every rank of the job with this exit status."""


class _Cleanups:
    """What to remove if this process ends without unwinding: the temporaries it is writing, by key."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending: dict[int, Callable[[], None]] = {}
        self.keys = itertools.count()
        self.marker: socket.socket | None = None
        """Bound while cleanups are pending: the job's other ranks here wait for them (:func:`_peers_cleaning`)."""


_cleanups = _Cleanups()
CLEANUP_WAIT_S = GRACE_S
"""How long a rank about to abort the job waits at most for the ranks of its node to run their cleanups."""


def _cleanup_prefix() -> str:
    """The start of the names of :func:`_cleanup_name` among the ranks of this node (they share a parent)."""
    return f"distgcn-cleanup-{os.getppid()}-"


def _cleanup_name(pid: int) -> str:
    """The abstract socket name that says: process ``pid`` has cleanups pending."""
    return f"{_cleanup_prefix()}{pid}"


def add_cleanup(cleanup: Callable[[], None]) -> int:
    """Call ``cleanup`` if a stop signal ends this process without unwinding it; returns the key to withdraw it.

    For what the process makes and removes itself on every path it unwinds
    through (a temporary file, a staging directory): a job's abort and the hard
    exit after :data:`GRACE_S` run no ``finally``. ``cleanup`` runs in the
    watcher thread while the main thread may still run, so it must tolerate
    what it removes being gone, renamed into place or still being written.
    While any is pending, the process holds an abstract socket name
    (:func:`_cleanup_name`; it vanishes with the process): a rank of its job on
    this node that is about to abort the job sends it the stop signal and
    waits for it first (:func:`_wait_for_peers`).
    """
    with _cleanups.lock:
        key = next(_cleanups.keys)
        _cleanups.pending[key] = cleanup
        if _cleanups.marker is None:
            marker = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                marker.bind(f"\0{_cleanup_name(os.getpid())}")
                _cleanups.marker = marker
            except OSError:
                marker.close()
    return key


def remove_cleanup(key: int) -> None:
    """Withdraw a cleanup of :func:`add_cleanup` (its temporary was renamed into place or removed)."""
    with _cleanups.lock:
        _cleanups.pending.pop(key, None)
        _drop_marker_if_done()


def _drop_marker_if_done() -> None:
    if not _cleanups.pending and _cleanups.marker is not None:
        _cleanups.marker.close()
        _cleanups.marker = None


def run_cleanups() -> None:
    """Run (once) every cleanup still registered; a failing one does not stop the others."""
    with _cleanups.lock:
        pending = list(_cleanups.pending.values())
        _cleanups.pending.clear()
    for cleanup in pending:
        try:
            cleanup()
        except Exception:  # noqa: BLE001 - the process is ending: what is left, a later run removes
            pass
    with _cleanups.lock:
        _drop_marker_if_done()


def _peers_cleaning() -> set[int]:
    """The processes of this node's ranks (siblings of this one) that hold cleanups, from /proc/net/unix."""
    prefix = "@" + _cleanup_prefix()
    try:
        lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    except OSError:
        return set()
    found = set()
    for line in lines:
        name = line.rsplit(None, 1)[-1]
        if name.startswith(prefix) and name[len(prefix):].isdigit():
            found.add(int(name[len(prefix):]))
    found.discard(os.getpid())
    return found


def _wait_for_peers(signum: int) -> None:
    """Before this rank aborts the job: send ``signum`` to the ranks of this node that hold cleanups (they may
    not have got it) and wait until they have run them, at most :data:`CLEANUP_WAIT_S` seconds."""
    deadline = time.monotonic() + CLEANUP_WAIT_S
    told: set[int] = set()
    while (peers := _peers_cleaning()) and time.monotonic() < deadline:
        for pid in peers - told:
            try:
                os.kill(pid, signum)
            except OSError:
                pass
        told |= peers
        time.sleep(0.005)


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.write_fd: int | None = None
        """The wakeup pipe's end (one pipe and one watcher thread per process, made on first use)."""
        self.claim: socket.socket | None = None
        """The name this process holds as the rank of its node that reports a stop (:func:`_first_on_node`)."""
        self.hangup_ignored = False
        """SIGHUP was ignored when distgcn took the signals over (``nohup``): it stays so."""
        self.reset()

    def reset(self) -> None:
        self.job: _Job | None = None
        self.defer_warning = False
        self.warning = threading.Event()
        self.stopping: int | None = None
        """The first stop signal received; later ones change nothing."""
        self.raised = False
        self.reported = False
        self.deadline_set = False
        self.deferring = 0
        """How many :func:`stops_deferred` blocks the main thread is in."""
        self.deferred: int | None = None
        """A stop signal that arrived in such a block, raised when the outermost one ends."""


_state = _State()


def install() -> Callable[[], None]:
    """Take over SIGINT, SIGTERM, SIGHUP and SIGUSR1 (from the main thread; else do nothing); returns the undo.

    A SIGHUP that the process inherited as ignored (``nohup``) stays ignored:
    the user asked the run to outlive the terminal.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    if _state.write_fd is None:
        read_fd, _state.write_fd = os.pipe()
        os.set_blocking(_state.write_fd, False)
        threading.Thread(target=_watch, args=(read_fd,), name="distgcn-signals", daemon=True).start()
    _state.reset()
    hangup = signal.getsignal(signal.SIGHUP)
    if hangup is not _python_handler:  # else taken over already, by an install() not undone
        _state.hangup_ignored = hangup == signal.SIG_IGN
    previous_fd = signal.set_wakeup_fd(_state.write_fd, warn_on_full_buffer=False)
    previous = {signum: signal.signal(signum, _python_handler) for signum in _taken_signals()}

    def restore() -> None:  # for callers of cli.main inside a longer-lived process (tests, notebooks)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(previous_fd)

    return restore


def _taken_signals() -> tuple[signal.Signals, ...]:
    return tuple(signum for signum in (*STOP_SIGNALS, WARNING_SIGNAL)
                 if not (signum == signal.SIGHUP and _state.hangup_ignored))


def attach_job(rank: int, size: int, abort: Callable[[int], NoReturn]) -> None:
    """From now on a stop signal aborts the whole job through ``abort`` (given the exit status).

    Call it once the transport has started: the handlers are installed again, since
    a communication library may have taken a signal over meanwhile (UCX, under
    MPICH, takes SIGHUP to switch its logging to debug).
    """
    _state.job = _Job(rank, size, abort) if size > 1 else None
    if _state.write_fd is not None and threading.current_thread() is threading.main_thread():
        for signum in _taken_signals():
            signal.signal(signum, _python_handler)
        if _state.hangup_ignored:
            signal.signal(signal.SIGHUP, signal.SIG_IGN)


def defer_warning() -> None:
    """SIGUSR1 no longer stops at once: the caller polls :func:`warning_received` at safe points (epochs)."""
    _state.defer_warning = True


def warning_received() -> bool:
    """Whether the scheduler's warning (SIGUSR1) has arrived; ranks agree on it with one reduction."""
    return _state.warning.is_set()


def stop_pending() -> int | None:
    """The stop signal this process is ending for, if any (a failure meanwhile is its consequence, not news)."""
    return _state.stopping


def report(signum: int, rank: int | None = None, what: str = "the job stops", fd: int = 2) -> None:
    """Print the one line that says why the run ends on ``fd`` (once per process, from any thread)."""
    with _state.lock:
        if _state.reported:
            return
        _state.reported = True
    where = f" (rank {rank})" if rank is not None else ""
    line = f"distgcn: interrupted by {describe(signum)}{where}; {what} (exit {exit_code(signum)})\n"
    try:
        os.write(fd, line.encode())
    except OSError:
        pass


def _stops_now(signum: int) -> bool:
    return signum in STOP_SIGNALS or not _state.defer_warning


@contextmanager
def stops_deferred() -> Iterator[None]:
    """Hold back a stop signal's :class:`Interrupted` while the block runs, and raise it when the block ends.

    For the few steps between making something and the point from which a cleanup owns it: a staging
    directory is made, then its owner file written, and an Interrupted in between would leave it where no
    cleanup looks (seen once in CI). Keep such a block short: the watcher still ends a process that has not
    unwound :data:`GRACE_S` seconds after the signal. Outside the main thread (which alone runs the
    handler) it changes nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _state.deferring += 1
    try:
        yield
    finally:
        _state.deferring -= 1
        if _state.deferring == 0 and _state.deferred is not None:
            signum, _state.deferred = _state.deferred, None
            _raise_once(signum)  # also when the block failed: the stop, not that error, ends the process


def _python_handler(signum: int, frame: object) -> None:
    if signum == WARNING_SIGNAL:
        _state.warning.set()
    if not _stops_now(signum) or _state.job is not None:
        return  # a deferred warning, or a job the watcher thread takes down
    if _state.deferring:
        with _state.lock:
            _state.stopping = signum if _state.stopping is None else _state.stopping
            _state.deferred = signum if _state.deferred is None else _state.deferred
        return
    _raise_once(signum)


def _raise_once(signum: int) -> None:
    with _state.lock:
        first = not _state.raised
        _state.raised = True
        _state.stopping = signum if _state.stopping is None else _state.stopping
    if first:  # once: a second signal must not interrupt the cleanup the first one started
        raise Interrupted(signum)


def _watch(read_fd: int) -> None:
    while True:
        try:
            data = os.read(read_fd, 64)
        except InterruptedError:
            continue
        for signum in data:
            if signum == WARNING_SIGNAL:
                _state.warning.set()
            if _stops_now(signum):
                with _state.lock:
                    _state.stopping = signum if _state.stopping is None else _state.stopping
                _stop(signum)


def _stop(signum: int) -> None:
    job = _state.job
    if job is None:  # the main thread unwinds, running its own cleanups
        if not _state.deadline_set:
            _state.deadline_set = True
            threading.Thread(target=_exit_after_grace, args=(signum,), daemon=True).start()
        return
    # From here on, stderr is this thread's alone: the main thread, whose temporaries the cleanups remove under
    # it, would report failures that are the stop's doing, and MPI_Abort would add its own line to ours.
    stderr = silence_stderr()
    run_cleanups()  # before the line: a peer's abort may end this process from now on (peers wait, but not forever)
    if _first_on_node():
        report(signum, job.rank, fd=stderr)
        wait_until_read(stderr, DRAIN_S)
    else:  # another rank here reports: give it time to, before this abort ends it
        time.sleep(PEER_DELAY_S)
    _wait_for_peers(signum)
    job.abort(exit_code(signum))


def _first_on_node() -> bool:
    """Whether this rank is the first on its node to stop: it alone prints the line.

    A launcher forwards its signal to every rank. The ranks of one job on a node
    share their parent (mpiexec's proxy, slurmstepd, torchrun's agent), so they
    race to bind one abstract Unix socket named after it: exactly one wins, and
    the name vanishes with the process, leaving nothing behind.
    """
    claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        claim.bind(f"\0distgcn-stop-{os.getppid()}")
    except OSError:
        claim.close()
        return False
    _state.claim = claim  # held until the process ends
    return True


def wait_until_read(fd: int, timeout: float) -> None:
    """Return once the reader of pipe ``fd`` has taken all it holds (or after ``timeout``; at once if no pipe).

    Call it between a rank's last words on stderr and its abort of the job. A
    launcher reads a rank's stderr from a pipe and forwards it; an abort right
    after the write can overtake the line (hydra lost it in 3 of 40 tries, none
    of 140 with this wait). A pipe's unread byte count is visible from its
    writing end too.
    """
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return
        deadline = time.monotonic() + timeout
        while _unread_bytes(fd) and time.monotonic() < deadline:
            time.sleep(0.002)
    except OSError:
        pass


def _unread_bytes(fd: int) -> int:
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def silence_stderr() -> int:
    """Point file descriptor 2 at /dev/null, so that nothing after this process's own last line reaches the user
    (the main thread's failures that a stop causes, MPI_Abort's own line); returns a descriptor of the stderr it
    had (2 if it cannot)."""
    try:
        kept = os.dup(2)
    except OSError:
        return 2
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
    except OSError:
        pass
    return kept


def _exit_after_grace(signum: int) -> None:
    time.sleep(GRACE_S)
    run_cleanups()
    report(signum)
    os._exit(exit_code(signum))  # no flush: the stuck main thread may hold stdout's lock
