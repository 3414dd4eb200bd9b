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
    """Torch intra-op threads and the BLAS/OpenMP pools that torch and numpy use."""
    import torch

    torch.set_num_threads(threads)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)
