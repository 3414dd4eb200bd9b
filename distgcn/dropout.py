"""Dropout whose mask depends on (seed, epoch, layer, global row, column), not on the partition.

Each rank draws the mask entries of its own rows from a counter-based hash
(:mod:`distgcn.hashing`) keyed by the global row id, so P ranks drop exactly
the entries that one process would: distributed training then equals
single-process training even with dropout on.
"""

from __future__ import annotations

import numpy as np
import torch

from . import dropout_kernel
from .hashing import GOLDEN, derive_key, mix64_inplace


def dropout_key(seed: int, epoch: int, layer: int) -> int:
    """One 64-bit key per (seed, epoch, layer)."""
    return derive_key(seed, epoch, layer)


def keyed_keep_mask(row_ids: np.ndarray, width: int, p: float, key: int) -> np.ndarray:
    """Boolean [rows, width]: True where entry (row_ids[i], j) survives dropout with probability p.

    One 64-bit hash per row and group of four columns gives four 16-bit
    uniforms, so p is applied at a resolution of 2**-16.
    """
    groups = (width + 3) // 4
    with np.errstate(over="ignore"):
        base = np.asarray(row_ids, dtype=np.uint64) * np.uint64(groups) + np.uint64(key) * GOLDEN
    counter = np.add.outer(base, np.arange(groups, dtype=np.uint64))
    lanes = mix64_inplace(counter).astype("<u8", copy=False).view("<u2")[:, :width]
    return lanes >= np.uint16(dropout_kernel.keep_threshold(p))


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
    return (lanes & np.uint64(0xFFFF)) >= np.uint64(dropout_kernel.keep_threshold(p))


class _KeyedDropout(torch.autograd.Function):
    """Forward and backward by :mod:`distgcn.dropout_kernel`; the backward regenerates the mask."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, row_ids: np.ndarray, p: float,  # type: ignore[override]
                key: int) -> torch.Tensor:
        ctx.mask = (row_ids, p, key)
        x = x.detach().contiguous().numpy()
        return torch.from_numpy(dropout_kernel.masked_scale(x, row_ids, p, key, np.empty_like(x)))

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        grad = grad.contiguous().numpy()
        return torch.from_numpy(dropout_kernel.masked_scale(grad, *ctx.mask, np.empty_like(grad))), None, None, None


def keyed_dropout(x: torch.Tensor, row_ids: np.ndarray, p: float, key: int) -> torch.Tensor:
    """Inverted dropout of ``x`` (rows = ``row_ids``) with a partition-independent mask.

    On the CPU in float32/float64 one compiled pass each way
    (:mod:`distgcn.dropout_kernel`: no mask stored); elsewhere the mask of
    :func:`keyed_keep_mask` as one float mask with the scale folded in. Both
    give x · mask with the same mask, bit for bit.
    """
    if p <= 0.0:
        return x
    if x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64) and x.dim() == 2:
        return _KeyedDropout.apply(x, row_ids, p, key)
    keep = torch.from_numpy(keyed_keep_mask(row_ids, x.shape[1], p, key)).to(x.device)
    return x * keep.to(x.dtype).mul_(1.0 / (1.0 - p))
