"""Starting a distgcn job as a user's terminal would, and checking how it ended: for the tests that signal
or kill jobs (tests/runtime/test_signals.py, tests/io/test_leftovers.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, mpiexec

SHM = "/dev/shm/mpich_sh"
"""The prefix of MPICH's shared-memory files."""


def job_env(**extra: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", **extra)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def start_job(args: list[str], ranks: int = 3, **env: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "distgcn", *args]
    if ranks > 1:
        command = [mpiexec(), "-n", str(ranks), *command]
    return subprocess.Popen(command, env=job_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=as_from_a_terminal)


def as_from_a_terminal() -> None:
    """SIGHUP at its default, as a terminal's shell starts a job, even when the tests run under nohup."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def kill_group(job: subprocess.Popen) -> None:
    """After a failed assertion: end what the test started (its own session), so nothing outlives the test."""
    if job.poll() is None:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()


def shared_memory_names(pids: set[int]) -> set[str]:
    """The MPICH shared-memory files these processes map, by name (with or without a name left on disk)."""
    names = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        names |= {line.split()[5] for line in maps.splitlines() if len(line.split()) >= 6
                  and line.split()[5].startswith(SHM)}
    return names


def assert_interrupted_once(stderr: str, name: str) -> None:
    assert stderr.count("distgcn: interrupted by") == 1, stderr
    assert f"distgcn: interrupted by {name}" in stderr, stderr
    assert "Traceback" not in stderr and "MPI_Abort" not in stderr, stderr
