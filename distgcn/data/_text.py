"""Fast integer parsing of text graph files, with line-accurate errors.

Edge lists and adjacency lists can hold tens of millions of integers, so the
whole file is parsed at once with numpy. Only when that fast path finds
something it cannot read does a slow line-by-line scan run, to name the first
bad line in the error message.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from distgcn.errors import InputError

MAX_ID = 2**62
"""Integers at or beyond this magnitude are rejected: ids are combined as row * n + col."""

_WHITESPACE = b" \t\n\r\x0b\x0c"
_IS_SPACE = np.zeros(256, dtype=bool)
_IS_SPACE[list(_WHITESPACE)] = True
_IS_DIGIT = np.zeros(256, dtype=bool)
_IS_DIGIT[list(b"0123456789")] = True
_IS_ALLOWED = _IS_SPACE | _IS_DIGIT
_IS_ALLOWED[list(b"+-")] = True
_INTEGER = re.compile(rb"[+-]?[0-9]+")
BLOCK_BYTES = 16 << 20
"""16 MiB: large enough that per-block overhead is invisible, small beside the arrays being built."""


def read_bytes(path: Path) -> bytes:
    """The whole file, gunzipped when its name ends in ``.gz``; OS errors become InputError."""
    with input_errors(path):
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()


def line_blocks(path: Path, block_bytes: int = BLOCK_BYTES) -> Iterator[bytes | bytearray]:
    """The file (gunzipped as it is read when named ``.gz``) in blocks of whole lines.

    Each block but the last ends with a newline, so a line never straddles two
    blocks; a block is about ``block_bytes`` long (longer when one line is), so
    a compressed file is never held decompressed in memory at once. OS and
    gzip errors become InputError, as in :func:`read_bytes`.
    """
    with input_errors(path), (gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")) as f:
        pending = bytearray()
        while block := f.read(block_bytes):
            cut = block.rfind(b"\n") + 1
            if cut == 0:
                pending += block
                continue
            if pending:
                pending += memoryview(block)[:cut]
                yield pending
            else:
                yield block[:cut] if cut < len(block) else block
            pending = bytearray(memoryview(block)[cut:])
        if pending:
            yield pending


@contextmanager
def input_errors(path: Path) -> Iterator[None]:
    """Turn the OS and gzip errors of reading ``path`` into InputError naming it."""
    try:
        yield
    except FileNotFoundError:
        raise InputError("file not found", path=path) from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise InputError(f"not a valid gzip file ({e})", path=path) from None
    except OSError as e:
        raise InputError(f"cannot read file ({e.strerror or e})", path=path) from None


def shown(token: bytes, limit: int = 40) -> str:
    """A token as it may appear in a one-line message."""
    text = token.decode("utf-8", errors="replace")
    if len(text) > limit:
        text = text[:limit] + "..."
    return repr(text)


@dataclass
class IntTokens:
    """Every integer of a file, with the line each came from."""

    values: np.ndarray
    """int64, the integers in file order."""
    line: np.ndarray
    """int64, 0-based line index of each value (add 1 for messages)."""
    num_lines: int
    ignored: np.ndarray
    """bool [num_lines]: comment lines (and a skipped header), which hold no values."""


def tokenize_ints(
    data: bytes,
    path: Path,
    *,
    comment: bytes = b"",
    skip_first_line: bool = False,
    what: str = "an integer",
) -> IntTokens:
    """Parse whitespace-separated integers, ignoring lines that start with a byte of ``comment``.

    Raises InputError naming the first line holding something other than an
    integer (``what`` says what was expected there).
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(buf == ord("\n"))
    num_lines = len(newlines) + (1 if data and not data.endswith(b"\n") else 0)
    ignored = np.zeros(num_lines, dtype=bool)
    if skip_first_line and num_lines:
        ignored[0] = True
    if comment and any(c in data for c in comment):
        marks = np.flatnonzero(np.isin(buf, np.frombuffer(comment, dtype=np.uint8)))
        at_line_start = marks == 0
        at_line_start[marks > 0] = buf[marks[marks > 0] - 1] == ord("\n")
        ignored[np.searchsorted(newlines, marks[at_line_start])] = True
    if ignored.any():
        buf = _blank_lines(buf, newlines, np.flatnonzero(ignored))
    tokens = _fast_parse(buf)
    if tokens is None:
        _raise_first_bad_token(data, path, ignored, what)
        raise InputError(f"could not parse the file as whitespace-separated integers ({what})", path=path)
    values, starts = tokens
    return IntTokens(values, np.searchsorted(newlines, starts), num_lines, ignored)


def _blank_lines(buf: np.ndarray, newlines: np.ndarray, lines: np.ndarray) -> np.ndarray:
    """A copy of ``buf`` with the given lines overwritten by spaces (newlines kept)."""
    bounds = np.concatenate(([-1], newlines, [len(buf)]))
    begin = bounds[lines] + 1
    end = bounds[lines + 1]
    step = np.zeros(len(buf) + 1, dtype=np.int8)
    np.add.at(step, begin, 1)
    np.add.at(step, end, -1)
    inside = np.cumsum(step[:-1], dtype=np.int8).astype(bool)
    out = buf.copy()
    out[inside] = ord(" ")
    return out


def _fast_parse(buf: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(values, byte offset of each token), or None when some token is not a plain integer."""
    if not _IS_ALLOWED[buf].all():
        return None
    space = _IS_SPACE[buf]
    token_start = ~space
    token_start[1:] &= space[:-1]
    starts = np.flatnonzero(token_start)
    if starts.size == 0:
        return np.zeros(0, dtype=np.int64), starts
    signs = np.flatnonzero((buf == ord("+")) | (buf == ord("-")))
    if signs.size:
        after = signs + 1
        if after[-1] >= len(buf) or not token_start[signs].all() or not _IS_DIGIT[buf[after]].all():
            return None
    try:
        values = np.fromstring(buf.tobytes(), dtype=np.int64, sep=" ")
    except ValueError:
        return None
    if len(values) != len(starts) or ((values >= MAX_ID) | (values <= -MAX_ID)).any():
        return None
    return values, starts


def _raise_first_bad_token(data: bytes, path: Path, ignored: np.ndarray, what: str) -> None:
    """Scan line by line and raise InputError at the first token that is not a usable integer."""
    for index, line in enumerate(data.split(b"\n")):
        if index < len(ignored) and ignored[index]:
            continue
        if error := bad_token(line, path, index + 1, what):
            raise error


def bad_token(line: bytes, path: Path, number: int, what: str) -> InputError | None:
    """The error for the first token of ``line`` (1-based ``number``) that is not a usable integer, if any."""
    for token in line.split():
        if not _INTEGER.fullmatch(token):
            return InputError(f"expected {what}, found {shown(token)}", path=path, line=number)
        if abs(int(token)) >= MAX_ID:
            return InputError(f"integer {shown(token)} is too large (limit 2**62)", path=path, line=number)
    return None
