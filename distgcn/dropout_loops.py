"""The compiled loops of keyed dropout (numba; imported by :mod:`distgcn.dropout_kernel` on first use only).

Every loop regenerates the mask from :func:`fill_lanes`, the hash that
:func:`distgcn.dropout.keyed_keep_mask` defines, so each sees the same mask bit
for bit. Rows are split over the threads; each row is computed alone, and the
weight gradient sums per-block partials whose blocks depend on the number of
rows only, so no result depends on the number of threads.
"""

from __future__ import annotations

import numba
import numpy as np

M1 = np.uint64(0xBF58476D1CE4E5B9)
M2 = np.uint64(0x94D049BB133111EB)
LANE = np.uint64(0xFFFF)
SUMS_IN_ANY_ORDER = {"reassoc", "contract", "arcp", "nsz", "afn"}
"""Fastmath for the products with a weight: the compiler may vectorize their sums (each row's order is then fixed by
the compiled code, the same on every run and thread count); no ``nnan``/``ninf``, so NaN and infinity propagate as
in IEEE arithmetic and a diverging run is still caught."""


@numba.njit(inline="always", nogil=True, cache=True)
def fill_lanes(lanes: np.ndarray, row_id: int, groups: int, base: np.uint64) -> None:
    """lanes[4g + l] = 16-bit lane l of SplitMix64(row_id · groups + base + g), for every group g of four columns."""
    start = np.uint64(row_id) * np.uint64(groups) + base
    for g in range(groups):
        z = start + np.uint64(g)
        z = (z ^ (z >> np.uint64(30))) * M1
        z = (z ^ (z >> np.uint64(27))) * M2
        z = z ^ (z >> np.uint64(31))
        for lane in range(4):
            lanes[4 * g + lane] = np.uint16((z >> np.uint64(16 * lane)) & LANE)


@numba.njit(parallel=True, nogil=True, cache=True)
def masked_scale(x, row_ids, base, threshold, scale, out):
    """out = x · (scale · kept), kept = lane ≥ threshold."""
    rows, width = x.shape
    groups = (width + 3) // 4
    for i in numba.prange(rows):
        # The row's lanes first, then one branch-free pass: a data-dependent
        # branch per entry (kept or not, p = 0.5) made the kernel 7x slower.
        lanes = np.empty(4 * groups, dtype=np.uint16)
        fill_lanes(lanes, row_ids[i], groups, base)
        for j in range(width):
            out[i, j] = x[i, j] * (scale * x.dtype.type(lanes[j] >= threshold))


ROWS_PER_BLOCK = 512
"""Rows a thread of :func:`dropped_product` takes at a time, with one set of scratch rows: scratch made per row cost
1.2-1.3x the whole pass (Slashdot, 64 -> 8 columns, 4.7 against 3.6-3.8 ms on one thread; docs/performance.md)."""


@numba.njit(parallel=True, nogil=True, fastmath=SUMS_IN_ANY_ORDER, cache=True)
def dropped_product(x, row_ids, base, threshold, scale, weight_t, out, relu):
    """out = (x · mask) @ weight_tᵀ, one row at a time (weight_t: the weight transposed, [out, in]); with ``relu``,
    x = relu(x) in place first (as torch.relu_: a NaN stays)."""
    rows, width = x.shape
    groups = (width + 3) // 4
    zero = x.dtype.type(0)
    for b in numba.prange((rows + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK):
        lanes = np.empty(4 * groups, dtype=np.uint16)
        dropped = np.empty(width, dtype=x.dtype)
        kept = np.empty(width, dtype=x.dtype)
        for i in range(b * ROWS_PER_BLOCK, min(rows, (b + 1) * ROWS_PER_BLOCK)):
            fill_lanes(lanes, row_ids[i], groups, base)
            if relu:
                for c in range(width):
                    v = x[i, c]
                    v = zero if v < 0 else v
                    kept[c] = v
                    dropped[c] = v * (scale * x.dtype.type(lanes[c] >= threshold))
            else:
                for c in range(width):
                    dropped[c] = x[i, c] * (scale * x.dtype.type(lanes[c] >= threshold))
            for j in range(weight_t.shape[0]):
                total = x.dtype.type(0)
                for c in range(width):
                    total += dropped[c] * weight_t[j, c]
                out[i, j] = total
            if relu:
                for c in range(width):
                    x[i, c] = kept[c]


@numba.njit(parallel=True, nogil=True, fastmath=SUMS_IN_ANY_ORDER, cache=True)
def dropped_product_backward(x, grad, row_ids, base, threshold, scale, weight_t, grad_x, want_grad_x, partials,
                             relu):
    """grad_x = (grad @ weight_t) · mask (if ``want_grad_x``), and partials[b] = Σ over block b's rows of
    gradᵀ · (x · mask), the blocks of ``rows / partials.shape[0]`` rows (rounded up) in order. With ``relu`` (x is
    a ReLU's output), grad_x is also ReLU's backward: 0 where x <= 0, as torch's threshold_backward."""
    rows, width = x.shape
    groups = (width + 3) // 4
    zero = x.dtype.type(0)
    blocks = partials.shape[0]
    per_block = (rows + blocks - 1) // blocks
    for b in numba.prange(blocks):
        lanes = np.empty(4 * groups, dtype=np.uint16)
        keep = np.empty(width, dtype=x.dtype)
        row_sums = np.empty(width, dtype=x.dtype)
        part = partials[b]
        part[:] = 0
        for i in range(b * per_block, min(rows, (b + 1) * per_block)):
            fill_lanes(lanes, row_ids[i], groups, base)
            for c in range(width):
                keep[c] = scale * x.dtype.type(lanes[c] >= threshold)
            if want_grad_x:
                row_sums[:] = 0
                for j in range(weight_t.shape[0]):
                    g = grad[i, j]
                    for c in range(width):
                        row_sums[c] += g * weight_t[j, c]
                if relu:  # a loop each way: a condition inside the loop kept it from vectorizing
                    for c in range(width):
                        value = row_sums[c] * keep[c]
                        grad_x[i, c] = zero if x[i, c] <= 0 else value
                else:
                    for c in range(width):
                        grad_x[i, c] = row_sums[c] * keep[c]
            for c in range(width):
                row_sums[c] = x[i, c] * keep[c]
            for j in range(weight_t.shape[0]):
                g = grad[i, j]
                for c in range(width):
                    part[j, c] += g * row_sums[c]
