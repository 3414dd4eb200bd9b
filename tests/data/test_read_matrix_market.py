"""Matrix Market coordinate files against a pure-Python reading: every field and symmetry, plain and gzip.

The loader hands the body to scipy's reader (fast_matrix_market); these cases
pin what the graph must be, whatever parses it: an entry ``i j`` is the edge
i -> j (``adj[j-1, i-1] = 1``) whatever its value, a symmetric file also gives
j -> i, self loops are dropped.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from distgcn.data.matrix_market import load_matrix_market


def reference(text: str) -> np.ndarray:
    """The dense adjacency a coordinate file describes."""
    lines = [line for line in text.splitlines()[1:] if line.strip() and not line.startswith("%")]
    symmetric = text.splitlines()[0].split()[-1] == "symmetric"
    n = int(lines[0].split()[0])
    adj = np.zeros((n, n))
    for line in lines[1:]:
        i, j = (int(t) - 1 for t in line.split()[:2])
        adj[j, i] = 1
        if symmetric:
            adj[i, j] = 1
    np.fill_diagonal(adj, 0)
    return adj


CASES = {
    "pattern general": "%%MatrixMarket matrix coordinate pattern general\n% c\n4 4 4\n1 2\n2 3\n4 1\n3 3\n",
    "real general, zero and negative values": "%%MatrixMarket matrix coordinate real general\n3 3 3\n"
                                              "1 2 0.0\n2 3 -1.5e3\n3 1 7\n",
    "integer symmetric": "%%MatrixMarket matrix coordinate integer symmetric\n4 4 3\n2 1 5\n4 2 -1\n3 3 9\n",
    "real symmetric, comments and tabs": "%%MatrixMarket matrix coordinate real symmetric\n%\n% more\n"
                                         "5 5 3\n2\t1\t0.5\n5  3  1\n4 4 1\n",
    "pattern symmetric, ids beyond the first lines": "%%MatrixMarket matrix coordinate pattern symmetric\n"
                                                     "6 6 2\n6 1\n5 2\n",
}


@pytest.mark.parametrize("text", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzip"])
def test_coordinate_files_read_like_the_reference(tmp_path: Path, text: str, gzipped: bool):
    path = tmp_path / ("m.mtx.gz" if gzipped else "m.mtx")
    path.write_bytes(gzip.compress(text.encode()) if gzipped else text.encode())
    graph = load_matrix_market(path)
    np.testing.assert_array_equal(graph.adj.toarray(), reference(text))
    assert graph.vertex_ids.tolist() == list(range(1, graph.num_vertices + 1))
