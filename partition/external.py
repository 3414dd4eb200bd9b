"""Reading a partition computed elsewhere: one part id per vertex, in vertex order.

The file holds non-negative integers separated by any ASCII whitespace
(usually one per line, as METIS and KaHyPar write them). The parser works on
the raw bytes with numpy, so a file with 10^7 ids reads in well under a
second, and every error names the file and the 1-based line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from distgcn.errors import InputError

__all__ = ["external_parts"]

_MAX_DIGITS = 18  # every 18-digit decimal fits into int64


def _line_of(newlines: np.ndarray, offset: int) -> int:
    """1-based line number of byte ``offset`` given the sorted offsets of b'\\n'."""
    return int(np.searchsorted(newlines, offset, side="left")) + 1


def _token_at(data: bytes, offset: int) -> str:
    start = offset
    while start > 0 and not data[start - 1 : start].isspace():
        start -= 1
    end = offset
    while end < len(data) and not data[end : end + 1].isspace():
        end += 1
    text = data[start:end].decode("utf-8", errors="replace")
    return text if len(text) <= 40 else text[:37] + "..."


def external_parts(path: str | Path, n: int, nparts: int) -> np.ndarray:
    """Read ``n`` part ids in ``[0, nparts)`` from ``path``; int64 array.

    Raises :class:`InputError` (naming the file and the line) for an unreadable
    file, a token that is not a non-negative integer, an id outside
    ``[0, nparts)``, or a count other than ``n``.
    """
    path = Path(path)
    if nparts < 1:
        raise InputError(f"the number of parts must be at least 1, got {nparts}")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read the partition file: {e.strerror or e}", path=path) from None

    b = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(b == 0x0A)
    isspace = (b == 0x20) | ((b >= 0x09) & (b <= 0x0D))
    isdigit = (b >= 0x30) & (b <= 0x39)
    issign = (b == 0x2B) | (b == 0x2D)  # '+' or '-'

    bad = ~(isspace | isdigit | issign)
    if bad.any():
        k = int(np.argmax(bad))
        raise InputError(
            f"'{_token_at(data, k)}' is not a part id: expected a non-negative integer",
            path=path, line=_line_of(newlines, k))

    tok = ~isspace
    prev = np.concatenate(([False], tok[:-1]))
    nxt = np.concatenate((tok[1:], [False]))
    starts = np.flatnonzero(tok & ~prev)
    ends = np.flatnonzero(tok & ~nxt) + 1
    count = starts.size

    # A sign may only open a token and must be followed by a digit.
    misplaced = issign & prev
    if misplaced.any():
        k = int(np.argmax(misplaced))
        raise InputError(
            f"'{_token_at(data, k)}' is not a part id: expected a non-negative integer",
            path=path, line=_line_of(newlines, k))
    has_sign = issign[starts]
    lone = has_sign & (ends - starts == 1)
    if lone.any():
        k = int(starts[np.argmax(lone)])
        raise InputError(f"'{_token_at(data, k)}' is not a part id: expected a non-negative integer",
                         path=path, line=_line_of(newlines, k))
    negative = b[starts] == 0x2D
    ndigits = ends - starts - has_sign
    if count > n:
        k = int(starts[n])
        raise InputError(
            f"more part ids than vertices: expected {n} (one per vertex), the extra ids start here",
            path=path, line=_line_of(newlines, k))
    if count < n:
        last = _line_of(newlines, len(data) - 1) if len(data) else 1
        raise InputError(f"found {count} part ids, expected {n} (one per vertex)", path=path, line=last)
    if n == 0:
        return np.zeros(0, dtype=np.int64)

    huge = ndigits > _MAX_DIGITS
    # Values: each digit contributes d * 10^(distance to the end of its token).
    digit_pos = np.flatnonzero(isdigit)
    token_of_digit = np.searchsorted(starts, digit_pos, side="right") - 1
    power = ends[token_of_digit] - 1 - digit_pos
    power = np.minimum(power, _MAX_DIGITS)  # huge tokens are rejected below anyway
    pow10 = 10 ** np.arange(_MAX_DIGITS + 1, dtype=np.int64)
    contrib = (b[digit_pos].astype(np.int64) - 0x30) * pow10[power]
    first_digit = starts + has_sign
    values = np.add.reduceat(contrib, _first_digit_index(digit_pos, first_digit)) if contrib.size else contrib
    values = np.where(negative, -values, values)

    out = huge | (values < 0) | (values >= nparts)
    if out.any():
        i = int(np.argmax(out))
        k = int(starts[i])
        raise InputError(
            f"part id {_token_at(data, k)} of vertex {i} is out of range: expected 0 <= id < {nparts}",
            path=path, line=_line_of(newlines, k))
    return values.astype(np.int64, copy=False)


def _first_digit_index(digit_pos: np.ndarray, first_digit: np.ndarray) -> np.ndarray:
    """Index into ``digit_pos`` of the first digit of each token (both sorted)."""
    return np.searchsorted(digit_pos, first_digit, side="left")
