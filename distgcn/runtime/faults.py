"""Fault injection, for tests of how a job fails and how it survives interruption.

``DISTGCN_FAIL_AT=RANK:EPOCH`` makes that rank raise in the middle of that
epoch (after the forward pass, while the other ranks wait in the backward
exchange): a failing rank must take the whole job down.

``DISTGCN_SLOW_EPOCH=SECONDS`` makes every rank sleep that long in every epoch:
a small job then runs as long as a large one, so a test under a real
scheduler can cancel or requeue it mid-run without racing its end.

``DISTGCN_FAIL_SHARD=RANK`` makes that rank of ``mpiexec -n P distgcn partition``
raise while it cuts its shard, while the other ranks write theirs.

``DISTGCN_SLOW_WRITE=SECONDS`` makes every file that :mod:`distgcn.io.safe_io`
writes wait that long once its temporary exists: a test can then stop or kill
the writer mid-write.

All are unset in normal use.
"""

from __future__ import annotations

import os
import time

FAIL_ENV = "DISTGCN_FAIL_AT"
SLOW_ENV = "DISTGCN_SLOW_EPOCH"
FAIL_SHARD_ENV = "DISTGCN_FAIL_SHARD"
SLOW_WRITE_ENV = "DISTGCN_SLOW_WRITE"


class InjectedFailure(RuntimeError):
    pass


def _sleep_for(name: str) -> None:
    """Sleep as long as the environment variable ``name`` says, if it is set."""
    slow = os.environ.get(name)
    if slow:
        try:
            seconds = float(slow)
        except ValueError:
            raise InjectedFailure(f"{name}={slow!r}: expected a number of seconds") from None
        time.sleep(seconds)


def inject_faults(rank: int, epoch: int) -> None:
    """Apply whichever faults the environment asks for, at this point of this epoch."""
    _sleep_for(SLOW_ENV)
    spec = os.environ.get(FAIL_ENV)
    if not spec:
        return
    try:
        fail_rank, fail_epoch = (int(x) for x in spec.split(":"))
    except ValueError:
        raise InjectedFailure(f"{FAIL_ENV}={spec!r}: expected RANK:EPOCH") from None
    if (fail_rank, fail_epoch) == (rank, epoch):
        raise InjectedFailure(f"injected failure at epoch {epoch} ({FAIL_ENV}={spec})")


def inject_shard_fault(rank: int) -> None:
    """Raise on the rank that ``DISTGCN_FAIL_SHARD`` names, as it cuts its shard."""
    spec = os.environ.get(FAIL_SHARD_ENV)
    if not spec:
        return
    if not spec.strip().isdigit():
        raise InjectedFailure(f"{FAIL_SHARD_ENV}={spec!r}: expected a rank")
    if int(spec) == rank:
        raise InjectedFailure(f"injected failure while cutting the shard of rank {rank} ({FAIL_SHARD_ENV}={spec})")


def inject_slow_write() -> None:
    """Wait as ``DISTGCN_SLOW_WRITE`` asks, with a temporary file of :mod:`distgcn.io.safe_io` open."""
    _sleep_for(SLOW_WRITE_ENV)
