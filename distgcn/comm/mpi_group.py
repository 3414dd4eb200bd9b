"""Starting MPI, and the ranks of an MPI job for commands that only decide together and never move tensors.

Every command that runs under MPI gets COMM_WORLD from :func:`world`, which
removes the names of MPICH's shared-memory files as soon as every rank of the
node has mapped them (:func:`unlink_shared_memory_files`).

``distgcn partition`` under mpiexec (:mod:`distgcn.shard.rank_shards`) needs what
:func:`distgcn.comm.collective.agree` and :func:`distgcn.comm.collective.abort_on_unexpected`
use: the rank, the size, an allgather of small objects and an abort. The
training transports offer the same members but import torch, whose import
costs seconds and hundreds of MB per rank.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from mpi4py import MPI  # starts MPI (MPI_Init_thread)

POLL_S = 0.005
"""How often a rank waiting for its peers checks whether they have arrived."""
_SHM_DIR = "/dev/shm/"
_SHM_PREFIXES = ("mpich_shm_", "mpich_shar_tmp")
"""Names of the files MPICH maps for shared memory between the ranks of a node (MPICH 4 and later; 3.x)."""


def world() -> MPI.Comm:
    """COMM_WORLD, with MPICH's shared-memory files already unlinked: how distgcn starts using MPI.

    Collective the first time (every rank of the job must call it), free after.
    """
    unlink_shared_memory_files()
    return MPI.COMM_WORLD


def _mapped_shared_memory_files() -> set[Path]:
    """MPICH's shared-memory files that this process maps and that still have a name."""
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return set()
    found = set()
    for line in lines:
        fields = line.split(maxsplit=5)
        path = fields[5] if len(fields) == 6 else ""
        name = path[len(_SHM_DIR):]
        if path.startswith(_SHM_DIR) and name.startswith(_SHM_PREFIXES) and " " not in name and "/" not in name:
            found.add(Path(path))  # a name with a blank is "NAME (deleted)": already gone
    return found


_unlinked = False


def unlink_shared_memory_files() -> None:
    """Remove the names of MPICH's node-shared memory files once every rank of the node has mapped them.

    The mappings stay valid, and MPICH opens them only in MPI_Init; with no name
    left, a job that is aborted or killed (even by SIGKILL) leaves nothing in
    /dev/shm, where such leftovers fill the node and can break a later job that
    derives the same name (a requeued Slurm job). Collective over COMM_WORLD, once per process.
    """
    global _unlinked
    if _unlinked:
        return
    _unlinked = True
    node = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        node.Barrier()  # every rank of this node has returned from MPI_Init, so has mapped the files
    finally:
        node.Free()
    for path in _mapped_shared_memory_files():
        try:
            path.unlink()
        except OSError:
            pass  # another rank of the node removed it first


class MPIGroup:
    """COMM_WORLD (or ``comm``) as a group: every call below is collective."""

    def __init__(self, comm: MPI.Comm | None = None):
        self.comm = comm if comm is not None else world()
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()

    def allgather_object(self, value: Any) -> list[Any]:
        """Every rank's ``value``, in rank order, on every rank.

        The wait for the slowest rank sleeps between polls: MPICH's blocking
        collectives spin, and ranks spinning while rank 0 partitions would take
        its cores.
        """
        arrived = self.comm.Ibarrier()
        while not arrived.Test():
            time.sleep(POLL_S)
        return self.comm.allgather(value)

    def alltoall_object(self, values: Sequence[Any]) -> list[Any]:
        """``values[d]`` to rank d from every rank; what rank s sent here is element s (waits as allgather_object)."""
        arrived = self.comm.Ibarrier()
        while not arrived.Test():
            time.sleep(POLL_S)
        return self.comm.alltoall(list(values))

    def abort(self, code: int = 1) -> NoReturn:
        abort_mpi_job(self.comm, code)


def abort_mpi_job(comm: MPI.Comm, code: int) -> NoReturn:
    """MPI_Abort with ``code`` (mpiexec then exits with it); from another thread only where MPI allows that.

    The caller has said why on stderr; MPICH's own line ("application called MPI_Abort ...") is kept off it.
    """
    from distgcn.runtime import signals

    sys.stderr.flush()
    signals.silence_stderr()
    if threading.current_thread() is threading.main_thread() or MPI.Query_thread() == MPI.THREAD_MULTIPLE:
        comm.Abort(code)
    os._exit(code)  # not reached after Abort; without thread support the launcher ends the other ranks
