"""Transports move tensors between ranks; the rest of the runtime does not know which one it has.

A transport offers point-to-point exchanges that complete receive by receive
(so computation can consume each arriving block), non-blocking in-place sums
for gradients, and small blocking reductions for metrics. The back ends are
imported on first use: a torchrun job never initializes MPI, and an MPI job
never imports torch.distributed's transport.
"""

from __future__ import annotations

from typing import Any

from distgcn.comm.transport.base import Exchange, Transport

__all__ = ["Exchange", "Transport", "MPITransport", "TorchDistTransport", "InProcessTransport", "run_ranks"]


def __getattr__(name: str) -> Any:
    if name == "MPITransport":
        from distgcn.comm.transport.mpi import MPITransport

        return MPITransport
    if name == "TorchDistTransport":
        from distgcn.comm.transport.torch_dist import TorchDistTransport

        return TorchDistTransport
    if name in ("InProcessTransport", "run_ranks"):
        from distgcn.comm.transport import inprocess

        return getattr(inprocess, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
