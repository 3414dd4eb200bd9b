"""Progress of long phases: one redrawn line on a terminal, timestamped lines in a log file.

Partitioning a large graph or training for hours must say how far it got and
how long is left, both to someone watching a terminal and in a Slurm log,
where a redrawn line would be garbage. Only one process of a job reports
(rank 0); the others build a silent ``Progress``. Usage, e.g. in a pre-pass::

    progress = Progress.for_rank(transport.rank, quiet=args.quiet, verbose=args.verbose)
    with progress.phase("sampling", total=num_batches) as phase:
        for batch in batches:
            ...
            phase.advance()
    progress.detail("sampled 1.2M edges")   # printed with --verbose only

Progress goes to stderr, so stdout keeps only results (epoch lines, summaries);
:meth:`Progress.echo` prints such a result line without tearing the status line.

Inside ``with progress.phase(...)`` a ticker thread keeps the elapsed time current while the work itself
reports nothing (loading a graph, measuring communication): it redraws the status line every ``tick_s`` on a
terminal and writes a line every ``log_every_s`` to a log. A thread runs only while the GIL is free, so
around C code that holds it throughout (the partitioners) :meth:`Phase.outside_the_gil` hands the ticking
to a small process (:mod:`distgcn.runtime.ticker_process`); inside it, :func:`c_stdout_to_ticker` lends that process
the C code's stdout, and the process shows the step the tool's log names (Mt-KaHyPar: "coarsening").
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import TextIO

QUIET, NORMAL, VERBOSE = 0, 1, 2

_ticker_input_fd: int | None = None
"""The stdin of the ticker process running now (one per process at a time: the GIL holder's), else None."""


def format_duration(seconds: float) -> str:
    """Short and readable at every scale: 0.4s, 12.3s, 4m05s, 2h07m."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Progress:
    """Where a process reports phases and messages, at a verbosity level (QUIET, NORMAL, VERBOSE)."""

    def __init__(self, level: int = NORMAL, stream: TextIO | None = None, *, interactive: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, wallclock: Callable[[], datetime] = datetime.now,
                 log_every_s: float = 30.0, redraw_s: float = 0.1, tick_s: float = 1.0):
        self.level = level
        self.stream = stream if stream is not None else sys.stderr
        self.interactive = self.stream.isatty() if interactive is None else interactive
        self.clock = clock
        self.wallclock = wallclock
        self.log_every_s = log_every_s
        """A log gets a line every this many seconds of a phase (docs/user-guide.md), however fast its steps go."""
        self.redraw_s = redraw_s
        self.tick_s = tick_s
        self._status = ""  # the status line: drawn on a terminal, redrawn below each message
        self._drawn = ""  # what the terminal shows of it now
        self.lock = threading.RLock()  # the ticker thread draws too: one writer at a time

    @classmethod
    def for_rank(cls, rank: int, *, quiet: bool = False, verbose: bool = False,
                 stream: TextIO | None = None) -> Progress:
        """Rank 0 reports at the level the options ask for; every other rank stays silent."""
        level = QUIET if rank != 0 or quiet else VERBOSE if verbose else NORMAL
        return cls(level, stream)

    @property
    def verbose(self) -> bool:
        return self.level >= VERBOSE

    def phase(self, name: str, total: int | None = None) -> Phase:
        """Start a phase of ``total`` steps (None: size unknown, only start and end are reported)."""
        return Phase(self, name, total)

    def info(self, message: str) -> None:
        """A message at normal verbosity."""
        if self.level >= NORMAL:
            self._line(message)

    def warn(self, message: str) -> None:
        """A warning that the results cannot be read as they look: shown at every level, --quiet included
        (call it on the reporting process only: the others' Progress is quiet too)."""
        self._line(message)

    def detail(self, message: str) -> None:
        """A message shown with --verbose only."""
        if self.level >= VERBOSE:
            self._line(message)

    def echo(self, text: str, file: TextIO | None = None) -> None:
        """Print a result line (whatever the level) to ``file``, keeping the status line below it."""
        with self.lock:
            self._clear()
            print(text, file=file if file is not None else sys.stdout, flush=True)
            self._draw(self._status)

    # ---- drawing (callers hold self.lock or run on the main thread alone) ----
    def _line(self, message: str) -> None:
        with self.lock:
            self._write_line(message)

    def _write_line(self, message: str) -> None:
        if self.interactive:
            self._clear()
            self.stream.write(message + "\n")
            self._draw(self._status)
        else:
            self.stream.write(f"{self.wallclock():%Y-%m-%d %H:%M:%S} {message}\n")
            self.stream.flush()

    def _set_status(self, text: str, draw: bool = True) -> None:
        with self.lock:
            self._status = text
            if draw:
                self._draw(text)

    def _drop_status(self) -> None:
        with self.lock:
            self._clear()
            self._status = ""

    def _draw(self, text: str) -> None:
        if self.interactive and text:
            self.stream.write("\r\033[K" + text)
            self.stream.flush()
            self._drawn = text

    def _clear(self) -> None:
        if self.interactive and self._status:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._drawn = ""


class Phase:
    """One phase of a :class:`Progress`: counts steps, reports percentage, elapsed and remaining time."""

    def __init__(self, progress: Progress, name: str, total: int | None, *, announce: bool = True,
                 elapsed_s: float = 0.0, since_log_s: float | None = None):
        """``announce=False``, ``elapsed_s``, ``since_log_s``: a phase already under way, as a ticker process
        continues it (no "started" line; elapsed time and the interval to the next log line go on)."""
        self.progress = progress
        self.name = name
        self.total = total
        self.done = 0
        now = progress.clock()
        self.start = now - elapsed_s
        self._last_shown = self.start if since_log_s is None else now - since_log_s
        self._finished = False
        self._ticker: Ticker | None = None
        self._handed_over = False  # a ticker process draws meanwhile (outside_the_gil)
        self.step: str | None = None  # the step a tool says it is in (show_step)
        self.ticker_process: subprocess.Popen | None = None
        if progress.level >= NORMAL and announce:
            if progress.interactive:
                progress._set_status(self._describe(self.start))
            else:
                progress._line(f"{name}: started" + (f" ({total} steps)" if total is not None else ""))

    def __enter__(self) -> Phase:
        if self.progress.level >= NORMAL and self.progress.tick_s > 0:
            self._ticker = Ticker(self.tick, self.progress.tick_s, f"progress: {self.name}")
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop_ticker()
        if exc_type is None:
            self.finish()
        else:  # leave the failure's message on a clean line
            self.progress._drop_status()

    def _stop_ticker(self) -> None:
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None

    def tick(self) -> None:
        """Refresh the elapsed time though no step was done: redraw the status line, or log it once an interval."""
        p = self.progress
        with p.lock:
            if self._finished or self._handed_over:
                return
            now = p.clock()
            if p.interactive:
                text = self._describe(now)
                if text != p._drawn:
                    p._set_status(text)
            elif now - self._last_shown >= p.log_every_s:
                self._last_shown = now
                p._write_line(self._describe(now))

    @contextmanager
    def outside_the_gil(self) -> Iterator[None]:
        """Keep the elapsed time current around C code that holds the GIL, which stops the ticker thread.

        A ticker process (:mod:`distgcn.runtime.ticker_process`) draws on this stream's file descriptor meanwhile;
        where it cannot start (a stream without one, as in tests; no process allowed), the phase only
        goes without ticks, as before.
        """
        global _ticker_input_fd
        process = self._start_ticker_process()
        if process is not None:
            _ticker_input_fd = process.stdin.fileno()
        try:
            yield
        finally:
            if process is not None:
                _ticker_input_fd = None
                _stop_process(process)
                with self.progress.lock:
                    self._handed_over = False
                    self._last_shown = self.progress.clock()  # the process logged within the last interval

    def _start_ticker_process(self) -> subprocess.Popen | None:
        p = self.progress
        if p.level < NORMAL or p.tick_s <= 0:
            return None
        try:
            fd = p.stream.fileno()
        except (AttributeError, OSError, io.UnsupportedOperation):
            return None
        with p.lock:
            now = p.clock()
            args = [self.name, now - self.start, now - self._last_shown, int(p.interactive), p.tick_s, p.log_every_s]
            p.stream.flush()
            try:
                process = subprocess.Popen([sys.executable, "-m", "distgcn.runtime.ticker_process", *map(str, args)],
                                           stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=fd,
                                           env=_finding_this_package(os.environ))
            except Exception:  # noqa: BLE001 - a display that cannot start must not stop the work it shows
                return None
            self._handed_over = True
            self.ticker_process = process
            return process

    def show_step(self, step: str) -> None:
        """Name the step the work is in now (a tool's own phase): drawn, or logged, at once."""
        p = self.progress
        with p.lock:
            self.step = step
            if self._finished or p.level < NORMAL:
                return
            now = p.clock()
            if p.interactive:
                p._set_status(self._describe(now))
            else:
                self._last_shown = now
                p._write_line(self._describe(now))

    def advance(self, steps: int = 1) -> None:
        self.update(self.done + steps)

    def update(self, done: int) -> None:
        """Record that ``done`` steps are complete; report if enough progress or time has passed."""
        self.done = done
        p = self.progress
        if p.level < NORMAL:
            return
        with p.lock:
            self._report(done)

    def _report(self, done: int) -> None:
        p = self.progress
        now = p.clock()
        if p.interactive:  # the text is kept current for redraws after echo(); drawn at a bounded rate
            draw = now - self._last_shown >= p.redraw_s or done == self.total
            p._set_status(self._describe(now), draw)
            if draw:
                self._last_shown = now
            return
        if self.total is not None and done >= self.total:
            return  # the "done in" line follows
        if now - self._last_shown >= p.log_every_s:
            self._last_shown = now
            p._line(self._describe(now))

    def finish(self, message: str = "") -> None:
        """End the phase with its duration, and an optional summary of what it did."""
        self._stop_ticker()  # before taking the lock, which the ticker may be waiting for
        p = self.progress
        with p.lock:
            if self._finished:
                return
            self._finished = True
            if p.level < NORMAL:
                return
            elapsed = format_duration(p.clock() - self.start)
            p._drop_status()
            p._write_line(f"{self.name}: done in {elapsed}" + (f"; {message}" if message else ""))

    def fraction(self) -> float:
        return min(1.0, self.done / self.total) if self.total else 0.0

    def _describe(self, now: float) -> str:
        elapsed = now - self.start
        text = f"{self.name}: " + (f"{self.step}, " if self.step else "")
        if self.total:
            text += f"{self.fraction():4.0%} ({self.done}/{self.total}), {format_duration(elapsed)} elapsed"
            if 0 < self.done < self.total:
                text += f", {format_duration(elapsed * (self.total - self.done) / self.done)} left"
        elif self.done:
            text += f"{self.done} done, {format_duration(elapsed)} elapsed"
        else:
            text += f"{format_duration(elapsed)} elapsed"
        return text


@contextmanager
def c_stdout_to_ticker() -> Iterator[bool]:
    """Inside :meth:`Phase.outside_the_gil`, send what C code prints on stdout (file descriptor 1) to the ticker
    process, which shows the steps it recognises (:func:`distgcn.runtime.ticker_process.tool_step`) and drops the rest.

    Yields whether it does: without a ticker process stdout is left alone, and the tool should stay silent.
    """
    fd = _ticker_input_fd
    if fd is None:
        yield False
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(fd, 1)
    try:
        yield True
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _finding_this_package(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with this copy of distgcn first on PYTHONPATH: the ticker process imports the code running here
    (from a source tree, in any directory), never another installed version, and never fails to find it."""
    root = str(Path(__file__).resolve().parents[2])
    paths = [root, *(path for path in env.get("PYTHONPATH", "").split(os.pathsep) if path)]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


def _stop_process(process: subprocess.Popen) -> None:
    """End a ticker process: its stdin closes (it exits at once), or after 5 s it is killed."""
    process.stdin.close()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class Ticker:
    """A daemon thread calling ``tick`` every ``interval_s`` seconds until :meth:`stop`."""

    def __init__(self, tick: Callable[[], None], interval_s: float, name: str):
        self._tick = tick
        self._interval_s = interval_s
        self._stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self._interval_s):
            self._tick()

    def stop(self) -> None:
        """End the thread and wait for it (a tick under way finishes first)."""
        self._stopped.set()
        self.thread.join()
