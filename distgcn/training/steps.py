"""Where a trainer's optimizer steps come from: a batch source yields each epoch's steps, the trainer takes them.

Full-batch training (:class:`FullBatch`) is one step per epoch on the whole
shard; minibatch training (:class:`distgcn.training.minibatch.SampledBatches`)
is K steps on sampled subgraphs. The trainer runs the model, the backward
pass, the gradient allreduce and the optimizer alike for both; a source says
which rows a step reads, how they are aggregated and how their loss is weighted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from distgcn.kernels import kept_buffers as activation_buffers
from distgcn.kernels import kernels_for
from distgcn.nn.sparse_input import SparseRows

Aggregate = Callable[[torch.Tensor], torch.Tensor]


class _CrossEntropies(torch.autograd.Function):
    """Each row's log Σ exp(z) − z[label]; the forward pass also forms the gradient softmax(z) − onehot(label), so
    that the backward pass only scales it.

    Autograd's own backward of that expression (logsumexp's and the gather's, then their sum) held two more
    buffers of z's size at once (70 MiB more at the peak of a rank of the scale-23 R-MAT at P = 4).
    With ``rows``, the loss is of those rows of z only, and the gradient of all of z (zero elsewhere) is
    written into a kept buffer (:mod:`distgcn.kernels.kept_buffers`), as ``index_select``'s backward would have
    allocated it anew; same bits. On the CPU both passes are compiled (:meth:`distgcn.kernels.Kernels.cross_entropies`).
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor,  # type: ignore[override]
                rows: torch.Tensor | None) -> torch.Tensor:
        ctx.all_rows = logits.shape
        ctx.kernels = kernels = kernels_for(logits.device)
        ctx.compiled = kernels.compiles_logits(logits)
        if ctx.compiled:
            losses, gradient = kernels.cross_entropies(logits, labels, rows)
        else:
            picked = logits if rows is None else logits.index_select(0, rows)
            log_sums = torch.logsumexp(picked, dim=1)
            losses = log_sums - picked.gather(1, labels.unsqueeze(1)).squeeze(1)
            gradient = torch.sub(picked, log_sums.unsqueeze(1)).exp_()
            gradient.scatter_add_(1, labels.unsqueeze(1), torch.full_like(log_sums, -1.0).unsqueeze(1))
        ctx.save_for_backward(gradient, rows)
        return losses

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        gradient, rows = ctx.saved_tensors
        if ctx.compiled:
            grad_logits = activation_buffers.empty(ctx.all_rows, gradient.dtype, gradient.device)
            return ctx.kernels.scatter_scaled_rows(gradient, grad, rows, grad_logits), None, None
        scaled = gradient * grad.unsqueeze(1)
        if rows is None:
            return scaled, None, None
        grad_logits = activation_buffers.empty(ctx.all_rows, gradient.dtype, gradient.device).zero_()
        return grad_logits.index_add_(0, rows, scaled), None, None


def cross_entropies(logits: torch.Tensor, labels: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
    """Each row's cross-entropy, log Σ exp(logits) − logits[label] (``F.cross_entropy(..., reduction="none")``);
    with ``rows`` (positions, each once), of ``logits.index_select(0, rows)``.

    torch's CPU log_softmax is slow over few classes ([41084, 8] float32, one thread, with its backward: 7.8-9.7
    ms against 3.2 ms for this form; ``benchmarks/logits_passes.py``). The row's largest logit is subtracted
    first, so large logits do not overflow.
    """
    return _CrossEntropies.apply(logits, labels, rows)


@dataclass(frozen=True)
class Step:
    """One optimizer step's rows on this rank and how their loss counts."""

    inputs: torch.Tensor | SparseRows
    """What layer 0 reads for the step's rows (X, or Â·X when the first layer is cached)."""
    aggregate: Aggregate
    """The step's distributed Â·H over its rows (collective)."""
    row_ids: np.ndarray
    """Global ids of the step's rows: they key the dropout masks, so masks do not depend on the partition."""
    dropout_step: int
    """Which dropout masks the step draws: distinct for every optimizer step of a run."""
    loss: Callable[[torch.Tensor], torch.Tensor]
    """This rank's share of the step's global loss, from the logits of the step's rows."""


class BatchSource(Protocol):
    """The steps of each epoch, and what the source adds to the epoch's metrics and to the run's identity."""

    def steps(self, epoch: int) -> Iterator[Step]:
        """The epoch's steps in order; each is taken before the next is asked for (collective)."""
        ...

    def epoch_metrics(self, losses: list[float]) -> dict:
        """Keys the source adds to the epoch's record, given this rank's loss share of each step (collective)."""
        ...

    def identity(self) -> dict:
        """Settings a checkpoint must match beyond the model's own ({} when there are none)."""
        ...


class FullBatch:
    """One step per epoch on all of this rank's rows.

    The loss is the sum of per-vertex cross-entropies over the rank's training
    rows divided by the *global* number of training vertices, so the sum of the
    ranks' weight gradients (the allreduce) is exactly the single-process gradient.
    """

    def __init__(self, inputs: torch.Tensor | SparseRows, aggregate: Aggregate, row_ids: np.ndarray,
                 train: torch.Tensor, labels: torch.Tensor, num_train: int):
        """``train``: this rank's training mask; ``num_train``: training vertices over all ranks."""
        self._inputs, self._aggregate, self._row_ids = inputs, aggregate, row_ids
        # the training rows as positions, found once: a boolean index searches the mask again every epoch
        self._train_rows = train.nonzero().squeeze(1)
        self._train_labels, self._num_train = labels[self._train_rows], num_train

    def _loss(self, logits: torch.Tensor) -> torch.Tensor:
        return cross_entropies(logits, self._train_labels, self._train_rows).sum() / self._num_train

    def steps(self, epoch: int) -> Iterator[Step]:
        yield Step(self._inputs, self._aggregate, self._row_ids, epoch, self._loss)

    def epoch_metrics(self, losses: list[float]) -> dict:
        return {}

    def identity(self) -> dict:
        return {}
