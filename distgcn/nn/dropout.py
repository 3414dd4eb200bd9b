"""Dropout whose mask depends on (seed, epoch, layer, global row, column), not on the partition.

Each rank draws the mask entries of its own rows from a counter-based hash
(:mod:`distgcn.hashing`) keyed by the global row id, so P ranks drop exactly
the entries that one process would: distributed training then equals
single-process training even with dropout on.
"""

from __future__ import annotations

import numpy as np
import torch

from distgcn.hashing import (
    GOLDEN,
    as_int64,
    derive_key,
    mix64_inplace,
    mix64_int64_inplace,
)
from distgcn.kernels import keep_threshold, kernels_for
from distgcn.kernels import kept_buffers as activation_buffers
from distgcn.kernels.dense import matmul, times_weight, weight_gradient
from distgcn.nn.relu import relu_


def dropout_key(seed: int, epoch: int, layer: int) -> int:
    """One 64-bit key per (seed, epoch, layer)."""
    return derive_key(seed, epoch, layer)


def keyed_keep_mask(row_ids: np.ndarray, width: int, p: float, key: int) -> np.ndarray:
    """Boolean [rows, width]: True where entry (row_ids[i], j) survives dropout (probability 1 - p).

    One 64-bit hash per row and group of four columns gives four 16-bit
    uniforms, so p is applied at a resolution of 2**-16.
    """
    groups = (width + 3) // 4
    with np.errstate(over="ignore"):
        base = np.asarray(row_ids, dtype=np.uint64) * np.uint64(groups) + np.uint64(key) * GOLDEN
    counter = np.add.outer(base, np.arange(groups, dtype=np.uint64))
    lanes = mix64_inplace(counter).astype("<u8", copy=False).view("<u2")[:, :width]
    return lanes >= np.uint16(keep_threshold(p))


def keyed_keep_values(entry_rows: np.ndarray, entry_cols: np.ndarray, width: int, p: float, key: int) -> np.ndarray:
    """:func:`keyed_keep_mask` at the entries (entry_rows[k], entry_cols[k]) of a ``width``-column matrix only.

    Same counter, same 16-bit lane: a sparse input drops exactly the stored
    entries that the dense mask drops.
    """
    groups = (width + 3) // 4
    cols = np.asarray(entry_cols, dtype=np.uint64)
    with np.errstate(over="ignore"):
        counter = (np.asarray(entry_rows, dtype=np.uint64) * np.uint64(groups) + np.uint64(key) * GOLDEN
                   + (cols >> np.uint64(2)))
    lanes = mix64_inplace(counter) >> ((cols & np.uint64(3)) * np.uint64(16))
    return (lanes & np.uint64(0xFFFF)) >= np.uint64(keep_threshold(p))


def _compiled_path(x: torch.Tensor) -> bool:
    """Whether ``x`` takes the device's compiled dropout pass (:meth:`distgcn.kernels.Kernels.compiles_dropout`)."""
    return kernels_for(x.device).compiles_dropout(x)


def _dropped(x: torch.Tensor, row_ids: np.ndarray | torch.Tensor, p: float, key: int) -> torch.Tensor:
    """x · mask as a new tensor outside autograd (the compiled pass, or the mask path elsewhere)."""
    if _compiled_path(x):
        out = activation_buffers.empty_like(x)
        kernels_for(x.device).masked_scale(x.detach().contiguous().numpy(), row_ids, p, key, out.numpy())
        return out
    return x.detach() * _scaled_mask(x, row_ids, p, key)


def _drop_in_place(x: torch.Tensor, row_ids: np.ndarray | torch.Tensor, p: float, key: int) -> torch.Tensor:
    """x · mask into x itself, for a tensor that nothing else refers to (no second copy of it)."""
    if _compiled_path(x) and x.is_contiguous():
        array = x.detach().numpy()
        kernels_for(x.device).masked_scale(array, row_ids, p, key, array)
        return x
    return x.mul_(_scaled_mask(x, row_ids, p, key))


def _scaled_mask(x: torch.Tensor, row_ids: np.ndarray | torch.Tensor, p: float, key: int) -> torch.Tensor:
    """keyed_keep_mask · 1/(1 - p) in x's dtype, on x's device (hashed there: a GPU gets no mask from the host)."""
    if x.device.type != "cpu":
        rows = torch.as_tensor(row_ids, dtype=torch.int64, device=x.device)
        return scaled_keep_mask_torch(rows, x.shape[1], p, key, x.dtype)
    return scaled(keyed_keep_mask(row_ids, x.shape[1], p, key), x.dtype, p)


def scaled(keep: np.ndarray, dtype: torch.dtype, p: float) -> torch.Tensor:
    """A boolean keep mask as the factors of inverted dropout: 1/(1 - p) where kept, 0 elsewhere, in ``dtype``."""
    return torch.from_numpy(keep).to(dtype).mul_(1.0 / (1.0 - p))


def scaled_keep_mask_torch(row_ids: torch.Tensor, width: int, p: float, key: int, dtype: torch.dtype) -> torch.Tensor:
    """:func:`keyed_keep_mask` · 1/(1 - p) as a ``dtype`` tensor, computed by torch on ``row_ids``' device.

    The same counters and 16-bit lanes as the numpy mask (lane l of a group's
    hash is its bits 16·l..16·l+15), in int64 arithmetic, whose wraparound is
    uint64's; so a GPU rank drops exactly the entries a CPU rank would.
    """
    groups = (width + 3) // 4
    counter = row_ids.to(torch.int64) * groups + as_int64(key * int(GOLDEN))
    hashed = mix64_int64_inplace(counter[:, None] + torch.arange(groups, dtype=torch.int64, device=row_ids.device))
    mask = torch.empty((row_ids.shape[0], groups, 4), dtype=dtype, device=row_ids.device)
    threshold = keep_threshold(p)
    for lane in range(4):  # one int64 temporary at a time: 2 bytes per entry beside the hashes' 2
        bits = hashed >> (16 * lane)
        mask[:, :, lane] = bits.bitwise_and_(0xFFFF) >= threshold
    return mask.view(row_ids.shape[0], 4 * groups)[:, :width].mul_(1.0 / (1.0 - p))


class _KeyedDropout(torch.autograd.Function):
    """Forward and backward by the device's compiled pass; the backward regenerates the mask."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, row_ids: np.ndarray, p: float,  # type: ignore[override]
                key: int) -> torch.Tensor:
        ctx.mask = (row_ids, p, key)
        return _dropped(x, row_ids, p, key)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        return _dropped(grad, *ctx.mask), None, None, None


def keyed_dropout(x: torch.Tensor, row_ids: np.ndarray, p: float, key: int) -> torch.Tensor:
    """Inverted dropout of ``x`` (rows = ``row_ids``) with a partition-independent mask.

    On the CPU in float32/float64 one compiled pass each way
    (:meth:`distgcn.kernels.Kernels.masked_scale`: no mask stored); elsewhere the mask of
    :func:`keyed_keep_mask` as one float mask with the scale folded in. Both
    give x · mask with the same mask, bit for bit.
    """
    if p <= 0.0:
        return x
    if _compiled_path(x):
        return _KeyedDropout.apply(x, row_ids, p, key)
    return x * _scaled_mask(x, row_ids, p, key)


CHUNK_BYTES = 1 << 24
"""How much of x :func:`keyed_dropout_matmul` drops at a time on the CPU: 16 MiB slices, never a dropped copy of
all x."""

DEVICE_CHUNK_BYTES = 1 << 26
"""The same on a GPU, where each slice's mask costs some 30 kernel launches (benchmarks/gpu_dropout_chunks.py)."""


def _row_chunks(x: torch.Tensor) -> list[slice]:
    """Consecutive row slices of x of about CHUNK_BYTES (DEVICE_CHUNK_BYTES on a GPU) each."""
    chunk_bytes = CHUNK_BYTES if x.device.type == "cpu" else DEVICE_CHUNK_BYTES
    step = max(1, chunk_bytes // max(1, x.shape[1] * x.element_size()))
    return [slice(start, start + step) for start in range(0, x.shape[0], step)]


def _ids_beside(row_ids: np.ndarray, x: torch.Tensor) -> np.ndarray | torch.Tensor:
    """``row_ids`` where x's masks are hashed: on a GPU copied there once per call, not once per slice."""
    return row_ids if x.device.type == "cpu" else torch.as_tensor(row_ids, dtype=torch.int64, device=x.device)


def _one_pass(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether dropout(x) @ weight runs as one compiled pass each way (:meth:`distgcn.kernels.Kernels.one_pass_product`)."""
    return kernels_for(x.device).one_pass_product(x, weight)


class _KeyedDropoutMatmul(torch.autograd.Function):
    """dropout(x) @ w that keeps x, not dropout(x), and drops x a slice of rows at a time both ways.

    x is alive anyway (the features, or the ReLU output that ReLU's own backward
    keeps), so no activation is held twice, and a layer's widest transient is a
    slice, not a copy of x. The weight gradient sums the slices' products in row
    order: the same result on every run, but not the bits of one product over all
    rows. Both products run in the layouts :mod:`distgcn.kernels.dense` found fastest; with a
    narrow weight (the output layer) both directions are instead one compiled pass
    (:meth:`distgcn.kernels.Kernels.dropped_product`).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, row_ids: np.ndarray,  # type: ignore[override]
                p: float, key: int) -> torch.Tensor:
        ctx.mask = (p, key)
        ctx.row_ids = row_ids
        ctx.save_for_backward(x, weight)
        out = activation_buffers.empty((x.shape[0], weight.shape[1]), x.dtype, x.device)
        ctx.one_pass = _one_pass(x, weight)
        if ctx.one_pass:
            kernels_for(x.device).dropped_product(x.detach().contiguous().numpy(), row_ids, p, key,
                                                  weight.detach().numpy(), out.numpy())
            return out
        ids = _ids_beside(row_ids, x)
        for rows in _row_chunks(x):
            times_weight(_dropped(x[rows], ids[rows], p, key), weight, out=out[rows])
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        x, weight = ctx.saved_tensors
        row_ids = ctx.row_ids
        if ctx.one_pass:
            grad_x = activation_buffers.empty_like(x) if ctx.needs_input_grad[0] else None
            _, grad_weight = kernels_for(x.device).dropped_product_backward(
                x.detach().contiguous().numpy(), grad.contiguous().numpy(), row_ids, *ctx.mask,
                weight.detach().numpy(), ctx.needs_input_grad[0], None if grad_x is None else grad_x.numpy())
            return grad_x, torch.from_numpy(grad_weight), None, None, None
        grad_x = grad_weight = None
        row_ids = _ids_beside(row_ids, x)
        if ctx.needs_input_grad[1]:
            for rows in _row_chunks(x):  # one product per slice, so that one slice gives the bits of one product
                part = weight_gradient(_dropped(x[rows], row_ids[rows], *ctx.mask), grad[rows])
                grad_weight = part if grad_weight is None else grad_weight.add_(part)
            grad_weight = grad_weight.contiguous()
        if ctx.needs_input_grad[0]:
            grad_x = activation_buffers.empty((grad.shape[0], weight.shape[0]), grad.dtype, grad.device)
            grad_x = _drop_in_place(torch.mm(grad, weight.t(), out=grad_x), row_ids, *ctx.mask)
        return grad_x, grad_weight, None, None, None


class _ReLUKeyedDropoutMatmul(torch.autograd.Function):
    """relu(x) in place, then dropout(relu(x)) @ w, as :class:`_KeyedDropoutMatmul`'s one compiled pass each way.

    The ReLU of the layer before, folded into the output layer's narrow product:
    one pass over x less each way, and no [rows, width] gradient of ReLU's own
    (the kernel's grad_x is zero where relu(x) <= 0, as threshold_backward's).
    Returns (the product, relu(x)): x is changed in place, so autograd must hand
    it on as an output.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, row_ids: np.ndarray,  # type: ignore[override]
                p: float, key: int) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.mark_dirty(x)
        ctx.set_materialize_grads(False)  # relu(x) is rarely read again: no zero gradient made for it
        ctx.mask = (p, key)
        ctx.row_ids = row_ids
        out = activation_buffers.empty((x.shape[0], weight.shape[1]), x.dtype, x.device)
        kernels_for(x.device).dropped_product(x.detach().numpy(), row_ids, p, key, weight.detach().numpy(),
                                              out.numpy(), relu=True)
        ctx.save_for_backward(x, weight)
        return out, x

    @staticmethod
    def backward(ctx, grad: torch.Tensor, grad_relu: torch.Tensor | None):  # type: ignore[override]
        x, weight = ctx.saved_tensors
        grad_x = activation_buffers.empty_like(x) if ctx.needs_input_grad[0] else None
        _, grad_weight = kernels_for(x.device).dropped_product_backward(
            x.detach().numpy(), grad.contiguous().numpy(), ctx.row_ids, *ctx.mask, weight.detach().numpy(),
            grad_x is not None, None if grad_x is None else grad_x.numpy(), relu=True)
        if grad_x is not None and grad_relu is not None:  # relu(x) was also read elsewhere
            grad_x.add_(torch.ops.aten.threshold_backward(grad_relu, x, 0))
        return grad_x, torch.from_numpy(grad_weight), None, None, None


def relu_fuses(x: torch.Tensor, weight: torch.Tensor, p: float) -> bool:
    """Whether :func:`relu_keyed_dropout_matmul` takes x (:meth:`distgcn.kernels.Kernels.folds_relu`)."""
    return kernels_for(x.device).folds_relu(x, weight, p)


class PreActivation:
    """A hidden layer's output before its ReLU, in training, where the next layer's one-pass kernels apply the ReLU
    (:func:`relu_fuses`): what :func:`relu_or_deferred` returns, :func:`keyed_dropout_matmul` takes, and
    :func:`activation` reads (it holds the ReLU's output once the next layer has run)."""

    def __init__(self, values: torch.Tensor):
        self.values = values


def relu_or_deferred(h: torch.Tensor, next_weight: torch.Tensor | None, p: float) -> torch.Tensor | PreActivation:
    """relu(h) in place; or, where the next layer drops out and multiplies h by ``next_weight`` first (None: it does
    not) and the device's kernels fold the ReLU into that product, h as a :class:`PreActivation` for it."""
    if next_weight is not None and relu_fuses(h, next_weight, p):
        return PreActivation(h)
    # in place: the product is a fresh tensor that no backward reads (one pass over H less per layer)
    return relu_(h)


def activation(h: torch.Tensor | PreActivation) -> torch.Tensor:
    """A layer's output as a tensor: a :class:`PreActivation`'s holds the ReLU's output once the next layer ran."""
    return h.values if isinstance(h, PreActivation) else h


def relu_keyed_dropout_matmul(x: torch.Tensor, weight: torch.Tensor, row_ids: np.ndarray, p: float,
                              key: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(keyed_dropout(relu(x), ...) @ weight, relu(x)), x made relu(x) in place; only where :func:`relu_fuses`."""
    return _ReLUKeyedDropoutMatmul.apply(x, weight, row_ids, p, key)


def keyed_dropout_matmul(x: torch.Tensor | PreActivation, weight: torch.Tensor, row_ids: np.ndarray, p: float,
                         key: int) -> torch.Tensor:
    """keyed_dropout(x, ...) @ weight, without storing the dropped x for the backward pass (p = 0: x @ weight, by
    :func:`distgcn.kernels.dense.matmul`); of relu(x) for a :class:`PreActivation`, its ReLU applied by the same
    kernels."""
    if isinstance(x, PreActivation):
        return relu_keyed_dropout_matmul(x.values, weight, row_ids, p, key)[0]
    if p <= 0.0:
        return matmul(x, weight)
    return _KeyedDropoutMatmul.apply(x, weight, row_ids, p, key)
