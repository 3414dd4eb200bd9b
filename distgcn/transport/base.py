"""The transport interface shared by the MPI and torch.distributed back ends."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

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
    rank: int
    size: int

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
