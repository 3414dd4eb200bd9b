"""GraphSAGE with the mean aggregator (Hamilton et al., NeurIPS 2017) over the same 1D plan as the GCN.

h' = W_self·h_v + W_neigh·mean_{u ∈ N(v)} h_u + b: the mean is a product with
D⁻¹A (A without self loops, each row divided by its number of entries), whose
pattern is Â's without the diagonal. A rank derives its rows of D⁻¹A from its
rows of Â (:func:`mean_blocks`), so the shards, the plan and the halo rows
are the GCN's; only the values differ, and D⁻¹A is never symmetric, so its
backward uses the stored transpose of the owned block.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from distgcn.config import ModelConfig, TrainConfig
from distgcn.kernels.dense import matmul
from distgcn.nn.dropout import dropout_key, keyed_dropout
from distgcn.nn.model import (
    Aggregate,
    LayerStack,
    LocalGraph,
    Product,
    exchanged_width,
    glorot_matrices,
)
from distgcn.nn.sparse_input import SparseRows
from distgcn.spmm.product import DistributedAdjacency


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


def sage_activation_bytes(n: int, widths: list[int], s: int, dropout: float, root_weight: bool) -> int:
    """GraphSAGE's saved activations, per layer: dropout(H) where a product reads it (W_self, or W_neigh before the
    mean when b < a) and dropout made a copy, the mean's output where W_neigh multiplies it afterwards (b >= a),
    and the output; plus the widest transient, as the GCN's."""
    saved = 0
    for a, b in zip(widths[:-1], widths[1:]):
        if dropout > 0 and (root_weight or b < a):
            saved += n * a
        saved += (n * a if b >= a else 0) + n * b
    return (saved + 3 * n * max(widths[1:])) * s


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

    @classmethod
    def from_config(cls, config: TrainConfig, widths: list[int], dtype: torch.dtype) -> GraphSAGE:
        return cls(widths, config.dropout, config.seed, dtype, root_weight=config.root_weight)

    @classmethod
    def aggregation(cls, graph: LocalGraph) -> Product:
        """D⁻¹A·H over the rank's rows of D⁻¹A (:func:`mean_blocks`): a GraphSAGE rank holds no kernel copy of Â."""
        owned, halo = mean_blocks(graph.owned_block, graph.halo_block)
        return Product(DistributedAdjacency(owned, halo, graph.exchanger, graph.dtype, graph.kernels))

    @classmethod
    def identity(cls, config: TrainConfig) -> dict:
        return {"conv": "sage", "root_weight": config.root_weight}

    @classmethod
    def memory_terms(cls, sizes: Any, model: ModelConfig, widths: list[int], s: int, on_gpu: bool,
                     adjacency_bytes: Callable[[Any], int]) -> dict[str, Any]:
        """D⁻¹A: Â's pattern less the diagonal, never symmetric; W_self beside W_neigh with ``root_weight``."""
        layers = list(zip(widths[:-1], widths[1:]))
        mean = replace(sizes, nnz_owned=max(0, sizes.nnz_owned - sizes.rows), owned_symmetric=False)
        return {"parameters": sum(a * b * (2 if model.root_weight else 1) + b for a, b in layers),
                "exchanged": {exchanged_width(a, b) for a, b in layers},
                "adjacency": adjacency_bytes(mean),
                "activations": sage_activation_bytes(sizes.rows, widths, s, model.dropout, model.root_weight)}

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
