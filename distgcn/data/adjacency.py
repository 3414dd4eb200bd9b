"""Turning edge arrays into the canonical adjacency every loader returns.

One place decides the conventions: an edge ``u -> v`` gives ``adj[v, u] = 1``
(v aggregates from u), self loops are dropped (normalization adds them back),
duplicates are merged, values are 1.0 float64, and the CSR has sorted indices.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp

from distgcn.errors import InputError

MAX_VERTICES = 2**31 - 1
"""Row * n + col must fit in int64, and index arrays in int32 where possible."""


def remap_ids(*id_arrays: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Map arbitrary integer ids to 0..n-1 in increasing order of id.

    Returns the sorted distinct ids (``vertex_ids``) and each input array
    rewritten to positions. Ids already equal to 0..n-1 are kept as they are.
    """
    everything = np.concatenate([np.asarray(a, dtype=np.int64) for a in id_arrays])
    vertex_ids = sorted_unique(everything)
    n = len(vertex_ids)
    if n == 0 or (vertex_ids[0] == 0 and vertex_ids[-1] == n - 1):
        return vertex_ids, [np.asarray(a, dtype=np.int64) for a in id_arrays]
    if vertex_ids[-1] - vertex_ids[0] < LOOKUP_SPAN * len(everything):
        lookup = np.empty(int(vertex_ids[-1] - vertex_ids[0]) + 1, dtype=np.int64)
        lookup[vertex_ids - vertex_ids[0]] = np.arange(n)
        return vertex_ids, [lookup[np.asarray(a, dtype=np.int64) - vertex_ids[0]] for a in id_arrays]
    return vertex_ids, [_ranks(a, vertex_ids) for a in id_arrays]


LOOKUP_SPAN = 2
"""Ids spanning less than this many times their count are mapped by a lookup table (at most twice the ids' bytes):
one memory access per id, where a binary search per id in file order misses the cache ~log2(n) times
(46 s for 10^7 ids among 4·10^6 on the shared 2-core machine; 0.9 s by table)."""


def _ranks(ids: np.ndarray, vertex_ids: np.ndarray) -> np.ndarray:
    """Position of each id in ``vertex_ids``, searched in sorted order: the searches then walk ``vertex_ids``
    in order and hit the cache."""
    ids = np.asarray(ids, dtype=np.int64)
    order = np.argsort(ids)
    ranks = np.empty(len(ids), dtype=np.int64)
    ranks[order] = np.searchsorted(vertex_ids, ids[order])
    return ranks


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """Distinct values in increasing order; sort-based, faster here than ``np.unique``'s hashing."""
    return drop_repeats(np.sort(values))


def drop_repeats(values: np.ndarray) -> np.ndarray:
    """The distinct values of a sorted array, in order."""
    if values.size:
        keep = np.empty(values.size, dtype=bool)
        keep[0] = True
        np.not_equal(values[1:], values[:-1], out=keep[1:])
        values = values[keep]
    return values


def edges_to_adjacency(
    src: np.ndarray, dst: np.ndarray, n: int, *, symmetrize: bool = False
) -> sp.csr_matrix:
    """CSR with ``adj[dst[k], src[k]] = 1`` for every edge, plus the reverse edges when ``symmetrize``.

    ``src`` and ``dst`` must already hold positions in 0..n-1.
    """
    if n > MAX_VERTICES:
        raise InputError(f"graph has {n} vertices; at most {MAX_VERTICES} are supported")
    keys = drop_repeats(_sorted_edge_keys(src, dst, n, symmetrize))
    index_dtype = np.int32 if len(keys) <= MAX_VERTICES else np.int64
    # Row r's entries are the keys in [r n, (r + 1) n); the column is the key's remainder, taken in place.
    indptr = np.searchsorted(keys, np.arange(n + 1, dtype=np.int64) * n).astype(index_dtype)
    np.remainder(keys, n, out=keys)
    cols = keys.astype(index_dtype)
    del keys
    return canonical_csr(np.ones(len(cols)), cols, indptr, n)


def _sorted_edge_keys(src: np.ndarray, dst: np.ndarray, n: int, symmetrize: bool) -> np.ndarray:
    """The keys ``dst * n + src`` of the edges that are no self loops (and ``src * n + dst`` too when
    ``symmetrize``), sorted, repeats kept.

    Written into one array and sorted in place: with the loader's edge arrays this is the peak memory of loading
    a 10^8-edge graph, where copies of the edges, the keys and a sorted copy of them were about twice it.
    """
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    keep = src != dst
    count = int(np.count_nonzero(keep))
    keys = np.empty(2 * count if symmetrize else count, dtype=np.int64)
    np.multiply(dst[keep], n, out=keys[:count])
    keys[:count] += src[keep]
    if symmetrize:
        np.multiply(src[keep], n, out=keys[count:])
        keys[count:] += dst[keep]
    keys.sort()
    return keys


def canonical_csr(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, n: int) -> sp.csr_matrix:
    """Wrap arrays that are already sorted and duplicate-free, without scipy re-checking them."""
    adj = sp.csr_matrix((data, indices, indptr), shape=(n, n), copy=False)
    adj.has_sorted_indices = True
    adj.has_canonical_format = True
    return adj


def canonicalize(adj: sp.spmatrix, *, symmetrize: bool = False) -> sp.csr_matrix:
    """Any square sparse matrix, as the canonical adjacency of its nonzero pattern."""
    coo = sp.coo_matrix(adj)
    # A stored entry (row r, column c) is an edge c -> r in the adj[v, u] convention.
    return edges_to_adjacency(coo.col, coo.row, coo.shape[0], symmetrize=symmetrize)


def require_edges(adj: sp.csr_matrix, where: str | Path) -> None:
    """Reject graphs without vertices or edges: nothing to partition or aggregate."""
    if adj.shape[0] == 0:
        raise InputError("graph has no vertices", path=where)
    if adj.nnz == 0:
        raise InputError("graph has no edges (after dropping self loops)", path=where)
