"""GraphSAGE with the mean aggregator (Hamilton et al., NeurIPS 2017) over the same 1D plan as the GCN.

h' = W_self·h_v + W_neigh·mean_{u ∈ N(v)} h_u + b: the mean is a product with
D⁻¹A (A without self loops, each row divided by its number of entries), whose
pattern is Â's without the diagonal. A rank derives its rows of D⁻¹A from its
rows of Â (:func:`mean_blocks`), so the shards, the plan and the halo rows
are the GCN's; only the values differ, and D⁻¹A is never symmetric, so its
backward uses the stored transpose of the owned block.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from distgcn.kernels.dense import matmul
from distgcn.nn.dropout import dropout_key, keyed_dropout
from distgcn.nn.model import Aggregate, LayerStack, glorot_matrices
from distgcn.nn.sparse_input import SparseRows


def mean_blocks(owned_block: sp.csr_matrix, halo_block: sp.csr_matrix) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """This rank's rows of D⁻¹A, split like Â's: Â's pattern less its diagonal (the self loops), each row
    divided by its count of entries (a row with none stays empty: its mean is zero)."""
    owned = sp.csr_matrix(owned_block, copy=True)
    owned.setdiag(0)
    owned.eliminate_zeros()
    halo = sp.csr_matrix(halo_block, copy=True)
    halo.eliminate_zeros()
    counts = np.diff(owned.indptr) + np.diff(halo.indptr)
    inverse = np.divide(1.0, counts, out=np.zeros(len(counts)), where=counts > 0)
    for block in (owned, halo):
        block.data = np.repeat(inverse, np.diff(block.indptr)).astype(block.dtype)
    return owned, halo


def sage_weights(widths: list[int], seed: int, dtype: torch.dtype,
                 root_weight: bool) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(W_neigh per layer, W_self per layer or []), Glorot-uniform from one seeded generator: every W_neigh
    in layer order, then every W_self."""
    shapes = list(zip(widths[:-1], widths[1:]))
    drawn = glorot_matrices(shapes * (2 if root_weight else 1), seed, dtype)
    return drawn[:len(shapes)], drawn[len(shapes):]


class GraphSAGE(LayerStack):
    """h^{l+1} = σ(dropout(h^l)·W_self + mean_N(dropout(h^l))·W_neigh + b); σ = ReLU except on the last layer."""

    def __init__(self, widths: list[int], dropout: float, seed: int, dtype: torch.dtype = torch.float32,
                 root_weight: bool = True):
        super().__init__(widths, dropout, seed)
        neigh, own = sage_weights(widths, seed, dtype, root_weight)
        self.neigh_weights = nn.ParameterList(nn.Parameter(w) for w in neigh)
        self.self_weights = nn.ParameterList(nn.Parameter(w) for w in own)
        self.biases = nn.ParameterList(nn.Parameter(torch.zeros(w, dtype=dtype)) for w in widths[1:])

    def layer(self, layer: int, h: torch.Tensor | SparseRows, mean: Aggregate, row_ids: np.ndarray, epoch: int,
              p: float) -> torch.Tensor:
        """``mean`` is the distributed D⁻¹A·H."""
        w_self = self.self_weights[layer] if len(self.self_weights) else None
        key = dropout_key(self.seed, epoch, layer)
        h = self._layer(h, self.neigh_weights[layer], w_self, mean, row_ids, p, key) + self.biases[layer]
        return h if layer == len(self.neigh_weights) - 1 else torch.relu(h)

    @staticmethod
    def _layer(h: torch.Tensor | SparseRows, w_neigh: torch.Tensor, w_self: torch.Tensor | None, mean: Aggregate,
               row_ids: np.ndarray, p: float, key: int) -> torch.Tensor:
        """One layer before its bias; the mean carries min(in, out) columns, as the GCN's Â does."""
        width = w_neigh.shape[1]
        if isinstance(h, SparseRows):  # one dropout of the stored entries, both products at once
            both = h.matmul(w_neigh if w_self is None else torch.cat([w_neigh, w_self], dim=1), p, key)
            neigh = mean(both[:, :width])
            return neigh if w_self is None else neigh + both[:, width:]
        dropped = keyed_dropout(h, row_ids, p, key)
        if width < w_neigh.shape[0]:  # products in the layouts the BLAS runs fastest (distgcn/kernels/dense.py)
            neigh = mean(matmul(dropped, w_neigh))
        else:
            neigh = matmul(mean(dropped), w_neigh)
        return neigh if w_self is None else neigh + matmul(dropped, w_self)
