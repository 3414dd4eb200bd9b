"""The ranks of an MPI job, for commands that only decide together and never move tensors (no torch).

``distgcn partition`` under mpiexec (:mod:`partition.rank_shards`) needs what
:func:`distgcn.collective.agree` and :func:`distgcn.collective.abort_on_unexpected`
use: the rank, the size, an allgather of small objects and an abort. The
training transports offer the same members but import torch, whose import
costs seconds and hundreds of MB per rank.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, NoReturn

from mpi4py import MPI

POLL_S = 0.005
"""How often a rank waiting for its peers checks whether they have arrived."""


class MPIGroup:
    """COMM_WORLD (or ``comm``) as a group: every call below is collective."""

    def __init__(self, comm: MPI.Comm | None = None):
        self.comm = comm if comm is not None else MPI.COMM_WORLD
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

    def abort(self, code: int = 1) -> NoReturn:
        abort_mpi_job(self.comm, code)


def abort_mpi_job(comm: MPI.Comm, code: int) -> NoReturn:
    """MPI_Abort with ``code`` (mpiexec then exits with it); from another thread only where MPI allows that.

    The caller has said why on stderr; MPICH's own line ("application called MPI_Abort ...") is kept off it.
    """
    from . import signals

    sys.stderr.flush()
    signals.silence_stderr()
    if threading.current_thread() is threading.main_thread() or MPI.Query_thread() == MPI.THREAD_MULTIPLE:
        comm.Abort(code)
    os._exit(code)  # not reached after Abort; without thread support the launcher ends the other ranks
