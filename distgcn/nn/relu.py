"""ReLU in place whose backward writes its gradient into a kept buffer (:mod:`distgcn.kernels.kept_buffers`).

Same values as ``torch.relu_`` both ways; only where the backward's
[rows, width] gradient lives differs: torch would allocate it anew each epoch.
"""

from __future__ import annotations

import torch

from distgcn.kernels import kept_buffers as activation_buffers


class _ReLUInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.mark_dirty(x)
        x.relu_()
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        (out,) = ctx.saved_tensors
        grad_input = activation_buffers.empty(out.shape, grad.dtype, grad.device)
        return torch.ops.aten.threshold_backward.grad_input(grad, out, 0, grad_input=grad_input)


def relu_(x: torch.Tensor) -> torch.Tensor:
    """max(x, 0) in place (autograd-aware)."""
    return _ReLUInPlace.apply(x)
