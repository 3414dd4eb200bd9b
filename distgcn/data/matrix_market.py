"""Matrix Market ``.mtx`` files (pattern/real/integer, general/symmetric, optionally gzipped).

Parsing is scipy's (``scipy.io.mmread``); its errors are rewrapped as InputError
with the file and line. An entry ``i j`` is read like an edge-list line: an
edge i -> j, so j aggregates from i (``adj[j, i] = 1``). Every stored entry is
an edge whatever its value (for the dense ``array`` layout: every nonzero).
Symmetric files come back symmetric. Vertex ids are the file's 1-based
indices, so ``vertex_ids`` is 1..n.
"""

from __future__ import annotations

import gzip
import io
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse as sp

from distgcn.data._text import BoundedLines, input_errors, open_text
from distgcn.data.adjacency import edges_to_adjacency, require_edges
from distgcn.data.graph import Graph
from distgcn.data.snap import file_stem
from distgcn.errors import InputError
from distgcn.io.limits import check_declared_size

_LINE_PREFIX = re.compile(r"^\s*Line (\d+):\s*")


def load_matrix_market(path: Path, *, symmetrize: bool = False, name: str | None = None) -> Graph:
    """Read a square Matrix Market matrix as the adjacency of a graph without features."""
    _check_banner(path)
    _check_size_line(path)
    try:
        with _source(path) as source:
            matrix = scipy.io.mmread(source)
    except InputError:
        raise
    except Exception as e:  # scipy's parser reports bad input with several exception types
        message = " ".join(str(e).split()) or type(e).__name__
        line = None
        found = _LINE_PREFIX.match(message)
        if found:
            line = int(found.group(1))
            message = message[found.end() :]
        raise InputError(f"invalid Matrix Market file: {message}", path=path, line=line) from None
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        shape = " x ".join(str(s) for s in matrix.shape)
        raise InputError(f"matrix is {shape}; expected a square adjacency matrix", path=path)
    coo = sp.coo_matrix(matrix)
    n = coo.shape[0]
    adj = edges_to_adjacency(coo.row, coo.col, n, symmetrize=symmetrize)
    require_edges(adj, path)
    return Graph(adj=adj, vertex_ids=np.arange(1, n + 1, dtype=np.int64), name=name or file_stem(path))


MAX_DENSE_ENTRIES = 10**8
"""A larger ``array`` (dense) layout would be materialized whole: 800 MB of float64 and more."""


def _check_size_line(path: Path) -> None:
    """Refuse what scipy's reader mishandles before it reads the body.

    scipy 1.17's reader dies of SIGFPE (killing the process, not raising) on
    an ``array`` file with a zero dimension; our fuzz run found it
    (docs/reliability.md). A zero dimension has no edges anyway, and a
    non-square matrix is no adjacency, so both are refused from the header.
    """
    try:
        with _source(path) as source:
            rows, cols, entries, layout, _field, symmetry = scipy.io.mminfo(source)
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001 - scipy reports a bad header with several exception types
        raise InputError(f"invalid Matrix Market header: {' '.join(str(e).split()) or type(e).__name__}",
                         path=path) from None
    if rows != cols:
        raise InputError(f"matrix is {rows} x {cols}; expected a square adjacency matrix", path=path)
    if rows == 0:
        raise InputError("matrix is 0 x 0: no vertices, no edges", path=path)
    if layout == "array" and rows * cols > MAX_DENSE_ENTRIES:
        raise InputError(f"dense 'array' layout of {rows} x {cols} entries (limit {MAX_DENSE_ENTRIES}); "
                         "store a graph this large in the 'coordinate' layout", path=path)
    stored = rows * cols if layout == "array" else entries
    check_declared_size(
        path, _size_line_number(path), f"header declares {rows} vertices and {stored} entries", vertices=rows,
        entries=stored * (1 if symmetry == "general" else 2),
        min_file_bytes=stored * (MIN_ARRAY_ENTRY_BYTES if layout == "array" else MIN_ENTRY_BYTES),
        file_bytes=None if path.name.endswith(".gz") else path.stat().st_size)


MIN_ENTRY_BYTES = 4
"""The shortest coordinate entry line: ``i j`` and a newline."""
MIN_ARRAY_ENTRY_BYTES = 2
"""The shortest dense entry line: one digit and a newline."""


@contextmanager
def _source(path: Path) -> Iterator[str | BoundedLines]:
    """What scipy's reader reads: a plain file by its name (its own fast reader, in parallel); a compressed
    one through :class:`BoundedLines`, so that a line without end is refused before it fills the memory."""
    if not path.name.endswith(".gz"):
        yield str(path)
        return
    with input_errors(path), BoundedLines(open_text(path), path) as stream:
        try:
            yield stream
        except Exception:
            if stream.error is not None:  # ours, whatever scipy made of it
                raise stream.error from None
            raise


def _size_line_number(path: Path) -> int | None:
    """The 1-based line of the size line: the first after the banner that is not a comment."""
    with input_errors(path), io.BufferedReader(BoundedLines(open_text(path), path)) as f:
        for number, line in enumerate(f, start=1):
            if number > 1 and not line.startswith(b"%") and line.strip():
                return number
    return None


def _check_banner(path: Path) -> None:
    """Fail early and clearly when the first line is not a Matrix Market banner."""
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            first = f.readline(200)
    except FileNotFoundError:
        raise InputError("file not found", path=path) from None
    except (OSError, EOFError) as e:
        raise InputError(f"cannot read file ({e})", path=path) from None
    if not first.lower().startswith(b"%%matrixmarket"):
        raise InputError("expected a Matrix Market banner '%%MatrixMarket matrix ...'", path=path, line=1)
