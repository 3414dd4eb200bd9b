"""A phase's ticker in its own process, for C code that holds the GIL (``python -m distgcn.runtime.ticker_process``).

Mt-KaHyPar's and METIS's partition calls keep the GIL until they return (measured: a 0.1 s ticker thread ran
4 times during a 139 s Mt-KaHyPar call), so no thread of the partitioning process can say that it is still
working. This process can: started by :meth:`distgcn.runtime.progress.Phase.outside_the_gil` with the phase's state,
it draws the same status line or log lines (through the same :class:`~distgcn.runtime.progress.Phase` code) on the
stream it inherited as stderr, and ends when its stdin closes: when the parent stops it, or dies. What arrives
on stdin meanwhile is the tool's log (:func:`distgcn.runtime.progress.c_stdout_to_ticker`): a line that names a step
(:func:`tool_step`) is shown with the elapsed time, the rest is dropped.

Arguments: name, seconds the phase has run, seconds since its last log line, interactive (0/1), tick_s,
log_every_s. Only the standard library and :mod:`distgcn.runtime.progress` are imported: the process starts in a
fraction of a second.
"""

from __future__ import annotations

import os
import re
import select
import signal
import sys

from distgcn.runtime.progress import NORMAL, Phase, Progress

# Mt-KaHyPar's banner of a step: "*     Coarsening...     *" (and Preprocessing, Initial Partitioning, Local Search)
_BANNER = re.compile(r"^\*\s+(\S[^*]*?)\.\.\.\s*\*\s*$")
_MAX_LINE = 4096  # bytes kept of a line still without its end (a tool's lines are short)


def tool_step(line: str) -> str | None:
    """The step a line of a tool's log announces, in lower case, or None."""
    match = _BANNER.match(line.strip())
    return match.group(1).lower() if match else None


def main(argv: list[str]) -> int:
    name, elapsed_s, since_log_s, interactive, tick_s, log_every_s = argv
    # Ctrl-C reaches the whole process group; the parent, still in C code, ends this process once it returns
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    progress = Progress(NORMAL, sys.stderr, interactive=interactive == "1", tick_s=float(tick_s),
                        log_every_s=float(log_every_s))
    phase = Phase(progress, name, None, announce=False, elapsed_s=float(elapsed_s), since_log_s=float(since_log_s))
    stdin = sys.stdin.fileno()
    pending = b""
    while True:
        if select.select([stdin], [], [], progress.tick_s)[0]:
            chunk = os.read(stdin, 1 << 16)
            if not chunk:
                return 0
            *lines, pending = (pending + chunk).split(b"\n")
            pending = pending[-_MAX_LINE:]
            for line in lines:
                step = tool_step(line.decode("utf-8", "replace"))
                if step is not None:
                    phase.show_step(step)
        phase.tick()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
