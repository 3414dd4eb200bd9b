"""The halo exchange: moving the rows of H that other ranks' rows of Â need.

Forward, each rank sends the owned rows listed in its plan and receives its
halo rows straight into the halo buffer (halo rows are grouped by sender, so
each peer's message fills one contiguous slice). Backward runs the same pairs
in reverse: partial products for halo rows go back to their owners, who add
them into the gradient of the rows they sent.

:class:`HaloExchanger` owns the plan, the reused buffers and the counters;
each exchange it starts is a :class:`HaloExchange` that owns what belongs to
that exchange alone (its messages, their conversion from the wire dtype, the
reverse add), so the SpMM needs nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from distgcn import config
from distgcn.comm.counters import CommCounters
from distgcn.comm.transport import Exchange, Transport
from distgcn.shard.rank_shard import Shard

HALO_DTYPES = {name: getattr(torch, name) for name in config.HALO_DTYPES}
"""``train --halo-dtype``: what halo messages may travel as (converted back to the training dtype on arrival)."""


def offsets_to_slices(offsets: Sequence[int] | np.ndarray) -> list[slice]:
    """The consecutive ranges ``offsets[k]:offsets[k + 1]`` (message k's rows in a buffer grouped by peer)."""
    return [slice(int(a), int(b)) for a, b in zip(offsets[:-1], offsets[1:])]


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
        return cls(
            n_owned=shard.n_owned,
            n_halo=shard.n_halo,
            send_peers=[int(p) for p in shard.send_peers],
            send_slices=offsets_to_slices(shard.send_offsets),
            send_index=torch.from_numpy(np.ascontiguousarray(shard.send_index, dtype=np.int64)).to(device),
            recv_peers=[int(p) for p in shard.recv_peers],
            recv_slices=offsets_to_slices(shard.recv_offsets),
        )

    @property
    def rows_sent(self) -> int:
        return int(self.send_index.shape[0])


class HaloExchange:
    """One posted exchange: its messages in sender order, converted from the wire dtype, then its sends finished.

    Its buffers belong to the exchanger and are reused by the next exchange,
    so it must be finished before another one starts.
    """

    def __init__(self, posted: Exchange, messages: list[torch.Tensor], landings: list[torch.Tensor] | None,
                 counters: CommCounters):
        self._posted = posted
        self._messages = messages
        """Per receive: where its rows are read from, in the data's dtype."""
        self._landings = landings
        """Per receive, with a narrower wire dtype: where it lands, to be converted into ``_messages``."""
        self._counters = counters

    def arrivals(self) -> Iterator[tuple[int, torch.Tensor]]:
        """(k, message k's rows) for k = 0, 1, ..., each as soon as it and every one before it have arrived.

        Adding the senders' contributions in a fixed order makes the sums, and
        so training, bitwise reproducible for a given partition whatever the
        arrival order; early messages are still consumed while later ones fly.
        A message sent in a narrower wire dtype is converted here, outside the
        timed wait.
        """
        count = len(self._messages)
        arrived = [False] * count
        next_index = 0
        for k in self._timed(self._posted.completed_receives()):
            if self._landings is not None:
                self._messages[k].copy_(self._landings[k])
            arrived[k] = True
            while next_index < count and arrived[next_index]:
                yield next_index, self._messages[next_index]
                next_index += 1

    def finish(self) -> None:
        """Wait until every send buffer may be reused (timed as comm wait)."""
        with self._counters.timing("comm_wait_s"):
            self._posted.wait_sends()

    def _timed(self, receives: Iterator[int]) -> Iterator[int]:
        """The completion iterator, with time blocked in it counted as comm wait."""
        while True:
            with self._counters.timing("comm_wait_s"):
                index = next(receives, None)
            if index is None:
                return
            yield index


class ReverseExchange(HaloExchange):
    """A reverse exchange: the partial products for the rows this rank sent forward, added into their gradient."""

    def __init__(self, posted: Exchange, messages: list[torch.Tensor], landings: list[torch.Tensor] | None,
                 counters: CommCounters, rows: list[torch.Tensor]):
        super().__init__(posted, messages, landings, counters)
        self._rows = rows
        """Per receive: the owned rows its partials belong to (the rows sent to that peer forward)."""

    def add_into(self, grad: torch.Tensor) -> None:
        """grad[rows sent to peer k] += peer k's partials, for k in order as they arrive."""
        for k, partials in self.arrivals():
            grad.index_add_(0, self._rows[k], partials)


class HaloExchanger:
    """Starts forward and reverse halo exchanges for one plan, owns their buffers, and counts them.

    With a ``wire_dtype`` narrower than the data (``train --halo-dtype``), the
    rows sent are converted to it, travel through separate reused buffers of
    that dtype, and are converted back into the usual buffers as each message
    arrives (in :meth:`HaloExchange.arrivals`): fewer bytes cross, for a
    rounding of the halo rows only.
    """

    def __init__(self, plan: HaloPlan, transport: Transport, counters: CommCounters, exchanges: bool,
                 wire_dtype: torch.dtype | None = None):
        self.plan = plan
        self.device = transport.device
        self._transport = transport
        self._counters = counters
        self._exchanges = exchanges
        """False when no rank sends anything (P = 1): then calls are not counted as exchanges."""
        self._wire_dtype = wire_dtype
        """What messages travel as; None: the data's own dtype."""
        self._buffers: dict[tuple[str, int, torch.dtype], torch.Tensor] = {}
        self._sent_rows = [plan.send_index[s] for s in plan.send_slices]

    def _buffer(self, role: str, rows: int, width: int, dtype: torch.dtype) -> torch.Tensor:
        """A message buffer reused across calls of the same width (one exchange runs at a time)."""
        key = (role, width, dtype)
        buf = self._buffers.get(key)
        if buf is None:
            buf = self._buffers[key] = torch.empty((rows, width), dtype=dtype, device=self.device)
        return buf

    def _post(self, outgoing: torch.Tensor, out_role: str, sends: list[tuple[int, slice]],
              incoming: torch.Tensor, in_role: str,
              recvs: list[tuple[int, slice]]) -> tuple[Exchange, list[torch.Tensor], list[torch.Tensor] | None]:
        """Send slices of ``outgoing`` and receive slices of ``incoming`` (via the wire dtype), counting the sends.

        Returns the posted exchange, each receive's slice of ``incoming`` and,
        with a narrower wire dtype, the slice of the wire buffer it lands in.
        """
        wire = None if self._wire_dtype in (None, outgoing.dtype) else self._wire_dtype
        landing = incoming
        if wire is not None:
            outgoing = self._buffer(out_role, outgoing.shape[0], outgoing.shape[1], wire).copy_(outgoing)
            landing = self._buffer(in_role, incoming.shape[0], incoming.shape[1], wire)
        posted = self._transport.exchange(sends=[(peer, outgoing[s]) for peer, s in sends],
                                          recvs=[(peer, landing[s]) for peer, s in recvs])
        if self._exchanges:
            self._counters.spmm_exchanges += 1
        self._counters.halo_rows += outgoing.shape[0]
        self._counters.halo_bytes += outgoing.numel() * outgoing.element_size()
        self._counters.messages += len(sends)
        messages = [incoming[s] for _, s in recvs]
        return posted, messages, None if wire is None else [landing[s] for _, s in recvs]

    def start_forward(self, h_owned: torch.Tensor) -> HaloExchange:
        """Post the exchange of halo rows of ``h_owned``; its arrivals are the halo rows of each sender."""
        plan = self.plan
        width = h_owned.shape[1]
        halo = self._buffer("halo", plan.n_halo, width, h_owned.dtype)
        packed = self._buffer("send", plan.rows_sent, width, h_owned.dtype)
        torch.index_select(h_owned, 0, plan.send_index, out=packed)
        posted, messages, landings = self._post(packed, "send", list(zip(plan.send_peers, plan.send_slices)),
                                                halo, "halo", list(zip(plan.recv_peers, plan.recv_slices)))
        return HaloExchange(posted, messages, landings, self._counters)

    def halo_partials(self, width: int, dtype: torch.dtype) -> torch.Tensor:
        """A zeroed buffer of one row per halo row, for the partial products :meth:`start_reverse` sends.

        It is the forward's halo buffer: the forward's rows are no longer needed when the backward runs.
        """
        return self._buffer("halo", self.plan.n_halo, width, dtype).zero_()

    def start_reverse(self, halo_partials: torch.Tensor) -> ReverseExchange:
        """Send the partial products for halo rows back to their owners.

        The exchange returned adds, per send peer, the partials for the rows
        this rank sent forward into their gradient (:meth:`ReverseExchange.add_into`).
        """
        plan = self.plan
        incoming = self._buffer("send", plan.rows_sent, halo_partials.shape[1], halo_partials.dtype)
        posted, messages, landings = self._post(halo_partials, "halo", list(zip(plan.recv_peers, plan.recv_slices)),
                                                incoming, "send", list(zip(plan.send_peers, plan.send_slices)))
        return ReverseExchange(posted, messages, landings, self._counters, self._sent_rows)
