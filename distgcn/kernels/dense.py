"""Products of activations with a weight matrix, asked of the BLAS in the layouts it runs fastest.

X·W, G·Wᵀ and Xᵀ·G (X, G: [rows, width], rows in the 10^4-10^7; W: a layer's
weight) are the same matrices whichever way the operands are laid out, but
the BLAS takes a different code path for each layout. On AMD EPYC processors
torch's CPU build (MKL) runs the products with a narrow output far slower in
the plain layouts (82168 rows, weight 64 × 8, one thread;
``benchmarks/dense_products.py``):

- X·W: 6.1 ms with W row-major (as torch stores it), 3.5 ms column-major;
- the weight gradient Xᵀ·G: 30 ms, against 3.0 ms computed as (Gᵀ·X)ᵀ.

From 16 output columns on, the layouts ran within about 10 % of each other.
Both forms here are plain BLAS products (GPUs included), so the result is the
same up to rounding as X @ W and X.t() @ G, and the same bits on every run.
"""

from __future__ import annotations

import torch

from distgcn.kernels import kept_buffers as activation_buffers


def times_weight(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight with the weight column-major (``out``: write there, as ``torch.mm``)."""
    column_major = weight.t().contiguous().t()  # a copy of the (small) weight
    return torch.mm(x, column_major) if out is None else torch.mm(x, column_major, out=out)


GRADIENT_SLICE_ROWS = 8192
"""The fewest rows in a slice of a weight gradient on the CPU: Xᵀ·G is summed over slices of rows, one batched
product (``torch.bmm``) of all slices and a sum over them. One product over all rows sums over 10^4-10^7 rows,
which MKL splits poorly over threads; the batched form runs its slices side by side (Slashdot's 82,168 rows,
64 x 8 columns, two threads: 2.3 ms as one product, 0.9 ms sliced)."""
GRADIENT_PARTIALS_BYTES = 16 << 20
"""The most the slices' partial products may take together: wide layers get fewer, longer slices."""


def gradient_slices(rows: int, x_width: int, grad_width: int, item_size: int) -> tuple[int, int]:
    """(slices, rows per slice) of a sliced weight gradient: slices of GRADIENT_SLICE_ROWS rows or more, whose
    partials fit in GRADIENT_PARTIALS_BYTES. They depend on the shapes only, so the bits do not depend on the number
    of threads."""
    most = max(1, GRADIENT_PARTIALS_BYTES // max(1, x_width * grad_width * item_size))
    per_slice = max(GRADIENT_SLICE_ROWS, -(-rows // most))
    return rows // per_slice, per_slice


def weight_gradient(x: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """xᵀ @ grad, the gradient of the weight in x @ weight, computed as (gradᵀ @ x)ᵀ, on the CPU summed over slices
    of rows (:func:`gradient_slices`); a [width_x, width_grad] view of a column-major result."""
    slices, per_slice = gradient_slices(x.shape[0], x.shape[1], grad.shape[1], x.element_size())
    if slices < 2 or x.device.type != "cpu" or not (x.is_contiguous() and grad.is_contiguous()):
        return torch.mm(grad.t(), x).t()
    rows = slices * per_slice
    per_slice_products = torch.bmm(grad[:rows].view(slices, per_slice, grad.shape[1]).transpose(1, 2),
                                   x[:rows].view(slices, per_slice, x.shape[1]))
    total = per_slice_products.sum(dim=0)
    if rows < x.shape[0]:  # the last rows, fewer than a slice
        total.add_(torch.mm(grad[rows:].t(), x[rows:]))
    return total.t()


class _Matmul(torch.autograd.Function):
    """x @ weight, with :func:`times_weight` forward and :func:`weight_gradient` backward; the products with x's rows
    are written into kept buffers (:mod:`distgcn.kernels.kept_buffers`)."""

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
    """x @ weight + bias (torch's addmm), written into a kept buffer (:mod:`distgcn.kernels.kept_buffers`), and so is
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
