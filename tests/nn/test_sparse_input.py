"""Sparse layer-0 input: the same dropout and products as the dense path, at the cost of the stored entries."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from distgcn.nn.dropout import keyed_dropout, keyed_keep_mask, keyed_keep_values
from distgcn.nn.sparse_input import SparseRows, sparse_pays_off


@pytest.mark.parametrize("width", [1, 4, 37, 64])
def test_entry_mask_equals_dense_mask(width: int) -> None:
    rng = np.random.default_rng(width)
    ids = rng.choice(10**9, size=40, replace=False)
    dense = keyed_keep_mask(ids, width, 0.3, key=987654321)
    rows, cols = np.nonzero(rng.random((40, width)) < 0.5)
    np.testing.assert_array_equal(keyed_keep_values(ids[rows], cols, width, 0.3, 987654321), dense[rows, cols])


@pytest.mark.parametrize("p", [0.0, 0.5])
def test_sparse_product_and_weight_gradient_equal_the_dense_path(p: float) -> None:
    rng = np.random.default_rng(1)
    x = sp.random(50, 30, density=0.1, format="csr", random_state=2).toarray()
    ids = rng.permutation(1000)[:50]
    key = 42
    w_dense = torch.from_numpy(rng.standard_normal((30, 5))).requires_grad_(True)
    w_sparse = w_dense.detach().clone().requires_grad_(True)
    g = torch.from_numpy(rng.standard_normal((50, 5)))

    expected = keyed_dropout(torch.from_numpy(x), ids, p, key) @ w_dense
    expected.backward(g)
    got = SparseRows(x, ids, torch.float64).matmul(w_sparse, p, key)
    got.backward(g)

    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w_sparse.grad, w_dense.grad, rtol=1e-12, atol=1e-12)


def test_rows_without_entries_and_an_empty_shard() -> None:
    x = np.zeros((3, 8))
    x[1, 5] = 2.0
    w = torch.ones((8, 2), dtype=torch.float64, requires_grad=True)
    out = SparseRows(x, np.array([7, 8, 9]), torch.float64).matmul(w)
    np.testing.assert_array_equal(out.detach().numpy(), [[0, 0], [2, 2], [0, 0]])
    empty = SparseRows(np.zeros((0, 8)), np.zeros(0, dtype=np.int64), torch.float64).matmul(w, 0.5, 1)
    empty.sum().backward()
    assert empty.shape == (0, 2) and torch.count_nonzero(w.grad) == 0


def test_chosen_only_when_sparse_and_wider_than_the_output() -> None:
    assert sparse_pays_off(nonzeros=49_216, entries=2708 * 1433, in_width=1433, out_width=16)  # Cora
    assert not sparse_pays_off(nonzeros=50, entries=100, in_width=1433, out_width=16)  # dense
    assert not sparse_pays_off(nonzeros=1, entries=100, in_width=16, out_width=64)  # Â·X first: width 16 is cheaper
    assert not sparse_pays_off(nonzeros=0, entries=0, in_width=8, out_width=4)


def test_a_minibatch_of_rows_drops_what_the_whole_matrix_drops() -> None:
    rng = np.random.default_rng(3)
    x = sp.random(40, 20, density=0.2, format="csr", random_state=4).toarray()
    ids = rng.permutation(100)[:40]
    rows = np.array([3, 0, 17, 39, 8])
    w = torch.from_numpy(rng.standard_normal((20, 4)))
    whole = SparseRows(x, ids, torch.float64).matmul(w, 0.5, 7)
    batch = SparseRows(x, ids, torch.float64).take(rows).matmul(w, 0.5, 7)
    torch.testing.assert_close(batch, whole[rows], rtol=1e-12, atol=1e-12)
