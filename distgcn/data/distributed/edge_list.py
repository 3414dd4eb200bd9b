"""An edge list (SNAP text: ``source target`` per line) read in P byte ranges at once.

A line belongs to the rank whose nominal range ``[size·r/P, size·(r+1)/P)``
holds its first byte, so each rank starts at the first line that begins in its
range and reads through the line that begins last in it: no rank reads
another's lines, and none is read twice. Comments, ids and errors follow
:mod:`distgcn.data.snap`; an error names the line as one process would (each
rank's line count is shared first), and of several errors every rank raises the
one a single process would have found first. A gzip file is one stream that
cannot be entered in the middle: rank 0 reads it whole, and the other ranks
start with no edges (split it into files beforehand to read it in parallel).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from distgcn.data._int_scan import NONE, scan_block
from distgcn.data._text import BLOCK_BYTES, bad_token, input_errors
from distgcn.data.distributed.ids import Exchanging
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
    if path.name.endswith(".gz"):
        if group.rank == 0:
            outcome: tuple[str, object] = ("ok", None)
            try:
                src, dst = read_edge_ids(path, block_bytes=block_bytes)
            except InputError as e:
                outcome = ("error", str(e))
        else:
            src = dst = np.zeros(0, dtype=np.int64)
            outcome = ("ok", None)
        verdict = group.allgather_object(outcome)[0]
        if verdict[0] == "error":
            raise InputError(str(verdict[1]))
        return src, dst
    pairs, findings = _scan_range(path, *byte_range(path, group.rank, group.size), block_bytes)
    everyone: list[Findings] = group.allgather_object(findings)
    _raise_first_error(path, everyone)
    if not pairs:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    edges = np.concatenate(pairs)
    return edges[:, 0], edges[:, 1]


def _scan_range(path: Path, start: int, stop: int, block_bytes: int) -> tuple[list[np.ndarray], Findings]:
    found = Findings(lines=0, edges=0)
    pairs: list[np.ndarray] = []
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
            if not block:
                continue
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


def _raise_first_error(path: Path, everyone: list[Findings]) -> None:
    """The error one process reading the whole file would raise, if any (snap.read_edge_ids's order of checks)."""
    before = np.concatenate([[0], np.cumsum([f.lines for f in everyone])])
    for r, f in enumerate(everyone):
        if f.bad_token is not None:
            line, text = f.bad_token
            number = int(before[r]) + line + 1
            raise bad_token(text, path, number, WHAT) or InputError(f"expected {WHAT}", path=path, line=number)
    for r, f in enumerate(everyone):
        if f.wrong_count is not None:
            line, count = f.wrong_count
            raise InputError(f"expected 2 vertex ids 'source target', found {count} values", path=path,
                             line=int(before[r]) + line + 1)
    if sum(f.edges for f in everyone) == 0:
        raise InputError("no edges found (expected lines 'source target')", path=path)
    for r, f in enumerate(everyone):
        if f.negative is not None:
            line, value = f.negative
            raise InputError(f"negative vertex id {value}", path=path, line=int(before[r]) + line + 1)

