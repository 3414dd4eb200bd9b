"""METIS ``.graph`` files: a header ``n m [fmt [ncon]]``, then one adjacency line per vertex.

Line i (1-based, counting only non-comment lines after the header) lists the
1-based neighbours of vertex i; an empty line is an isolated vertex. Lines
starting with ``%`` are comments. ``m`` counts undirected edges, so the lists
must hold exactly 2m entries. The graph is undirected: the adjacency is
symmetrized (A ∪ Aᵀ) even if the lists are not mutually consistent.

Weighted formats (``fmt`` 1, 10, 11, 100, ...: vertex sizes, ``ncon`` vertex
weights, edge weights) are accepted and their weights ignored: the trainer only
needs the structure. Vertex ids are the file's 1-based numbers, so
``vertex_ids`` is 1..n.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from distgcn.data._text import TOKENIZE_BYTES_PER_BYTE, read_bytes, tokenize_ints
from distgcn.data.adjacency import edges_to_adjacency, require_edges
from distgcn.data.graph import Graph
from distgcn.data.snap import file_stem
from distgcn.errors import InputError
from distgcn.io.limits import check_declared_size


def load_metis(path: Path, *, name: str | None = None) -> Graph:
    """Read a METIS graph file into a Graph without features."""
    data = read_bytes(path, bytes_per_byte=TOKENIZE_BYTES_PER_BYTE)
    tokens = tokenize_ints(data, path, comment=b"%", what="an integer")
    per_line = np.bincount(tokens.line, minlength=tokens.num_lines)
    content = np.flatnonzero(per_line > 0)
    if content.size == 0:
        raise InputError("empty file (expected a METIS header 'n m [fmt [ncon]]')", path=path)
    header_line = int(content[0])
    header = tokens.values[tokens.line == header_line]
    n, m, skip, stride = _parse_header(header, path, header_line + 1)

    # Every non-comment line after the header is the adjacency line of the next vertex.
    is_vertex_line = ~tokens.ignored
    is_vertex_line[: header_line + 1] = False
    vertex_lines = np.flatnonzero(is_vertex_line)
    if len(vertex_lines) < n:
        raise InputError(
            f"header says {n} vertices but only {len(vertex_lines)} adjacency lines follow",
            path=path,
            line=tokens.num_lines,
        )
    extra = vertex_lines[n:][per_line[vertex_lines[n:]] > 0]
    if extra.size:
        raise InputError(f"more adjacency lines than the {n} vertices in the header", path=path, line=int(extra[0]) + 1)
    vertex_lines = vertex_lines[:n]
    # n now fits the file's lines; m must fit its bytes (each edge listed twice, an id and a separator 2 bytes
    # each) and both the memory, before any array of their size exists
    check_declared_size(path, header_line + 1, f"header declares {n} vertices and {m} edges", vertices=n,
                        entries=2 * m, min_file_bytes=n + 4 * m, file_bytes=len(data))

    vertex_of_line = np.full(tokens.num_lines, -1, dtype=np.int64)
    vertex_of_line[vertex_lines] = np.arange(n)
    body = tokens.line > header_line
    owner = vertex_of_line[tokens.line[body]]
    values = tokens.values[body]
    keep = owner >= 0  # tokens on blank padding lines beyond n cannot exist (checked above)
    owner, values = owner[keep], values[keep]

    counts = np.bincount(owner, minlength=n)
    bad = np.flatnonzero((counts < skip) | ((counts - skip) % stride != 0))
    if bad.size:
        v = int(bad[0])
        layout = "neighbour ids" if stride == 1 else "(neighbour, weight) pairs"
        if skip:
            layout = f"{skip} vertex size/weight values, then {layout}"
        raise InputError(
            f"vertex {v + 1}: expected {layout}, found {counts[v]} values", path=path, line=int(vertex_lines[v]) + 1
        )
    line_start = np.concatenate(([0], np.cumsum(counts)[:-1]))
    position = np.arange(len(values)) - line_start[owner]
    is_neighbour = (position >= skip) & ((position - skip) % stride == 0)
    neighbours = values[is_neighbour]
    owner = owner[is_neighbour]

    out_of_range = (neighbours < 1) | (neighbours > n)
    if out_of_range.any():
        k = int(np.argmax(out_of_range))
        raise InputError(
            f"neighbour id {neighbours[k]} of vertex {owner[k] + 1} is outside 1..{n}",
            path=path,
            line=int(vertex_lines[owner[k]]) + 1,
        )
    if len(neighbours) != 2 * m:
        raise InputError(
            f"header says {m} edges, so the adjacency lists should hold {2 * m} entries, "
            f"but they hold {len(neighbours)}",
            path=path,
            line=header_line + 1,
        )
    adj = edges_to_adjacency(neighbours - 1, owner, n, symmetrize=True)
    require_edges(adj, path)
    return Graph(adj=adj, vertex_ids=np.arange(1, n + 1, dtype=np.int64), name=name or file_stem(path))


def _parse_header(header: np.ndarray, path: Path, line: int) -> tuple[int, int, int, int]:
    """(n, m, values to skip at the start of each line, values per neighbour)."""
    if not 2 <= len(header) <= 4:
        raise InputError(
            f"expected a METIS header 'n m [fmt [ncon]]', found {len(header)} values", path=path, line=line
        )
    n, m = int(header[0]), int(header[1])
    if n < 0 or m < 0:
        raise InputError(f"vertex and edge counts must be non-negative, found n={n} m={m}", path=path, line=line)
    if n == 0:
        raise InputError("graph has no vertices (header n=0)", path=path, line=line)
    fmt = int(header[2]) if len(header) > 2 else 0
    digits = f"{fmt:03d}"
    if fmt < 0 or len(digits) > 3 or set(digits) - {"0", "1"}:
        raise InputError(
            f"unknown METIS fmt {fmt} (expected up to three 0/1 digits, e.g. 0, 1, 10, 11)", path=path, line=line
        )
    has_sizes, has_vertex_weights, has_edge_weights = (d == "1" for d in digits)
    ncon = int(header[3]) if len(header) > 3 else 1
    if ncon < 1:
        raise InputError(f"ncon must be at least 1, found {ncon}", path=path, line=line)
    if len(header) > 3 and not has_vertex_weights:
        raise InputError(f"ncon={ncon} given but fmt {fmt} has no vertex weights", path=path, line=line)
    skip = int(has_sizes) + (ncon if has_vertex_weights else 0)
    return n, m, skip, 2 if has_edge_weights else 1
