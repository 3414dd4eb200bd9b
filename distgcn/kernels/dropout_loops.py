"""The compiled loops of keyed dropout (numba; imported by :mod:`distgcn.kernels.dropout` on first use only).

Every loop regenerates the mask from :func:`fill_lanes`, the hash that
:func:`distgcn.nn.dropout.keyed_keep_mask` defines, so each sees the same mask bit
for bit. Rows are split over the threads; each row is computed alone, and the
weight gradient sums per-block partials whose blocks depend on the number of
rows only, so no result depends on the number of threads.
"""

from __future__ import annotations

from functools import cache

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
1.2-1.3x the whole pass (Slashdot, 64 -> 8 columns, one thread; ``benchmarks/dropped_product.py``)."""


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


GRADIENT_ROWS = 4
"""Rows whose terms :func:`backward_loop` adds into the weight gradient's partial sums at once: one load and store
of the partials per four rows, not per row (with the input gradient in registers, below: Slashdot's rows, one
thread, 64 -> 8 columns 23.2 -> 16.7 ms; ``benchmarks/dropped_product.py``)."""


@cache
def backward_loop(width: int = 0):
    """The gradients of :func:`dropped_product` for inputs of ``width`` columns, compiled for it (0: any width,
    read at run time; csr_kernel's STACK_ACCUMULATOR_BYTES decides which, as for its products):

    grad_x = (grad @ weight_t) · mask (if ``want_grad_x``), and partials[b] = Σ over block b's rows of
    gradᵀ · (x · mask), the blocks of ``rows / partials.shape[0]`` rows (rounded up) in order. With ``relu`` (x is
    a ReLU's output), grad_x is also ReLU's backward: 0 where x <= 0, as torch's threshold_backward.

    A row's input gradient is summed in registers (a stack buffer, as csr_kernel's rows), one weight row at a
    time: kept in memory, every one of its out-column steps stored it again. Only the buffer's size is compiled
    in: loops over a compiled-in width were slower at 16 columns than over the width read at run time."""
    from distgcn.kernels import (
        llvm_intrinsics as llvm,  # a module, not its functions: closure cells must pickle alike in every
    )
    # process, or numba's cache never finds the loop again
    intrinsics = llvm.SOURCE_DIGEST

    @numba.njit(parallel=True, nogil=True, fastmath=SUMS_IN_ANY_ORDER, cache=True)
    def dropped_product_backward(x, grad, row_ids, base, threshold, scale, weight_t, grad_x, want_grad_x, partials,
                                 relu):
        llvm.keyed_to(intrinsics)  # compiled again when an intrinsic changes
        rows = x.shape[0]
        zero = x.dtype.type(0)
        blocks = partials.shape[0]
        per_block = (rows + blocks - 1) // blocks
        for b in numba.prange(blocks):
            columns = x.shape[1]
            groups = (columns + 3) // 4
            lanes = np.empty(4 * groups, dtype=np.uint16)
            keep = np.empty(columns, dtype=x.dtype)
            if width:
                sums_pointer = llvm.stack_buffer(width, x.dtype)
                sums = numba.carray(sums_pointer, width)
            else:
                sums = np.empty(columns, dtype=x.dtype)
            dropped = np.empty((GRADIENT_ROWS, columns), dtype=x.dtype)
            part = partials[b]
            part[:] = 0
            i, stop = b * per_block, min(rows, (b + 1) * per_block)
            while i < stop:
                count = min(GRADIENT_ROWS, stop - i)
                for r in range(count):
                    fill_lanes(lanes, row_ids[i + r], groups, base)
                    for c in range(columns):
                        keep[c] = scale * x.dtype.type(lanes[c] >= threshold)
                    if want_grad_x:
                        for c in range(columns):
                            sums[c] = 0
                        for j in range(weight_t.shape[0]):
                            if width:
                                llvm.add_scaled_row(sums_pointer, weight_t, j, grad[i + r, j], width)
                            else:
                                g = grad[i + r, j]
                                for c in range(columns):
                                    sums[c] += g * weight_t[j, c]
                        if relu:  # a loop each way: a condition inside the loop kept it from vectorizing
                            for c in range(columns):
                                value = sums[c] * keep[c]
                                grad_x[i + r, c] = zero if x[i + r, c] <= 0 else value
                        else:
                            for c in range(columns):
                                grad_x[i + r, c] = sums[c] * keep[c]
                    for c in range(columns):
                        dropped[r, c] = x[i + r, c] * keep[c]
                if count == GRADIENT_ROWS:
                    for j in range(weight_t.shape[0]):
                        g0, g1, g2, g3 = grad[i, j], grad[i + 1, j], grad[i + 2, j], grad[i + 3, j]
                        for c in range(columns):
                            part[j, c] += (g0 * dropped[0, c] + g1 * dropped[1, c] + g2 * dropped[2, c]
                                           + g3 * dropped[3, c])
                else:  # the block's last rows
                    for r in range(count):
                        for j in range(weight_t.shape[0]):
                            g = grad[i + r, j]
                            for c in range(columns):
                                part[j, c] += g * dropped[r, c]
                i += count

    return dropped_product_backward
