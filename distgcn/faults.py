"""Fault injection for testing that a failing rank takes the whole job down.

``DISTGCN_FAIL_AT=RANK:EPOCH`` makes that rank raise in the middle of that
epoch (after the forward pass, while the other ranks wait in the backward
exchange). Unset in normal use.
"""

from __future__ import annotations

import os

ENV = "DISTGCN_FAIL_AT"


class InjectedFailure(RuntimeError):
    pass


def maybe_fail(rank: int, epoch: int) -> None:
    spec = os.environ.get(ENV)
    if not spec:
        return
    try:
        fail_rank, fail_epoch = (int(x) for x in spec.split(":"))
    except ValueError:
        raise InjectedFailure(f"{ENV}={spec!r}: expected RANK:EPOCH") from None
    if (fail_rank, fail_epoch) == (rank, epoch):
        raise InjectedFailure(f"injected failure at epoch {epoch} ({ENV}={spec})")
