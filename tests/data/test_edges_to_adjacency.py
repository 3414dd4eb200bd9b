"""distgcn.data.adjacency.edges_to_adjacency against scipy's own COO to CSR conversion (the oracle)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from distgcn.data.adjacency import edges_to_adjacency


def scipy_adjacency(src: list[int], dst: list[int], n: int, symmetrize: bool) -> sp.csr_matrix:
    """adj[dst, src] = 1 for every edge that is no self loop (and adj[src, dst] when symmetrizing), repeats once."""
    pairs = {(d, s) for s, d in zip(src, dst) if s != d}
    if symmetrize:
        pairs |= {(s, d) for d, s in pairs}
    rows = [r for r, _ in sorted(pairs)]
    cols = [c for _, c in sorted(pairs)]
    return sp.coo_matrix((np.ones(len(pairs)), (rows, cols)), shape=(n, n)).tocsr()


@st.composite
def edge_lists(draw):
    n = draw(st.integers(1, 9))
    edges = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=4 * n))
    return n, [s for s, _ in edges], [d for _, d in edges], draw(st.booleans())


@settings(max_examples=200, deadline=None)
@given(edge_lists())
def test_edges_to_adjacency_matches_scipy(case):
    """Row pointers, sorted columns and ones, with self loops dropped and repeats merged, empty rows included."""
    n, src, dst, symmetrize = case
    adj = edges_to_adjacency(np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64), n, symmetrize=symmetrize)
    expected = scipy_adjacency(src, dst, n, symmetrize)
    assert adj.shape == (n, n)
    assert adj.indptr.tolist() == expected.indptr.tolist()
    assert adj.indices.tolist() == expected.indices.tolist()
    assert adj.indices.dtype == np.int32 and adj.indptr.dtype == np.int32
    assert adj.data.dtype == np.float64 and np.all(adj.data == 1.0)


def test_edges_to_adjacency_leaves_the_callers_arrays_alone():
    src = np.array([0, 1, 2, 2], dtype=np.int64)
    dst = np.array([1, 2, 2, 0], dtype=np.int64)
    edges_to_adjacency(src, dst, 3, symmetrize=True)
    assert src.tolist() == [0, 1, 2, 2] and dst.tolist() == [1, 2, 2, 0]
