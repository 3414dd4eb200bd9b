"""A phase's ticker in its own process, for C code that holds the GIL (``python -m distgcn.runtime.ticker_process``).

Mt-KaHyPar's and METIS's partition calls keep the GIL until they return (measured: a 0.1 s ticker thread ran
4 times during a 139 s Mt-KaHyPar call), so no thread of the partitioning process can say that it is still
working. This process can: started by :meth:`distgcn.runtime.progress.Phase.outside_the_gil` with the phase's state,
it draws the same status line or log lines (through the same :class:`~distgcn.runtime.progress.Phase` code) on the
stream it inherited as stderr, and ends when its stdin closes: when the parent stops it, or dies. What arrives
on stdin meanwhile is the tool's log (:func:`distgcn.runtime.progress.c_stdout_to_ticker`): a line that names a step
(:func:`tool_step`) is shown with the elapsed time and, for Mt-KaHyPar's V-cycles, which pass of how many
(:class:`ToolLog`); the rest is dropped.

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
# its context's line "  Number of V-Cycles:   5", and the banner "*     V-Cycle  2     *" that starts one
_VCYCLES = re.compile(r"^Number of V-Cycles:\s*(\d+)$")
_VCYCLE = re.compile(r"^\*\s+V-Cycle\s+(\d+)\s*\*$")
_MAX_LINE = 4096  # bytes kept of a line still without its end (a tool's lines are short)


def tool_step(line: str) -> str | None:
    """The step a line of a tool's log announces, in lower case, or None."""
    match = _BANNER.match(line.strip())
    return match.group(1).lower() if match else None


class ToolLog:
    """Where a partitioner is, from its log: the step, and for Mt-KaHyPar with V-cycles which pass of how many.

    Mt-KaHyPar goes through coarsening, initial partitioning and local search once, then again in each of its K
    V-cycles: pass 1 of K + 1 is the first, pass n + 1 the n-th V-cycle, so that a line whose step comes round
    again says how far round it is.
    """

    def __init__(self) -> None:
        self.step: str | None = None
        self.vcycles = 0
        self.vcycle = 0

    def read(self, line: str) -> bool:
        """Take one line of the log; whether what :meth:`shown` says changed."""
        text = line.strip()
        if (total := _VCYCLES.match(text)) is not None:
            self.vcycles, self.vcycle = int(total.group(1)), 0  # a new run's context
            return False
        if (cycle := _VCYCLE.match(text)) is not None:
            self.vcycle = int(cycle.group(1))
            return False
        step = tool_step(text)
        if step is None:
            return False
        self.step = step
        return True

    def shown(self) -> str | None:
        """The step as the progress line names it: ``pass 2 of 6, coarsening`` with V-cycles, else the step."""
        if self.step is None or self.vcycles == 0:
            return self.step
        return f"pass {min(self.vcycle, self.vcycles) + 1} of {self.vcycles + 1}, {self.step}"


def main(argv: list[str]) -> int:
    name, elapsed_s, since_log_s, interactive, tick_s, log_every_s = argv
    # Ctrl-C reaches the whole process group; the parent, still in C code, ends this process once it returns
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    progress = Progress(NORMAL, sys.stderr, interactive=interactive == "1", tick_s=float(tick_s),
                        log_every_s=float(log_every_s))
    phase = Phase(progress, name, None, announce=False, elapsed_s=float(elapsed_s), since_log_s=float(since_log_s))
    stdin = sys.stdin.fileno()
    log = ToolLog()
    pending = b""
    while True:
        if select.select([stdin], [], [], progress.tick_s)[0]:
            chunk = os.read(stdin, 1 << 16)
            if not chunk:
                return 0
            *lines, pending = (pending + chunk).split(b"\n")
            pending = pending[-_MAX_LINE:]
            for line in lines:
                if log.read(line.decode("utf-8", "replace")):
                    phase.show_step(log.shown())
        phase.tick()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
