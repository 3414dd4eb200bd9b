"""The halo exchange: moving the rows of H that other ranks' rows of Â need.

Forward, each rank sends the owned rows listed in its plan and receives its
halo rows straight into the halo buffer (halo rows are grouped by sender, so
each peer's message fills one contiguous slice). Backward runs the same pairs
in reverse: partial products for halo rows go back to their owners, who add
them into the gradient of the rows they sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from .counters import CommCounters
from .shard import Shard
from .transport import Exchange, Transport


@dataclass(frozen=True)
class HaloPlan:
    """Who sends which rows to whom, in local numbering."""

    n_owned: int
    n_halo: int
    send_peers: list[int]
    send_slices: list[slice]
    send_index: torch.Tensor
    recv_peers: list[int]
    recv_slices: list[slice]

    @classmethod
    def from_shard(cls, shard: Shard, device: torch.device = torch.device("cpu")) -> HaloPlan:
        """The shard's plan, with the index of rows to send on ``device`` (where the rows are packed)."""
        def slices(offsets: np.ndarray) -> list[slice]:
            return [slice(int(a), int(b)) for a, b in zip(offsets[:-1], offsets[1:])]

        return cls(
            n_owned=shard.n_owned,
            n_halo=shard.n_halo,
            send_peers=[int(p) for p in shard.send_peers],
            send_slices=slices(shard.send_offsets),
            send_index=torch.from_numpy(np.ascontiguousarray(shard.send_index, dtype=np.int64)).to(device),
            recv_peers=[int(p) for p in shard.recv_peers],
            recv_slices=slices(shard.recv_offsets),
        )

    @property
    def rows_sent(self) -> int:
        return int(self.send_index.shape[0])


class HaloExchanger:
    """Runs forward and reverse halo exchanges for one plan, and counts them."""

    def __init__(self, plan: HaloPlan, transport: Transport, counters: CommCounters, exchanges: bool):
        self.plan = plan
        self.transport = transport
        self.counters = counters
        self.exchanges = exchanges
        """False when no rank sends anything (P = 1): then calls are not counted as exchanges."""
        self._buffers: dict[tuple[str, int, torch.dtype], torch.Tensor] = {}

    def buffer(self, role: str, rows: int, width: int, dtype: torch.dtype) -> torch.Tensor:
        """A message buffer reused across calls of the same width (one exchange runs at a time)."""
        key = (role, width, dtype)
        buf = self._buffers.get(key)
        if buf is None:
            buf = self._buffers[key] = torch.empty((rows, width), dtype=dtype, device=self.transport.device)
        return buf

    def _count(self, rows: int, messages: int, width: int, itemsize: int) -> None:
        if self.exchanges:
            self.counters.spmm_exchanges += 1
        self.counters.halo_rows += rows
        self.counters.halo_bytes += rows * width * itemsize
        self.counters.messages += messages

    def start_forward(self, h_owned: torch.Tensor) -> tuple[torch.Tensor, Exchange]:
        """Post the exchange of halo rows of ``h_owned``; returns the halo buffer it fills."""
        plan = self.plan
        width = h_owned.shape[1]
        halo = self.buffer("halo", plan.n_halo, width, h_owned.dtype)
        packed = self.buffer("send", plan.rows_sent, width, h_owned.dtype)
        torch.index_select(h_owned, 0, plan.send_index, out=packed)
        exchange = self.transport.exchange(
            sends=[(peer, packed[s]) for peer, s in zip(plan.send_peers, plan.send_slices)],
            recvs=[(peer, halo[s]) for peer, s in zip(plan.recv_peers, plan.recv_slices)],
        )
        self._count(plan.rows_sent, len(plan.send_peers), width, h_owned.element_size())
        return halo, exchange

    def start_reverse(self, halo_grad: torch.Tensor) -> tuple[torch.Tensor, Exchange]:
        """Send the partial products for halo rows back to their owners.

        Returns the buffer receiving, per send-peer slice, the partials for the
        rows this rank sent forward (to be added into their gradient).
        """
        plan = self.plan
        width = halo_grad.shape[1]
        incoming = self.buffer("send", plan.rows_sent, width, halo_grad.dtype)
        exchange = self.transport.exchange(
            sends=[(peer, halo_grad[s]) for peer, s in zip(plan.recv_peers, plan.recv_slices)],
            recvs=[(peer, incoming[s]) for peer, s in zip(plan.send_peers, plan.send_slices)],
        )
        self._count(plan.n_halo, len(plan.recv_peers), width, halo_grad.element_size())
        return incoming, exchange

    def in_order(self, receives: Iterator[int], count: int) -> Iterator[int]:
        """Yield 0..count-1 in order, each as soon as it and every one before it have arrived.

        Adding the senders' contributions in a fixed order makes the sums, and
        so training, bitwise reproducible for a given partition whatever the
        arrival order; early messages are still consumed while later ones fly.
        """
        arrived = [False] * count
        next_index = 0
        for k in self.timed(receives):
            arrived[k] = True
            while next_index < count and arrived[next_index]:
                yield next_index
                next_index += 1

    def timed(self, receives: Iterator[int]) -> Iterator[int]:
        """Wrap a completion iterator so time blocked in it counts as comm wait."""
        while True:
            with self.counters.timing("comm_wait_s"):
                index = next(receives, None)
            if index is None:
                return
            yield index
