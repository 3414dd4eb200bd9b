"""A CSR × dense kernel of our own, for the wide products where every library falls short, on any number of threads.

benchmarks/spmm_kernels.py (docs/performance.md) measured, on one thread and
64 columns, this loop 1.3× (Slashdot) to 1.9× (10^6-vertex R-MAT) faster
than scipy's CSR product, the fastest library there; at 16 columns scipy was
as fast or faster. Each output row accumulates in a small buffer that the
compiler keeps in vector registers, and the width loop vectorizes, where
scipy's loop re-reads and re-writes the output row for every nonzero.

With more threads the rows are cut into blocks of about equal work
(nonzeros plus one per row, :func:`row_blocks`) that the threads take in
turn. Every output row is still summed by one thread, in the order of its
nonzeros, so the result is the same bits whatever the number of threads.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from .threads import follow_torch_threads

MIN_WIDTH = 32
"""Narrower products go to torch's CSR product (measured: at 8-16 columns this loop was 0.4-0.7x its speed)."""
BLOCKS_PER_THREAD = 4
"""Row blocks per thread: a few, so that a thread slowed by another process does not hold up the product."""


@cache
def _compiled():
    import numba  # imported on first use: compiling costs ~1 s per process and dtype, so only runs that need it pay

    # One function: a parallel kernel that called another compiled closure missed numba's cache (5 s per process).
    @numba.njit(parallel=True, fastmath=True, nogil=True, cache=True)
    def csr_product(indptr, indices, data, dense, out, bounds, accumulate):
        for b in numba.prange(bounds.shape[0] - 1):
            acc = np.empty(out.shape[1], dtype=out.dtype)
            for i in range(bounds[b], bounds[b + 1]):
                acc[:] = 0
                for k in range(indptr[i], indptr[i + 1]):
                    a = data[k]
                    row = dense[indices[k]]
                    for c in range(acc.shape[0]):
                        acc[c] += a * row[c]
                if accumulate:
                    out[i, :] += acc
                else:
                    out[i, :] = acc

    return csr_product


def threads() -> int:
    """The threads the next product runs on (torch's count, as ``train --threads`` set it)."""
    import numba

    follow_torch_threads()
    return numba.get_num_threads()


def row_blocks(indptr: np.ndarray, blocks: int) -> np.ndarray:
    """Boundaries of ``blocks`` consecutive row ranges of about equal work (nonzeros + rows), int64 [blocks + 1]."""
    rows = indptr.shape[0] - 1
    work = np.asarray(indptr, dtype=np.int64) + np.arange(rows + 1)
    return np.searchsorted(work, np.linspace(0, work[-1], blocks + 1)).astype(np.int64)


def add_product(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, dense: np.ndarray,
                out: np.ndarray, bounds_cache: dict[int, np.ndarray] | None = None, accumulate: bool = True) -> None:
    """out += CSR(indptr, indices, data) @ dense in place (``accumulate=False``: out = ..., so ``out`` may start
    uninitialised and is not read); all C-contiguous, data/dense/out of one dtype.

    ``bounds_cache`` keeps the matrix's row blocks per thread count, for a matrix multiplied again and again.
    """
    cache = {} if bounds_cache is None else bounds_cache
    count = threads()
    bounds = cache.get(count)
    if bounds is None:
        bounds = cache[count] = row_blocks(indptr, count * BLOCKS_PER_THREAD)
    _compiled()(indptr, indices, data, dense, out, bounds, accumulate)


def compile_now(dtype: np.dtype) -> None:
    """Compile (or load from numba's cache) the product for ``dtype`` and int32 indices on a 1 x 1 matrix, before
    a rank's large arrays exist (as :func:`distgcn.dropout_kernel.compile_now`)."""
    one = np.ones((1, 1), dtype=dtype)
    add_product(np.array([0, 1], dtype=np.int32), np.zeros(1, dtype=np.int32), one[0], one, np.zeros_like(one))
