"""The in-process transport behaves like a wire between ranks, so tests that run on it prove what they claim.

Each test makes the order of events deterministic with the transport's own
blocking calls (or a threading.Barrier), never with sleeps.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time

import numpy as np
import pytest
import torch

from distgcn.comm.transport.base import Transport
from distgcn.comm.transport.inprocess import (
    InProcessTransport,
    RankAborted,
    World,
    run_ranks,
)


def payload(source: int, dest: int, rows: int = 3, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """A message that names its sender and receiver in every value."""
    return torch.full((rows, 2), 10.0 * source + dest, dtype=dtype) + torch.arange(2, dtype=dtype)


def test_implements_every_method_of_the_transport_protocol():
    wanted = {name for name, _ in inspect.getmembers(Transport, inspect.isfunction) if not name.startswith("_")}
    assert "exchange" in wanted and "abort" in wanted
    assert wanted <= {name for name, _ in inspect.getmembers(InProcessTransport, inspect.isfunction)}
    transport = InProcessTransport(1, 3, World(3))
    assert (transport.backend, transport.rank, transport.size, transport.device) == ("inprocess", 1, 3,
                                                                                        torch.device("cpu"))
    assert transport.ranks_on_this_node() == 3


@pytest.mark.parametrize("size", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_exchange_delivers_each_peers_buffer_to_the_right_receive(size, dtype):
    def rank(t: InProcessTransport) -> list[torch.Tensor]:
        peers = [p for p in range(t.size) if p != t.rank]
        recvs = [(p, torch.empty(p + 1, 2, dtype=dtype)) for p in peers]  # sizes differ by sender
        exchange = t.exchange([(p, payload(t.rank, p, t.rank + 1, dtype)) for p in peers], recvs)
        done = sorted(exchange.completed_receives())
        exchange.wait_sends()
        assert done == list(range(len(peers)))
        return [buf for _, buf in recvs]

    for me, received in enumerate(run_ranks(size, rank)):
        peers = [p for p in range(size) if p != me]
        for p, buf in zip(peers, received):
            assert torch.equal(buf, payload(p, me, p + 1, dtype))


def test_messages_between_two_ranks_match_receives_in_posting_order():
    """Two exchanges posted before either is waited on: each receive gets its own exchange's message."""

    def rank(t: InProcessTransport) -> list[float]:
        peer = 1 - t.rank
        first, second = torch.empty(1), torch.empty(1)
        a = t.exchange([(peer, torch.tensor([1.0 + t.rank]))], [(peer, first)])
        b = t.exchange([(peer, torch.tensor([10.0 + t.rank]))], [(peer, second)])
        list(b.completed_receives())
        list(a.completed_receives())
        return [first.item(), second.item()]

    assert run_ranks(2, rank) == [[2.0, 11.0], [1.0, 10.0]]


def test_receives_complete_in_arrival_order_not_posting_order():
    """Ranks 3, 2, 1 send in that order (each waits for the previous one's token); rank 0 posted 1, 2, 3."""

    def rank(t: InProcessTransport) -> list[int] | None:
        if t.rank == 0:
            recvs = [(p, torch.empty(1)) for p in (1, 2, 3)]
            exchange = t.exchange([], recvs)
            t.recv_object(1)  # rank 1 sends last: every message has landed
            return list(exchange.completed_receives())
        if t.rank < 3:
            t.recv_object(t.rank + 1)
        t.exchange([(0, torch.tensor([float(t.rank)]))], []).wait_sends()
        t.send_object("sent", t.rank - 1)
        return None

    assert run_ranks(4, rank)[0] == [2, 1, 0]


def test_a_reused_send_buffer_does_not_change_what_the_peer_receives():
    def rank(t: InProcessTransport) -> float | None:
        if t.rank == 0:
            buf = torch.tensor([1.0])
            t.exchange([(1, buf)], []).wait_sends()
            buf.fill_(99.0)  # before rank 1 takes the message (it waits for the barrier below)
            t.allgather_object(None)
            return None
        received = torch.empty(1)
        exchange = t.exchange([], [(0, received)])
        t.allgather_object(None)
        list(exchange.completed_receives())
        return received.item()

    assert run_ranks(2, rank)[1] == 1.0


def test_a_message_that_does_not_fit_its_receive_is_an_error():
    def rank(t: InProcessTransport) -> None:
        peer = 1 - t.rank
        list(t.exchange([(peer, torch.zeros(3))], [(peer, torch.empty(2))]).completed_receives())

    with pytest.raises(ValueError, match="posted a receive of 2"):
        run_ranks(2, rank)


# Order matters in floating point: summed in rank order these give 1.0, in reverse order 0.0.
UNEVEN = [1e16, 1.0, -1e16, 1.0]


def test_allreduce_sums_in_rank_order_and_takes_max_and_min():
    def rank(t: InProcessTransport) -> tuple[list[float], ...]:
        return (t.allreduce([UNEVEN[t.rank], t.rank]), t.allreduce([UNEVEN[t.rank], -t.rank], op="max"),
                t.allreduce([UNEVEN[t.rank], -t.rank], op="min"))

    in_rank_order = functools.reduce(lambda a, b: a + b, UNEVEN)
    assert in_rank_order == 1.0
    for sums, maxima, minima in run_ranks(4, rank):
        assert sums == [in_rank_order, 6.0]
        assert maxima == [1e16, 0.0] and minima == [-1e16, -3.0]


@pytest.mark.parametrize("size", [2, 3, 4])
def test_async_sum_is_in_place_bitwise_the_rank_order_sum_and_equal_on_every_rank(size):
    values = [torch.from_numpy(np.random.default_rng(r).standard_normal(50)).float() * 10 ** r for r in range(size)]

    def rank(t: InProcessTransport) -> torch.Tensor:
        grad = values[t.rank].clone()
        pending = t.allreduce_sum_async(grad)
        pending.wait()
        return grad

    expected = functools.reduce(lambda a, b: a + b, values)
    for got in run_ranks(size, rank):
        assert torch.equal(got, expected)


def test_objects_are_copied_like_messages():
    def rank(t: InProcessTransport) -> tuple[list, dict | None]:
        gathered = t.allgather_object({"rank": t.rank, "items": [t.rank]})
        gathered[0]["items"].append("changed here")  # must not show on rank 0 or elsewhere
        received = None
        if t.rank == 0:
            for dest in (1, 2):
                shard = {"for": dest, "rows": np.arange(dest)}
                t.send_object(shard, dest)
                shard["for"] = -1
        else:
            received = t.recv_object(0)
        t.close()
        return [g["items"] for g in t.allgather_object({"items": [t.rank]})], received

    results = run_ranks(3, rank)
    assert [r[0] for r in results] == [[[0], [1], [2]]] * 3
    assert results[1][1]["for"] == 1 and results[2][1]["for"] == 2
    assert np.array_equal(results[2][1]["rows"], [0, 1])


def test_abort_releases_every_waiting_rank_within_a_second():
    ready = threading.Barrier(4)
    released: list[int] = []
    aborted_at: list[float] = []

    def rank(t: InProcessTransport) -> None:
        ready.wait()
        if t.rank == 0:
            aborted_at.append(time.monotonic())
            t.abort(7)
        try:
            t.recv_object(0) if t.rank == 1 else t.allreduce([1.0])  # neither can ever complete
        except RankAborted:
            released.append(t.rank)
            raise

    with pytest.raises(RankAborted) as info:
        run_ranks(4, rank, timeout=60)
    assert time.monotonic() - aborted_at[0] < 1.0
    assert (info.value.rank, info.value.code) == (0, 7)
    assert sorted(released) == [1, 2, 3]


def test_an_exception_on_one_rank_is_raised_after_the_others_end():
    ended: list[int] = []
    failure = ValueError("bad input on rank 2")

    def rank(t: InProcessTransport) -> None:
        try:
            if t.rank == 2:
                raise failure
            t.allreduce([1.0])
        finally:
            ended.append(t.rank)

    with pytest.raises(ValueError) as info:
        run_ranks(4, rank, timeout=60)
    assert info.value is failure
    assert sorted(ended) == [0, 1, 2, 3]


def test_abort_while_handling_an_error_keeps_it_as_the_context():
    def rank(t: InProcessTransport) -> None:
        try:
            if t.rank == 1:
                raise KeyError("the real cause")
            t.allreduce([1.0])
        except KeyError:
            t.abort()

    with pytest.raises(RankAborted) as info:
        run_ranks(2, rank, timeout=60)
    assert info.value.rank == 1 and isinstance(info.value.__context__, KeyError)


def test_a_wait_that_nothing_can_end_times_out_instead_of_hanging():
    def rank(t: InProcessTransport) -> None:
        if t.rank == 1:
            t.recv_object(0)

    with pytest.raises(TimeoutError, match="rank 1 waited"):
        run_ranks(2, rank, timeout=0.2)


def test_results_come_back_in_rank_order():
    assert run_ranks(4, lambda t: t.rank * 10) == [0, 10, 20, 30]
