"""Write a hypergraph as an hMETIS text file with numpy, for partitioners that read files.

Mt-KaHyPar's Python API takes a hypergraph either as one Python sequence per
net (slow and memory-hungry at 10^8 pins: issue #16) or as a file; this module
writes the file. Format (hMETIS manual, Karypis & Kumar 1998): a header line
``num_nets num_vertices 11`` (11 = weighted nets and vertices), then one line
per net, ``weight pin pin ...`` with 1-based pins, then one line per vertex
holding its weight.

Integers are rendered to ASCII digits by whole-array arithmetic, a bounded
chunk of tokens at a time, so writing costs a few bytes per pin of memory and
no Python loop over nets or pins.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["write_hmetis"]

_CHUNK_TOKENS = 1 << 22  # tokens rendered per write: ~4M, a few tens of MB of scratch
_SPACE, _NEWLINE = ord(" "), ord("\n")


def _digits(values: np.ndarray) -> np.ndarray:
    """Number of decimal digits of each non-negative value (1 for 0)."""
    count = np.ones(values.shape, dtype=np.int64)
    power = 10
    while True:
        more = values >= power
        if not more.any():
            return count
        count += more
        power *= 10


def render_tokens(values: np.ndarray, ends_line: np.ndarray) -> np.ndarray:
    """ASCII bytes of ``values`` (non-negative ints), each followed by a newline where ``ends_line``, else a space."""
    values = np.asarray(values, dtype=np.int64)
    digits = _digits(values)
    ends = np.cumsum(digits + 1)  # one past each token's separator
    out = np.empty(int(ends[-1]) if ends.size else 0, dtype=np.uint8)
    out[ends - 1] = np.where(ends_line, _NEWLINE, _SPACE)
    remaining = values.copy()
    last_digit = ends - 2
    for place in range(int(digits.max()) if digits.size else 0):
        alive = digits > place
        out[last_digit[alive] - place] = ord("0") + remaining[alive] % 10
        remaining //= 10
    return out


def _write_nets(fh, indptr: np.ndarray, pins: np.ndarray, net_weights: np.ndarray) -> None:
    """Lines ``weight pin+1 pin+1 ...``, a chunk of whole nets (at most ~2 * _CHUNK_TOKENS tokens) at a time."""
    num_nets = indptr.shape[0] - 1
    first = 0
    while first < num_nets:
        last = int(np.searchsorted(indptr, indptr[first] + _CHUNK_TOKENS, side="right")) - 1
        last = min(max(last, first + 1), num_nets)
        line_len = np.diff(indptr[first:last + 1]) + 1  # the weight, then the pins
        line_end = np.cumsum(line_len)
        tokens = np.empty(int(line_end[-1]), dtype=np.int64)
        is_pin = np.ones(tokens.shape[0], dtype=bool)
        is_pin[line_end - line_len] = False
        tokens[~is_pin] = net_weights[first:last]
        tokens[is_pin] = pins[indptr[first]:indptr[last]]
        tokens[is_pin] += 1
        ends_line = np.zeros(tokens.shape[0], dtype=bool)
        ends_line[line_end - 1] = True
        fh.write(render_tokens(tokens, ends_line).tobytes())
        first = last


def write_hmetis(path: str | Path, indptr: np.ndarray, pins: np.ndarray, vertex_weights: np.ndarray,
                 net_weights: np.ndarray) -> None:
    """Write nets ``pins[indptr[i]:indptr[i+1]]`` (0-based, every net non-empty) with weights, hMETIS format 11."""
    num_nets = int(indptr.shape[0]) - 1
    n = int(vertex_weights.shape[0])
    with open(path, "wb") as fh:
        fh.write(f"{num_nets} {n} 11\n".encode("ascii"))
        _write_nets(fh, np.asarray(indptr, dtype=np.int64), pins, np.asarray(net_weights, dtype=np.int64))
        for start in range(0, n, _CHUNK_TOKENS):
            chunk = np.asarray(vertex_weights[start:start + _CHUNK_TOKENS], dtype=np.int64)
            fh.write(render_tokens(chunk, np.ones(chunk.shape[0], dtype=bool)).tobytes())
