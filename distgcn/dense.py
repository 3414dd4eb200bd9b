"""Products of activations with a weight matrix, asked of the BLAS in the layouts it runs fastest.

X·W, G·Wᵀ and Xᵀ·G (X, G: [rows, width], rows in the 10^4-10^7; W: a layer's
weight) are the same matrices whichever way the operands are laid out, but
the BLAS takes a different code path for each layout. On this project's AMD
EPYC hosts torch's CPU build (MKL) ran the products with a narrow output far
slower in the plain layouts (82168 rows, weight 64 × 8, one thread;
``benchmarks/dense_products.py``, docs/performance.md):

- X·W: 6.1 ms with W row-major (as torch stores it), 3.5 ms column-major;
- the weight gradient Xᵀ·G: 30 ms, against 3.0 ms computed as (Gᵀ·X)ᵀ.

From 16 output columns on, the layouts ran within about 10 % of each other.
Both forms here are plain BLAS products (GPUs included), so the result is the
same up to rounding as X @ W and X.t() @ G, and the same bits on every run.
"""

from __future__ import annotations

import torch

from . import activation_buffers


def times_weight(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight with the weight column-major (``out``: write there, as ``torch.mm``)."""
    column_major = weight.t().contiguous().t()  # a copy of the (small) weight
    return torch.mm(x, column_major) if out is None else torch.mm(x, column_major, out=out)


def weight_gradient(x: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """xᵀ @ grad, the gradient of the weight in x @ weight, computed as (gradᵀ @ x)ᵀ; a [width_x, width_grad]
    view of a column-major result."""
    return torch.mm(grad.t(), x).t()


class _Matmul(torch.autograd.Function):
    """x @ weight, with :func:`times_weight` forward and :func:`weight_gradient` backward; the products with x's rows
    are written into kept buffers (:mod:`distgcn.activation_buffers`)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(x, weight)
        return times_weight(x, weight, out=activation_buffers.empty((x.shape[0], weight.shape[1]), x.dtype, x.device))

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        x, weight = ctx.saved_tensors
        grad_x = torch.mm(grad, weight.t(), out=activation_buffers.empty(x.shape, x.dtype, x.device)) \
            if ctx.needs_input_grad[0] else None
        grad_weight = weight_gradient(x, grad).contiguous() if ctx.needs_input_grad[1] else None
        return grad_x, grad_weight


def matmul(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weight (autograd-aware), each product in its fastest layout (module docstring)."""
    return _Matmul.apply(x, weight)


class _Affine(torch.autograd.Function):
    """x @ weight + bias (torch's addmm), written into a kept buffer (:mod:`distgcn.activation_buffers`), and so is
    the backward's G·Wᵀ; the weight's gradient by :func:`weight_gradient`."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(x, weight)
        out = activation_buffers.empty((x.shape[0], weight.shape[1]), x.dtype, x.device)
        return torch.addmm(bias, x, weight, out=out)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        x, weight = ctx.saved_tensors
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.mm(grad, weight.t(), out=activation_buffers.empty(x.shape, x.dtype, x.device))
        if ctx.needs_input_grad[1]:
            grad_weight = weight_gradient(x, grad).contiguous()
        if ctx.needs_input_grad[2]:
            grad_bias = grad.sum(dim=0)
        return grad_x, grad_weight, grad_bias


def affine(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """x @ weight + bias (autograd-aware), its activations in kept buffers."""
    return _Affine.apply(x, weight, bias)
