"""The transport interface shared by the MPI and torch.distributed back ends.

Everything outside ``distgcn/comm/transport/`` talks to other ranks through this
protocol only, so the plan, the SpMM, the models and the trainer are the same
code whichever library moves the bytes and whichever device holds them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NoReturn, Protocol

import torch


class Exchange(Protocol):
    """Posted sends and receives of one halo exchange."""

    def completed_receives(self) -> Iterator[int]:
        """Yield the index (into the receive list) of each receive as it completes."""
        ...

    def wait_sends(self) -> None:
        """Block until every send buffer may be reused."""
        ...


class PendingReduction(Protocol):
    def wait(self) -> None: ...


class Transport(Protocol):
    backend: str
    """mpi, gloo or nccl: what moves the bytes (recorded with a run's metrics)."""
    rank: int
    size: int
    device: torch.device
    """Where this rank's tensors live (the CPU, or the GPU chosen for the rank)."""

    def exchange(
        self, sends: Sequence[tuple[int, torch.Tensor]], recvs: Sequence[tuple[int, torch.Tensor]]
    ) -> Exchange:
        """Post receives into ``recvs`` buffers, then sends; nothing blocks."""
        ...

    def allreduce_sum_async(self, tensor: torch.Tensor) -> PendingReduction:
        """Start an in-place sum of ``tensor`` over all ranks."""
        ...

    def allreduce(self, values: Sequence[float], op: str = "sum") -> list[float]:
        """Blocking reduction of a few scalars (``op``: sum, max or min)."""
        ...

    def allgather_object(self, value: Any) -> list[Any]:
        """Every rank's ``value`` (small and picklable), in rank order, on every rank."""
        ...

    def send_object(self, value: Any, dest: int) -> None:
        """Blocking send of a picklable object (shards sent from rank 0)."""
        ...

    def alltoall_object(self, values: Sequence[Any]) -> list[Any]:
        """``values[d]`` to rank d, from every rank at once: what rank s sent this rank is element s."""
        ...

    def recv_object(self, source: int) -> Any:
        """Blocking receive of an object sent with :meth:`send_object`."""
        ...

    def ranks_on_this_node(self) -> int:
        """How many ranks of the job share this node (they share its cores)."""
        ...

    def close(self) -> None:
        """Leave the job cleanly, all ranks together, after the last communication."""
        ...

    def abort(self, code: int = 1) -> NoReturn:
        """End the whole job now, from any one rank (any thread), so no other rank waits forever; exit ``code``."""
        ...
