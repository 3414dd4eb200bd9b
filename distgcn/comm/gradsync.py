"""Sum weight gradients over ranks, starting each allreduce as soon as its gradient is ready.

A post-accumulate hook per parameter starts a non-blocking in-place sum, so
the reduction of the last layer's gradients overlaps the backward pass of
the layers below it (the idea of Horovod's DistributedOptimizer).
"""

from __future__ import annotations

from torch import nn

from distgcn.comm.counters import CommCounters
from distgcn.comm.transport import Transport
from distgcn.comm.transport.base import PendingReduction


class GradientSync:
    """Attach to a model once; call :meth:`wait` before ``optimizer.step()``."""

    def __init__(self, model: nn.Module, transport: Transport, counters: CommCounters):
        self.transport = transport
        self.counters = counters
        self._pending: list[PendingReduction] = []
        if transport.size > 1:
            for param in model.parameters():
                param.register_post_accumulate_grad_hook(self._start)

    def _start(self, param: nn.Parameter) -> None:
        with self.counters.timing("allreduce_s"):
            self._pending.append(self.transport.allreduce_sum_async(param.grad))

    def wait(self) -> None:
        """Block until every started reduction has finished."""
        with self.counters.timing("allreduce_s"):
            for pending in self._pending:
                pending.wait()
        self._pending.clear()
