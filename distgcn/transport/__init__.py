"""Transports move tensors between ranks; the rest of the runtime does not know which one it has.

A transport offers point-to-point exchanges that complete receive by receive
(so computation can consume each arriving block), non-blocking in-place sums
for gradients, and small blocking reductions for metrics.
"""

from .base import Exchange, Transport
from .mpi import MPITransport

__all__ = ["Exchange", "Transport", "MPITransport"]
