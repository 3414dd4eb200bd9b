"""A CSR × dense kernel of our own, near the memory bandwidth where every library falls short, on any number of
threads.

Y = A·H gathers, for each nonzero A[i, j], row j of H into row i's sums. Four
things make it fast (benchmarks/spmm_kernels.py, docs/performance.md; Slashdot
in RCM order, 64 float32 columns, 2 threads: 1.5-2.1x the loop before them,
36-46 % of a one-thread copy's bandwidth counting compulsory bytes; the sixth
round 1.3-2.2x more; of a copy on the same two threads, the fourteenth round's
Zen 1 host: 21-30 %, docs/performance.md):

- the loop is compiled for its width, and a row's sums live in vector
  registers (a stack array that never escapes, added to and written out in
  whole vectors: :mod:`distgcn.kernels.llvm_intrinsics`);
- the row of H that the nonzero PREFETCH_AHEAD places on will gather is asked
  for now, which the hardware prefetcher cannot guess; the row FAR_PREFETCH_AHEAD
  places on may also be asked into L2, so that more rows are on their way than
  L1 can track (where that pays depends on the processor: a matrix multiplied
  every epoch times both ways on its first calls, :class:`FarPrefetchChoice`);
- a written product (``accumulate=False``) of whole 64-byte rows is stored
  around the caches, so no output line is first read;
- positions and indices are unsigned, so no index is checked for a negative
  value.

With more threads the rows are cut into blocks of about equal work
(nonzeros plus one per row, :func:`row_blocks`) that each thread claims from a
shared counter whenever it finishes one. Equal nonzeros are not equal time (a
row costs 4-6 nonzeros' time with H in cache, less than one when its rows
come from memory), and numba's ``prange`` hands its iterations out before the
loop starts: Slashdot's first half of RCM rows took 1.1-1.4x the second's
time (1.4-1.5x with H in L1; docs/performance.md, thirteenth round). Every
output row is summed by one thread, in the order of its nonzeros, one fused
multiply-add at a time, so the result is the same bits whatever the number
of threads, whichever thread takes a block and whichever loop runs.

A row of at most 64 bytes (16 float32 or 8 float64 columns) fits one vector
register, and summed as one chain each multiply-add waits for the last
(4-5 cycles). Such rows are summed in two chains instead: the nonzeros at
even positions of the row (0, 2, 4, ...) and those at odd positions, each in
order, then the odd sum added to the even one: a fixed order, so still the
same bits on any number of threads. Slashdot RCM, written products, this
loop's time over the one-chain loop's on the same calls in one process, far
prefetch off / on (``benchmarks/spmm_ab.py``; docs/performance.md,
seventeenth round, Zen 4): one thread 0.89 / 0.92x at 8 columns and 0.87 /
0.91x at 16; two threads 0.79 / 0.89x and 0.91 / 0.93x. Wider rows already
sum in several independent chains (one per vector); two chains gained
nothing at 32 and 64 columns in a scratch version (0.97-1.03x), so they
keep one chain, one nonzero a pass, and their bits.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from functools import cache

import numpy as np

from distgcn.kernels import tricks as switches
from distgcn.runtime.threads import follow_torch_threads

MIN_WIDTH = 8
"""Narrower products go to torch's CSR product. Ours against torch's on int32 indices (torch's time / ours, > 1:
ours faster), one process, sixth round: Slashdot RCM float32, 1 thread: 1 column 0.90, 2 0.93, 4 0.99, 8 1.99, 12
2.10, 16 3.46; 2 threads: 4 0.95-1.06, 8 2.01; added onto an output, 8 columns 1.08; the 10^6 R-MAT, 4 columns
1.55, 8 2.44 (docs/performance.md)."""
STACK_ACCUMULATOR_BYTES = 16 * 1024
"""The widest accumulator kept on a thread's stack (4096 float32 or 2048 float64 columns). Each width up to it
gets its own compiled loop (numba caches each on disk like any other; first call of a new width: about 1 s);
wider rows use one loop that reads the width at run time and keeps its sums on the heap, 1.7-2x slower at 64
columns."""
PREFETCH_AHEAD = 16
"""The loop asks for the row of H that the nonzero this many places ahead gathers. Slashdot, RCM, 64 columns, 2
threads: 1.3-1.5x the same loop without prefetching; 8 and 32 places ahead were no better (docs/performance.md)."""
FAR_PREFETCH_AHEAD = 128
"""Where H has FAR_PREFETCH_MIN_BYTES or more, the loop also asks for the row of H this many nonzeros ahead, into
L2 only: L1 tracks too few outstanding misses for rows that come from L3 or memory. One thread, the same loop
with and without it (docs/performance.md, sixth round): Slashdot RCM 64 columns 6.5 -> 4.9 ms; the 10^6 R-MAT
64 columns 149 -> 79 ms, 16 columns 47 -> 26 ms. 64 places ahead was about as fast, 192 no faster."""
FAR_PREFETCH_MIN_BYTES = 12 * 2**20
"""The smallest H (rows x width x item size) a product without a :class:`FarPrefetchChoice` takes the far prefetch
for. On the sixth round's host smaller ones mostly stayed in the last-level cache, where it cost time: Slashdot
RCM, one thread, 16 columns (5 MiB) 1.67 -> 1.85 ms, 32 columns (10 MiB) 2.55 -> 2.69 ms; from 48 columns (15 MiB)
it gained."""
FAR_PREFETCH_TRIALS = 3
"""Timed calls of each variant in a round of a :class:`FarPrefetchChoice`'s trials (the first round after one
untimed call of each). Whether the far prefetch pays depends on the processor as much as on H: on the twelfth
round's Zen 1 host (docs/performance.md) it made Slashdot RCM 10-20 % faster at 16 columns with H at 5 MiB, where
the size rule above leaves it off, and 5-10 % slower at 32 and 64 columns, where it turns it on."""
FAR_PREFETCH_CLEAR_MARGIN = 0.10
"""After a round, the faster variant is kept if the other's fastest call took this much longer than its own;
otherwise another round is timed. Slashdot RCM on the eighteenth round's Zen 4 host, one thread: on a quiet host
the far loop took 1.1-1.35x the near one's time at 16 columns (1.72-1.98 against 1.40-1.57 ms) and the near loop
1.1-1.25x the far one's at 64, but in one of the host's slow spells (every call 1.3-2x longer for tens of
milliseconds or more) the two came within 3 % at 16 columns. One round inside such a spell kept the far loop,
which on the quiet host costs 1.76 ms a call against the near loop's 1.43 (docs/performance.md, eighteenth
round)."""
FAR_PREFETCH_MOST_TRIALS = 12
"""Timed calls of each variant after which the faster fastest call is kept however close the two are: variants
that close cost about the same, so timing them longer would gain nothing."""
BLOCKS_PER_THREAD = 4
"""Row blocks per thread, claimed one at a time: enough that a thread slowed by a costlier block or by another
process leaves the rest to the others (Slashdot RCM, 16 columns, two threads, 13th round: 4, 8 and 16 alike)."""
EXACT_SUMS = {"nnan", "ninf", "nsz", "arcp", "contract", "afn"}
"""numba's fastmath less ``reassoc``: a row is summed in the order the loop states (its nonzeros' order, in one or
two chains: the module's docstring; each step one fused multiply-add), whatever the compiler vectorizes or unrolls,
so every loop here gives the same bits."""


@cache
def _compiled(width: int = 0, near_prefetch: bool = True, two_chains: bool = True):
    """The product for ``width`` columns, compiled for it (0: any width, read at run time), with or without the
    near prefetch and the two chains (:class:`Tricks`)."""
    import numba  # imported on first use: compiling costs ~1 s per process and dtype, so only runs that need it pay

    from distgcn.kernels import (
        llvm_intrinsics as llvm,  # a module, not its functions: closure cells must pickle alike in
    )
    # every process, or numba's cache never finds the loop again (intrinsic objects do not)

    ahead = np.uint64(PREFETCH_AHEAD)
    far_ahead = np.uint64(FAR_PREFETCH_AHEAD)
    one, two = np.uint64(1), np.uint64(2)
    intrinsics = llvm.SOURCE_DIGEST

    # One function: a parallel kernel that called another compiled closure missed numba's cache (5 s per process).
    # ``width`` is a constant of the closure, so numba compiles (and caches) one loop per value. Positions in
    # ``indices`` and ``data`` are unsigned, and so are the indices (a uint32 view): numba then checks no index for
    # a negative value (with H cache-resident, 1.2x faster than signed).
    @numba.njit(parallel=True, fastmath=EXACT_SUMS, nogil=True, cache=True)
    def csr_product(indptr, indices, data, dense, out, bounds, workers, next_block, accumulate, stream, far):
        llvm.keyed_to(intrinsics)  # compiled again when an intrinsic changes
        end_of_indices = np.uint64(indices.shape[0])
        blocks = bounds.shape[0] - 1
        for _ in numba.prange(workers):  # one per thread, each claiming blocks until none is left
            # Set inside the parallel loop: numba passes the values set before it to the loop's body as arguments,
            # which hid these constants from the compiler (the line loop then divided at every nonzero)
            columns = width if width else out.shape[1]
            line = llvm.items_per_line(dense)
            paired = two_chains and columns <= line  # a row's sums fit one 64-byte vector: two chains (the module's docstring)
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
                            if far and p + far_ahead < end_of_indices:
                                for c in range(0, columns, line):
                                    llvm.prefetch(dense, indices[p + far_ahead], c, 1)  # into L2
                            if near_prefetch and p + ahead < end_of_indices:
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
                        elif stream:
                            llvm.stream_row(out, i, sums, width)
                        else:
                            llvm.write_row(out, i, sums, width, False)
                    elif accumulate:
                        for c in range(columns):
                            out[i, c] += acc[c]
                    else:
                        for c in range(columns):
                            out[i, c] = acc[c]
                b = llvm.claim_next(next_block)
            if stream:
                llvm.store_fence()

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


class FarPrefetchChoice:
    """Whether one matrix's products take the far prefetch, learnt by timing both on its first calls.

    A matrix multiplied every epoch (a rank's blocks) runs each variant once untimed, then rounds of
    FAR_PREFETCH_TRIALS timed calls of each (in the order of :meth:`next_trial`) until one variant's fastest call
    is clearly faster (FAR_PREFETCH_CLEAR_MARGIN) or FAR_PREFETCH_MOST_TRIALS are timed; from then on it runs the
    one whose fastest call was faster: for each width, accumulate or write, and thread count apart. Fastest calls,
    because a call can only be slowed by what else the host does; further rounds, because a slow spell of the
    host brings the two variants' times together, and a choice made inside one holds after it. Both variants give
    the same bits (the prefetch only asks for rows early), so the choice changes the speed, never the result.
    """

    def __init__(self) -> None:
        self._seconds: dict[tuple[int, bool, int], dict[bool, list[float]]] = {}
        self._chosen: dict[tuple[int, bool, int], bool] = {}

    def decided(self, key: tuple[int, bool, int]) -> bool | None:
        """The variant kept for ``key`` (width, accumulate, threads), or None while it is still being timed."""
        return self._chosen.get(key)

    def next_trial(self, key: tuple[int, bool, int]) -> bool:
        """The variant to time next, in the order near, far, far, near (repeated). A matrix's calls often alternate
        between two contexts, e.g. layer 0's product in training and again in evaluation every epoch, which leave
        different data in the caches: taking turns, each variant was timed in one context only, and `train` on
        Slashdot (64 columns) kept the near loop in 3 runs of 18 on one thread and 4 of 6 on two, though the far
        one was faster in both contexts (one thread: 5.0 against 7.2-7.8 ms in training, 6.8-7.6 against 8.3-9.1
        in evaluation); each such run's 64-column products took 4-10 ms more an epoch on one thread, 1.2-3.6 on
        two. In this order each variant's timed calls fall in both, and the far loop was kept in 18 runs of 18 and
        6 of 6 (docs/performance.md, seventeenth round)."""
        seconds = self._seconds.setdefault(key, {False: [], True: []})
        return (len(seconds[False]) + len(seconds[True])) % 4 in (1, 2)

    def record(self, key: tuple[int, bool, int], far: bool, seconds: float) -> None:
        """One call's time; at the end of a round of trials, keep the faster variant if it is clearly faster or
        the trials are used up."""
        samples = self._seconds[key]
        samples[far].append(seconds)
        timed = len(samples[far]) - 1  # the first call of each variant is untimed
        if timed < 1 or timed % FAR_PREFETCH_TRIALS or len(samples[not far]) != len(samples[far]):
            return  # within a round
        near, with_far = (min(samples[variant][1:]) for variant in (False, True))
        if max(near, with_far) >= (1 + FAR_PREFETCH_CLEAR_MARGIN) * min(near, with_far) \
                or timed >= FAR_PREFETCH_MOST_TRIALS:
            self._chosen[key] = with_far < near
            del self._seconds[key]


def far_prefetch_key(width: int, accumulate: bool) -> tuple[int, bool, int]:
    """What a :class:`FarPrefetchChoice` times apart: a product's width, accumulate or write, and the thread count
    it runs on now."""
    return width, accumulate, threads()


def compiled_width(width: int, itemsize: int) -> int:
    """The width the loop for ``width`` columns of ``itemsize`` bytes is compiled for: its own, or 0 (read at run
    time) where the sums would not fit STACK_ACCUMULATOR_BYTES."""
    return width if width * itemsize <= STACK_ACCUMULATOR_BYTES else 0


def add_product(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, dense: np.ndarray,
                out: np.ndarray, bounds_cache: dict | None = None, accumulate: bool = True,
                far_prefetch: bool | FarPrefetchChoice | None = None) -> None:
    """out += CSR(indptr, indices, data) @ dense in place (``accumulate=False``: out = ..., so ``out`` may start
    uninitialised and is not read); data/dense/out of one dtype, ``out`` C-contiguous (``dense`` is made so).

    ``bounds_cache`` keeps the matrix's row blocks per thread count (and blocks per thread), for a matrix multiplied again and again.
    ``far_prefetch``: the far prefetch on or off; a :class:`FarPrefetchChoice` kept with the matrix: whichever
    its timed first calls found faster; None: on where ``dense`` has FAR_PREFETCH_MIN_BYTES or more.
    """
    if not out.flags.c_contiguous:  # the loop adds and streams whole rows at their addresses
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
    # A written product of whole 64-byte rows from a 64-byte boundary is stored around the caches
    stream = tricks.streamed_stores and not accumulate and width > 0 and (width * out.itemsize) % 64 == 0 \
        and out.ctypes.data % 64 == 0
    compiled = _compiled(width, tricks.near_prefetch, tricks.two_chains)
    unsigned_indices = _unsigned(indices) if tricks.unsigned_indices else indices

    def product(far: bool) -> None:
        next_block = np.zeros(1, dtype=np.int64)  # the counter the workers claim blocks from: fresh for each call
        compiled(indptr, unsigned_indices, data, dense, out, bounds, count, next_block, accumulate, stream, far)

    if not tricks.far_prefetch:
        far_prefetch = False
    elif isinstance(far_prefetch, FarPrefetchChoice) and not tricks.far_prefetch_timing:
        far_prefetch = None
    if not isinstance(far_prefetch, FarPrefetchChoice):
        product(dense.nbytes >= FAR_PREFETCH_MIN_BYTES if far_prefetch is None else far_prefetch)
        return
    key = far_prefetch_key(dense.shape[1], accumulate)
    far = far_prefetch.decided(key)
    if far is None:  # still timing both variants
        far = far_prefetch.next_trial(key)
        start = time.perf_counter()
        product(far)
        far_prefetch.record(key, far, time.perf_counter() - start)
    else:
        product(far)


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
    _compiled_transpose(width)(indptr, _unsigned(indices) if tricks.unsigned_indices else indices, data, dense, out,
                               bounds)


def _unsigned(indices: np.ndarray) -> np.ndarray:
    """The same column indices as unsigned integers (a view): the loop then checks none for a negative value."""
    return indices.view(np.dtype(f"u{indices.itemsize}"))


def compile_now(dtype: np.dtype, widths: Iterable[int] = (), transpose: bool = False) -> None:
    """Compile (or load from numba's cache) the product for ``dtype``, int32 indices and each of ``widths`` (the
    run-time-width loop for those too wide for the stack), and with ``transpose`` the transpose product too, before
    a rank's large arrays exist (as :func:`distgcn.kernels.dropout.compile_now`). Each runs on a matrix of no rows,
    so no width allocates anything: the memory check that follows may still refuse a model too wide for the rank."""
    no_rows = np.zeros(1, dtype=np.int32)
    dense = np.zeros((1, 1), dtype=dtype)
    nothing = (no_rows, _unsigned(no_rows[:0]), dense[0, :0], dense, np.zeros((0, 1), dtype=dtype),
               np.zeros(2, dtype=np.int64))
    for width in sorted({compiled_width(w, dense.itemsize) for w in widths if w >= MIN_WIDTH}):
        _compiled(width)(*nothing, 1, np.zeros(1, dtype=np.int64), False, False, False)
        if transpose:
            _compiled_transpose(width)(*nothing)
