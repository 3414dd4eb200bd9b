"""How many compute threads a process uses: one answer for training ranks and the partitioners."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_set() -> frozenset[int]:
    """The CPUs this process may run on (its affinity: all of the node's unless a launcher bound it)."""
    try:
        return frozenset(os.sched_getaffinity(0)) or frozenset(range(node_cpus()))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return frozenset(range(node_cpus()))


def available_cores() -> int:
    """Cores this process may run on (all of them unless restricted by affinity)."""
    return max(1, len(cpu_set()))


def node_cpus() -> int:
    """The node's CPUs, whichever this process may use: the load average counts the tasks of all of them."""
    return max(1, os.cpu_count() or 1)


def load_average() -> float | None:
    """The node's 1-minute load average (runnable and uninterruptible tasks of every process, this one's too,
    averaged over about the last minute); None where the system keeps none."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):  # pragma: no cover - not a Unix
        return None


def process_age_s() -> float | None:
    """Seconds since this process started, from Linux's /proc; None where that cannot be read."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()  # after the command's name
        start_ticks = int(fields[19])  # field 22 of proc(5), starttime: clock ticks after boot
        uptime_s = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime_s - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def default_threads(ranks_per_node: int) -> int:
    """Slurm's cpus-per-task when launched by srun, else this node's cores shared among its ranks."""
    slurm = os.environ.get("SLURM_CPUS_PER_TASK")
    if slurm and slurm.isdigit() and int(slurm) > 0:
        return int(slurm)
    return max(1, available_cores() // max(1, ranks_per_node))


def set_threads(threads: int) -> None:
    """Torch intra-op threads and the BLAS/OpenMP pools that torch and numpy use.

    numba's pool follows torch's count at each kernel call (:func:`follow_torch_threads`).
    """
    import torch

    torch.set_num_threads(threads)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)


def follow_torch_threads() -> None:
    """Run the next numba kernel on torch's intra-op thread count (``train --threads``, the API's ``threads``).

    numba's pool is sized once per process (NUMBA_NUM_THREADS, by default
    the machine's cores; changing it later is an error), so this uses at
    most that many. Starting that pool on OpenMP, which torch shares, sets
    torch's count to the pool's size: torch's own count is put back.
    """
    import numba
    import torch

    count = torch.get_num_threads()
    numba.set_num_threads(min(count, numba.config.NUMBA_NUM_THREADS))
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
