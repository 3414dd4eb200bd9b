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

from . import config
from .counters import CommCounters
from .shard import Shard
from .transport import Exchange, Transport

HALO_DTYPES = {name: getattr(torch, name) for name in config.HALO_DTYPES}
"""``train --halo-dtype``: what halo messages may travel as (converted back to the training dtype on arrival)."""


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
    """Runs forward and reverse halo exchanges for one plan, and counts them.

    With a ``wire_dtype`` narrower than the data (``train --halo-dtype``), the
    rows sent are converted to it, travel through separate reused buffers of
    that dtype, and are converted back into the usual buffers as each message
    arrives (in :meth:`in_order`): fewer bytes cross, for a rounding of the
    halo rows only.
    """

    def __init__(self, plan: HaloPlan, transport: Transport, counters: CommCounters, exchanges: bool,
                 wire_dtype: torch.dtype | None = None):
        self.plan = plan
        self.transport = transport
        self.counters = counters
        self.exchanges = exchanges
        """False when no rank sends anything (P = 1): then calls are not counted as exchanges."""
        self.wire_dtype = wire_dtype
        """What messages travel as; None: the data's own dtype."""
        self._buffers: dict[tuple[str, int, torch.dtype], torch.Tensor] = {}
        self._widen: list[tuple[torch.Tensor, torch.Tensor]] = []
        """Per receive of the exchange started last: (the slice it lands in, the slice to convert it into)."""

    def buffer(self, role: str, rows: int, width: int, dtype: torch.dtype) -> torch.Tensor:
        """A message buffer reused across calls of the same width (one exchange runs at a time)."""
        key = (role, width, dtype)
        buf = self._buffers.get(key)
        if buf is None:
            buf = self._buffers[key] = torch.empty((rows, width), dtype=dtype, device=self.transport.device)
        return buf

    def _post(self, outgoing: torch.Tensor, out_role: str, sends: list[tuple[int, slice]],
              incoming: torch.Tensor, in_role: str, recvs: list[tuple[int, slice]]) -> Exchange:
        """Send slices of ``outgoing`` and receive slices of ``incoming`` (via the wire dtype), counting the sends."""
        wire = None if self.wire_dtype in (None, outgoing.dtype) else self.wire_dtype
        landing = incoming
        if wire is not None:
            outgoing = self.buffer(out_role, outgoing.shape[0], outgoing.shape[1], wire).copy_(outgoing)
            landing = self.buffer(in_role, incoming.shape[0], incoming.shape[1], wire)
        exchange = self.transport.exchange(sends=[(peer, outgoing[s]) for peer, s in sends],
                                           recvs=[(peer, landing[s]) for peer, s in recvs])
        self._widen = [] if wire is None else [(landing[s], incoming[s]) for _, s in recvs]
        if self.exchanges:
            self.counters.spmm_exchanges += 1
        self.counters.halo_rows += outgoing.shape[0]
        self.counters.halo_bytes += outgoing.numel() * outgoing.element_size()
        self.counters.messages += len(sends)
        return exchange

    def start_forward(self, h_owned: torch.Tensor) -> tuple[torch.Tensor, Exchange]:
        """Post the exchange of halo rows of ``h_owned``; returns the halo buffer it fills."""
        plan = self.plan
        width = h_owned.shape[1]
        halo = self.buffer("halo", plan.n_halo, width, h_owned.dtype)
        packed = self.buffer("send", plan.rows_sent, width, h_owned.dtype)
        torch.index_select(h_owned, 0, plan.send_index, out=packed)
        exchange = self._post(packed, "send", list(zip(plan.send_peers, plan.send_slices)),
                              halo, "halo", list(zip(plan.recv_peers, plan.recv_slices)))
        return halo, exchange

    def start_reverse(self, halo_grad: torch.Tensor) -> tuple[torch.Tensor, Exchange]:
        """Send the partial products for halo rows back to their owners.

        Returns the buffer receiving, per send-peer slice, the partials for the
        rows this rank sent forward (to be added into their gradient).
        """
        plan = self.plan
        incoming = self.buffer("send", plan.rows_sent, halo_grad.shape[1], halo_grad.dtype)
        exchange = self._post(halo_grad, "halo", list(zip(plan.recv_peers, plan.recv_slices)),
                              incoming, "send", list(zip(plan.send_peers, plan.send_slices)))
        return incoming, exchange

    def in_order(self, receives: Iterator[int], count: int) -> Iterator[int]:
        """Yield 0..count-1 in order, each as soon as it and every one before it have arrived.

        Adding the senders' contributions in a fixed order makes the sums, and
        so training, bitwise reproducible for a given partition whatever the
        arrival order; early messages are still consumed while later ones fly.
        ``receives`` must be those of the exchange started last: a message sent
        in a narrower wire dtype is converted here, outside the timed wait.
        """
        arrived = [False] * count
        next_index = 0
        for k in self.timed(receives):
            if self._widen:
                landing, target = self._widen[k]
                target.copy_(landing)
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
