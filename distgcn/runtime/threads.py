"""How many compute threads a process uses: one answer for training ranks and the partitioners."""

from __future__ import annotations

import os


def available_cores() -> int:
    """Cores this process may run on (all of them unless restricted by affinity)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


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
