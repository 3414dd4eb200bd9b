"""Keyed dropout in one compiled pass: hash, compare and scale each entry, with no mask stored.

:func:`distgcn.nn.dropout.keyed_keep_mask` defines the mask with numpy: per row
and group of four columns, one SplitMix64 hash of the counter
``row · groups + key · GOLDEN + group``, whose four 16-bit lanes (low lane
first) are compared with ``round(p · 65536)``. Done as numpy passes, that
is several sweeps over 64-bit temporaries and a float mask the size of the
input, kept for the backward pass. This kernel computes the same hash per
group and writes ``x · (scale · kept)``: the same mask bit for bit and the
same product as ``x * mask`` (a dropped entry is ``x · 0``, so a NaN stays
NaN and a negative gives -0.0). The backward pass runs it again on the
gradient, which regenerates the mask instead of keeping it. Rows are split
over the threads of ``train --threads``; each entry is computed alone, so
the result does not depend on their number.

A dropout followed by a product with a narrow weight (the output layer) runs
as one pass each way (:func:`dropped_product`): the product is computed from
the dropped row while it is in registers, and the backward pass gives both
gradients from one read of x and the output's gradient.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from distgcn.hashing import GOLDEN
from distgcn.kernels import keep_threshold
from distgcn.kernels.csr import STACK_ACCUMULATOR_BYTES, compiled_width
from distgcn.runtime.threads import follow_torch_threads

NARROW_PRODUCT_WIDTH = 8
"""dropout(x) @ w with at most this many output columns runs as one compiled pass each way
(:func:`dropped_product`); wider, the dropout pass and torch's products are faster (Slashdot's rows, 1 thread,
forward + backward, 64 -> 8: 11.2 against 19.0 ms; ``benchmarks/dropped_product.py``)."""
PARTIAL_BLOCKS = 256
"""The weight gradient sums at most this many per-block partials: blocks depend on the rows alone (so the sum does
not depend on the threads), and the partials take at most 256 · in · out numbers."""


def _loops():
    """The compiled loops (:mod:`distgcn.kernels.dropout_loops`), imported on first use like csr_kernel: numba's import and
    compiling cost ~1 s per process and dtype, so only runs that need them pay."""
    from distgcn.kernels import dropout_loops

    return dropout_loops


def masked_scale(x: np.ndarray, row_ids: np.ndarray, p: float, key: int, out: np.ndarray) -> np.ndarray:
    """out = x · mask, mask = keyed_keep_mask(row_ids, width, p, key) · 1/(1 - p) in x's dtype.

    ``x`` and ``out`` are C-contiguous [rows, width] float32 or float64 arrays
    (``out`` may be ``x``); ``row_ids`` are the rows' global ids.
    """
    follow_torch_threads()
    _loops().masked_scale(x, *_mask_arguments(x, row_ids, p, key), out)
    return out


def dropped_product(x: np.ndarray, row_ids: np.ndarray, p: float, key: int, weight: np.ndarray,
                    out: np.ndarray, relu: bool = False) -> np.ndarray:
    """out = (x · mask) @ weight, the mask of :func:`masked_scale`, in one pass over x (no dropped copy).

    ``x`` [rows, in] and ``weight`` [in, out] C-contiguous, one dtype; ``out`` [rows, out]. ``relu``: first
    x = relu(x), in place (the ReLU of the layer before, folded into this pass).
    """
    follow_torch_threads()
    _loops().dropped_product(x, *_mask_arguments(x, row_ids, p, key), np.ascontiguousarray(weight.T), out, relu)
    return out


def dropped_product_backward(x: np.ndarray, grad: np.ndarray, row_ids: np.ndarray, p: float, key: int,
                             weight: np.ndarray, want_grad_x: bool, grad_x_out: np.ndarray | None = None,
                             relu: bool = False) -> tuple[np.ndarray | None, np.ndarray]:
    """The gradients of :func:`dropped_product` for ``grad`` = d loss / d out: (grad @ weightᵀ) · mask (None unless
    ``want_grad_x``; written into ``grad_x_out`` if given, C-contiguous like x) and (x · mask)ᵀ @ grad, in one pass
    over x and grad; the mask is regenerated, not stored. ``relu``: x is relu(x') and grad_x is the gradient for
    x', 0 where x <= 0."""
    rows, width = x.shape
    partials = np.empty((min(PARTIAL_BLOCKS, max(1, rows)), weight.shape[1], width), dtype=x.dtype)
    if not want_grad_x:
        grad_x = np.empty((0, width), dtype=x.dtype)
    else:
        grad_x = np.empty_like(x) if grad_x_out is None else grad_x_out
    follow_torch_threads()
    loop = _loops().backward_loop(compiled_width(width, x.itemsize))
    loop(x, np.ascontiguousarray(grad), *_mask_arguments(x, row_ids, p, key), np.ascontiguousarray(weight.T), grad_x,
         want_grad_x, partials, relu)
    return (grad_x if want_grad_x else None), np.ascontiguousarray(partials.sum(axis=0).T)


def _mask_arguments(x: np.ndarray, row_ids: np.ndarray, p: float, key: int) -> tuple:
    """What every loop takes to regenerate the mask: the rows' ids, the key's hash base, the keep threshold and
    the scale 1/(1 - p) in x's dtype."""
    with np.errstate(over="ignore"):
        base = np.uint64(key) * GOLDEN
    return np.asarray(row_ids, dtype=np.int64), base, np.uint16(keep_threshold(p)), x.dtype.type(1.0 / (1.0 - p))


def compile_now(dtype: np.dtype, widths: Iterable[int] = ()) -> None:
    """Compile (or load from numba's cache) the passes for ``dtype`` on tiny arrays, before a rank's large
    arrays exist: compiled beside them on the first epoch, they left ~330 MB more resident.
    The backward pass is compiled for each input width of ``widths`` (the model's hidden widths: the inputs of
    the narrow products that take it), on one row of at most 16 KiB whatever the width."""
    x = np.ones((1, 4), dtype=dtype)
    ids = np.zeros(1, dtype=np.int64)
    masked_scale(x, ids, 0.5, 0, x)
    weight = np.ones((4, 1), dtype=dtype)
    dropped_product(x, ids, 0.5, 0, weight, np.empty((1, 1), dtype=dtype))
    for compiled in sorted({compiled_width(w, x.itemsize) for w in widths}):
        width = compiled or STACK_ACCUMULATOR_BYTES // x.itemsize + 1  # the run-time-width loop on a small row
        row = np.ones((1, width), dtype=dtype)
        dropped_product_backward(row, np.ones((1, 1), dtype=dtype), ids, 0.5, 0, np.ones((width, 1), dtype=dtype),
                                 True)
