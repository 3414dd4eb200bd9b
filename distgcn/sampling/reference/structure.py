"""The graph as the samplers see it, and the induced subgraph they return.

Samplers read the normalized adjacency Â itself (CSR, rows = destinations:
``Â[v, u] != 0`` when v aggregates from u), not a second copy of the
structure: the training code already holds Â, a rank of the 1D row partition
holds rows of Â, and a subgraph can then point at Â's entries by position
(``edge_ids``) so that values and per-edge normalization are plain gathers.

Degree convention (used by the edge, random-walk and frontier samplers):
``deg(v)`` is the **in-degree of v without the self loop**, i.e. the number of
off-diagonal entries of row v of Â. Walks step from v to a uniformly chosen u
with ``Â[v, u] != 0, u != v``: they follow the aggregation direction, so they
collect vertices whose features the sampled vertices aggregate, and every
quantity a step needs (row v) lives on the rank that owns v, which is what the
distributed sampler needs. On a symmetric graph, GraphSAINT's setting, this is
the undirected degree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from distgcn.errors import InputError


@dataclass(frozen=True)
class Subgraph:
    """The subgraph of Â induced by a sampled vertex set.

    ``vertices`` are sorted, distinct global ids; the local CSR (``indptr``,
    ``indices``) numbers vertices by their position in ``vertices`` and holds
    every entry ``Â[v, u]`` with both v and u sampled, self loops included,
    with sorted columns. ``edge_ids[k]`` is the position of local entry k in
    Â's CSR arrays, so ``Â.data[edge_ids]`` are its values.
    """

    vertices: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    edge_ids: np.ndarray

    @property
    def num_vertices(self) -> int:
        return int(self.vertices.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])

    def rows(self) -> np.ndarray:
        """Local row (destination) index of every entry."""
        return np.repeat(np.arange(self.num_vertices, dtype=np.int64), np.diff(self.indptr))

    def matrix(self, data: np.ndarray) -> sp.csr_matrix:
        """The local k x k CSR matrix with one value per local entry."""
        k = self.num_vertices
        return sp.csr_matrix((np.asarray(data), self.indices, self.indptr), shape=(k, k))

    def submatrix(self, a_hat: sp.csr_matrix) -> sp.csr_matrix:
        """``Â[S, S]`` with Â's own values (the unnormalized aggregation of the batch)."""
        return self.matrix(a_hat.data[self.edge_ids])


class SamplingGraph:
    """Read-only view of Â with the degree and neighbour lookups the samplers share.

    Keeps references to Â's ``indptr``/``indices`` (no copy when they are
    already sorted int arrays) plus three n-length arrays: degrees, the
    position of each row's diagonal entry, and scratch maps used to build
    induced subgraphs in O(entries of the sampled rows) rather than O(n).
    """

    def __init__(self, adjacency: sp.spmatrix):
        if not sp.issparse(adjacency) or adjacency.ndim != 2 or adjacency.shape[0] != adjacency.shape[1]:
            raise InputError("samplers need a square scipy sparse matrix (the normalized adjacency Â)")
        a = adjacency if adjacency.format == "csr" else sp.csr_matrix(adjacency)
        if not a.has_canonical_format:  # sorted, no duplicates; fix a copy, not the caller's matrix
            a = a.copy()
            a.sum_duplicates()
        self.matrix = a
        self.n = int(a.shape[0])
        if self.n == 0:
            raise InputError("cannot sample from an empty graph")
        self.indptr = a.indptr.astype(np.int64, copy=False)
        self.indices = a.indices
        rows = np.repeat(np.arange(self.n, dtype=np.int64), np.diff(self.indptr))
        on_diag = a.indices == rows
        self.has_diag = np.zeros(self.n, dtype=bool)
        self.has_diag[rows[on_diag]] = True
        # position of the diagonal entry of each row; one past the row when absent
        self.diag_pos = self.indptr[1:].copy()
        self.diag_pos[rows[on_diag]] = np.flatnonzero(on_diag)
        self.deg = (np.diff(self.indptr) - self.has_diag).astype(np.int64)
        """int64 [n]: in-degree without the self loop (off-diagonal entries of each row)."""
        # scratch for induced(): membership bytes and local ids, reset after each use (O(|S|))
        self._mark = np.zeros(self.n, dtype=bool)
        self._local = np.zeros(self.n, dtype=np.int32 if self.n < 2**31 else np.int64)

    @property
    def nnz(self) -> int:
        return int(self.indices.shape[0])

    def neighbor(self, v: np.ndarray, u01: np.ndarray) -> np.ndarray:
        """The ``floor(u01 * deg(v))``-th off-diagonal in-neighbour of each v (vectorized).

        Vertices with ``deg(v) == 0`` are returned unchanged (a walker there cannot move).
        """
        d = self.deg[v]
        k = np.minimum((u01 * d).astype(np.int64), np.maximum(d - 1, 0))
        pos = self.indptr[v] + k
        pos += pos >= self.diag_pos[v]  # skip the self loop
        out = v.copy()
        movable = d > 0
        out[movable] = self.indices[pos[movable]]
        return out

    def induced(self, vertices: np.ndarray) -> Subgraph:
        """The subgraph of Â induced by ``vertices`` (sorted, distinct global ids).

        Scans every entry of the sampled rows (Σ deg over the sample: on
        power-law graphs the hubs dominate, and scanning still beats
        binary-searching |S| ids in each hub row up to degrees ~|S| log deg).
        Rows are concatenated as slices (one Python step per sampled row,
        cheaper than materializing an index array per entry), filtered with a
        byte mask, and only kept entries get local ids and Â positions.
        """
        s = np.asarray(vertices, dtype=np.int64)
        k = s.shape[0]
        starts = self.indptr[s]
        ends = self.indptr[s + 1]
        indices = self.indices
        cols = np.concatenate([indices[a:b] for a, b in zip(starts.tolist(), ends.tolist())]) if k else \
            np.zeros(0, dtype=indices.dtype)
        self._mark[s] = True
        self._local[s] = np.arange(k, dtype=self._local.dtype)
        try:
            flat = np.flatnonzero(self._mark[cols])
            local_cols = self._local[cols[flat]].astype(np.int64)
        finally:
            self._mark[s] = False
        cum = np.zeros(k + 1, dtype=np.int64)
        np.cumsum(ends - starts, out=cum[1:])
        row_of = np.searchsorted(cum, flat, side="right") - 1
        edge_ids = flat + (starts - cum[:-1])[row_of]
        indptr = np.zeros(k + 1, dtype=np.int64)
        np.cumsum(np.bincount(row_of, minlength=k), out=indptr[1:])
        return Subgraph(vertices=s, indptr=indptr, indices=local_cols, edge_ids=edge_ids)
