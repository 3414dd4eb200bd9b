"""The matrix the SpMM kernel benchmarks run as scripts from this folder multiply (``python benchmarks/NAME.py``)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee

from distgcn.data import load_graph
from distgcn.graph import normalized_adjacency


def rcm_adjacency(graph: str, symmetrize: bool) -> sp.csr_matrix:
    """Â of ``graph`` in float32, its rows and columns in reverse Cuthill-McKee order (the order #15's roofline
    target names), each row's indices sorted."""
    a = normalized_adjacency(load_graph(graph, symmetrize=symmetrize).adj, dtype=np.float32)
    order = reverse_cuthill_mckee((abs(a) + abs(a.T)).tocsr(), symmetric_mode=True)
    a = a[order][:, order].tocsr()
    a.sort_indices()
    return a
