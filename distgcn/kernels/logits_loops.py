"""The compiled loops over a model's logits (numba; imported by :mod:`distgcn.kernels.logits` on first use only).

Each row is computed alone, by one thread, so no result depends on the number of threads.
"""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(parallel=True, nogil=True, cache=True)
def cross_entropies(logits, rows, use_rows, labels, losses, softmax_less_onehot):
    """losses[k] = log Σ exp(z) − z[labels[k]] for row z = logits[rows[k]] (logits[k] without ``use_rows``), and
    softmax_less_onehot[k] = exp(z) / Σ exp(z) − onehot(labels[k]), the gradient of losses[k].

    As torch's logsumexp: the row's largest logit is subtracted first (so large logits do not overflow), unless it
    is infinite; a NaN anywhere in the row gives a NaN loss."""
    classes = logits.shape[1]
    for k in numba.prange(labels.shape[0]):
        row = rows[k] if use_rows else np.int64(k)  # one type either way (int64 and uint64 unify to float)
        largest = logits[row, 0]
        for c in range(1, classes):
            value = logits[row, c]
            if value > largest or math.isnan(value):
                largest = value
                if math.isnan(value):
                    break
        shift = largest if math.isfinite(largest) else logits.dtype.type(0)
        total = logits.dtype.type(0)
        for c in range(classes):  # each exp once (numba's exp is a scalar call): kept in the gradient's row
            softmax_less_onehot[k, c] = math.exp(logits[row, c] - shift)
            total += softmax_less_onehot[k, c]
        label = labels[k]
        losses[k] = (math.log(total) + shift) - logits[row, label]
        inverse = logits.dtype.type(1) / total
        for c in range(classes):
            softmax_less_onehot[k, c] *= inverse
        softmax_less_onehot[k, label] -= logits.dtype.type(1)


@numba.njit(parallel=True, nogil=True, cache=True)
def scatter_scaled_rows(values, scales, rows, use_rows, out):
    """out = 0, then out[rows[k]] = values[k] · scales[k] (out[k] without ``use_rows``); rows distinct."""
    for i in numba.prange(out.shape[0]):
        for c in range(out.shape[1]):
            out[i, c] = 0
    for k in numba.prange(values.shape[0]):
        row = rows[k] if use_rows else np.int64(k)  # one type either way (int64 and uint64 unify to float)
        for c in range(values.shape[1]):
            out[row, c] = values[k, c] * scales[k]


@numba.njit(parallel=True, nogil=True, cache=True)
def row_argmax(logits, out):
    """out[i] = the first column of row i holding its largest value, or its first NaN (as torch.argmax)."""
    for i in numba.prange(logits.shape[0]):
        best = 0
        largest = logits[i, 0]
        if not math.isnan(largest):
            for c in range(1, logits.shape[1]):
                value = logits[i, c]
                if math.isnan(value):
                    best = c
                    break
                if value > largest:
                    best, largest = c, value
        out[i] = best
