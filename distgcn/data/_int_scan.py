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
    from distgcn.data._int_scan_kernel import (
        scan,  # imports numba on first use: ~1 s, not paid by other loaders
    )

    if len(block) and block[-1] != ord("\n"):
        block = bytes(block) + b"\n"  # the kernel stops at newlines only: one ends every block
    buf = np.frombuffer(memoryview(block).toreadonly(), dtype=np.uint8)  # one type, so one compiled kernel
    # A value and its separator take two bytes or more. Pages of the array that are never written are never
    # backed by memory, so the unused tail costs nothing and the values need no copy.
    values = np.empty(buf.size // 2 + 1, dtype=np.int64)
    found = scan(buf, comment, per_line, values, NONE, np.int64(MAX_ID))
    count, num_lines, bad_token, bad_line, bad_count, negative, negative_line = found
    return BlockScan(values[:count], num_lines, bad_token, bad_line, bad_count, negative, negative_line)
