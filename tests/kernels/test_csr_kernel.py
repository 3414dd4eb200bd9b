"""Our CSR x dense loop (distgcn/kernels/csr.py): the products scipy gives, and training that does not change.

The training comparison runs the command line's pipeline on in-process ranks (threads).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from conftest import run_distgcn_in_process

from distgcn.config import ConfigError
from distgcn.kernels import csr as csr_kernel
from distgcn.kernels import kernels_for
from distgcn.kernels.sparse import NumbaBlock


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [1, 7, 16, 17, 24, 32, 33, 47, 48, 64, 100])
def test_product_equals_scipy(dtype, width: int) -> None:
    a = sp.random(200, 150, density=0.05, format="csr", random_state=width, dtype=dtype)
    a[7] = 0  # a row without entries
    a.eliminate_zeros()
    dense = np.random.default_rng(width).standard_normal((150, width)).astype(dtype)
    out = np.ones((200, width), dtype=dtype)
    csr_kernel.add_product(a.indptr, a.indices, a.data, dense, out)
    np.testing.assert_allclose(out, 1 + a @ dense, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)


def test_block_gives_scipys_product_at_every_width_and_accumulates() -> None:
    a = sp.random(60, 60, density=0.1, format="csr", random_state=0)
    block = NumbaBlock(a, torch.float64, torch.device("cpu"))
    for width in (4, 40):
        h = torch.randn(60, width, dtype=torch.float64)[:, :]  # a view, as the halo slices are
        out = torch.full((60, width), 2.0, dtype=torch.float64)
        block.add_product(out, h)
        torch.testing.assert_close(out, 2.0 + torch.from_numpy(a @ h.numpy()), rtol=1e-12, atol=1e-12)


def test_auto_picks_it_on_the_cpu_and_torch_on_a_gpu() -> None:
    assert kernels_for("cpu").name == kernels_for(torch.device("cpu"), "numba").name == "numba"
    assert kernels_for(torch.device("cuda")).name == "torch"
    assert kernels_for("cpu", "scipy").name == "scipy"
    assert kernels_for("cpu") is kernels_for(torch.device("cpu"), "auto")  # one object per device and product


@pytest.mark.parametrize("kernel", ["scipy", "numba"])
def test_a_cpu_kernel_for_gpu_tensors_is_refused_naming_the_setting(kernel: str) -> None:
    assert [kernels_for("cpu", k).name for k in ("torch", "numba")] == ["torch", "numba"]
    assert kernels_for(torch.device("cuda"), "torch").name == "torch"
    with pytest.raises(ConfigError) as info:
        kernels_for(torch.device("cuda", 1), kernel)
    assert info.value.field == "compute.spmm_kernel"
    assert str(info.value) == f"compute.spmm_kernel {kernel} runs on the CPU only; the tensors are on cuda:1"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [8, 64])
def test_product_is_the_same_bits_on_any_number_of_threads(dtype, width: int) -> None:
    """Each row is summed by one thread in its nonzeros' order, so threads cannot change the result."""
    import numba

    a = sp.random(3000, 2500, density=0.004, format="csr", random_state=1, dtype=dtype)
    a[100:400] = 0  # a stretch of empty rows: blocks by work differ from blocks by rows
    a.eliminate_zeros()
    dense = np.random.default_rng(width).standard_normal((2500, width)).astype(dtype)
    results = []
    try:
        for threads in sorted({1, 2, numba.config.NUMBA_NUM_THREADS}):
            torch.set_num_threads(threads)
            assert csr_kernel.threads() == threads
            out = np.zeros((3000, width), dtype=dtype)
            csr_kernel.add_product(a.indptr, a.indices, a.data, dense, out)
            assert torch.get_num_threads() == threads  # numba's OpenMP pool, started here, must not change torch's
            results.append(out)
    finally:
        torch.set_num_threads(1)
    for out in results:
        np.testing.assert_array_equal(out.view(f"u{out.itemsize}"), results[0].view(f"u{out.itemsize}"))
    np.testing.assert_allclose(results[0], a @ dense, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)


@pytest.mark.parametrize("dtype, width, chains", [(np.float32, 8, 2), (np.float32, 16, 2), (np.float32, 17, 1),
                                                   (np.float32, 64, 1), (np.float64, 8, 2), (np.float64, 9, 1)])
@pytest.mark.parametrize("threads", [1, 2])
def test_rows_of_one_vector_are_summed_in_two_chains_and_wider_rows_in_one(dtype, width: int, chains: int,
                                                                          threads: int) -> None:
    """The order the module's docstring states, on a row whose sum depends on it: 1 * [big, 1, -big, 1] with big
    = 2^(mantissa bits + 1), where big + 1 rounds back to big. One chain: ((big + 1) - big) + 1 = 1. Two chains
    (nonzeros at even positions, then at odd ones, then the two sums added): (big - big) + (1 + 1) = 2. A row of
    at most 64 bytes takes two chains."""
    big = dtype(2.0 ** (np.finfo(dtype).nmant + 1))
    assert big + dtype(1) == big  # the premise: 1 is lost against big
    a = sp.csr_matrix((np.ones(4, dtype=dtype), np.arange(4), np.array([0, 4, 4])), shape=(2, 4))
    dense = np.repeat(np.array([[big], [1], [-big], [1]], dtype=dtype), width, axis=1)
    out = np.full((2, width), np.nan, dtype=dtype)
    torch.set_num_threads(threads)
    try:
        csr_kernel.add_product(a.indptr, a.indices, a.data, dense, out, accumulate=False)
    finally:
        torch.set_num_threads(1)
    np.testing.assert_array_equal(out, [[chains] * width, [0] * width])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [1, 7, 16, 17, 24, 32, 33, 48, 64, 100])
def test_a_loop_compiled_for_its_width_gives_the_bits_of_the_run_time_width_loop(dtype, width: int) -> None:
    """Same sum, same order: compiling the width in (whole vectors, then narrower ones, then single items) changes the
    speed, not the result."""
    a = sp.random(500, 400, density=0.02, format="csr", random_state=width, dtype=dtype)
    dense = np.random.default_rng(width).standard_normal((400, width)).astype(dtype)
    bounds = csr_kernel.row_blocks(a.indptr, 4)
    results = []
    for compiled_width in (0, width):
        out = np.full((500, width), 0.5, dtype=dtype)
        csr_kernel._compiled(compiled_width)(a.indptr, a.indices, a.data, dense, out, bounds, csr_kernel.threads(),
                                             np.zeros(1, dtype=np.int64), True)
        results.append(out)
    bits = f"u{np.dtype(dtype).itemsize}"
    for out in results[1:]:
        np.testing.assert_array_equal(results[0].view(bits), out.view(bits))
    np.testing.assert_allclose(results[1], 0.5 + a @ dense, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)


@pytest.mark.parametrize("dtype, width, compiled_for", [(np.float32, 4096, 4096), (np.float32, 4097, 0),
                                                        (np.float64, 2048, 2048), (np.float64, 2049, 0)])
def test_an_accumulator_too_wide_for_the_stack_takes_the_run_time_width_loop(dtype, width: int,
                                                                             compiled_for: int) -> None:
    """The compiled loop keeps a row's sums on the thread's stack; wider rows go to the loop that allocates them."""
    assert csr_kernel.compiled_width(width, np.dtype(dtype).itemsize) == compiled_for
    a = sp.random(40, 30, density=0.2, format="csr", random_state=3, dtype=dtype)
    dense = np.random.default_rng(3).standard_normal((30, width)).astype(dtype)
    out = np.full((40, width), np.nan, dtype=dtype)
    csr_kernel.add_product(a.indptr, a.indices, a.data, dense, out, accumulate=False)
    np.testing.assert_allclose(out, a @ dense, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)


def _fresh_llvm(width: int) -> str:
    """The LLVM IR of the loop for ``width`` (0: the run-time width), float32. Compiled here without numba's
    cache: code loaded from the cache cannot be inspected."""
    import numba

    cached = csr_kernel._compiled(width)
    loop = numba.njit(**cached.targetoptions)(cached.py_func)
    no_rows, dense = np.zeros(1, dtype=np.int32), np.zeros((1, max(width, 1)), dtype=np.float32)
    loop(no_rows, no_rows[:0], dense[0, :0], dense, dense[:0], np.zeros(2, dtype=np.int64), 1,
         np.zeros(1, dtype=np.int64), False)
    return "\n".join(loop.inspect_llvm().values())


def test_the_width_compiled_loop_sums_in_registers_and_prefetches() -> None:
    """What made it faster (benchmarks/kernel_ablation.py, ``stack_sums``, ``prefetch``): no heap accumulator per
    row block, rows asked for ahead into L1."""
    compiled, run_time = (_fresh_llvm(width) for width in (64, 0))
    assert "NRT_MemInfo_alloc" not in compiled and "NRT_MemInfo_alloc" in run_time
    assert "i32 0, i32 3, i32 1)" in compiled and "i32 0, i32 3, i32 1)" in run_time


@pytest.mark.parametrize("width", [16, 64])
def test_the_width_compiled_loop_writes_its_rows_in_whole_vectors(width: int) -> None:
    """A row's sums stay in vector registers to the end: written or added item by item, LLVM took the registers
    apart into items at every row's end, on every path (64 extractelements at 64 columns; there 8-16 % of the
    loop's time on short rows with H in L1, docs/performance.md, sixteenth round)."""
    assert "extractelement" not in _fresh_llvm(width)


@pytest.mark.parametrize("width", [16, 64, 0])
def test_the_loop_knows_its_cache_line_and_width_when_compiled(width: int) -> None:
    """Values numba passes into a parallel loop's body arrive as arguments, unknown to the compiler: the prefetch
    over a row's cache lines then divided by the line's items at every nonzero; none divides at run time."""
    assert not re.search(r"= (udiv|sdiv|urem|srem) ", _fresh_llvm(width))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width, offset", [(64, 0), (64, 1), (48, 0), (56, 0), (100, 0)])
def test_written_rows_are_the_bits_of_added_rows(dtype, width: int, offset: int) -> None:
    """A written product (any alignment of the output, whole vectors or not) is the bits of the same product added
    onto zeros."""
    a = sp.random(700, 600, density=0.02, format="csr", random_state=width, dtype=dtype)
    a[5] = 0
    a.eliminate_zeros()
    dense = np.random.default_rng(width).standard_normal((600, width)).astype(dtype)
    block = np.full(700 * width + 64, np.nan, dtype=dtype)
    start = (-block.ctypes.data // block.itemsize) % (64 // block.itemsize) + offset  # 64-byte boundary, + offset
    out = block[start:start + 700 * width].reshape(700, width)
    csr_kernel.add_product(a.indptr, a.indices, a.data, dense, out, accumulate=False)
    stored = np.zeros((700, width), dtype=dtype)
    csr_kernel.add_product(a.indptr, a.indices, a.data, dense, stored)  # accumulated onto zeros
    np.testing.assert_array_equal(out.view(f"u{out.itemsize}"), stored.view(f"u{out.itemsize}"))
    np.testing.assert_allclose(out, a @ dense, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)


GUARDED_INDICES = """
import ctypes, mmap, sys
import numpy as np
from distgcn.kernels import csr as csr_kernel

page = mmap.PAGESIZE
region = mmap.mmap(-1, 2 * page)
libc = ctypes.CDLL(None, use_errno=True)
start = ctypes.addressof(ctypes.c_char.from_buffer(region))
assert libc.mprotect(ctypes.c_void_p(start + page), page, 0) == 0  # PROT_NONE: reading past the array faults
nnz, rows, width = 400, 10, int(sys.argv[1])
indices = np.frombuffer(region, dtype=np.int32, count=nnz, offset=page - 4 * nnz)
indices[:] = np.arange(nnz) % 7
indptr = np.arange(0, nnz + 1, nnz // rows, dtype=np.int32)
data = np.ones(nnz, dtype=np.float32)
dense = np.ones((7, width), dtype=np.float32)
out = np.zeros((rows, width), dtype=np.float32)
csr_kernel.add_product(indptr, indices, data, dense, out, accumulate=False)
assert (out == nnz // rows).all()
"""


@pytest.mark.parametrize("width", [40, 64])
def test_the_loop_reads_no_index_past_the_end(width: int) -> None:
    """The loop looks PREFETCH_AHEAD nonzeros ahead, and sums two nonzeros a pass where rows fit a vector; the
    matrix's last indices end where the next page is unreadable, so a look past them would kill the process
    (SIGSEGV)."""
    result = subprocess.run([sys.executable, "-c", GUARDED_INDICES, str(width)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


CACHE_HITS = """
import sys
import numpy as np
from distgcn.kernels import csr as csr_kernel, llvm_intrinsics

if len(sys.argv) > 1:  # llvm_intrinsics.py as if edited since the loops were cached
    llvm_intrinsics.SOURCE_DIGEST = sys.argv[1]
csr_kernel.compile_now(np.dtype(np.float32), [64, 5000])  # a width compiled in, and the run-time-width loop
print(sum(sum(csr_kernel._compiled(width).stats.cache_hits.values()) for width in (64, 0)))
"""


def test_a_second_process_loads_the_loops_from_numbas_cache(tmp_path) -> None:
    """Each width's loop takes about 1 s to compile; a later run (a rank, the next job) loads it from disk. The
    cache key includes the loop's closure cells, so a cell that pickles differently in each process (a function
    object of llvm_intrinsics) made every run compile again."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    hits = [subprocess.run([sys.executable, "-c", CACHE_HITS], capture_output=True, text=True, env=env, timeout=300,
                           check=True).stdout.split()[-1] for _ in range(2)]
    assert hits == ["0", "2"]


def test_a_changed_intrinsic_compiles_the_loops_again(tmp_path) -> None:
    """numba's cache finds a loop by its own file and closure, not by llvm_intrinsics.py: a loop cached before an
    intrinsic changed was loaded unchanged. The loops keep that file's digest in their closure; another digest is a
    cache miss, the same digest a hit."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}

    def hits(*digest: str) -> str:
        return subprocess.run([sys.executable, "-c", CACHE_HITS, *digest], capture_output=True, text=True, env=env,
                              timeout=300, check=True).stdout.split()[-1]

    assert [hits(), hits("edited"), hits("edited"), hits()] == ["0", "0", "2", "2"]


def test_strided_operands_give_the_product_or_a_clear_error() -> None:
    """Rows are read and stored as whole vectors at their addresses: a strided ``dense`` is made contiguous, and a
    strided ``out`` refused (the loop would write a column slice of a wider array over its neighbours)."""
    a = sp.random(70, 60, density=0.1, format="csr", random_state=4, dtype=np.float32)
    wide = np.random.default_rng(4).standard_normal((60, 100)).astype(np.float32)
    out = np.empty((70, 64), dtype=np.float32)
    csr_kernel.add_product(a.indptr, a.indices, a.data, wide[:, :64], out, accumulate=False)
    np.testing.assert_allclose(out, a @ wide[:, :64], rtol=1e-5, atol=1e-5)
    csr_kernel.add_product(a.indptr, a.indices, a.data, np.asfortranarray(wide[:, :64]), out, accumulate=False)
    np.testing.assert_allclose(out, a @ wide[:, :64], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="out must be C-contiguous"):
        csr_kernel.add_product(a.indptr, a.indices, a.data, wide[:, :64], np.empty((70, 100), np.float32)[:, :64])


def test_row_blocks_split_the_work_evenly() -> None:
    indptr = np.concatenate([[0], np.cumsum([10] * 1000 + [0] * 3000)])  # heavy rows, then empty ones
    bounds = csr_kernel.row_blocks(indptr, 4)
    assert bounds[0] == 0 and bounds[-1] == 4000 and np.all(np.diff(bounds) >= 0)
    work = [indptr[b] - indptr[a] + b - a for a, b in zip(bounds[:-1], bounds[1:])]
    assert max(work) - min(work) <= 22  # each boundary within one row (11) of the ideal; by rows: 11000 vs 1000


def test_each_value_of_the_shared_counter_is_claimed_by_one_thread() -> None:
    """The product's threads take row blocks from one counter (llvm_intrinsics.claim_next): a value claimed by two
    threads would add its block twice into an accumulated product, a value skipped would leave its rows unwritten."""
    import numba

    from distgcn.kernels import llvm_intrinsics as llvm

    @numba.njit(parallel=True)
    def claim_every_value(counter, claims, workers):
        for _ in numba.prange(workers):
            value = llvm.claim_next(counter)
            while value < claims.shape[0]:
                claims[value] += 1  # each value has one claimant, so no two threads write one slot
                value = llvm.claim_next(counter)

    torch.set_num_threads(2)
    try:
        claims = np.zeros(2_000_000, dtype=np.int64)
        counter = np.zeros(1, dtype=np.int64)
        workers = csr_kernel.threads()
        claim_every_value(counter, claims, workers)
    finally:
        torch.set_num_threads(1)
    assert (claims == 1).all(), np.bincount(claims)
    assert counter[0] == claims.shape[0] + workers  # each worker's last claim found nothing left


@pytest.mark.parametrize("threads", [1, 2])
def test_every_block_is_added_once_when_threads_claim_many_blocks(threads: int) -> None:
    """Many more row blocks than threads (the threads claim them as they finish), added onto an output that is not
    zero: a block done twice or not at all changes the sums."""
    a = _sorted_block(3000, 900, 0.01, 7, np.float64)
    dense = np.random.default_rng(7).standard_normal((900, 24))
    start = np.random.default_rng(8).standard_normal((3000, 24))
    torch.set_num_threads(threads)
    try:
        out = start.copy()
        csr_kernel.add_product(a.indptr, a.indices, a.data, dense, out,
                               bounds_cache={csr_kernel.threads(): csr_kernel.row_blocks(a.indptr, 97)})
    finally:
        torch.set_num_threads(1)
    np.testing.assert_allclose(out, start + a @ dense, rtol=1e-12, atol=1e-12)


def _sorted_block(rows: int, columns: int, density: float, seed: int, dtype) -> sp.csr_matrix:
    """A random CSR with an empty row and an empty column (where blocks of work and of columns part ways)."""
    a = sp.random(rows, columns, density=density, format="csr", random_state=seed, dtype=dtype).tolil()
    a[3, :] = 0
    a[:, 5] = 0
    a = a.tocsr()
    a.eliminate_zeros()
    a.sort_indices()
    return a


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [1, 7, 8, 16, 17, 33, 64, 100])
def test_transpose_product_adds_the_dense_definition(dtype, width: int) -> None:
    """out += Aᵀ·G against the dense matrix's transpose (numpy's dense product: no sparse code in the oracle)."""
    a = _sorted_block(300, 250, 0.03, width, dtype)
    g = np.random.default_rng(width).standard_normal((300, width)).astype(dtype)
    out = np.full((250, width), 0.25, dtype=dtype)
    csr_kernel.add_transpose_product(a.indptr, a.indices, a.data, g, out)
    np.testing.assert_allclose(out, 0.25 + a.toarray().T @ g, rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [8, 64, 4097])
def test_transpose_product_is_the_same_bits_for_any_blocks_threads_and_loop(dtype, width: int) -> None:
    """Each output row is summed by one thread in the order of the matrix's rows, so neither the column blocks, nor
    the threads, nor compiling the width in changes a bit."""
    import numba

    a = _sorted_block(2000, 1500, 0.004, 11, dtype)
    a.indices = a.indices.astype(np.int32)
    g = np.random.default_rng(width).standard_normal((2000, width)).astype(dtype)
    compiled = csr_kernel.compiled_width(width, np.dtype(dtype).itemsize)
    results = []
    try:
        for threads in sorted({1, 2, numba.config.NUMBA_NUM_THREADS}):
            torch.set_num_threads(threads)
            for blocks in (1, 2, 3, 7):
                for loop in {compiled, 0}:
                    out = np.full((1500, width), 0.5, dtype=dtype)
                    csr_kernel._compiled_transpose(loop)(a.indptr, a.indices, a.data, g, out,
                                                         csr_kernel.column_blocks(a.indices, 1500, blocks))
                    results.append(out)
            out = np.full((1500, width), 0.5, dtype=dtype)
            csr_kernel.add_transpose_product(a.indptr, a.indices, a.data, g, out)
            results.append(out)
    finally:
        torch.set_num_threads(1)
    bits = f"u{np.dtype(dtype).itemsize}"
    for out in results[1:]:
        np.testing.assert_array_equal(results[0].view(bits), out.view(bits))
    np.testing.assert_allclose(results[0], 0.5 + a.toarray().T @ g, rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=1e-5)


def test_column_blocks_split_the_entries_evenly() -> None:
    indices = np.concatenate([np.repeat(np.arange(100), 30), np.arange(100, 3000)])  # heavy columns, then light
    bounds = csr_kernel.column_blocks(indices, 3000, 4)
    assert bounds[0] == 0 and bounds[-1] == 3000 and np.all(np.diff(bounds) >= 0)
    per_column = np.bincount(indices, minlength=3000)
    entries = [per_column[a:b].sum() for a, b in zip(bounds[:-1], bounds[1:])]
    assert sum(entries) == len(indices) and max(entries) - min(entries) <= 60  # each bound within a column (30)
    assert list(csr_kernel.column_blocks(indices, 3000, 1)) == [0, 3000]


def test_numba_block_transposes_an_unsorted_block_correctly() -> None:
    """The transpose loop finds a row's columns by bisection: every block sorts what it is given (SparseBlock)."""
    a = _sorted_block(80, 70, 0.1, 2, np.float64)
    shuffled = sp.csr_matrix((a.data[::-1].copy(), a.indices[::-1].copy(), a.indptr), shape=a.shape)
    for r in range(80):  # reverse each row's entries in place: the same matrix, unsorted
        lo, hi = a.indptr[r], a.indptr[r + 1]
        shuffled.indices[lo:hi], shuffled.data[lo:hi] = a.indices[lo:hi][::-1], a.data[lo:hi][::-1]
    shuffled.has_sorted_indices = False
    block = NumbaBlock(shuffled, torch.float64, torch.device("cpu"))
    g = torch.randn(80, 16, dtype=torch.float64)
    out = torch.zeros(70, 16, dtype=torch.float64)
    torch.set_num_threads(2)  # two column blocks: with one, any order of a row's entries passes
    try:
        block.add_transpose_product(out, g)
    finally:
        torch.set_num_threads(1)
    torch.testing.assert_close(out, torch.from_numpy(a.toarray().T @ g.numpy()), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("ranks", [2, 3])
def test_ranks_train_the_same_with_numba_and_scipy(tmp_path, ranks: int) -> None:
    losses = {}
    for kernel in ("numba", "scipy"):
        metrics = tmp_path / f"{kernel}.jsonl"
        assert run_distgcn_in_process(["train", "--graph", "synthetic:sbm,n=300,features=40", "--hidden", "48",
                                       "--epochs", "4", "--dtype", "float64", "--threads", "1", "--spmm-kernel",
                                       kernel, "--quiet", "--metrics", str(metrics)], ranks) == [0] * ranks
        records = [json.loads(line) for line in metrics.read_text().splitlines()]
        assert records[0]["run"]["spmm_kernel"] == kernel
        losses[kernel] = [r["loss"] for r in records[1:]]
    np.testing.assert_allclose(losses["numba"], losses["scipy"], rtol=1e-12)
