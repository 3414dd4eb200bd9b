"""A CSR × dense kernel of our own, on any number of threads.

Y = A·H gathers, for each nonzero A[i, j], row j of H into row i's sums. The
loop is compiled for its width, and a row's sums live in vector registers (a
stack array that never escapes, added to and written out in whole vectors:
:mod:`distgcn.kernels.llvm_intrinsics`); the run-time-width loop that keeps
them on the heap took 1.6-4x its time on Slashdot RCM, one thread, 16 and 64
float32 columns (``benchmarks/kernel_ablation.py``, switch ``stack_sums``).
The row of H that the nonzero PREFETCH_AHEAD places on will gather is asked
for now, which the hardware prefetcher cannot guess.

With more threads the rows are cut into blocks of about equal work
(nonzeros plus one per row, :func:`row_blocks`) that each thread claims from a
shared counter whenever it finishes one: equal nonzeros are not equal time,
and numba's ``prange`` hands its iterations out before the loop starts. Every
output row is summed by one thread, in the order of its nonzeros, one fused
multiply-add at a time, so the result is the same bits whatever the number
of threads, whichever thread takes a block and whichever loop runs.

A row of at most 64 bytes (16 float32 or 8 float64 columns) fits one vector
register, and is summed in two chains: the nonzeros at even positions of the
row (0, 2, 4, ...) and those at odd positions, each in order, then the odd
sum added to the even one (a fixed order, so still the same bits on any
number of threads). Wider rows already sum in several independent chains
(one per vector) and keep one chain.

Each of these is a switch of :mod:`distgcn.kernels.tricks`.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

import numpy as np

from distgcn.kernels import tricks as switches
from distgcn.runtime.threads import follow_torch_threads

MIN_WIDTH = 8
"""Narrower products go to torch's CSR product, which is as fast as this loop up to 4 columns; from 8 this loop
is about 2x faster (Slashdot RCM, ``benchmarks/spmm_kernels.py``)."""
STACK_ACCUMULATOR_BYTES = 16 * 1024
"""The widest accumulator kept on a thread's stack (4096 float32 or 2048 float64 columns). Each width up to it
gets its own compiled loop (numba caches each on disk like any other; first call of a new width: about 1 s);
wider rows use one loop that reads the width at run time and keeps its sums on the heap, 1.7-2x slower at 64
columns."""
PREFETCH_AHEAD = 16
"""The loop asks for the row of H that the nonzero this many places ahead gathers, into L1: the hardware prefetcher
cannot guess it. Slashdot RCM, one thread, 64 float32 columns: 1.29x faster than without (16 columns: 0.93x;
``benchmarks/kernel_ablation.py``, switch ``prefetch``)."""
BLOCKS_PER_THREAD = 4
"""Row blocks per thread, claimed one at a time: enough that a thread slowed by a costlier block or by another
process leaves the rest to the others (4, 8 and 16 were alike: Slashdot RCM, two threads)."""
EXACT_SUMS = {"nnan", "ninf", "nsz", "arcp", "contract", "afn"}
"""numba's fastmath less ``reassoc``: a row is summed in the order the loop states (its nonzeros' order, in one or
two chains: the module's docstring; each step one fused multiply-add), whatever the compiler vectorizes or unrolls,
so every loop here gives the same bits."""


@cache
def _compiled(width: int = 0, two_chains: bool = True, prefetch: bool = True):
    """The product for ``width`` columns, compiled for it (0: any width, read at run time), with or without the
    two chains and the prefetch (:class:`~distgcn.kernels.tricks.Tricks`)."""
    import numba  # imported on first use: compiling costs ~1 s per process and dtype, so only runs that need it pay

    from distgcn.kernels import (
        llvm_intrinsics as llvm,  # a module, not its functions: closure cells must pickle alike in
    )
    # every process, or numba's cache never finds the loop again (intrinsic objects do not)

    ahead = np.uint64(PREFETCH_AHEAD)
    one, two = np.uint64(1), np.uint64(2)
    intrinsics = llvm.SOURCE_DIGEST

    # One function: a parallel kernel that called another compiled closure missed numba's cache (5 s per process).
    # ``width`` is a constant of the closure, so numba compiles (and caches) one loop per value.
    @numba.njit(parallel=True, fastmath=EXACT_SUMS, nogil=True, cache=True)
    def csr_product(indptr, indices, data, dense, out, bounds, workers, next_block, accumulate):
        llvm.keyed_to(intrinsics)  # compiled again when an intrinsic changes
        end_of_indices = np.uint64(indices.shape[0])
        blocks = bounds.shape[0] - 1
        for _ in numba.prange(workers):  # one per thread, each claiming blocks until none is left
            # Set inside the parallel loop: numba passes the values set before it to the loop's body as arguments,
            # which hid these constants from the compiler (the line loop then divided at every nonzero)
            columns = width if width else out.shape[1]
            line = llvm.items_per_line(dense)
            paired = two_chains and columns <= line  # a row's sums fit one 64-byte vector: two chains (docstring)
            step = two if paired else one  # nonzeros a pass of the loop below takes
            if width:  # fixed sizes on the stack: the compiler keeps them in registers
                sums = llvm.stack_buffer(width, out.dtype)
                odd_sums = llvm.stack_buffer(width, out.dtype)
                acc, odd_acc = numba.carray(sums, width), numba.carray(odd_sums, width)
            else:
                acc, odd_acc = np.empty(columns, dtype=out.dtype), np.empty(columns, dtype=out.dtype)
            b = llvm.claim_next(next_block)
            while b < blocks:
                for i in range(bounds[b], bounds[b + 1]):
                    for c in range(columns):
                        acc[c] = 0
                    if paired:
                        for c in range(columns):
                            odd_acc[c] = 0
                    k, end = np.uint64(indptr[i]), np.uint64(indptr[i + 1])
                    while k < end:  # paired: nonzero k into acc, k + 1 (if the row has it) into odd_acc
                        for p in range(k, k + step):  # p past the row's end: the next row's prefetches, made twice
                            if prefetch and p + ahead < end_of_indices:
                                for c in range(0, columns, line):
                                    llvm.prefetch(dense, indices[p + ahead], c, 3)  # into L1
                        if width:
                            llvm.add_scaled_row(sums, dense, indices[k], data[k], width)
                            if paired and k + one < end:
                                llvm.add_scaled_row(odd_sums, dense, indices[k + one], data[k + one], width)
                        else:
                            for p in range(k, min(k + step, end)):
                                a, row, into = data[p], dense[indices[p]], odd_acc if p > k else acc
                                for c in range(columns):
                                    into[c] += a * row[c]
                        k += step
                    if paired and width:
                        llvm.add_row_into(sums, odd_sums, width)
                    elif paired:
                        for c in range(columns):
                            acc[c] += odd_acc[c]
                    if width:  # whole vectors: read item by item, the registers were split at every row's end
                        if accumulate:
                            llvm.write_row(out, i, sums, width, True)
                        else:
                            llvm.write_row(out, i, sums, width, False)
                    elif accumulate:
                        for c in range(columns):
                            out[i, c] += acc[c]
                    else:
                        for c in range(columns):
                            out[i, c] = acc[c]
                b = llvm.claim_next(next_block)

    return csr_product


@cache
def _compiled_transpose(width: int = 0):
    """out += Aᵀ·H for a CSR A, compiled for ``width`` columns (0: any width): each block of output rows (A's
    columns) is summed by one thread that walks A's rows in order and takes, from each, the entries whose column
    falls in its block (a contiguous run of the sorted indices, found by bisection). Every output row thus adds
    its terms in the order of A's rows, whatever the blocks and threads."""
    import numba

    from distgcn.kernels import llvm_intrinsics as llvm

    intrinsics = llvm.SOURCE_DIGEST

    @numba.njit(parallel=True, fastmath=EXACT_SUMS, nogil=True, cache=True)
    def csr_transpose_product(indptr, indices, data, dense, out, bounds):
        llvm.keyed_to(intrinsics)  # compiled again when an intrinsic changes
        one = np.uint64(1)
        for b in numba.prange(bounds.shape[0] - 1):
            first, stop = bounds[b], bounds[b + 1]
            columns = width if width else out.shape[1]
            if width:  # the row of H being scattered, on the stack: in registers
                row_buffer = llvm.stack_buffer(width, out.dtype)
                row = numba.carray(row_buffer, width)
            else:
                row = np.empty(columns, dtype=out.dtype)
            for r in range(indptr.shape[0] - 1):
                start, end = np.uint64(indptr[r]), np.uint64(indptr[r + 1])
                if start == end or indices[end - one] < first or indices[start] >= stop:
                    continue
                low, high = start, end  # the first entry of the row whose column is in the block
                while low < high:
                    middle = (low + high) >> one
                    if indices[middle] < first:
                        low = middle + one
                    else:
                        high = middle
                for c in range(columns):
                    row[c] = dense[r, c]
                k = low
                while k < end and indices[k] < stop:
                    if width:
                        llvm.add_scaled_to_row(out, indices[k], row_buffer, data[k], width)
                    else:
                        a = data[k]
                        target = out[indices[k]]
                        for c in range(columns):
                            target[c] += a * row[c]
                    k += one

    return csr_transpose_product


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


def column_blocks(indices: np.ndarray, columns: int, blocks: int) -> np.ndarray:
    """Boundaries of ``blocks`` consecutive column ranges of about equal entries, int64 [blocks + 1]: the output
    rows each thread of a transpose product sums. Called at a run's first backward pass, near its peak memory, so
    its only temporary is one count per column."""
    cumulative = np.bincount(indices, minlength=columns)
    np.cumsum(cumulative, out=cumulative)
    entries = cumulative[-1] if columns else 0
    inner = np.searchsorted(cumulative, np.linspace(0, entries, blocks + 1)[1:-1], side="right")
    return np.concatenate(([0], inner, [columns])).astype(np.int64)


def compiled_width(width: int, itemsize: int) -> int:
    """The width the loop for ``width`` columns of ``itemsize`` bytes is compiled for: its own, or 0 (read at run
    time) where the sums would not fit STACK_ACCUMULATOR_BYTES."""
    return width if width * itemsize <= STACK_ACCUMULATOR_BYTES else 0


def add_product(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, dense: np.ndarray,
                out: np.ndarray, bounds_cache: dict | None = None, accumulate: bool = True) -> None:
    """out += CSR(indptr, indices, data) @ dense in place (``accumulate=False``: out = ..., so ``out`` may start
    uninitialised and is not read); data/dense/out of one dtype, ``out`` C-contiguous (``dense`` is made so).

    ``bounds_cache`` keeps the matrix's row blocks per thread count (and blocks per thread), for a matrix multiplied
    again and again.
    """
    if not out.flags.c_contiguous:  # the loop writes whole rows at their addresses
        raise ValueError(f"out must be C-contiguous (strides {out.strides} for shape {out.shape})")
    dense = np.ascontiguousarray(dense)
    tricks = switches.TRICKS
    cache = {} if bounds_cache is None else bounds_cache
    count = threads()
    per_thread = BLOCKS_PER_THREAD if tricks.claimed_blocks else 1
    bounds = cache.get((count, per_thread))
    if bounds is None:
        bounds = cache[count, per_thread] = row_blocks(indptr, count * per_thread)
    width = compiled_width(dense.shape[1], out.itemsize) if tricks.stack_sums else 0
    next_block = np.zeros(1, dtype=np.int64)  # the counter the workers claim blocks from: fresh for each call
    _compiled(width, tricks.two_chains, tricks.prefetch)(indptr, indices, data, dense, out, bounds, count, next_block,
                                                         accumulate)


def add_transpose_product(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, dense: np.ndarray,
                          out: np.ndarray, bounds_cache: dict[int, np.ndarray] | None = None) -> None:
    """out += CSR(indptr, indices, data)ᵀ @ dense in place, without a stored transpose: each output row is summed
    by one thread, in the order of the matrix's rows, so the result is the same bits on any number of threads.
    The column indices must be sorted within each row (canonical CSR). ``bounds_cache`` keeps the column blocks
    per thread count."""
    if not out.flags.c_contiguous:  # the loop adds whole rows at their addresses
        raise ValueError(f"out must be C-contiguous (strides {out.strides} for shape {out.shape})")
    dense = np.ascontiguousarray(dense)
    cache = {} if bounds_cache is None else bounds_cache
    count = threads()
    bounds = cache.get(count)
    if bounds is None:  # one block per thread: each block walks every row, so more blocks cost more
        bounds = cache[count] = column_blocks(indices, out.shape[0], count)
    tricks = switches.TRICKS
    width = compiled_width(dense.shape[1], out.itemsize) if tricks.stack_sums else 0
    _compiled_transpose(width)(indptr, indices, data, dense, out, bounds)


def compile_now(dtype: np.dtype, widths: Iterable[int] = (), transpose: bool = False) -> None:
    """Compile (or load from numba's cache) the product for ``dtype``, int32 indices and each of ``widths`` (the
    run-time-width loop for those too wide for the stack), and with ``transpose`` the transpose product too, before
    a rank's large arrays exist (as :func:`distgcn.kernels.dropout.compile_now`). Each runs on a matrix of no rows,
    so no width allocates anything: the memory check that follows may still refuse a model too wide for the rank."""
    no_rows = np.zeros(1, dtype=np.int32)
    dense = np.zeros((1, 1), dtype=dtype)
    nothing = (no_rows, no_rows[:0], dense[0, :0], dense, np.zeros((0, 1), dtype=dtype), np.zeros(2, dtype=np.int64))
    for width in sorted({compiled_width(w, dense.itemsize) for w in widths if w >= MIN_WIDTH}):
        _compiled(width)(*nothing, 1, np.zeros(1, dtype=np.int64), False)
        if transpose:
            _compiled_transpose(width)(*nothing)
