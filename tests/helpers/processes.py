"""The processes of a job, read from /proc: to find an MPI rank's pid and to check that none is left behind
(tests/training/test_faults.py, tests/runtime/test_signals.py)."""

from __future__ import annotations

import os
from pathlib import Path


def _children() -> dict[int, int]:
    """pid -> parent pid of every process on the machine."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


def descendants(root: int) -> set[int]:
    """Every process below ``root`` (children, their children, ...)."""
    parents = _children()
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def rank_pid(launcher: int, rank: int) -> int | None:
    """The pid of MPI rank ``rank`` under this mpiexec, found by its PMI_RANK environment."""
    for pid in descendants(launcher):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"PMI_RANK={rank}".encode() in environ and b"distgcn" in Path(f"/proc/{pid}/cmdline").read_bytes():
            return pid
    return None


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def unused_pid() -> int:
    """A process id that no process has now (counting down from the largest the kernel hands out)."""
    pid = int(Path("/proc/sys/kernel/pid_max").read_text()) - 1
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid -= 1
