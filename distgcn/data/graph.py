"""The in-memory graph that loaders produce and the partitioner consumes.

Convention: ``adj[v, u] != 0`` means that vertex ``v`` aggregates from ``u``
(an edge ``u v`` in a file). The adjacency stored here has no self loops and
no duplicate entries; self loops are added by :func:`normalized_adjacency`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


@dataclass
class Graph:
    """A graph with optional vertex features, labels and split masks."""

    adj: sp.csr_matrix
    """n x n, ``adj[v, u] = 1`` when v aggregates from u; no self loops."""
    vertex_ids: np.ndarray
    """int64 [n]: the user's id of each vertex (vertex i has id vertex_ids[i])."""
    name: str = "graph"
    features: np.ndarray | None = None
    """float32 [n, F], or None for an unlabelled graph."""
    labels: np.ndarray | None = None
    """int64 [n], class of each vertex (-1 where unknown)."""
    train_mask: np.ndarray | None = None
    val_mask: np.ndarray | None = None
    test_mask: np.ndarray | None = None

    @property
    def num_vertices(self) -> int:
        return int(self.adj.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.adj.nnz)

    @property
    def num_classes(self) -> int:
        if self.labels is None or self.labels.size == 0:
            return 0
        return int(self.labels.max()) + 1

    @property
    def has_training_data(self) -> bool:
        return self.features is not None and self.labels is not None and self.train_mask is not None

    def fingerprint(self) -> str:
        """A hash of the structure and the data, to tie shards and checkpoints to a graph."""
        h = hashlib.sha256()
        adj = self.adj.tocsr()
        adj.sort_indices()
        # The arrays' own buffers are hashed (the bytes tobytes() would copy: 1.2 GB of Â's values at 10^8).
        for arr in (adj.indptr, adj.indices, adj.data, self.vertex_ids):
            h.update(np.ascontiguousarray(arr))
        for arr in (self.features, self.labels, self.train_mask, self.val_mask, self.test_mask):
            h.update(b"|")
            if arr is not None:
                h.update(np.ascontiguousarray(arr))
        return h.hexdigest()[:32]


def normalized_adjacency(adj: sp.spmatrix, dtype: np.dtype | type = np.float64) -> sp.csr_matrix:
    """Â = D^-1/2 (A + I) D^-1/2 with D the row sums of A + I (Kipf & Welling; the VLDB'23 paper)."""
    a = sp.csr_matrix(adj) + sp.identity(adj.shape[0])  # CSR, and float64 (the identity's) whatever adj's dtype
    a.sum_duplicates()
    deg = np.asarray(a.sum(axis=1)).ravel()
    inv_sqrt = 1.0 / np.sqrt(deg)
    # Scaled in place, in the order of D^-1/2 · (A + I) · D^-1/2 (row scale first): the same bits as the two
    # sparse products, without building them (they were most of the normalisation of a 10^8-nonzero graph),
    # and one temporary of nnz values at a time (four were the peak memory of loading a 10^8-nonzero graph).
    a.data *= np.repeat(inv_sqrt, np.diff(a.indptr))
    a.data *= inv_sqrt[a.indices]
    a = sp.csr_matrix(a, dtype=dtype)
    a.sort_indices()
    return a
