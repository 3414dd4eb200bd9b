"""One compiled pass over a block of text: whitespace-separated integers, line by line.

The numpy tokenizer of :mod:`distgcn.data._text` makes a dozen full-size
passes (masks, cumulative sums, a search per token) and parses at about
20 MB/s; this kernel reads each byte once and parses at over 100 MB/s on one
core (docs/scale.md, "Reading"). It accepts exactly what the numpy path
accepts (``[+-]?[0-9]+`` tokens of magnitude below ``MAX_ID``, separated by
ASCII whitespace; lines split at ``\\n``; a line whose first byte is a comment
byte holds nothing), and reports problems as 0-based line indices within the
block, so the caller can name the file's line with the same message as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from distgcn.data._text import MAX_ID

NONE = -1
"""A line index the kernel returns when there is no such line."""


@dataclass
class BlockScan:
    """What :func:`scan_block` found in one block of whole lines."""

    values: np.ndarray
    """int64, the integers in file order (up to the first bad token)."""
    num_lines: int
    bad_token_line: int
    """First line holding a token that is not an integer below MAX_ID, or NONE."""
    bad_count_line: int
    """First line holding a number of values other than 0 or ``per_line``, or NONE."""
    bad_count: int
    """How many values that line holds."""
    first_negative: int
    """Index in ``values`` of the first negative value, or NONE."""
    first_negative_line: int


def comment_table(comment: bytes) -> np.ndarray:
    """bool[256]: the bytes that make a line a comment when they start it."""
    table = np.zeros(256, dtype=np.bool_)
    table[list(comment)] = True
    return table


def scan_block(block: bytes | bytearray | memoryview, comment: np.ndarray, per_line: int = 0) -> BlockScan:
    """Scan a block that starts at the start of a line; ``per_line`` 0 accepts any count per line."""
    if len(block) and block[-1] != ord("\n"):
        block = bytes(block) + b"\n"  # the kernel stops at newlines only: one ends every block
    buf = np.frombuffer(memoryview(block).toreadonly(), dtype=np.uint8)  # one type, so one compiled kernel
    # A value and its separator take two bytes or more. Pages of the array that are never written are never
    # backed by memory, so the unused tail costs nothing and the values need no copy.
    values = np.empty(buf.size // 2 + 1, dtype=np.int64)
    found = _compiled()(buf, comment, per_line, values)
    count, num_lines, bad_token, bad_line, bad_count, negative, negative_line = found
    return BlockScan(values[:count], num_lines, bad_token, bad_line, bad_count, negative, negative_line)


@cache
def _compiled():
    import numba  # imported on first use, like csr_kernel: the first call in a process compiles or loads it

    limit = np.int64(MAX_ID)
    before_last_digit = np.int64(MAX_ID // 10 + 1)  # below this, v * 10 + 9 cannot overflow int64

    @numba.njit(nogil=True, cache=True)
    def is_space(c):
        return c == 32 or (9 <= c <= 13)  # ' ', \t \n \v \f \r: what bytes.split() splits at

    @numba.njit(nogil=True, cache=True)
    def checked_value(buf, i):
        """(value, usable) of the digits from ``i`` to the next space, with overflow checked at each digit."""
        value = np.int64(0)
        usable = True
        while not is_space(buf[i]):
            if 48 <= buf[i] <= 57 and value < before_last_digit:
                value = value * 10 + (buf[i] - 48)
                usable = usable and value < limit
            else:
                usable = False
            i += 1
        return value, usable

    @numba.njit(nogil=True, cache=True)
    def scan(buf, comment, per_line, values):
        """The loops test no bounds: ``buf`` ends with a newline, which stops each of them."""
        n = buf.size
        count = 0
        line = 0
        i = 0
        bad_line = NONE
        bad_count = 0
        negative = NONE
        negative_line = NONE
        while i < n:
            if comment[buf[i]]:
                while buf[i] != 10:
                    i += 1
                i += 1
                line += 1
                continue
            on_line = 0
            while buf[i] != 10:
                if is_space(buf[i]):
                    i += 1
                    continue
                minus = buf[i] == 45
                if buf[i] == 43 or buf[i] == 45:  # '+' or '-'
                    i += 1
                start = i
                value = np.int64(0)
                while 0 <= np.int64(buf[i]) - 48 <= 9:  # up to 18 digits cannot overflow; longer are checked below
                    value = value * 10 + (np.int64(buf[i]) - 48)
                    i += 1
                usable = i > start and is_space(buf[i])
                if usable and i - start > 18:
                    value, usable = checked_value(buf, start)
                if not usable:
                    return count, line + 1, line, bad_line, bad_count, negative, negative_line
                if minus and value != 0:
                    if negative == NONE:
                        negative = count
                        negative_line = line
                    value = -value
                values[count] = value
                count += 1
                on_line += 1
            if per_line and on_line != 0 and on_line != per_line and bad_line == NONE:
                bad_line = line
                bad_count = on_line
            i += 1
            line += 1
        return count, line, NONE, bad_line, bad_count, negative, negative_line

    return scan
