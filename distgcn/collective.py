"""Agreeing on failures across ranks.

A rank that hits bad input must not leave the others waiting in a
collective: :func:`agree` turns a per-rank outcome into a decision that every
rank reaches together, and anything unexpected aborts the whole job.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from typing import Any, NoReturn, Protocol, TypeVar

from . import signals
from .errors import InputError

T = TypeVar("T")


class Group(Protocol):
    """What deciding together needs of the ranks: every transport has it, and so has the torch-free
    :class:`distgcn.mpi_group.MPIGroup`."""

    rank: int
    size: int

    def allgather_object(self, value: Any) -> list[Any]: ...

    def abort(self, code: int = 1) -> NoReturn: ...


class CollectiveInputError(Exception):
    """Some rank hit an InputError; every rank raises this together (exit status 2)."""

    def __init__(self, message: str, printed_here: bool):
        super().__init__(message)
        self.printed_here = printed_here


def agree(transport: Group, step: Callable[[], T]) -> T:
    """Run ``step`` on every rank; if any rank raises InputError, all raise CollectiveInputError."""
    error: str | None = None
    result = None
    try:
        result = step()
    except InputError as exc:
        error = str(exc)
    errors = transport.allgather_object(error)
    failed = [(rank, msg) for rank, msg in enumerate(errors) if msg is not None]
    if failed:
        first_rank, message = failed[0]
        if transport.size > 1:
            message = f"rank {first_rank}: {message}"
        raise CollectiveInputError(message, printed_here=transport.rank == first_rank)
    return result  # type: ignore[return-value]


def abort_on_unexpected(transport: Group, exc: BaseException) -> None:
    """Print the error naming this rank, then take the whole job down (no rank may hang).

    While this rank is stopping for a signal, a failure is the signal's doing (a
    peer that got it too has left, and a torch transport has no MPI_Abort to end
    this rank first): the job ends with the signal's exit status, reported once
    by the rank that got it first, without a traceback here.
    """
    signum = signals.stop_pending()
    if signum is not None and transport.size > 1:
        transport.abort(signals.exit_code(signum))
    sys.stderr.write(f"distgcn: rank {transport.rank}: unexpected error: {type(exc).__name__}: {exc}\n")
    traceback.print_exception(exc, file=sys.stderr)
    sys.stderr.flush()
    if transport.size > 1:
        signals.wait_until_read(2, signals.DRAIN_S)  # else the abort can overtake the message
        transport.abort()
    raise SystemExit(1)
