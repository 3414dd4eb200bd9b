"""Each local SpMM block (``train --spmm-kernel``) against numpy's dense product, and the numba block's dispatch.

The distributed tests only build blocks from Â, whose owned blocks always have
a diagonal entry in every column; here the matrix has an empty last column and
an empty row, and the float32 case is one where summing in float64 gives other
bits than summing in float32 (1 + 2⁻²⁴ + 2⁻²⁴ is 1 in float32, in index order).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from distgcn.kernels import csr as csr_kernel
from distgcn.kernels.sparse import BLOCKS, NumbaBlock

CPU = torch.device("cpu")
# 4 x 5: row 2 and column 4 are empty
DENSE_A = np.array([[1.0, 0.0, 2.0, 0.0, 0.0],
                    [0.0, 3.0, 0.0, -1.0, 0.0],
                    [0.0, 0.0, 0.0, 0.0, 0.0],
                    [0.5, 0.0, 0.0, 4.0, 0.0]])


@pytest.mark.parametrize("kernel", sorted(BLOCKS))
@pytest.mark.parametrize("width", [3, 40])  # the numba block hands products under 8 columns to torch
def test_products_and_transpose_products_add_the_dense_definition(kernel, width):
    rng = np.random.default_rng(width)
    block = BLOCKS[kernel](sp.csr_matrix(DENSE_A), torch.float64, CPU)
    x, g = rng.standard_normal((5, width)), rng.standard_normal((4, width))
    out = torch.full((4, width), 2.0, dtype=torch.float64)
    block.add_product(out, torch.from_numpy(x))
    np.testing.assert_allclose(out.numpy(), 2.0 + DENSE_A @ x, rtol=1e-14, atol=1e-14)
    out_t = torch.full((5, width), -1.0, dtype=torch.float64)
    block.add_transpose_product(out_t, torch.from_numpy(g))
    np.testing.assert_allclose(out_t.numpy(), -1.0 + DENSE_A.T @ g, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("kernel", sorted(BLOCKS))
@pytest.mark.parametrize("width", [3, 40])
@pytest.mark.parametrize("empty", [False, True])
def test_a_written_product_ignores_what_the_output_held(kernel, width, empty):
    """``product`` fills an uninitialised buffer (the distributed SpMM skips the zeroing pass): NaNs there vanish."""
    a = sp.csr_matrix(DENSE_A * (not empty))
    x = np.random.default_rng(width).standard_normal((5, width))
    out = torch.full((4, width), float("nan"), dtype=torch.float64)
    BLOCKS[kernel](a, torch.float64, CPU).product(out, torch.from_numpy(x))
    np.testing.assert_allclose(out.numpy(), a.toarray() @ x, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("kernel", sorted(BLOCKS))
def test_a_float32_block_sums_in_float32(kernel):
    tiny = 2.0 ** -24
    a = sp.csr_matrix(np.array([[1.0, 1.0, 1.0]]))
    dense = torch.tensor([[1.0], [tiny], [tiny]], dtype=torch.float32)
    out = torch.zeros((1, 1), dtype=torch.float32)
    BLOCKS[kernel](a, torch.float32, CPU).add_product(out, dense)
    if kernel == "torch":  # torch's CSR product may add in another order; its float32 result is one of the two
        assert out.item() in (1.0, 1.0 + 2 * tiny)
    else:  # in index order: (1 + 2⁻²⁴) rounds to 1, and again; float64 would give 1 + 2⁻²³
        assert out.item() == 1.0


@pytest.mark.parametrize("kernel", ["scipy", "numba"])
def test_indices_are_int32_where_they_fit(kernel):
    a = sp.random(70, 90, density=0.2, format="csr", random_state=1)
    a.indices, a.indptr = a.indices.astype(np.int64), a.indptr.astype(np.int64)  # as a large shard's blocks come
    block = BLOCKS[kernel](a, torch.float64, CPU)
    assert block.matrix.indices.dtype == np.int32 and block.matrix.indptr.dtype == np.int32


@pytest.mark.parametrize(("width", "threads", "own_loop"), [(7, 1, False), (8, 1, True), (7, 2, False),
                                                       (4, 3, False), (16, 3, True), (40, 2, True)])
@pytest.mark.parametrize("accumulate", [False, True])
def test_numba_block_uses_its_loop_from_8_columns_and_torch_below(monkeypatch, width, threads, own_loop, accumulate):
    calls = []
    loop = csr_kernel.add_product
    monkeypatch.setattr(csr_kernel, "threads", lambda: threads)
    monkeypatch.setattr(csr_kernel, "add_product", lambda *args: calls.append(1) or loop(*args))
    block = NumbaBlock(sp.csr_matrix(DENSE_A), torch.float64, CPU)
    x = np.random.default_rng(0).standard_normal((5, width))
    out = torch.full((4, width), 3.0 if accumulate else float("nan"), dtype=torch.float64)
    (block.add_product if accumulate else block.product)(out, torch.from_numpy(x))
    assert calls == ([1] if own_loop else [])
    np.testing.assert_allclose(out.numpy(), (3.0 if accumulate else 0.0) + DENSE_A @ x, rtol=1e-14, atol=1e-14)


def test_numba_blocks_torch_view_shares_the_int32_arrays():
    """One copy of the block in memory: torch's product reads the scipy arrays in place."""
    block = NumbaBlock(sp.random(50, 60, density=0.1, format="csr", random_state=2), torch.float32, CPU)
    assert block.view.col_indices().dtype == torch.int32
    assert np.shares_memory(block.view.col_indices().numpy(), block.matrix.indices)
    assert np.shares_memory(block.view.values().numpy(), block.matrix.data)


def test_numba_block_computes_its_row_blocks_once_per_thread_count(monkeypatch):
    """csr_kernel.add_product's cache: a block multiplied again and again splits its rows once per thread count."""
    splits = []
    row_blocks = csr_kernel.row_blocks
    monkeypatch.setattr(csr_kernel, "row_blocks", lambda *args: splits.append(args[1]) or row_blocks(*args))
    block = NumbaBlock(sp.csr_matrix(DENSE_A), torch.float64, CPU)
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((5, 40)))
    for threads in (2, 2, 3, 2):
        monkeypatch.setattr(csr_kernel, "threads", lambda: threads)
        block.add_product(torch.zeros((4, 40), dtype=torch.float64), x)
    assert splits == [2 * csr_kernel.BLOCKS_PER_THREAD, 3 * csr_kernel.BLOCKS_PER_THREAD]


@pytest.mark.parametrize("kernel", sorted(BLOCKS))
@pytest.mark.parametrize("entries", [0, 1])  # a block with no entry is skipped; one with a single entry is not
def test_a_block_of_zero_or_one_entry_adds_its_definition(kernel, entries):
    a = np.zeros((3, 2))
    a[2, 1] = 5.0 if entries else 0.0
    block = BLOCKS[kernel](sp.csr_matrix(a), torch.float64, CPU)
    x, g = np.arange(8.0).reshape(2, 4), np.arange(12.0).reshape(3, 4)
    out, out_t = torch.ones((3, 4), dtype=torch.float64), torch.ones((2, 4), dtype=torch.float64)
    block.add_product(out, torch.from_numpy(x))
    block.add_transpose_product(out_t, torch.from_numpy(g))
    np.testing.assert_array_equal(out.numpy(), 1.0 + a @ x)
    np.testing.assert_array_equal(out_t.numpy(), 1.0 + a.T @ g)
