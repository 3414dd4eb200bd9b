"""distgcn/kernels/dense.py: the weight products in other operand layouts are still X·W, G·Wᵀ and Xᵀ·G."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from distgcn.kernels import dense


@pytest.mark.parametrize("k,m", [(64, 8), (8, 64), (16, 16), (3, 1), (1, 5)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matmul_and_both_gradients_equal_a_float64_numpy_oracle(k: int, m: int, dtype) -> None:
    gen = torch.Generator().manual_seed(k * 100 + m)
    x = torch.randn(301, k, generator=gen, dtype=dtype, requires_grad=True)
    w = torch.randn(k, m, generator=gen, dtype=dtype, requires_grad=True)
    g = torch.randn(301, m, generator=gen, dtype=dtype)
    y = dense.matmul(x, w)
    y.backward(g)
    x64, w64, g64 = (t.detach().numpy().astype(np.float64) for t in (x, w, g))
    rtol = 1e-12 if dtype == torch.float64 else 1e-5
    atol = 1e-12 if dtype == torch.float64 else 1e-4
    np.testing.assert_allclose(y.detach().numpy(), x64 @ w64, rtol=rtol, atol=atol)
    np.testing.assert_allclose(w.grad.numpy(), x64.T @ g64, rtol=rtol, atol=atol)
    np.testing.assert_allclose(x.grad.numpy(), g64 @ w64.T, rtol=rtol, atol=atol)
    assert w.grad.shape == w.shape and w.grad.is_contiguous()


def test_times_weight_writes_into_out_and_leaves_the_weight_alone() -> None:
    x = torch.randn(20, 6, dtype=torch.float64)
    w = torch.randn(6, 3, dtype=torch.float64)
    before = w.clone()
    out = torch.empty(20, 3, dtype=torch.float64)
    assert dense.times_weight(x, w, out=out) is out
    np.testing.assert_allclose(out.numpy(), x.numpy() @ w.numpy(), rtol=1e-12)
    assert torch.equal(w, before) and w.is_contiguous()


def test_weight_gradient_of_a_slice_of_rows() -> None:
    """The weight gradient of rows 5-14 only: what keyed_dropout_matmul sums slice by slice."""
    x = torch.randn(30, 7, dtype=torch.float64)
    g = torch.randn(30, 2, dtype=torch.float64)
    part = dense.weight_gradient(x[5:15], g[5:15])
    np.testing.assert_allclose(part.numpy(), x.numpy()[5:15].T @ g.numpy()[5:15], rtol=1e-12)


@pytest.mark.parametrize("rows", [2 * dense.GRADIENT_SLICE_ROWS, 3 * dense.GRADIENT_SLICE_ROWS + 37])
def test_weight_gradient_over_slices_of_rows_is_the_product_on_any_number_of_threads(rows: int) -> None:
    """From two slices of rows on, the CPU sums Xᵀ·G slice by slice (the rows left over too): the product still,
    and the same bits on one thread and two, since the slices depend on the rows only."""
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 6, generator=gen, dtype=torch.float64)
    g = torch.randn(rows, 3, generator=gen, dtype=torch.float64)
    before = torch.get_num_threads()
    try:
        results = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            results.append(dense.weight_gradient(x, g).contiguous())
    finally:
        torch.set_num_threads(before)
    np.testing.assert_allclose(results[0].numpy(), x.numpy().T @ g.numpy(), rtol=1e-12, atol=1e-9)
    assert torch.equal(results[0], results[1])


def test_gradient_slices_are_long_enough_and_their_partials_small() -> None:
    assert dense.gradient_slices(82168, 64, 64, 4) == (10, dense.GRADIENT_SLICE_ROWS)
    assert dense.gradient_slices(dense.GRADIENT_SLICE_ROWS * 2 - 1, 64, 8, 4)[0] == 1  # one slice: one product
    slices, per_slice = dense.gradient_slices(2_000_000, 512, 512, 4)  # 1 MiB a partial
    assert slices * 512 * 512 * 4 <= dense.GRADIENT_PARTIALS_BYTES and slices * per_slice <= 2_000_000
    assert per_slice * (slices + 1) > 2_000_000  # fewer rows left over than a slice
