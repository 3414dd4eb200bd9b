"""Each rank's rows of Â = D^-1/2 (A + I) D^-1/2, built from edges that any rank may hold.

Rank r owns the vertices it numbered (:func:`distgcn.data.distributed.ids.number_ids`: a contiguous range).
Every edge ``u v`` (Â[v, u] ≠ 0) travels to the owner of v (and, symmetrized, ``v u`` to the owner of u); the
owner drops self loops and repeats, adds the diagonal and knows its rows' degrees; the D^-1/2 of the columns it
meets comes from their owners. The values are those of :func:`distgcn.data.graph.normalized_adjacency` to the
bit: the same products in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from distgcn.data.adjacency import drop_repeats
from distgcn.data.distributed.ids import Exchanging


@dataclass
class OwnedRows:
    """This rank's rows ``first .. first + rows - 1`` of Â, columns numbered globally."""

    first: int
    matrix: sp.csr_matrix
    """rows x n."""


def owned_normalized_rows(group: Exchanging, src: np.ndarray, dst: np.ndarray, first: int, rows: int, n: int, *,
                          symmetrize: bool = False, dtype: np.dtype | type = np.float64) -> OwnedRows:
    """This rank's rows of Â from the numbered edges each rank holds (``adj[dst[k], src[k]] = 1``); collective."""
    adjacency = owned_adjacency_rows(group, src, dst, first, rows, n, symmetrize=symmetrize)
    return OwnedRows(first=first, matrix=normalized_rows(group, adjacency, first, dtype=dtype))


def owned_adjacency_rows(group: Exchanging, src: np.ndarray, dst: np.ndarray, first: int, rows: int, n: int, *,
                         symmetrize: bool = False) -> sp.csr_matrix:
    """This rank's rows of A (rows x n, sorted, ones, no self loops or repeats: the loaders' convention) from the
    numbered edges each rank holds; collective."""
    firsts = np.asarray(group.allgather_object(first), dtype=np.int64)
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    keep = src != dst
    heads, tails = dst[keep], src[keep]
    if symmetrize:
        heads, tails = np.concatenate([heads, tails]), np.concatenate([tails, heads])
    order = np.argsort(heads, kind="stable")
    keys = heads[order] * n + tails[order]
    cuts = _owner_cuts(firsts, heads[order])
    del heads, tails, order
    received = group.alltoall_object([keys[cuts[d]:cuts[d + 1]] for d in range(group.size)])
    del keys
    keys = np.concatenate(received)
    del received
    keys.sort()
    keys = drop_repeats(keys)
    indptr = np.searchsorted(keys, (np.arange(rows + 1, dtype=np.int64) + first) * n)
    return sp.csr_matrix((np.ones(len(keys)), keys % n, indptr), shape=(rows, n))


def normalized_rows(group: Exchanging, adjacency: sp.csr_matrix, first: int, *,
                    dtype: np.dtype | type = np.float64) -> sp.csr_matrix:
    """This rank's rows of Â from its rows of A (rows ``first ..``); collective: the D^-1/2 of the columns it
    meets comes from their owners."""
    firsts = np.asarray(group.allgather_object(first), dtype=np.int64)
    rows = adjacency.shape[0]
    # A + I: the diagonal joins each row in column order (A has no self loops, so it is new)
    row_of = np.concatenate([np.repeat(np.arange(rows, dtype=np.int64), np.diff(adjacency.indptr)),
                             np.arange(rows, dtype=np.int64)])
    cols = np.concatenate([adjacency.indices.astype(np.int64), np.arange(first, first + rows, dtype=np.int64)])
    order = np.lexsort((cols, row_of))
    row_of, cols = row_of[order], cols[order]
    del order
    indptr = np.searchsorted(row_of, np.arange(rows + 1))
    del row_of
    inv_sqrt = 1.0 / np.sqrt(np.diff(indptr).astype(np.float64))
    column_scale = _owners_values(group, firsts, first, inv_sqrt, cols)
    data = np.ones(len(cols))
    data *= np.repeat(inv_sqrt, np.diff(indptr))
    data *= column_scale
    return sp.csr_matrix((data.astype(dtype, copy=False), cols, indptr), shape=(rows, adjacency.shape[1]))


def _owners_values(group: Exchanging, firsts: np.ndarray, first: int, values: np.ndarray,
                   vertices: np.ndarray) -> np.ndarray:
    """``values`` (each rank's, for its own vertices) at ``vertices`` (any), asked of their owners."""
    wanted = np.unique(vertices)
    cuts = _owner_cuts(firsts, wanted)
    asked = group.alltoall_object([wanted[cuts[d]:cuts[d + 1]] for d in range(group.size)])
    answers = group.alltoall_object([values[q - first] for q in asked])
    found = np.concatenate(answers) if answers else np.zeros(0)
    return found[np.searchsorted(wanted, vertices)]


def _owner_cuts(firsts: np.ndarray, vertices: np.ndarray) -> np.ndarray:
    """Where the sorted ``vertices`` pass from one owner to the next: rank d owns ``vertices[cuts[d]:cuts[d+1]]``
    (rank d owns the vertices from ``firsts[d]`` up to the next rank's first)."""
    return np.concatenate([np.searchsorted(vertices, firsts), [len(vertices)]])
