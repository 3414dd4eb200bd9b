"""Dropout whose mask depends on (seed, epoch, layer, global row, column), not on the partition.

Each rank draws the mask entries of its own rows from a counter-based hash
(SplitMix64's finalizer) keyed by the global row id, so P ranks drop exactly
the entries that one process would: distributed training then equals
single-process training even with dropout on.
"""

from __future__ import annotations

import numpy as np
import torch

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer: a bijective avalanche on uint64 (wraps modulo 2**64)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * _M1
        x = (x ^ (x >> np.uint64(27))) * _M2
        return x ^ (x >> np.uint64(31))


def dropout_key(seed: int, epoch: int, layer: int) -> int:
    """One 64-bit key per (seed, epoch, layer)."""
    with np.errstate(over="ignore"):
        x = np.uint64(seed & 0xFFFFFFFFFFFFFFFF)
        for part in (epoch, layer):
            x = _mix(np.array([x ^ (np.uint64(part) * _GOLDEN)], dtype=np.uint64))[0]
    return int(x)


def _mix_inplace(x: np.ndarray) -> np.ndarray:
    """:func:`_mix` overwriting ``x`` with one scratch buffer: no temporary per step (dropout is per epoch)."""
    scratch = np.empty_like(x)
    for shift, multiplier in ((30, _M1), (27, _M2)):
        np.right_shift(x, np.uint64(shift), out=scratch)
        np.bitwise_xor(x, scratch, out=x)
        np.multiply(x, multiplier, out=x)
    np.right_shift(x, np.uint64(31), out=scratch)
    return np.bitwise_xor(x, scratch, out=x)


def keyed_keep_mask(row_ids: np.ndarray, width: int, p: float, key: int) -> np.ndarray:
    """Boolean [rows, width]: True where entry (row_ids[i], j) survives dropout with probability p.

    One 64-bit hash per row and group of four columns gives four 16-bit
    uniforms, so p is applied at a resolution of 2**-16.
    """
    groups = (width + 3) // 4
    with np.errstate(over="ignore"):
        base = np.asarray(row_ids, dtype=np.uint64) * np.uint64(groups) + np.uint64(key) * _GOLDEN
    counter = np.add.outer(base, np.arange(groups, dtype=np.uint64))
    lanes = _mix_inplace(counter).astype("<u8", copy=False).view("<u2")[:, :width]
    return lanes >= np.uint16(min(65535, round(p * 65536)))


def keyed_keep_values(entry_rows: np.ndarray, entry_cols: np.ndarray, width: int, p: float, key: int) -> np.ndarray:
    """:func:`keyed_keep_mask` at the entries (entry_rows[k], entry_cols[k]) of a ``width``-column matrix only.

    Same counter, same 16-bit lane: a sparse input drops exactly the stored
    entries that the dense mask drops.
    """
    groups = (width + 3) // 4
    cols = np.asarray(entry_cols, dtype=np.uint64)
    with np.errstate(over="ignore"):
        counter = (np.asarray(entry_rows, dtype=np.uint64) * np.uint64(groups) + np.uint64(key) * _GOLDEN
                   + (cols >> np.uint64(2)))
    lanes = _mix_inplace(counter) >> ((cols & np.uint64(3)) * np.uint64(16))
    return (lanes & np.uint64(0xFFFF)) >= np.uint64(min(65535, round(p * 65536)))


def keyed_dropout(x: torch.Tensor, row_ids: np.ndarray, p: float, key: int) -> torch.Tensor:
    """Inverted dropout of ``x`` (rows = ``row_ids``) with a partition-independent mask.

    The kept entries' scale is folded into one float mask, so forward and
    backward are one multiplication each (x * keep * scale took two).
    """
    if p <= 0.0:
        return x
    keep = torch.from_numpy(keyed_keep_mask(row_ids, x.shape[1], p, key)).to(x.device)
    return x * keep.to(x.dtype).mul_(1.0 / (1.0 - p))
