"""Transport over MPI (mpi4py): non-blocking point-to-point and Iallreduce on CPU tensors."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

import numpy as np
import torch
from mpi4py import MPI

from distgcn.comm.mpi_group import abort_mpi_job, world

_HALO_TAG = 17
_OBJECT_TAG = 1
_OPS = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}


def _buffer(tensor: torch.Tensor) -> np.ndarray:
    """A numpy view sharing memory with a contiguous CPU tensor (no copy)."""
    if not tensor.is_contiguous():
        raise ValueError("MPI buffers must be contiguous")
    return tensor.detach().numpy()


def _message_buffer(tensor: torch.Tensor) -> np.ndarray:
    """:func:`_buffer` for point-to-point messages, which only move bits: bfloat16, unknown to numpy, as int16."""
    return _buffer(tensor.view(torch.int16) if tensor.dtype == torch.bfloat16 else tensor)


class _MPIExchange:
    def __init__(self, recv_requests: list[MPI.Request], send_requests: list[MPI.Request]):
        self._recv = recv_requests
        self._send = send_requests

    def completed_receives(self) -> Iterator[int]:
        remaining = len(self._recv)
        while remaining:
            index = MPI.Request.Waitany(self._recv)
            remaining -= 1
            yield index

    def wait_sends(self) -> None:
        MPI.Request.Waitall(self._send)


class _MPIReduction:
    def __init__(self, request: MPI.Request):
        self._request = request

    def wait(self) -> None:
        self._request.Wait()


class MPITransport:
    """Point-to-point and collectives on an MPI communicator (COMM_WORLD by default)."""

    backend = "mpi"
    device = torch.device("cpu")

    def __init__(self, comm: MPI.Comm | None = None):
        self.comm = comm if comm is not None else world()  # collective, as every rank builds its transport
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()

    def exchange(
        self, sends: Sequence[tuple[int, torch.Tensor]], recvs: Sequence[tuple[int, torch.Tensor]]
    ) -> _MPIExchange:
        recv_requests = [self.comm.Irecv(_message_buffer(buf), source=peer, tag=_HALO_TAG) for peer, buf in recvs]
        send_requests = [self.comm.Isend(_message_buffer(buf), dest=peer, tag=_HALO_TAG) for peer, buf in sends]
        return _MPIExchange(recv_requests, send_requests)

    def allreduce_sum_async(self, tensor: torch.Tensor) -> _MPIReduction:
        return _MPIReduction(self.comm.Iallreduce(MPI.IN_PLACE, _buffer(tensor), op=MPI.SUM))

    def allreduce(self, values: Sequence[float], op: str = "sum") -> list[float]:
        buf = np.asarray(values, dtype=np.float64)
        out = np.empty_like(buf)
        self.comm.Allreduce(buf, out, op=_OPS[op])
        return out.tolist()

    def allgather_object(self, value: Any) -> list[Any]:
        return self.comm.allgather(value)

    def send_object(self, value: Any, dest: int) -> None:
        self.comm.send(value, dest=dest, tag=_OBJECT_TAG)

    def recv_object(self, source: int) -> Any:
        return self.comm.recv(source=source, tag=_OBJECT_TAG)

    def alltoall_object(self, values: Sequence[Any]) -> list[Any]:
        return self.comm.alltoall(list(values))

    def ranks_on_this_node(self) -> int:
        node = self.comm.Split_type(MPI.COMM_TYPE_SHARED)
        try:
            return node.Get_size()
        finally:
            node.Free()

    def close(self) -> None:
        """Nothing to do: mpi4py finalizes MPI, itself a collective, when the process exits."""

    def abort(self, code: int = 1) -> NoReturn:
        abort_mpi_job(self.comm, code)
