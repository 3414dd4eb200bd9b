"""Hypothesis strategies shared by several test files."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from hypothesis import strategies as st

from distgcn.data.graph import normalized_adjacency


@st.composite
def directed_a_hat(draw, max_n: int = 25, edges_per_vertex: int = 4) -> sp.csr_matrix:
    """Â of a random directed graph (2 <= n <= max_n), possibly with isolated vertices and sources."""
    n = draw(st.integers(2, max_n))
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), min_size=1,
                          max_size=edges_per_vertex * n))
    src = np.array([p[0] for p in pairs])
    dst = np.array([p[1] for p in pairs])
    keep = src != dst
    adj = sp.csr_matrix((np.ones(keep.sum()), (dst[keep], src[keep])), shape=(n, n))
    adj.data[:] = 1.0
    return normalized_adjacency(adj)
