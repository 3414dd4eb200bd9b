"""Transport over torch.distributed: gloo for CPU tensors, NCCL for one GPU per rank.

Halo messages are non-blocking point-to-point operations. With gloo each
send and receive is its own request, and receives are handed to the SpMM one
by one as they complete, in sender order. With NCCL the whole exchange is one
``batch_isend_irecv`` group (separately posted NCCL sends and receives
between the same two ranks can deadlock); it runs on NCCL's own
communication stream, and waiting on it only makes the compute stream wait,
so the host goes on queueing the owned-block product, which the GPU then
runs alongside the transfer.
"""

from __future__ import annotations

import atexit
import os
import socket
import sys
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

import torch
import torch.distributed as dist

_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


class _PerRequestExchange:
    """gloo: one request per message, each waited on exactly once.

    gloo has no completion test (``is_completed`` stays False until ``wait``,
    and a second ``wait`` on a receive waits for another message), so receives
    are taken in posting order, which is sender order. Messages land in the
    background meanwhile, so the owned-block product still overlaps them.
    """

    def __init__(self, recv_works: list[dist.Work], send_works: list[dist.Work]):
        self._recv = recv_works
        self._send = send_works

    def completed_receives(self) -> Iterator[int]:
        for k, work in enumerate(self._recv):
            work.wait()
            yield k

    def wait_sends(self) -> None:
        for work in self._send:
            work.wait()


class _GroupedExchange:
    """NCCL: one coalesced group; waiting orders the compute stream after it."""

    def __init__(self, works: list[dist.Work], receives: int):
        self._works = works
        self._receives = receives

    def completed_receives(self) -> Iterator[int]:
        for work in self._works:
            work.wait()
        yield from range(self._receives)

    def wait_sends(self) -> None:
        for work in self._works:
            work.wait()


def _destroy_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


class TorchDistTransport:
    """Point-to-point and collectives on torch.distributed's default process group.

    The process group must already be initialized (see :mod:`distgcn.launcher`);
    ``device`` is ``cpu`` for gloo and this rank's GPU for NCCL.
    """

    def __init__(self, device: torch.device):
        self.backend = dist.get_backend()
        self.rank = dist.get_rank()
        self.size = dist.get_world_size()
        self.device = device
        # A process that exits with the group alive can die in gloo's threads during interpreter
        # teardown ("terminate called without an active exception"); close() is the collective way
        # out, and this is the fallback for library users who never call it.
        atexit.register(_destroy_group)

    def close(self) -> None:
        """Wait until every rank is done, then take the process group down while Python still runs."""
        if dist.is_initialized():
            dist.barrier()
            _destroy_group()

    def exchange(
        self, sends: Sequence[tuple[int, torch.Tensor]], recvs: Sequence[tuple[int, torch.Tensor]]
    ) -> _PerRequestExchange | _GroupedExchange:
        if self.backend == "nccl":
            ops = [dist.P2POp(dist.irecv, buf, peer) for peer, buf in recvs]
            ops += [dist.P2POp(dist.isend, buf, peer) for peer, buf in sends]
            return _GroupedExchange(dist.batch_isend_irecv(ops) if ops else [], len(recvs))
        recv_works = [dist.irecv(buf, src=peer) for peer, buf in recvs]
        send_works = [dist.isend(buf, dst=peer) for peer, buf in sends]
        return _PerRequestExchange(recv_works, send_works)

    def allreduce_sum_async(self, tensor: torch.Tensor) -> dist.Work:
        return dist.all_reduce(tensor, op=dist.ReduceOp.SUM, async_op=True)

    def allreduce(self, values: Sequence[float], op: str = "sum") -> list[float]:
        buf = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        dist.all_reduce(buf, op=_OPS[op])
        return buf.tolist()

    def allgather_object(self, value: Any) -> list[Any]:
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, value)
        return out

    def send_object(self, value: Any, dest: int) -> None:
        dist.send_object_list([value], dst=dest, device=self.device)

    def alltoall_object(self, values: Sequence[Any]) -> list[Any]:
        """In P rounds of pairs: in round k rank r trades with rank (k - r) mod P, the lower rank sending first,
        so blocking sends never wait on each other in a cycle."""
        out: list[Any] = [None] * self.size
        for k in range(self.size):
            peer = (k - self.rank) % self.size
            if peer == self.rank:
                out[peer] = values[peer]
            elif self.rank < peer:
                self.send_object(values[peer], peer)
                out[peer] = self.recv_object(peer)
            else:
                out[peer] = self.recv_object(peer)
                self.send_object(values[peer], peer)
        return out

    def recv_object(self, source: int) -> Any:
        box: list[Any] = [None]
        dist.recv_object_list(box, src=source, device=self.device)
        return box[0]

    def ranks_on_this_node(self) -> int:
        hosts = self.allgather_object(socket.gethostname())
        return hosts.count(hosts[self.rank])

    def abort(self, code: int = 1) -> NoReturn:
        sys.stderr.flush()
        sys.stdout.flush()
        if _mpi_running():  # under mpiexec: MPI_Abort ends every rank at once, with this code
            from mpi4py import MPI

            from distgcn.comm.mpi_group import abort_mpi_job

            abort_mpi_job(MPI.COMM_WORLD, code)
        # torch.distributed has no MPI_Abort: leave at once without cleanup; the
        # launcher (torchrun, srun) then stops the other ranks, and any rank still
        # blocked on this one sees its connection close and fails too.
        os._exit(code)


def _mpi_running() -> bool:
    """Whether this process initialized MPI (and has not finalized it), without initializing it."""
    mpi = sys.modules.get("mpi4py.MPI")
    return mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized()
