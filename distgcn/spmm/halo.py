"""The halo exchange: moving the rows of H that other ranks' rows of Â need.

Forward, each rank sends the owned rows listed in its plan and receives its
halo rows; backward runs the same pairs in reverse: partial products for
halo rows go back to their owners, who add them into the gradient of the
rows they sent.

Messages move in rounds, the classic shifted schedule of an all-to-all: in
round t = 1 .. P-1 rank r sends to r + t and receives from r - t (mod P),
and a rank that has nothing for either peer skips the round. Every rank adds
what it receives in round order, so a result does not depend on when the
messages land, nor on how many rounds are in flight:

- the whole halo (``window=None``): every round is posted at once and the
  halo rows land in one buffer, each sender's in its own slice;
- a window of K rounds (``train --halo-window K``): at most K rounds are in
  flight, each in one of K reused slots the size of the largest message, so
  a rank holds K peers' rows instead of its whole halo (where that is
  fewer rows: :func:`windowed`). A round's rows are
  packed when it is posted and its slot is reused once its rows are consumed
  and its send is done. The message of rounds t is posted by both of its
  ends in their round t, and every rank posts its rounds in increasing
  order and waits only on its lowest unfinished one, so the lowest unfinished
  round of the whole job can always complete: no rank waits forever.

:class:`HaloExchanger` owns the plan, the schedule, the reused buffers and
the counters; each exchange it starts owns what belongs to that exchange
alone (its messages, their conversion from the wire dtype, the reverse add).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from distgcn import config
from distgcn.comm.counters import CommCounters
from distgcn.comm.transport import Exchange, Transport
from distgcn.shard.rank_shard import Shard
from distgcn.spmm.window import streams, windowed

HALO_DTYPES = {name: getattr(torch, name) for name in config.HALO_DTYPES}
"""``train --halo-dtype``: what halo messages may travel as (converted back to the training dtype on arrival)."""

FillPartials = Callable[[int, torch.Tensor], None]
"""``fill(k, out)``: write into ``out`` the partial products for the halo rows received from recv peer k."""


def offsets_to_slices(offsets: Sequence[int] | np.ndarray) -> list[slice]:
    """The consecutive ranges ``offsets[k]:offsets[k + 1]`` (message k's rows in a buffer grouped by peer)."""
    return [slice(int(a), int(b)) for a, b in zip(offsets[:-1], offsets[1:])]


def _rows(s: slice) -> int:
    return s.stop - s.start


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


@dataclass(frozen=True)
class Round:
    """One round of the schedule: the index of the send peer and of the recv peer in the plan (None: nothing)."""

    send: int | None
    recv: int | None


def round_schedule(plan: HaloPlan, rank: int, size: int) -> list[Round]:
    """Rank ``rank``'s non-empty rounds: in round t it sends to rank + t and receives from rank - t (mod size)."""
    send_at = {peer: k for k, peer in enumerate(plan.send_peers)}
    recv_at = {peer: k for k, peer in enumerate(plan.recv_peers)}
    rounds = []
    for t in range(1, size):
        step = Round(send_at.get((rank + t) % size), recv_at.get((rank - t) % size))
        if step.send is not None or step.recv is not None:
            rounds.append(step)
    return rounds


class HaloExchange:
    """One exchange posted whole: its messages in round order, converted from the wire dtype, then its sends finished.

    Its buffers belong to the exchanger and are reused by the next exchange,
    so it must be finished before another one starts.
    """

    def __init__(self, posted: Exchange, received: list[int], messages: list[torch.Tensor],
                 landings: list[torch.Tensor] | None, counters: CommCounters):
        self._posted = posted
        self._received = received
        """Per posted receive: its index in the plan's receive (or, reversed, send) list."""
        self._messages = messages
        """Per posted receive: where its rows are read from, in the data's dtype."""
        self._landings = landings
        """Per posted receive, with a narrower wire dtype: where it lands, to be converted into ``_messages``."""
        self._counters = counters

    def arrivals(self) -> Iterator[tuple[int, torch.Tensor]]:
        """(k, the rows of the plan's receive k), in round order, each as soon as it and every one before it landed.

        Adding the senders' contributions in a fixed order makes the sums, and
        so training, bitwise reproducible for a given partition whatever the
        arrival order; early messages are still consumed while later ones fly.
        A message sent in a narrower wire dtype is converted here, outside the
        timed wait.
        """
        count = len(self._messages)
        arrived = [False] * count
        next_index = 0
        for i in _timed(self._counters, self._posted.completed_receives()):
            if self._landings is not None:
                self._messages[i].copy_(self._landings[i])
            arrived[i] = True
            while next_index < count and arrived[next_index]:
                yield self._received[next_index], self._messages[next_index]
                next_index += 1

    def finish(self) -> None:
        """Wait until every send buffer may be reused (timed as comm wait)."""
        with self._counters.timing("comm_wait_s"):
            self._posted.wait_sends()


def _timed(counters: CommCounters, receives: Iterator[int]) -> Iterator[int]:
    """The completion iterator, with time blocked in it counted as comm wait."""
    while True:
        with counters.timing("comm_wait_s"):
            index = next(receives, None)
        if index is None:
            return
        yield index


class ReverseExchange(HaloExchange):
    """A reverse exchange: the partial products for the rows this rank sent forward, added into their gradient."""

    def __init__(self, posted: Exchange, received: list[int], messages: list[torch.Tensor],
                 landings: list[torch.Tensor] | None, counters: CommCounters, rows: list[torch.Tensor]):
        super().__init__(posted, received, messages, landings, counters)
        self._rows = rows
        """Per send peer: the owned rows its partials belong to (the rows sent to that peer forward)."""

    def add_into(self, grad: torch.Tensor) -> None:
        """grad[rows sent to peer k] += peer k's partials, in round order."""
        for k, partials in self.arrivals():
            grad.index_add_(0, self._rows[k], partials)


@dataclass(frozen=True)
class Slots:
    """One direction of a windowed exchange: its peers, each message's rows, and the reused slots they go through."""

    peers: list[int]
    rows: list[int]
    """Rows of the message to or from each peer."""
    data: torch.Tensor
    """[window, largest message, width] in the data's dtype."""
    wire: torch.Tensor | None
    """The same in a narrower wire dtype, or None."""


class WindowedExchange:
    """An exchange of at most ``window`` rounds in flight, each in a reused slot (see the module docstring).

    ``pack(k, slot)`` fills the message to outgoing peer k just before its
    round is posted; :meth:`arrivals` yields each round's received rows in
    round order, valid until the next one is asked for, and posts the next
    round as a slot frees.
    """

    def __init__(self, transport: Transport, rounds: list[Round], counters: CommCounters, outgoing: Slots,
                 incoming: Slots, pack: Callable[[int, torch.Tensor], None]):
        self._transport = transport
        self._rounds = rounds
        self._window = int(outgoing.data.shape[0])
        self._counters = counters
        self._out = outgoing
        self._in = incoming
        self._pack = pack
        self._posted: deque[Exchange] = deque()
        self._next = 0
        for _ in range(min(self._window, len(rounds))):
            self._post_next()

    def _post_next(self) -> None:
        step = self._rounds[self._next]
        slot = self._next % self._window
        sends, recvs = [], []
        if step.send is not None:
            outgoing = self._out.data[slot, :self._out.rows[step.send]]
            self._pack(step.send, outgoing)
            if self._out.wire is not None:
                outgoing = self._out.wire[slot, :outgoing.shape[0]].copy_(outgoing)
            sends.append((self._out.peers[step.send], outgoing))
        if step.recv is not None:
            landing = self._in.data if self._in.wire is None else self._in.wire
            recvs.append((self._in.peers[step.recv], landing[slot, :self._in.rows[step.recv]]))
        self._posted.append(self._transport.exchange(sends=sends, recvs=recvs))
        self._next += 1

    def arrivals(self) -> Iterator[tuple[int, torch.Tensor]]:
        """(k, the rows of receive k) round by round; the slot is reused once the caller asks for the next."""
        for index, step in enumerate(self._rounds):
            posted = self._posted.popleft()
            slot = index % self._window
            for _ in _timed(self._counters, posted.completed_receives()):
                pass
            if step.recv is not None:
                rows = self._in.data[slot, :self._in.rows[step.recv]]
                if self._in.wire is not None:
                    rows.copy_(self._in.wire[slot, :rows.shape[0]])
                yield step.recv, rows
            with self._counters.timing("comm_wait_s"):
                posted.wait_sends()
            if self._next < len(self._rounds):
                self._post_next()

    def finish(self) -> None:
        """Nothing left: each round's sends were waited for before its slot was reused."""


class WindowedReverse(WindowedExchange):
    """A windowed reverse exchange: the partials for the rows this rank sent forward, added into their gradient."""

    def __init__(self, *args, rows: list[torch.Tensor], **kwargs):
        super().__init__(*args, **kwargs)
        self._rows = rows

    def add_into(self, grad: torch.Tensor) -> None:
        """grad[rows sent to peer k] += peer k's partials, in round order."""
        for k, partials in self.arrivals():
            grad.index_add_(0, self._rows[k], partials)


class HaloExchanger:
    """Starts forward and reverse halo exchanges for one plan, owns their buffers, and counts them.

    ``window``: at most that many rounds (peers' messages) in flight and in
    memory at once; None: the whole halo at once. With a ``wire_dtype``
    narrower than the data (``train --halo-dtype``), the rows sent are
    converted to it, travel through separate reused buffers of that dtype,
    and are converted back as each message arrives: fewer bytes cross, for a
    rounding of the halo rows only.
    """

    def __init__(self, plan: HaloPlan, transport: Transport, counters: CommCounters, exchanges: bool,
                 wire_dtype: torch.dtype | None = None, window: int | None = None):
        if window is not None and window < 2:
            raise ValueError(f"a halo window holds at least 2 rounds (one in flight, one multiplied), got {window}")
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
        self._rounds = round_schedule(plan, transport.rank, transport.size)
        self._send_rows = [_rows(s) for s in plan.send_slices]
        self._recv_rows = [_rows(s) for s in plan.recv_slices]
        slots = windowed(window, plan.n_halo, plan.rows_sent, max(self._recv_rows, default=0),
                         max(self._send_rows, default=0))
        self.window = window if slots else None
        """Rounds in flight at once in this rank's slots; None: all of them (the whole halo)."""
        self.requested_window = window if streams(window, transport.size) else None
        """The window asked for where it is below the P - 1 rounds a rank may have, else None: the same on every
        rank (``window`` is this rank's own choice of buffers), so it decides collective steps, such as GAT
        fetching its halo rows again (:func:`distgcn.spmm.window.streams`)."""
        self.receive_order = [r.recv for r in self._rounds if r.recv is not None]
        """The plan's receives in the order exchanges deliver them."""

    @property
    def buffer_rows(self) -> int:
        """Rows of every message buffer this exchanger holds now (all widths): what a window bounds."""
        return sum(int(b.shape[0]) * (int(b.shape[1]) if b.dim() == 3 else 1) for b in self._buffers.values())

    def _buffer(self, role: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A message buffer reused across calls of the same width (one exchange runs at a time)."""
        key = (role, shape[-1], dtype)
        buf = self._buffers.get(key)
        if buf is None:
            buf = self._buffers[key] = torch.empty(shape, dtype=dtype, device=self.device)
        return buf

    def _wire(self, dtype: torch.dtype) -> torch.dtype | None:
        return None if self._wire_dtype in (None, dtype) else self._wire_dtype

    def _count(self, rows: int, width: int, dtype: torch.dtype, messages: int) -> None:
        if self._exchanges:
            self._counters.spmm_exchanges += 1
        self._counters.halo_rows += rows
        self._counters.halo_bytes += rows * width * dtype.itemsize
        self._counters.messages += messages

    def _post_whole(self, outgoing: torch.Tensor, out_role: str, sends: list[tuple[int, slice]],
                    incoming: torch.Tensor, in_role: str, recvs: list[tuple[int, slice]],
                    ) -> tuple[Exchange, list[torch.Tensor], list[torch.Tensor] | None]:
        """Send slices of ``outgoing`` and receive slices of ``incoming`` (via the wire dtype), counting the sends.

        Returns the posted exchange, each receive's slice of ``incoming`` and,
        with a narrower wire dtype, the slice of the wire buffer it lands in.
        """
        wire = self._wire(outgoing.dtype)
        landing = incoming
        if wire is not None:
            outgoing = self._buffer(out_role + "-wire", outgoing.shape, wire).copy_(outgoing)
            landing = self._buffer(in_role + "-wire", incoming.shape, wire)
        posted = self._transport.exchange(sends=[(peer, outgoing[s]) for peer, s in sends],
                                          recvs=[(peer, landing[s]) for peer, s in recvs])
        self._count(outgoing.shape[0], outgoing.shape[1], outgoing.dtype, len(sends))
        messages = [incoming[s] for _, s in recvs]
        return posted, messages, None if wire is None else [landing[s] for _, s in recvs]

    def _slots(self, role: str, peers: list[int], rows: list[int], width: int, dtype: torch.dtype) -> Slots:
        """``window`` reused slots as large as the largest message of ``rows`` (and as many in the wire dtype)."""
        shape = (self.window, max(rows, default=0), width)
        wire = self._wire(dtype)
        return Slots(peers, rows, self._buffer(role, shape, dtype),
                     None if wire is None else self._buffer(role + "-wire", shape, wire))

    def _start_windowed(self, kind: type[WindowedExchange], width: int, dtype: torch.dtype, forward: bool,
                        pack: Callable[[int, torch.Tensor], None], **extra: object) -> WindowedExchange:
        """A windowed exchange of either direction, its sends counted (the forward's sends are the reverse's
        receives; the reverse sends from the forward's halo slots)."""
        plan = self.plan
        sent = self._slots("send", plan.send_peers, self._send_rows, width, dtype)
        halo = self._slots("halo", plan.recv_peers, self._recv_rows, width, dtype)
        rounds = self._rounds if forward else [Round(send=r.recv, recv=r.send) for r in self._rounds]
        outgoing, incoming = (sent, halo) if forward else (halo, sent)
        self._count(sum(outgoing.rows), width, self._wire(dtype) or dtype, len(outgoing.rows))
        return kind(self._transport, rounds, self._counters, outgoing, incoming, pack, **extra)

    def start_forward(self, h_owned: torch.Tensor) -> HaloExchange | WindowedExchange:
        """Post the exchange of halo rows of ``h_owned``; its arrivals are the halo rows of each sender."""
        plan = self.plan
        width = h_owned.shape[1]
        if self.window is not None:
            def pack(k: int, out: torch.Tensor) -> None:
                torch.index_select(h_owned, 0, self._sent_rows[k], out=out)

            return self._start_windowed(WindowedExchange, width, h_owned.dtype, True, pack)
        halo = self._buffer("halo", (plan.n_halo, width), h_owned.dtype)
        packed = self._buffer("send", (plan.rows_sent, width), h_owned.dtype)
        torch.index_select(h_owned, 0, plan.send_index, out=packed)
        sends = [(plan.send_peers[r.send], plan.send_slices[r.send]) for r in self._rounds if r.send is not None]
        received = [r.recv for r in self._rounds if r.recv is not None]
        recvs = [(plan.recv_peers[k], plan.recv_slices[k]) for k in received]
        posted, messages, landings = self._post_whole(packed, "send", sends, halo, "halo", recvs)
        return HaloExchange(posted, received, messages, landings, self._counters)

    def start_reverse(self, width: int, dtype: torch.dtype, fill: FillPartials) -> ReverseExchange | WindowedReverse:
        """Send the partial products for halo rows back to their owners; ``fill`` writes those of one sender.

        The exchange returned adds, per send peer, the partials for the rows
        this rank sent forward into their gradient (``add_into``). Whole, every
        sender's partials are filled before this returns; windowed, the first
        rounds' are, and the rest as slots free.
        """
        plan = self.plan
        if self.window is not None:
            return self._start_windowed(WindowedReverse, width, dtype, False, fill, rows=self._sent_rows)
        partials = self._buffer("halo", (plan.n_halo, width), dtype)  # the forward's rows are no longer needed
        for k, s in enumerate(plan.recv_slices):
            fill(k, partials[s])
        incoming = self._buffer("send", (plan.rows_sent, width), dtype)
        sends = [(plan.recv_peers[r.recv], plan.recv_slices[r.recv]) for r in self._rounds if r.recv is not None]
        received = [r.send for r in self._rounds if r.send is not None]
        recvs = [(plan.send_peers[k], plan.send_slices[k]) for k in received]
        posted, messages, landings = self._post_whole(partials, "halo", sends, incoming, "send", recvs)
        return ReverseExchange(posted, received, messages, landings, self._counters, self._sent_rows)
