"""Keyed dropout in one compiled pass: hash, compare and scale each entry, with no mask stored.

:func:`distgcn.dropout.keyed_keep_mask` defines the mask with numpy: per row
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
"""

from __future__ import annotations

from functools import cache

import numpy as np

from .hashing import GOLDEN
from .threads import follow_torch_threads


@cache
def _compiled():
    import numba  # imported on first use, like csr_kernel: compiling costs ~1 s per process and dtype

    m1 = np.uint64(0xBF58476D1CE4E5B9)
    m2 = np.uint64(0x94D049BB133111EB)
    lane_mask = np.uint64(0xFFFF)

    @numba.njit(parallel=True, nogil=True, cache=True)
    def masked_scale(x, row_ids, base, threshold, scale, out):
        rows, width = x.shape
        groups = (width + 3) // 4
        for i in numba.prange(rows):
            # The row's 16-bit lanes first, then one branch-free pass: a data-dependent
            # branch per entry (kept or not, p = 0.5) made the kernel 7x slower.
            lanes = np.empty(4 * groups, dtype=np.uint16)
            start = np.uint64(row_ids[i]) * np.uint64(groups) + base
            for g in range(groups):
                z = start + np.uint64(g)
                z = (z ^ (z >> np.uint64(30))) * m1
                z = (z ^ (z >> np.uint64(27))) * m2
                z = z ^ (z >> np.uint64(31))
                for lane in range(4):
                    lanes[4 * g + lane] = np.uint16((z >> np.uint64(16 * lane)) & lane_mask)
            for j in range(width):
                out[i, j] = x[i, j] * (scale * x.dtype.type(lanes[j] >= threshold))

    return masked_scale


def keep_threshold(p: float) -> int:
    """The 16-bit lane value at and above which an entry is kept (as in keyed_keep_mask)."""
    return min(65535, round(p * 65536))


def masked_scale(x: np.ndarray, row_ids: np.ndarray, p: float, key: int, out: np.ndarray) -> np.ndarray:
    """out = x · mask, mask = keyed_keep_mask(row_ids, width, p, key) · 1/(1 - p) in x's dtype.

    ``x`` and ``out`` are C-contiguous [rows, width] float32 or float64 arrays
    (``out`` may be ``x``); ``row_ids`` are the rows' global ids.
    """
    with np.errstate(over="ignore"):
        base = np.uint64(key) * GOLDEN
    scale = x.dtype.type(1.0 / (1.0 - p))
    follow_torch_threads()
    _compiled()(x, np.asarray(row_ids, dtype=np.int64), base, np.uint16(keep_threshold(p)), scale, out)
    return out


def compile_now(dtype: np.dtype) -> None:
    """Compile (or load from numba's cache) the pass for ``dtype`` on a tiny array, before a rank's large
    arrays exist: compiled beside them on the first epoch, it left ~330 MB more resident (docs/performance.md)."""
    x = np.ones((1, 4), dtype=dtype)
    masked_scale(x, np.zeros(1, dtype=np.int64), 0.5, 0, x)
