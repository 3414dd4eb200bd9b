"""SplitMix64's output function in Python ints, written from its published formula: the oracle that
distgcn.hashing, the dropout masks and the attention masks are checked against."""

from __future__ import annotations

MASK = (1 << 64) - 1
PHI_INCREMENT = 0x9E3779B97F4A7C15
"""SplitMix64's counter step (the golden ratio in 64 bits)."""


def oracle_mix64(x: int) -> int:
    """SplitMix64's output function on one Python int, every product reduced modulo 2**64 by hand."""
    z = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)
