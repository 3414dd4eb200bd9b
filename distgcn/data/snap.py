"""SNAP-style edge lists: one ``source target`` pair of integer ids per line.

Lines starting with ``#`` or ``%`` are comments; ids are separated by spaces or
tabs; the file may be gzipped. Ids may be any non-negative integers: they are
mapped to 0..n-1 in increasing order and kept in ``Graph.vertex_ids``. A line
``u v`` means v aggregates from u (``adj[v, u] = 1``); the graph stays directed
unless ``symmetrize``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from distgcn.data._text import read_bytes, tokenize_ints
from distgcn.data.adjacency import edges_to_adjacency, remap_ids, require_edges
from distgcn.errors import InputError
from distgcn.graph import Graph


def load_snap(path: Path, *, symmetrize: bool = False, name: str | None = None) -> Graph:
    """Read an edge list file into a Graph without features."""
    tokens = tokenize_ints(read_bytes(path), path, comment=b"#%", what="an integer vertex id")
    per_line = np.bincount(tokens.line, minlength=tokens.num_lines)
    bad = np.flatnonzero((per_line != 0) & (per_line != 2))
    if bad.size:
        line = int(bad[0])
        raise InputError(
            f"expected 2 vertex ids 'source target', found {per_line[line]} values", path=path, line=line + 1
        )
    values = tokens.values
    if values.size == 0:
        raise InputError("no edges found (expected lines 'source target')", path=path)
    negative = values < 0
    if negative.any():
        first = int(np.argmax(negative))
        raise InputError(f"negative vertex id {values[first]}", path=path, line=int(tokens.line[first]) + 1)
    vertex_ids, (src, dst) = remap_ids(values[0::2], values[1::2])
    adj = edges_to_adjacency(src, dst, len(vertex_ids), symmetrize=symmetrize)
    require_edges(adj, path)
    return Graph(adj=adj, vertex_ids=vertex_ids, name=name or file_stem(path))


def file_stem(path: Path) -> str:
    """The file name without ``.gz`` and its format suffix (``soc-Slashdot0902``)."""
    name = path.name
    if name.endswith(".gz"):
        name = name[:-3]
    return Path(name).stem or name
