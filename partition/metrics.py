"""Exact communication metrics of a 1D row partition of Â.

Model (the distributed SpMM ``Y = Â H`` of the VLDB'23 paper):

* rank ``p`` owns the rows ``{v : parts[v] == p}`` of Â and of H;
* ``Â[v, u] != 0`` means that row ``v`` reads row ``u`` of H;
* when ``parts[u] != parts[v]``, row ``u`` of H travels from its owner
  ``parts[u]`` to ``parts[v]`` -- once per (u, receiving rank) pair, however
  many nonzeros of that rank's rows sit in column ``u``.

Everything here is vectorised over the nonzeros (sorting ``int64`` keys, made
a block of 2^20 nonzeros at a time, and keeping the distinct ones, counting
with ``np.bincount``): no Python loop runs over vertices, nonzeros or pairs of
parts, so P = 512 and 10^7 nonzeros take seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import scipy.sparse as sp

from distgcn.data.adjacency import drop_repeats
from distgcn.errors import InputError

__all__ = ["comm_pairs", "comm_matrix", "partition_metrics", "summarize", "validate_parts"]


# ---------------------------------------------------------------------------
# input checks
# ---------------------------------------------------------------------------


def _as_csr(a) -> sp.csr_matrix:
    """A CSR copy-free view of ``a`` when possible; explicit zeros dropped."""
    if not sp.issparse(a):
        raise InputError(f"expected a scipy sparse matrix, got {type(a).__name__}")
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise InputError(f"the matrix must be square (n x n), got shape {a.shape}")
    a = a.tocsr()
    if not np.all(a.data):  # a stored zero is no nonzero (np.all of no entries is True)
        # A stored zero is not a nonzero: it moves no H row.
        a = a.copy()
        a.eliminate_zeros()
    return a


def validate_parts(parts, n: int, nparts: int | None = None) -> np.ndarray:
    """Check a part vector and return it as int64.

    Raises :class:`InputError` when the length is not ``n``, when an entry is
    not an integer, or when an id lies outside ``[0, nparts)`` (``[0, inf)``
    when ``nparts`` is None).
    """
    parts = np.asarray(parts)
    if parts.ndim != 1:
        raise InputError(f"the part vector must be one-dimensional, got shape {parts.shape}")
    if parts.shape[0] != n:
        raise InputError(f"the part vector has {parts.shape[0]} entries, but the matrix has {n} rows")
    if parts.size and not np.issubdtype(parts.dtype, np.integer):
        if np.issubdtype(parts.dtype, np.floating) and np.all(np.isfinite(parts)) and np.all(parts == np.round(parts)):
            pass
        else:
            raise InputError(f"part ids must be integers, got dtype {parts.dtype}")
    parts = parts.astype(np.int64, copy=False)
    if nparts is not None:
        if int(nparts) < 1:
            raise InputError(f"the number of parts must be at least 1, got {nparts}")
    if parts.size:
        lo = int(parts.min())
        hi = int(parts.max())
        if lo < 0:
            i = int(np.argmax(parts < 0))
            raise InputError(f"part id {int(parts[i])} of vertex {i} is negative")
        if nparts is not None and hi >= nparts:
            i = int(np.argmax(parts >= nparts))
            raise InputError(
                f"part id {int(parts[i])} of vertex {i} is out of range: expected 0 <= id < {nparts}")
    return parts


def _unique(x: np.ndarray) -> np.ndarray:
    """Sorted distinct values of a 1-D integer array (sort + mask: several times
    faster than ``np.unique``, which may hash first and sort afterwards)."""
    if x.size == 0:
        return x.copy()
    s = np.sort(x)
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


BLOCK_NONZEROS = 1 << 20
"""Nonzeros per block of rows when keys are made (:func:`_distinct_keys`): a block's temporaries (some 40 bytes a
nonzero) are small next to the keys themselves, where the whole matrix's at once set the peak memory of a
10^8-nonzero partition."""


def _row_blocks(indptr: np.ndarray) -> Iterator[tuple[int, int]]:
    """Consecutive row ranges [start, stop) of about :data:`BLOCK_NONZEROS` nonzeros each (a longer row alone)."""
    n = indptr.shape[0] - 1
    start = 0
    while start < n:
        stop = int(np.searchsorted(indptr, indptr[start] + BLOCK_NONZEROS, side="right")) - 1
        stop = min(max(stop, start + 1), n)
        yield start, stop
        start = stop


def _distinct_keys(a: sp.csr_matrix, make_keys: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """Sorted distinct int64 keys of ``make_keys(rows, cols)``, called on the (row, column) ids of the
    nonzeros of one block of rows at a time (:func:`_row_blocks`); sorted in place, without a second copy."""
    blocks = []
    for start, stop in _row_blocks(a.indptr):
        rows = np.repeat(np.arange(start, stop, dtype=np.int64), np.diff(a.indptr[start : stop + 1]))
        blocks.append(make_keys(rows, a.indices[a.indptr[start] : a.indptr[stop]].astype(np.int64)))
    keys = np.concatenate(blocks) if blocks else np.empty(0, dtype=np.int64)
    blocks.clear()
    keys.sort()
    return drop_repeats(keys)


# ---------------------------------------------------------------------------
# core: the (u, dest) transfers
# ---------------------------------------------------------------------------


def _pair_keys(a: sp.csr_matrix, parts: np.ndarray, nparts: int) -> tuple[np.ndarray, int]:
    """Sorted unique keys ``(owner * P + dest) * n + u`` of all remote transfers."""
    n = a.shape[0]
    if nparts * nparts * max(n, 1) >= 2**62:
        raise InputError(f"n = {n} and P = {nparts} are too large for 64-bit transfer keys")

    def transfers(rows: np.ndarray, u: np.ndarray) -> np.ndarray:
        dest = parts[rows]  # part of the row (receiver)
        owner = parts[u]
        remote = owner != dest
        return (owner[remote] * nparts + dest[remote]) * n + u[remote]

    return _distinct_keys(a, transfers), n


def comm_pairs(a: sp.spmatrix, parts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(u, dest) for every H row u that must be sent to part dest != parts[u].

    Sorted by ``(parts[u], dest, u)``; each pair appears once.
    """
    a = _as_csr(a)
    parts = validate_parts(parts, a.shape[0])
    nparts = int(parts.max()) + 1 if parts.size else 1
    keys, n = _pair_keys(a, parts, nparts)
    # int64 already; with n = 0 there are no keys, and // 0 of an empty array is empty
    return keys % n, (keys // n) % nparts


def comm_matrix(a: sp.spmatrix, parts: np.ndarray, nparts: int) -> np.ndarray:
    """P x P int64 matrix; entry [i, j] = number of H rows that rank i sends to rank j."""
    a = _as_csr(a)
    parts = validate_parts(parts, a.shape[0], nparts)
    keys, n = _pair_keys(a, parts, int(nparts))
    pair = keys // n
    return np.bincount(pair, minlength=nparts * nparts).astype(np.int64).reshape(nparts, nparts)


# ---------------------------------------------------------------------------
# the hypergraph and graph objectives, computed independently of the pairs
# ---------------------------------------------------------------------------


def connectivity_minus_one(a: sp.spmatrix, parts: np.ndarray, nparts: int) -> int:
    """Column-net cut: sum over columns j of (lambda_j - 1).

    ``lambda_j`` is the number of distinct parts among the rows with a nonzero
    in column ``j``; empty columns contribute nothing. Computed from the
    (column, part) incidences, without reference to the owner of ``j``.
    """
    a = _as_csr(a)
    parts = validate_parts(parts, a.shape[0], nparts)
    if a.nnz == 0:
        return 0
    incid = _distinct_keys(a, lambda rows, col: col * nparts + parts[rows])  # distinct (column, part) pairs
    cols = incid // nparts  # sorted, since incid is
    nonempty_cols = int(np.count_nonzero(cols[1:] != cols[:-1])) + 1
    return int(incid.size - nonempty_cols)


def edge_cut(a: sp.spmatrix, parts: np.ndarray, nparts: int | None = None) -> int:
    """Undirected edges {u, v}, u != v, of the symmetrised pattern with parts[u] != parts[v].

    A self loop is never cut (its ends share a part), so no step removes the diagonal.
    """
    a = _as_csr(a)
    parts = validate_parts(parts, a.shape[0], nparts)
    n = a.shape[0]

    def cut_edges(r: np.ndarray, c: np.ndarray) -> np.ndarray:
        cut = parts[r] != parts[c]
        r, c = r[cut], c[cut]
        return np.minimum(r, c) * n + np.maximum(r, c)

    return int(_distinct_keys(a, cut_edges).size)


# ---------------------------------------------------------------------------
# the summary
# ---------------------------------------------------------------------------


def _stats(per_rank: np.ndarray, nparts: int) -> dict:
    """Sum, mean over the P ranks and maximum of a per-rank count (``per_rank`` has P >= 1 entries)."""
    total = int(per_rank.sum())
    return {"total": total, "avg": total / nparts, "max": int(per_rank.max())}


def partition_metrics(
    a: sp.spmatrix,
    parts: np.ndarray,
    nparts: int,
    weights: np.ndarray | None = None,
) -> dict:
    """JSON-ready summary of the communication a partition causes in one SpMM with ``a``.

    Keys:

    * ``parts``: P;
    * ``volume``: rows of H *sent* per rank (``total``, ``avg`` over P, ``max``);
    * ``max_recv_volume``: most rows received by one rank;
    * ``messages``: messages sent per rank (``total``, ``avg``, ``max``), one
      message per non-empty (sender, receiver) pair;
    * ``max_recv_messages``: most messages received by one rank;
    * ``imbalance``: max part weight / average part weight (weights default to
      the nonzeros per row of ``a``);
    * ``connectivity_minus_one``: the column-net hypergraph cut; equals
      ``volume.total`` when ``a`` has a nonzero diagonal;
    * ``edge_cut``: cut edges of the symmetrised graph without self loops;
    * ``empty_parts``: ids of parts that own no vertex (allowed, but reported);
    * ``part_sizes``: min/max vertices per part.
    """
    a = _as_csr(a)
    n = a.shape[0]
    nparts = int(nparts)
    parts = validate_parts(parts, n, nparts)

    # np.bincount converts the weights to float64 itself.
    if weights is None:
        w = np.diff(a.indptr)
    else:
        w = np.asarray(weights)
        if w.shape != (n,):
            raise InputError(f"weights must have shape ({n},), got {w.shape}")
        if not np.issubdtype(w.dtype, np.number) or np.any(w < 0):
            raise InputError("weights must be non-negative numbers")

    keys, _ = _pair_keys(a, parts, nparts)
    pair = keys // n
    owner = pair // nparts
    dest = pair % nparts
    del keys

    msg_pairs = _unique(pair)
    return summarize(
        nparts, n, int(a.nnz),
        sent=np.bincount(owner, minlength=nparts),
        received=np.bincount(dest, minlength=nparts),
        messages_sent=np.bincount(msg_pairs // nparts, minlength=nparts),
        messages_received=np.bincount(msg_pairs % nparts, minlength=nparts),
        part_weights=np.bincount(parts, weights=w, minlength=nparts),
        part_sizes=np.bincount(parts, minlength=nparts),
        connectivity=connectivity_minus_one(a, parts, nparts),
        cut=edge_cut(a, parts),
    )


def summarize(nparts: int, n: int, nnz: int, *, sent: np.ndarray, received: np.ndarray, messages_sent: np.ndarray,
              messages_received: np.ndarray, part_weights: np.ndarray, part_sizes: np.ndarray, connectivity: int,
              cut: int) -> dict:
    """The summary of :func:`partition_metrics` from per-part counts (each an array of P entries).

    Also called with the counts each rank took of its own shard (``distgcn/shard/rank_shards.py``): one place
    says what the summary holds.
    """
    part_weights = np.asarray(part_weights, dtype=np.float64)
    total_w = float(part_weights.sum())
    imbalance = float(part_weights.max() / (total_w / nparts)) if total_w > 0 else 1.0
    empty = np.flatnonzero(part_sizes == 0)
    return {
        "parts": nparts,
        "vertices": int(n),
        "nonzeros": int(nnz),
        "volume": _stats(sent, nparts),
        "max_recv_volume": int(received.max()),
        "messages": _stats(messages_sent, nparts),
        "max_recv_messages": int(messages_received.max()),
        "imbalance": imbalance,
        "connectivity_minus_one": int(connectivity),
        "edge_cut": int(cut),
        "empty_parts": [int(p) for p in empty],
        "part_sizes": {"min": int(part_sizes.min()), "max": int(part_sizes.max())},
    }
