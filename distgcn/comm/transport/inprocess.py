"""An in-process transport: every rank is a thread of this process, for tests of multi-rank logic.

:func:`run_ranks` starts one thread per rank, each with its own
:class:`InProcessTransport` over a shared :class:`World`, so plans, halo
exchanges, the trainer and minibatch agreement run their real code on P ranks
without starting P interpreters (each importing torch) under mpiexec.

It behaves like a wire, not like shared memory: a sent tensor or object is
copied when sent (a rank that reuses its send buffer cannot change what its
peer receives), point-to-point messages between two ranks are matched in
posting order as MPI's are, and sums run in rank order ((r0 + r1) + r2 ...)
on every rank, so every rank gets the same bits, and the MPI transport's bits
wherever MPI also adds in rank order. A failing rank never leaves the others
hanging: its exception aborts the world, which wakes every waiting rank, and
every wait also ends after ``timeout`` seconds (a deadlock in the code under
test then fails instead of hanging).

Caveats: torch's thread count (``torch.set_num_threads``) and the
environment are per process, not per rank, so a rank that sets them sets
them for all; the ranks share the process's cores and one GIL, so this
transport says nothing about speed or overlap; a rank busy computing notices
an abort only at its next call into the transport. The ranks are CPU ranks:
they cannot share one GPU, because autograd runs the backward pass of every
CUDA graph of a process on one thread per device, so a rank that waits there
for its peer's halo rows stops the peer's backward as well. (Tried on an
H200: P = 1 on cuda:0 matched the single process, P = 2 failed after about
the wait timeout each time; this is the explanation by reading autograd's
engine, not from a captured trace.)
"""

from __future__ import annotations

import pickle
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn, TypeVar

import numpy as np
import torch

T = TypeVar("T")
_HALO = "halo"
_OBJECT = "object"
DEFAULT_TIMEOUT_S = 120.0
"""How long any one wait may last before the job is failed as deadlocked (generous: the test machines are loaded)."""


class RankAborted(BaseException):
    """Raised in every rank's wait (and in the aborting rank) once some rank aborts the job.

    What an MPI rank meets there is the end of its process, not an error of its
    own: like SystemExit, this is no ``Exception``, so a rank's handlers of
    unexpected errors (:func:`distgcn.comm.collective.abort_on_unexpected`) let it pass
    instead of reporting the peer's abort as this rank's failure.
    """

    def __init__(self, rank: int, code: int, reason: str):
        super().__init__(f"rank {rank} aborted the job (code {code}): {reason}")
        self.rank = rank
        self.code = code


class World:
    """The state that the ranks of one in-process job share; one lock and condition guard all of it."""

    def __init__(self, size: int, timeout: float = DEFAULT_TIMEOUT_S):
        if size < 1:
            raise ValueError(f"a job needs at least one rank, got {size}")
        self.size = size
        self.timeout = timeout
        self.cond = threading.Condition()
        self.failure: BaseException | None = None
        """The first failure (what run_ranks raises); once set, every wait raises RankAborted."""
        self._aborted_by: tuple[int, int, str] | None = None
        self._sent: dict[tuple[int, int, str], int] = {}
        self._posted: dict[tuple[int, int, str], int] = {}
        self._messages: dict[tuple[int, int, str, int], tuple[int, Any]] = {}
        """(source, dest, tag, sequence) -> (arrival number, payload)."""
        self._arrivals = 0
        self._collectives: dict[int, list[Any]] = {}
        self._readers: dict[int, int] = {}

    def fail(self, rank: int, code: int, cause: BaseException) -> None:
        """Record the first failure and wake every waiting rank (later failures are consequences)."""
        with self.cond:
            if self.failure is None:
                self.failure = cause
                reason = "abort called" if isinstance(cause, RankAborted) else f"{type(cause).__name__}: {cause}"
                self._aborted_by = (rank, code, reason)
                self.cond.notify_all()

    def check(self) -> None:
        """Raise RankAborted (a new one per rank: threads must not share a traceback) once the job is aborted."""
        if self._aborted_by is not None:
            raise RankAborted(*self._aborted_by)

    def wait_until(self, ready: Callable[[], bool], rank: int, what: str) -> None:
        """Wait (holding ``cond``) until ``ready()``; raise if the job is aborted or the wait times out."""
        deadline = time.monotonic() + self.timeout
        while True:
            self.check()
            if ready():
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                error = TimeoutError(f"rank {rank} waited {self.timeout:.0f} s for {what}")
                self.fail(rank, 1, error)
                raise error
            self.cond.wait(remaining)

    # ---- point to point ------------------------------------------------------------------
    def post_send(self, source: int, dest: int, tag: str, payload: Any) -> None:
        self._check_rank(dest)
        with self.cond:
            self.check()
            channel = (source, dest, tag)
            sequence = self._sent.get(channel, 0)
            self._sent[channel] = sequence + 1
            self._messages[(*channel, sequence)] = (self._arrivals, payload)
            self._arrivals += 1
            self.cond.notify_all()

    def post_recv(self, source: int, dest: int, tag: str) -> tuple[int, int, str, int]:
        """Claim the next message of this channel, as MPI matches receives in posting order."""
        self._check_rank(source)
        with self.cond:
            channel = (source, dest, tag)
            sequence = self._posted.get(channel, 0)
            self._posted[channel] = sequence + 1
            return (*channel, sequence)

    def arrival(self, key: tuple[int, int, str, int]) -> int | None:
        """When the message for ``key`` arrived (a global count), None while it has not (holding ``cond``)."""
        message = self._messages.get(key)
        return None if message is None else message[0]

    def take(self, key: tuple[int, int, str, int]) -> Any:
        return self._messages.pop(key)[1]

    # ---- collectives -----------------------------------------------------------------------
    def contribute(self, sequence: int, rank: int, value: Any) -> None:
        with self.cond:
            self.check()
            slot = self._collectives.setdefault(sequence, [None] * self.size)
            slot[rank] = (value,)  # boxed: a contribution may itself be None
            self.cond.notify_all()

    def gather(self, sequence: int, rank: int, what: str) -> list[Any]:
        """Every rank's contribution to collective ``sequence``, in rank order, once all have arrived."""
        with self.cond:
            slot = self._collectives[sequence]
            self.wait_until(lambda: all(box is not None for box in slot), rank, what)
            values = [box[0] for box in slot]
            self._readers[sequence] = self._readers.get(sequence, 0) + 1
            if self._readers[sequence] == self.size:  # the last reader frees the slot
                del self._collectives[sequence], self._readers[sequence]
            return values

    def _check_rank(self, peer: int) -> None:
        if not 0 <= peer < self.size:
            raise ValueError(f"rank {peer} is not in a job of {self.size} ranks")


def _wire_copy(tensor: torch.Tensor) -> torch.Tensor:
    """What a peer receives: the tensor's values at sending time, in memory the sender no longer touches."""
    return tensor.detach().clone(memory_format=torch.contiguous_format)


class _InProcessExchange:
    def __init__(self, transport: InProcessTransport, keys: list[tuple[int, int, str, int]],
                 buffers: list[torch.Tensor]):
        self._transport = transport
        self._keys = keys
        self._buffers = buffers

    def completed_receives(self) -> Iterator[int]:
        """Each receive as its message lands, earliest arrival first (like MPI_Waitany)."""
        world = self._transport.world
        pending = set(range(len(self._keys)))
        while pending:
            chosen: list[int] = []

            def landed() -> bool:
                arrived = [(world.arrival(self._keys[k]), k) for k in pending]
                arrived = [(when, k) for when, k in arrived if when is not None]
                if arrived:
                    chosen.append(min(arrived)[1])
                return bool(arrived)

            with world.cond:
                world.wait_until(landed, self._transport.rank, f"halo messages from ranks "
                                 f"{sorted({self._keys[k][0] for k in pending})}")
                index = chosen[-1]
                payload = world.take(self._keys[index])
            _deliver(payload, self._buffers[index], self._keys[index])
            pending.discard(index)
            yield index

    def wait_sends(self) -> None:
        """Sends were copied when posted, so their buffers are free at once."""
        self._transport.world.check()


def _deliver(payload: torch.Tensor, buf: torch.Tensor, key: tuple[int, int, str, int]) -> None:
    """Copy a message into its receive buffer; a size or dtype that does not fit is a bug in the plan."""
    if payload.dtype != buf.dtype or payload.numel() != buf.numel():
        raise ValueError(f"rank {key[1]} posted a receive of {buf.numel()} {buf.dtype} from rank {key[0]}, "
                         f"which sent {payload.numel()} {payload.dtype}")
    buf.copy_(payload.reshape(buf.shape))


class _InProcessReduction:
    def __init__(self, transport: InProcessTransport, sequence: int, tensor: torch.Tensor):
        self._transport = transport
        self._sequence = sequence
        self._tensor = tensor

    def wait(self) -> None:
        parts = self._transport.world.gather(self._sequence, self._transport.rank, "a gradient sum")
        self._tensor.copy_(_sum_in_rank_order(parts))


def _sum_in_rank_order(parts: Sequence[Any]) -> Any:
    """((r0 + r1) + r2) + ...: one fixed order, so every rank gets the same bits."""
    total = parts[0].clone() if isinstance(parts[0], torch.Tensor) else parts[0].copy()
    for part in parts[1:]:
        total += part
    return total


class InProcessTransport:
    """One rank's end of a :class:`World`; implements :class:`~distgcn.comm.transport.base.Transport`."""

    backend = "inprocess"
    device = torch.device("cpu")

    def __init__(self, rank: int, size: int, world: World):
        if size != world.size or not 0 <= rank < size:
            raise ValueError(f"rank {rank} of {size} does not fit a world of {world.size} ranks")
        self.rank = rank
        self.size = size
        self.world = world
        self._collectives = 0
        """How many collectives this rank has started: ranks call them in the same order, so the count names one."""

    def _next_collective(self, value: Any) -> int:
        sequence = self._collectives
        self._collectives += 1
        self.world.contribute(sequence, self.rank, value)
        return sequence

    def exchange(self, sends: Sequence[tuple[int, torch.Tensor]],
                 recvs: Sequence[tuple[int, torch.Tensor]]) -> _InProcessExchange:
        keys = [self.world.post_recv(peer, self.rank, _HALO) for peer, _ in recvs]
        for peer, buf in sends:
            self.world.post_send(self.rank, peer, _HALO, _wire_copy(buf))
        return _InProcessExchange(self, keys, [buf for _, buf in recvs])

    def allreduce_sum_async(self, tensor: torch.Tensor) -> _InProcessReduction:
        return _InProcessReduction(self, self._next_collective(_wire_copy(tensor)), tensor)

    def allreduce(self, values: Sequence[float], op: str = "sum") -> list[float]:
        if op not in ("sum", "max", "min"):
            raise ValueError(f"unknown reduction {op!r} (expected sum, max or min)")
        sequence = self._next_collective(np.asarray(values, dtype=np.float64).copy())
        parts = self.world.gather(sequence, self.rank, f"an allreduce ({op})")
        if op == "sum":
            return _sum_in_rank_order(parts).tolist()
        return (np.maximum if op == "max" else np.minimum).reduce(parts).tolist()

    def allgather_object(self, value: Any) -> list[Any]:
        sequence = self._next_collective(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        return [pickle.loads(data) for data in self.world.gather(sequence, self.rank, "an allgather")]

    def send_object(self, value: Any, dest: int) -> None:
        self.world.post_send(self.rank, dest, _OBJECT, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))

    def recv_object(self, source: int) -> Any:
        world = self.world
        key = world.post_recv(source, self.rank, _OBJECT)
        with world.cond:
            world.wait_until(lambda: world.arrival(key) is not None, self.rank, f"an object from rank {source}")
            return pickle.loads(world.take(key))

    def alltoall_object(self, values: Sequence[Any]) -> list[Any]:
        for dest, value in enumerate(values):  # posting a send never blocks here
            self.send_object(value, dest)
        return [self.recv_object(source) for source in range(self.size)]

    def ranks_on_this_node(self) -> int:
        return self.size

    def close(self) -> None:
        """A barrier, as torch.distributed's close: every rank leaves together."""
        self.world.gather(self._next_collective(None), self.rank, "the other ranks to close")

    def abort(self, code: int = 1) -> NoReturn:
        """End every rank's waits with :class:`RankAborted`; raises it here too (a thread cannot exit the job).

        Called while handling an exception (as abort_on_unexpected does), the
        RankAborted raised here keeps that exception as its ``__context__``.
        """
        error = RankAborted(self.rank, code, "abort called")
        self.world.fail(self.rank, code, error)
        raise error


def run_ranks(size: int, fn: Callable[[InProcessTransport], T], timeout: float = DEFAULT_TIMEOUT_S) -> list[T]:
    """Run ``fn(transport)`` on ``size`` rank threads; return their results in rank order.

    If any rank raises, the others are released (their waits raise
    :class:`RankAborted`) and, once every thread has ended, the first failure
    is raised here: the rank's own exception, or the RankAborted of a rank
    that called ``abort`` (chained to what it was handling).
    """
    world = World(size, timeout)
    results: list[Any] = [None] * size

    def rank_main(rank: int) -> None:
        try:
            results[rank] = fn(InProcessTransport(rank, size, world))
        except RankAborted:
            pass  # this rank's own abort (already recorded) or its release by another rank's failure
        except BaseException as exc:  # noqa: BLE001 - any failure must release the other ranks
            world.fail(rank, 1, exc)

    threads = [threading.Thread(target=rank_main, args=(rank,), name=f"inprocess-rank-{rank}", daemon=True)
               for rank in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if world.failure is not None:
        raise world.failure
    return results
