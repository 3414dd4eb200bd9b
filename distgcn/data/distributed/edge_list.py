"""An edge list (SNAP text: ``source target`` per line) read in P byte ranges at once.

A line belongs to the rank whose nominal range ``[size·r/P, size·(r+1)/P)``
holds its first byte, so each rank starts at the first line that begins in its
range and reads through the line that begins last in it: no rank reads
another's lines, and none is read twice. Comments, ids and errors follow
:mod:`distgcn.data.snap`; an error names the line as one process would (each
rank's line count is shared first), and of several errors every rank raises the
one a single process would have found first. A gzip file is one stream that
cannot be entered in the middle: rank 0 reads it whole, and the other ranks
start with no edges. A directory of edge-list files, plain or gzipped (how large
graphs are usually shipped), is read as the files' concatenation in name order,
each rank reading whole files, about a P-th of the bytes (:func:`read_edge_files`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from distgcn.data._int_scan import NONE, scan_block
from distgcn.data._text import BLOCK_BYTES, bad_token, input_errors, line_blocks
from distgcn.data.adjacency import edges_to_adjacency, remap_ids, require_edges
from distgcn.data.distributed.ids import Exchanging
from distgcn.data.graph import Graph
from distgcn.data.snap import COMMENT, WHAT, read_edge_ids
from distgcn.errors import InputError


@dataclass
class Findings:
    """What one rank's range holds, for choosing the error every rank raises and numbering lines."""

    lines: int
    edges: int
    bad_token: tuple[int, bytes] | None = None
    """(0-based line in the range, the line) of the first token that is not an id."""
    wrong_count: tuple[int, int] | None = None
    """(0-based line in the range, values found) of the first line without exactly two ids."""
    negative: tuple[int, int] | None = None
    """(0-based line in the range, the id)."""


def byte_range(path: Path, rank: int, size: int) -> tuple[int, int]:
    """[start, stop): the bytes of the lines that begin in this rank's nominal range."""
    total = path.stat().st_size
    with input_errors(path), path.open("rb") as f:
        return _line_start(f, total * rank // size, total), _line_start(f, total * (rank + 1) // size, total)


def _line_start(f: BinaryIO, at: int, total: int) -> int:
    """The first position >= ``at`` where a line begins, or ``total`` if none does."""
    if at == 0 or at >= total:
        return min(at, total)
    f.seek(at - 1)  # a line begins at ``at`` exactly when the byte before it ends one
    read = 0
    while chunk := f.read(1 << 16):
        newline = chunk.find(b"\n")
        if newline >= 0:
            return at + read + newline
        read += len(chunk)
    return total


def read_edge_range(group: Exchanging, path: Path, *,
                    block_bytes: int = BLOCK_BYTES) -> tuple[np.ndarray, np.ndarray]:
    """This rank's (source, target) ids, in file order; collective (the ranks agree on errors)."""
    if path.name.endswith(".gz"):  # one process's error, not distgcn.comm.collective.agree's "rank 0: ..."
        src = dst = np.zeros(0, dtype=np.int64)
        error = None
        if group.rank == 0:
            try:
                src, dst = read_edge_ids(path, block_bytes=block_bytes)
            except InputError as e:
                error = str(e)
        if (error := group.allgather_object(error)[0]) is not None:
            raise InputError(error)
        return src, dst
    pairs, findings = _scan_blocks(_range_blocks(path, *byte_range(path, group.rank, group.size), block_bytes))
    everyone: list[Findings] = group.allgather_object(findings)
    before = np.concatenate([[0], np.cumsum([f.lines for f in everyone])]).astype(int).tolist()
    _raise_first_error([(path, before[r], f) for r, f in enumerate(everyone)], path)
    return _as_columns(pairs)


def read_edge_files(group: Exchanging, directory: Path, *,
                    block_bytes: int = BLOCK_BYTES) -> tuple[np.ndarray, np.ndarray]:
    """This rank's (source, target) ids from a directory of edge-list files (plain or gzipped), the way large
    graphs are shipped: read as the files' concatenation in name order, each rank reading whole files, about a
    P-th of the bytes (a file goes to the rank whose nominal range holds its middle byte). An error names the
    file and its line; of several, every rank raises the one that reading the files in order would meet first
    (bad token, then wrong count, then no edges at all, then a negative id). Collective."""
    with input_errors(directory):
        files = sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))
    if not files:
        raise InputError("no edge-list files in this directory", path=directory)
    sizes = np.array([p.stat().st_size for p in files], dtype=np.int64)
    middles = np.cumsum(sizes) - sizes / 2
    owner = np.minimum((middles * group.size / max(int(sizes.sum()), 1)).astype(np.int64), group.size - 1)
    pairs: list[np.ndarray] = []
    mine: list[tuple[int, Findings]] = []
    for k in np.flatnonzero(owner == group.rank):
        found_pairs, found = _scan_blocks(line_blocks(files[k], block_bytes))
        pairs += found_pairs
        mine.append((int(k), found))
    everyone = sorted(entry for ranks in group.allgather_object(mine) for entry in ranks)
    _raise_first_error([(files[k], 0, found) for k, found in everyone], directory)
    return _as_columns(pairs)


def _as_columns(pairs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    if not pairs:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    edges = np.concatenate(pairs)
    return edges[:, 0], edges[:, 1]


def _range_blocks(path: Path, start: int, stop: int, block_bytes: int) -> Iterator[bytes]:
    """Bytes [start, stop) of ``path`` in blocks of whole lines (the last one may lack its newline)."""
    with input_errors(path), path.open("rb") as f:
        f.seek(start)
        left = stop - start
        pending = b""
        while left > 0 or pending:
            chunk = f.read(min(block_bytes, left)) if left > 0 else b""
            left = left - len(chunk) if chunk else 0  # a file cut short while read ends the range
            data = pending + chunk
            cut = data.rfind(b"\n") + 1 if left > 0 else len(data)
            block, pending = data[:cut], data[cut:]
            if block:
                yield block


def _scan_blocks(blocks: Iterable[bytes | bytearray]) -> tuple[list[np.ndarray], Findings]:
    """The id pairs of blocks of whole lines, and what they hold for the errors (snap.read_edge_ids's checks)."""
    found = Findings(lines=0, edges=0)
    pairs: list[np.ndarray] = []
    for block in blocks:
        scan = scan_block(block, COMMENT, per_line=2)
        if found.bad_token is None and scan.bad_token_line != NONE:
            found.bad_token = (found.lines + scan.bad_token_line,
                               bytes(block).split(b"\n", scan.bad_token_line + 1)[scan.bad_token_line])
        if found.wrong_count is None and scan.bad_count_line != NONE:
            found.wrong_count = (found.lines + scan.bad_count_line, scan.bad_count)
        if found.negative is None and scan.first_negative != NONE:
            found.negative = (found.lines + scan.first_negative_line, int(scan.values[scan.first_negative]))
        if found.bad_token is None and found.wrong_count is None:
            pairs.append(scan.values.reshape(-1, 2))
            found.edges += len(pairs[-1])
        found.lines += scan.num_lines
    return pairs, found


def _raise_first_error(parts: list[tuple[Path, int, Findings]], whole: Path) -> None:
    """The error one process reading the parts in order would raise, if any (snap.read_edge_ids's order of
    checks); each part is (its file, the lines of that file before it, what it holds)."""
    for path, before, f in parts:
        if f.bad_token is not None:
            line, text = f.bad_token
            number = before + line + 1
            raise bad_token(text, path, number, WHAT) or InputError(f"expected {WHAT}", path=path, line=number)
    for path, before, f in parts:
        if f.wrong_count is not None:
            line, count = f.wrong_count
            raise InputError(f"expected 2 vertex ids 'source target', found {count} values", path=path,
                             line=before + line + 1)
    if sum(f.edges for _, _, f in parts) == 0:
        raise InputError("no edges found (expected lines 'source target')", path=whole)
    for path, before, f in parts:
        if f.negative is not None:
            line, value = f.negative
            raise InputError(f"negative vertex id {value}", path=path, line=before + line + 1)


class OneProcess:
    """The group of one process, for reading a directory of edge lists without ranks."""

    rank = 0
    size = 1

    def allgather_object(self, value):
        return [value]

    def alltoall_object(self, values):
        return list(values)


def load_edge_directory(directory: Path, *, symmetrize: bool = False) -> Graph:
    """A directory of edge-list files read by one process (:func:`read_edge_files`'s order and errors)."""
    src, dst = read_edge_files(OneProcess(), directory)
    vertex_ids, (src, dst) = remap_ids(src, dst)
    adj = edges_to_adjacency(src, dst, len(vertex_ids), symmetrize=symmetrize)
    require_edges(adj, directory)
    return Graph(adj=adj, vertex_ids=vertex_ids, name=directory.name)
