"""A CSR × dense kernel of our own, for the wide products where every library falls short.

benchmarks/spmm_kernels.py (docs/performance.md) measured, on one thread and
64 columns, this loop 1.3× (Slashdot) to 1.9× (10^6-vertex R-MAT) faster
than scipy's CSR product, the fastest library there; at 16 columns scipy was
as fast or faster. Each output row accumulates in a small buffer that the
compiler keeps in vector registers, and the width loop vectorizes, where
scipy's loop re-reads and re-writes the output row for every nonzero.
"""

from __future__ import annotations

from functools import cache

import numpy as np

MIN_WIDTH = 32
"""Narrower products go to scipy (measured: at 16 columns this loop was 0.5-1x scipy's speed)."""


@cache
def _compiled():
    import numba  # imported on first use: compiling costs ~1 s per process and dtype, so only runs that need it pay

    @numba.njit(fastmath=True, nogil=True, cache=True)
    def csr_add_product(indptr, indices, data, dense, out):
        acc = np.empty(out.shape[1], dtype=out.dtype)
        for i in range(out.shape[0]):
            acc[:] = 0
            for k in range(indptr[i], indptr[i + 1]):
                a = data[k]
                row = dense[indices[k]]
                for c in range(acc.shape[0]):
                    acc[c] += a * row[c]
            out[i, :] += acc

    return csr_add_product


def add_product(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, dense: np.ndarray,
                out: np.ndarray) -> None:
    """out += CSR(indptr, indices, data) @ dense, in place; all C-contiguous, data/dense/out of one dtype."""
    _compiled()(indptr, indices, data, dense, out)
