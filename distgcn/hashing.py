"""The counter-based hash behind every keyed random choice of distgcn.

Dropout masks (:mod:`distgcn.nn.dropout`), distributed minibatches
(:mod:`distgcn.sampling.distributed`) and the stochastic model's merging of
identical nets (:mod:`distgcn.partitioning.stochastic`) need random values that are a
pure function of a key and a counter (a global row, a vertex, a walker id),
not of a generator's state: then a rank computes the values of its own rows
alone, and P ranks see exactly what one process would.

The hash is SplitMix64's output function (Steele, Lea and Flood, OOPSLA 2014;
Vigna's ``splitmix64.c``): for a uint64 ``x``, with arithmetic modulo 2**64,

    z = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB
    mix64(x) = z ^ (z >> 31)

a bijection on uint64 whose every output bit depends on every input bit.
SplitMix64's n-th output from seed s is ``mix64(s + n * GOLDEN)``. Keys and
counters are combined the same way, through multiples of :data:`GOLDEN`.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np

Int64Array = TypeVar("Int64Array")
"""A numpy int64 array or a torch int64 tensor (torch is not imported here: partitioning does not need it)."""

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
"""floor(2**64 / φ), odd: SplitMix64's increment, which spreads consecutive counters and keys apart."""
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_ROUNDS = ((30, _M1), (27, _M2))
"""mix64's xor-shift-multiply rounds; a last xor-shift by :data:`_FINAL_SHIFT` follows them."""
_FINAL_SHIFT = 31


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's output function of each element of the uint64 array ``x`` (a new array)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * _M1
        x = (x ^ (x >> np.uint64(27))) * _M2
        return x ^ (x >> np.uint64(31))


def mix64_inplace(x: np.ndarray) -> np.ndarray:
    """:func:`mix64` overwriting the uint64 array ``x``, with one scratch buffer instead of a temporary per step.

    For the largest hashed arrays (a dropout mask of every owned row, each epoch).
    """
    scratch = np.empty_like(x)
    for shift, multiplier in _ROUNDS:
        np.right_shift(x, np.uint64(shift), out=scratch)
        np.bitwise_xor(x, scratch, out=x)
        np.multiply(x, multiplier, out=x)
    np.right_shift(x, np.uint64(_FINAL_SHIFT), out=scratch)
    return np.bitwise_xor(x, scratch, out=x)


def as_int64(value: int) -> int:
    """The int64 whose bits are those of ``value`` mod 2**64."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >> 63 else value


def mix64_int64_inplace(x: Int64Array) -> Int64Array:
    """:func:`mix64` in place on a signed int64 array or tensor, read as uint64.

    For libraries without uint64 arithmetic on every device (torch on a GPU):
    int64 products wrap as uint64's do, and each right shift is made logical
    by masking off the copied sign bits. Returns ``x``.
    """
    for shift, multiplier in _ROUNDS:
        x ^= (x >> shift) & ((1 << (64 - shift)) - 1)
        x *= as_int64(int(multiplier))
    x ^= (x >> _FINAL_SHIFT) & ((1 << (64 - _FINAL_SHIFT)) - 1)
    return x


def derive_key(seed: int, *parts: int) -> int:
    """A 64-bit key for (seed, parts...): ``k = seed mod 2**64``, then ``k = mix64(k ^ part · GOLDEN)`` per part.

    ``parts`` are non-negative integers below 2**64 (an epoch, a layer, a batch number, a stream id).
    """
    with np.errstate(over="ignore"):
        x = np.uint64(seed & 0xFFFFFFFFFFFFFFFF)
        for part in parts:
            x = mix64(np.array([x ^ (np.uint64(part) * GOLDEN)], dtype=np.uint64))[0]
    return int(x)


def uniforms(key: int, counters: np.ndarray) -> np.ndarray:
    """One float64 uniform in [0, 1) per counter: the top 53 bits of ``mix64(counter + key · GOLDEN)``."""
    with np.errstate(over="ignore"):
        x = mix64(counters.astype(np.uint64) + np.uint64(key) * GOLDEN)
    return (x >> np.uint64(11)).astype(np.float64) * 2.0**-53


def uniforms_tensor(key: int, counters: Int64Array) -> Int64Array:
    """:func:`uniforms` for a torch int64 tensor of counters, on its device: bit for bit the same float64 values.

    The counters are read as uint64 through :func:`mix64_int64_inplace`; the top 53 bits are taken with a logical
    shift (a mask over the copied sign bits), which is exactly what the uint64 form computes.
    """
    x = mix64_int64_inplace(counters.long() + as_int64(key * int(GOLDEN)))  # a new tensor: counters stay as given
    top = (x >> 11) & ((1 << 53) - 1)
    return top.double() * 2.0**-53
