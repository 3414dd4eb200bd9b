"""GradientSync sums each weight gradient over ranks, step after step, and does not communicate on one rank.

The oracle is the gradient of a linear layer worked out by hand: for
``loss = sum(W x + b)`` over a batch X, dL/dW[i, j] = sum of column j of X
and dL/db[i] = the batch size, so the summed gradient is the same formula
over every rank's batch together.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from distgcn.comm.counters import CommCounters
from distgcn.comm.gradsync import GradientSync
from distgcn.comm.transport.inprocess import InProcessTransport, run_ranks

OUT, IN = 2, 3


def batch(rank: int, step: int) -> torch.Tensor:
    """A batch of ``rank + 1`` rows, different on each rank and step."""
    return torch.arange(1.0, 1.0 + (rank + 1) * IN, dtype=torch.float64).reshape(rank + 1, IN) * (step + 1) + rank


def train_steps(transport: InProcessTransport, steps: int) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], int]:
    """Each step's (dW, db) after :meth:`GradientSync.wait`, and how many async sums the rank started."""
    calls = []
    start = transport.allreduce_sum_async

    def counted(tensor: torch.Tensor):
        calls.append(tensor.shape)
        return start(tensor)

    transport.allreduce_sum_async = counted  # type: ignore[method-assign]
    layer = nn.Linear(IN, OUT, dtype=torch.float64)
    sync = GradientSync(layer, transport, CommCounters())
    grads = []
    for step in range(steps):
        layer.zero_grad(set_to_none=True)
        layer(batch(transport.rank, step)).sum().backward()
        sync.wait()
        grads.append((layer.weight.grad.clone(), layer.bias.grad.clone()))
    return grads, len(calls)


@pytest.mark.parametrize("ranks", [2, 3])
def test_each_step_gives_every_rank_the_sum_of_the_hand_worked_gradients(ranks):
    steps = 2
    for grads, calls in run_ranks(ranks, lambda t: train_steps(t, steps)):
        assert calls == 2 * steps  # one sum per parameter per step, none left over from the step before
        for step, (d_w, d_b) in enumerate(grads):
            rows = torch.cat([batch(r, step) for r in range(ranks)])
            assert torch.equal(d_w, rows.sum(dim=0).expand(OUT, IN))
            assert torch.equal(d_b, torch.full((OUT,), float(rows.shape[0]), dtype=torch.float64))


def test_one_rank_keeps_its_own_gradient_and_starts_no_sum():
    [(grads, calls)] = run_ranks(1, lambda t: train_steps(t, 1))
    d_w, d_b = grads[0]
    assert calls == 0
    assert torch.equal(d_w, batch(0, 0).sum(dim=0).expand(OUT, IN))
    assert torch.equal(d_b, torch.full((OUT,), 1.0, dtype=torch.float64))
