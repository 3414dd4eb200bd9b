"""Fast integer parsing of text graph files, with line-accurate errors.

Edge lists and adjacency lists can hold tens of millions of integers, so the
whole file is parsed at once with numpy. Only when that fast path finds
something it cannot read does a slow line-by-line scan run, to name the first
bad line in the error message.
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from distgcn.errors import InputError, quoted
from distgcn.io import limits

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


MAX_LINE_BYTES = BLOCK_BYTES
"""The longest line the line-by-line readers take. Their lines are an edge or a row of numbers; a longer one
would be held whole before it could be parsed, and a line of a gigabyte of spaces compresses to a megabyte."""
TOKENIZE_BYTES_PER_BYTE = 4
"""What :func:`tokenize_ints` holds per byte of text at least, whatever the text: the text, two boolean masks
of its length and the copy numpy's parser reads."""


def read_bytes(path: Path, *, bytes_per_byte: int = 1) -> bytes | bytearray:
    """The whole file, gunzipped when its name ends in ``.gz``; OS errors become InputError.

    The caller's parser needs at least ``bytes_per_byte`` bytes of memory per byte of text (the text
    itself: 1). A file whose text cannot fit this node's available memory on that count is refused before
    it is read, and a compressed one as soon as what it has decompressed to cannot: a small ``.gz`` can
    hold gigabytes.
    """
    available = limits.available_bytes(None, 1)
    limit = None if available is None else available // bytes_per_byte
    with input_errors(path):
        if not path.name.endswith(".gz"):
            size = path.stat().st_size
            if limit is not None and size > limit:
                limits.check_fits(path, None, f"file of {size} bytes", size * bytes_per_byte,
                                  available=available, doing="reading it")
            return path.read_bytes()
        data = bytearray()
        with gzip.open(path, "rb") as f:
            while chunk := f.read(BLOCK_BYTES):
                if limit is not None and len(data) + len(chunk) > limit:
                    total = len(data) + len(chunk)
                    limits.check_fits(path, None, f"decompresses to more than {total} bytes (read so far)",
                                      total * bytes_per_byte, available=available, doing="reading it")
                data += chunk
        return data


def open_text(path: Path) -> BinaryIO:
    """``path`` opened for reading bytes, gunzipped as it is read when its name ends in ``.gz``."""
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


class BoundedLines(io.RawIOBase):
    """A binary stream that passes the bytes of another on, counting lines, and refuses a line longer than
    ``max_line_bytes`` with an InputError naming the file and line as soon as that much of it has been read.

    For readers that take a stream (scipy's Matrix Market reader): the error is raised from ``readinto``,
    and kept in :attr:`error` in case the reader wraps it in one of its own.
    """

    def __init__(self, raw: BinaryIO, path: Path, max_line_bytes: int = MAX_LINE_BYTES):
        super().__init__()
        self.raw, self.path, self.max_line_bytes = raw, path, max_line_bytes
        self.lines = 0
        """Newlines read so far."""
        self.line_bytes = 0
        """Bytes read since the last newline."""
        self.error: InputError | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.raw.read(len(buffer))
        buffer[: len(data)] = data
        newline = data.rfind(b"\n")
        if newline < 0:
            self.line_bytes += len(data)
            if self.line_bytes > self.max_line_bytes:
                self.error = long_line(self.path, self.lines + 1, self.max_line_bytes)
                raise self.error
        else:
            self.lines += data.count(b"\n")
            self.line_bytes = len(data) - newline - 1
        return len(data)

    def close(self) -> None:
        self.raw.close()
        super().close()


def long_line(path: Path, line: int, max_line_bytes: int) -> InputError:
    """The error for a line of more than ``max_line_bytes``."""
    size = f"{max_line_bytes >> 20} MiB" if max_line_bytes % (1 << 20) == 0 else f"{max_line_bytes} bytes"
    return InputError(f"line longer than {size} (expected lines of text)", path=path, line=line)


def line_blocks(path: Path, block_bytes: int = BLOCK_BYTES,
                max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[bytes | bytearray]:
    """The file (gunzipped as it is read when named ``.gz``) in blocks of whole lines.

    Each block but the last ends with a newline, so a line never straddles two
    blocks; a block is about ``block_bytes`` long (longer when one line is), so
    a compressed file is never held decompressed in memory at once. A line is
    refused once more than ``max_line_bytes`` of it have been read without its
    end (:data:`MAX_LINE_BYTES`). OS and gzip errors become InputError, as in
    :func:`read_bytes`.
    """
    with input_errors(path), open_text(path) as f:
        pending = bytearray()
        lines = 0  # newlines in the blocks yielded so far
        while block := f.read(block_bytes):
            cut = block.rfind(b"\n") + 1
            if cut == 0:
                pending += block
                if len(pending) > max_line_bytes:
                    raise long_line(path, lines + 1, max_line_bytes)
                continue
            lines += block.count(b"\n")
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
        if error := token_error(token, path, number, what):
            return error
    return None


def token_error(token: bytes, path: Path, number: int | None, what: str) -> InputError | None:
    """The error for ``token`` if it is not an integer of magnitude below :data:`MAX_ID`, else None.

    The digits are counted before Python converts them: it refuses to convert more than 4300.
    """
    if not _INTEGER.fullmatch(token):
        return InputError(f"expected {what}, found {quoted(token)}", path=path, line=number)
    if len(token.lstrip(b"+-").lstrip(b"0")) > len(str(MAX_ID)) or abs(int(token)) >= MAX_ID:
        return InputError(f"integer {quoted(token)} is too large (limit 2**62)", path=path, line=number)
    return None


def parse_int(token: str | bytes, path: Path, number: int | None, what: str) -> int:
    """``token`` (surrounding whitespace ignored) as an int, or the InputError of :func:`token_error`."""
    raw = (token.encode("utf-8", errors="replace") if isinstance(token, str) else bytes(token)).strip()
    if error := token_error(raw, path, number, what):
        raise error
    return int(raw)
