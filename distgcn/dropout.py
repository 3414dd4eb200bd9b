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


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer: a bijective avalanche on uint64 (wraps modulo 2**64)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def dropout_key(seed: int, epoch: int, layer: int) -> int:
    """One 64-bit key per (seed, epoch, layer)."""
    with np.errstate(over="ignore"):
        x = np.uint64(seed & 0xFFFFFFFFFFFFFFFF)
        for part in (epoch, layer):
            x = _mix(np.array([x ^ (np.uint64(part) * _GOLDEN)], dtype=np.uint64))[0]
    return int(x)


def keyed_keep_mask(row_ids: np.ndarray, width: int, p: float, key: int) -> np.ndarray:
    """Boolean [rows, width]: True where entry (row_ids[i], j) survives dropout with probability p.

    One 64-bit hash per row and group of four columns gives four 16-bit
    uniforms, so p is applied at a resolution of 2**-16.
    """
    groups = (width + 3) // 4
    rows = np.asarray(row_ids, dtype=np.uint64)[:, None]
    cols = np.arange(groups, dtype=np.uint64)[None, :]
    with np.errstate(over="ignore"):
        counter = rows * np.uint64(groups) + cols + np.uint64(key) * _GOLDEN
    lanes = _mix(counter).astype("<u8", copy=False).view("<u2")[:, :width]
    return lanes >= np.uint16(min(65535, round(p * 65536)))


def keyed_dropout(x: torch.Tensor, row_ids: np.ndarray, p: float, key: int) -> torch.Tensor:
    """Inverted dropout of ``x`` (rows = ``row_ids``) with a partition-independent mask."""
    if p <= 0.0:
        return x
    keep = torch.from_numpy(keyed_keep_mask(row_ids, x.shape[1], p, key)).to(x.device)
    return x * keep * (1.0 / (1.0 - p))
