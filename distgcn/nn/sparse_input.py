"""Layer 0's input X kept as sparse rows, when most feature entries are zero.

Bag-of-words features (Cora: 1.3% nonzero, Facebook page-page: 4,714 columns
with ~0.4% nonzero) make the dense path pay for zeros twice per epoch: the
dropout mask is hashed for every one of the n·F entries, and X·W reads them
all. Dropping a zero changes nothing, so here dropout hashes only the stored
entries, with the very counter the dense mask uses for them
(:func:`distgcn.nn.dropout.keyed_keep_values`): the product equals the dense
path's, for any partition. X·W and its weight gradient Xᵀ·G are CSR products
costing O(nnz · width) (``benchmarks/sparse_input.py``: 71x the dense path on Facebook page-page).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from distgcn.nn.dropout import keyed_keep_values

MAX_DENSITY = 0.1
"""Above this fraction of nonzeros the dense path is used (the hash per entry then costs more than it saves)."""


def sparse_pays_off(nonzeros: int, entries: int, in_width: int, out_width: int) -> bool:
    """True when X is sparse enough and layer 0 multiplies X·W first (its input is wider than its output)."""
    return in_width > out_width and 0 < entries and nonzeros <= MAX_DENSITY * entries


class SparseRows:
    """X as CSR on the CPU, with the transpose's entry order precomputed for the weight gradient."""

    def __init__(self, features: np.ndarray | sp.csr_matrix, row_ids: np.ndarray, dtype: torch.dtype):
        matrix = sp.csr_matrix(features)
        matrix.sort_indices()
        numpy_dtype = torch.empty((), dtype=dtype).numpy().dtype
        self.dtype = dtype
        self.shape = matrix.shape
        self.indptr, self.indices = matrix.indptr, matrix.indices
        self.values = np.asarray(matrix.data, dtype=numpy_dtype)
        self.row_ids = np.asarray(row_ids, dtype=np.int64)
        self.entry_rows = np.repeat(self.row_ids, np.diff(matrix.indptr))
        """Global row id of each stored entry: the dropout counter's row."""
        transpose = sp.csr_matrix((np.arange(matrix.nnz, dtype=np.int64), self.indices, self.indptr),
                                  shape=self.shape).T.tocsr()
        self.t_indptr, self.t_indices = transpose.indptr, transpose.indices
        self.t_order = transpose.data
        """Entry k of Xᵀ (CSR) is entry t_order[k] of X."""

    @property
    def width(self) -> int:
        return int(self.shape[1])

    def dropped_values(self, p: float, key: int) -> np.ndarray:
        """The stored values after inverted dropout (dropped entries become explicit zeros)."""
        if p <= 0.0:
            return self.values
        keep = keyed_keep_values(self.entry_rows, self.indices, self.width, p, key)
        return np.where(keep, self.values * self.values.dtype.type(1.0 / (1.0 - p)), self.values.dtype.type(0))

    def matmul(self, weight: torch.Tensor, p: float = 0.0, key: int = 0) -> torch.Tensor:
        """dropout(X) · W, differentiable in W."""
        return _SparseTimesDense.apply(weight, self, self.dropped_values(p, key))

    def take(self, rows: np.ndarray) -> SparseRows:
        """The rows ``rows`` (local indices), e.g. a minibatch's."""
        matrix = sp.csr_matrix((self.values, self.indices, self.indptr), shape=self.shape)
        return SparseRows(matrix[rows], self.row_ids[rows], self.dtype)


class _SparseTimesDense(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight: torch.Tensor, rows: SparseRows, values: np.ndarray) -> torch.Tensor:  # type: ignore[override]
        ctx.rows, ctx.values = rows, values
        x = sp.csr_matrix((values, rows.indices, rows.indptr), shape=rows.shape)
        return torch.from_numpy(np.asarray(x @ weight.detach().numpy()))

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):  # type: ignore[override]
        rows: SparseRows = ctx.rows
        x_t = sp.csr_matrix((ctx.values[rows.t_order], rows.t_indices, rows.t_indptr),
                            shape=(rows.shape[1], rows.shape[0]))
        grad_weight = torch.from_numpy(np.asarray(x_t @ grad_out.detach().contiguous().numpy()))
        return grad_weight, None, None
