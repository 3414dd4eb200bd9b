"""Agreeing on failures across ranks.

A rank that hits bad input must not leave the others waiting in a
collective: :func:`agree` turns a per-rank outcome into a decision that every
rank reaches together, and anything unexpected aborts the whole job. Bad input
includes what the environment causes (a full disk, a name too long: see
:func:`distgcn.errors.as_input_error`); bad input that one rank finds outside
any agreement still ends the job with one line and exit status 2
(:func:`abort_on_unexpected`).
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from typing import Any, NoReturn, Protocol, TypeVar

from distgcn.errors import InputError, as_input_error
from distgcn.runtime import signals

T = TypeVar("T")


class Group(Protocol):
    """What deciding together needs of the ranks: every transport has it, and so has the torch-free
    :class:`distgcn.comm.mpi_group.MPIGroup`."""

    rank: int
    size: int

    def allgather_object(self, value: Any) -> list[Any]: ...

    def abort(self, code: int = 1) -> NoReturn: ...


class CollectiveInputError(Exception):
    """Some rank hit an InputError; every rank raises this together (exit status 2)."""

    def __init__(self, message: str, printed_here: bool):
        super().__init__(message)
        self.printed_here = printed_here

    def report(self) -> int:
        """Print the error on the rank that found it (one line for the job) and give the exit status, 2."""
        if self.printed_here:
            print(f"distgcn: error: {self}", file=sys.stderr)
        return 2


def agree(transport: Group, step: Callable[[], T]) -> T:
    """Run ``step`` on every rank; if any rank raises InputError (or an error of the environment that
    :func:`~distgcn.errors.as_input_error` words), all raise CollectiveInputError."""
    error: str | None = None
    result = None
    try:
        result = step()
    except Exception as exc:  # noqa: BLE001 - only bad input is decided together; anything else propagates
        bad_input = as_input_error(exc)
        if bad_input is None:
            raise
        error = str(bad_input)
    errors = transport.allgather_object(error)
    failed = [(rank, msg) for rank, msg in enumerate(errors) if msg is not None]
    if failed:
        first_rank, message = failed[0]
        if transport.size > 1:
            message = f"rank {first_rank}: {message}"
        raise CollectiveInputError(message, printed_here=transport.rank == first_rank)
    return result  # type: ignore[return-value]


def abort_on_unexpected(transport: Group, exc: BaseException) -> NoReturn:
    """Print the error naming this rank, then take the whole job down (no rank may hang).

    Bad input found by this rank alone, outside any :func:`agree` (rank 0
    writing the metrics to a disk that fills up while the others train on), is
    not unexpected: :func:`stop_on_bad_input` ends the job with one line and
    exit status 2.

    While this rank is stopping for a signal, a failure is the signal's doing (a
    peer that got it too has left, and a torch transport has no MPI_Abort to end
    this rank first): the job ends with the signal's exit status, reported once
    by the rank that got it first, without a traceback here.
    """
    signum = signals.stop_pending()
    if signum is not None and transport.size > 1:
        transport.abort(signals.exit_code(signum))
    bad_input = as_input_error(exc)
    if bad_input is not None:
        stop_on_bad_input(transport, bad_input)
    sys.stderr.write(f"distgcn: rank {transport.rank}: unexpected error: {type(exc).__name__}: {exc}\n")
    traceback.print_exception(exc, file=sys.stderr)
    sys.stderr.flush()
    if transport.size > 1:
        signals.wait_until_read(2, signals.DRAIN_S)  # else the abort can overtake the message
        transport.abort()
    raise SystemExit(1)


def stop_on_bad_input(transport: Group, error: InputError) -> NoReturn:
    """End the job for bad input that this rank found alone: its one line (naming the rank when there are
    several), then every rank ends with exit status 2 (the job is aborted, so no rank waits for this one)."""
    where = f"rank {transport.rank}: " if transport.size > 1 else ""
    sys.stderr.write(f"distgcn: error: {where}{error}\n")
    sys.stderr.flush()
    if transport.size > 1:
        signals.wait_until_read(2, signals.DRAIN_S)  # else the abort can overtake the message
        transport.abort(2)
    raise SystemExit(2)


class RankFailed(Exception):
    """Some rank failed unexpectedly in a step of :func:`agree_on_failure`; every rank raises this together,
    once the failing rank has printed its traceback (exit status 1)."""


def agree_on_failure(transport: Group, step: Callable[[], T]) -> T:
    """:func:`agree`, with an unexpected failure on any rank raised as :class:`RankFailed` on every rank instead of
    aborting the job: for steps whose output one rank must remove if any rank fails (no rank still writes then)."""
    def guarded() -> tuple[T | None, str | None]:
        try:
            return step(), None
        except Exception as exc:  # noqa: BLE001 - reported to every rank below
            if as_input_error(exc) is not None:
                raise  # bad input: agree() decides it
            sys.stderr.write(f"distgcn: rank {transport.rank}: unexpected error: {type(exc).__name__}: {exc}\n")
            traceback.print_exception(exc, file=sys.stderr)
            return None, f"{type(exc).__name__}: {exc}"

    result, failure = agree(transport, guarded)
    failed = [(rank, message) for rank, message in enumerate(transport.allgather_object(failure)) if message]
    if failed:
        raise RankFailed(f"rank {failed[0][0]}: {failed[0][1]}")
    return result  # type: ignore[return-value]
