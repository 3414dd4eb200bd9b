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

from distgcn.data._int_scan import NONE, comment_table, scan_block
from distgcn.data._text import BLOCK_BYTES, bad_token, line_blocks
from distgcn.data.adjacency import edges_to_adjacency, remap_ids, require_edges
from distgcn.data.graph import Graph
from distgcn.errors import InputError
from distgcn.io import limits

COMMENT = comment_table(b"#%")
WHAT = "an integer vertex id"
PAIR_BYTES = 32
"""Each edge's two int64 ids, held once as read and once joined into one array."""


def load_snap(path: Path, *, symmetrize: bool = False, name: str | None = None) -> Graph:
    """Read an edge list file into a Graph without features."""
    src, dst = read_edge_ids(path)
    vertex_ids, (src, dst) = remap_ids(src, dst)
    adj = edges_to_adjacency(src, dst, len(vertex_ids), symmetrize=symmetrize)
    require_edges(adj, path)
    return Graph(adj=adj, vertex_ids=vertex_ids, name=name or file_stem(path))


def read_edge_ids(path: Path, *, block_bytes: int = BLOCK_BYTES) -> tuple[np.ndarray, np.ndarray]:
    """The (source, target) id of every edge line, streamed block by block.

    Errors keep the order of checks of a whole-file read: the first bad token
    anywhere wins over a line with the wrong number of ids, which wins over an
    empty file, which wins over a negative id. The edges read so far, with what
    loading makes of each (:data:`PAIR_BYTES`), must fit the memory this node
    had when reading began: else the file is refused at the line reached.
    """
    available = limits.available_bytes(None, 1)
    pairs: list[np.ndarray] = []
    edges = 0
    lines_before = 0
    wrong_count: tuple[int, int] | None = None  # (1-based line, values found)
    negative: tuple[int, int] | None = None  # (1-based line, value)
    for block in line_blocks(path, block_bytes):
        scan = scan_block(block, COMMENT, per_line=2)
        if scan.bad_token_line != NONE:
            number = lines_before + scan.bad_token_line + 1
            raise bad_token(_line_of(block, scan.bad_token_line), path, number, WHAT) or InputError(
                f"expected {WHAT}", path=path, line=number)
        if wrong_count is None and scan.bad_count_line != NONE:
            wrong_count = (lines_before + scan.bad_count_line + 1, scan.bad_count)
        if negative is None and scan.first_negative != NONE:
            negative = (lines_before + scan.first_negative_line + 1, int(scan.values[scan.first_negative]))
        if wrong_count is None:  # once a line is wrong the ids are not pairs, and only an error follows
            pairs.append(scan.values.reshape(-1, 2))
            edges += len(pairs[-1])
        lines_before += scan.num_lines
        limits.check_fits(path, lines_before, f"{edges} edges read up to this line",
                          edges * (PAIR_BYTES + limits.EDGE_BYTES), available=available)
    if wrong_count is not None:
        raise InputError(f"expected 2 vertex ids 'source target', found {wrong_count[1]} values", path=path,
                         line=wrong_count[0])
    if sum(len(p) for p in pairs) == 0:
        raise InputError("no edges found (expected lines 'source target')", path=path)
    if negative is not None:
        raise InputError(f"negative vertex id {negative[1]}", path=path, line=negative[0])
    edges = np.concatenate(pairs)
    return edges[:, 0], edges[:, 1]


def _line_of(block: bytes | bytearray, index: int) -> bytes:
    """Line ``index`` (0-based) of a block."""
    return bytes(block).split(b"\n", index + 1)[index]


def file_stem(path: Path) -> str:
    """The file name without ``.gz`` and its format suffix (``soc-Slashdot0902``)."""
    name = path.name
    if name.endswith(".gz"):
        name = name[:-3]
    return Path(name).stem or name
