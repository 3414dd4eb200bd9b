"""Which launcher started this process, from its environment alone (no torch, no MPI: cheap to import).

Launchers announce themselves through the environment: torchrun sets RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; srun sets SLURM_*; MPI
launchers set PMI_RANK/PMI_SIZE (MPICH's hydra) or OMPI_COMM_WORLD_* (Open
MPI). ``train`` reads it before its slow imports, so that rank 0 can say at
once that the job started; :mod:`distgcn.comm.transport.setup` starts the transport from it.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from distgcn.errors import InputError

_MPI_RANK_VARS = (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"))


@dataclass(frozen=True)
class Launch:
    """Where this process sits in the job, as its launcher described it."""

    launcher: str
    """torchrun, mpi, srun, or none (a single process started by hand)."""
    rank: int
    world_size: int
    local_rank: int
    """-1 under an MPI launcher until MPI itself is asked (see _store_over_mpi)."""
    master_addr: str | None = None
    master_port: int | None = None


def _int(env: Mapping[str, str], name: str) -> int:
    text = env[name]
    if not text.strip().isdigit():
        raise InputError(f"environment variable {name}={text!r}: expected a non-negative integer")
    return int(text)


def first_host(nodelist: str) -> str:
    """The first host of a Slurm host list such as ``gpu[003-005,9],login1`` (here ``gpu003``)."""
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if match is None:
        raise InputError(f"cannot read the Slurm node list {nodelist!r}")
    prefix, ranges = match.groups()
    if ranges is None:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def detect(env: Mapping[str, str]) -> Launch:
    """The launcher of this process, from its environment: torchrun, then MPI, then srun.

    MPI's variables win over Slurm's: srun --mpi=pmi2 sets both (and they
    agree), while mpiexec inside a batch script inherits the script's
    SLURM_PROCID, which is not the rank.
    """
    if "RANK" in env and "WORLD_SIZE" in env:
        missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if name not in env]
        if missing:
            raise InputError(f"RANK and WORLD_SIZE are set but {' and '.join(missing)} not (launch with torchrun)")
        local_rank = _int(env, "LOCAL_RANK") if "LOCAL_RANK" in env else 0
        return Launch("torchrun", _int(env, "RANK"), _int(env, "WORLD_SIZE"), local_rank, env["MASTER_ADDR"],
                      _int(env, "MASTER_PORT"))
    for rank_var, size_var in _MPI_RANK_VARS:
        if rank_var in env and size_var in env:
            return Launch("mpi", _int(env, rank_var), _int(env, size_var), -1)
    if "SLURM_STEP_ID" in env and "SLURM_PROCID" in env:
        nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or socket.gethostname()
        size_var = "SLURM_STEP_NUM_TASKS" if "SLURM_STEP_NUM_TASKS" in env else "SLURM_NTASKS"
        port = _int(env, "MASTER_PORT") if "MASTER_PORT" in env else 20000 + _int(env, "SLURM_JOB_ID") % 20000
        return Launch("srun", _int(env, "SLURM_PROCID"), _int(env, size_var), _int(env, "SLURM_LOCALID"),
                      env.get("MASTER_ADDR") or first_host(nodes), port)
    return Launch("none", 0, 1, 0)


def this_process() -> Launch:
    """This process's place in its job, from its own environment: what ``train`` reads before its slow imports.

    The in-process ranks of the tests share one environment, so their harness (tests/conftest.py) gives each
    rank its own place here, as it gives each its own transport.
    """
    return detect(os.environ)
