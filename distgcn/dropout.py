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


def keyed_uniform(row_ids: np.ndarray, width: int, key: int) -> np.ndarray:
    """Uniform [0, 1) numbers for entries (row_ids[i], j), j < width, under ``key``."""
    rows = np.asarray(row_ids, dtype=np.uint64)[:, None]
    cols = np.arange(width, dtype=np.uint64)[None, :]
    with np.errstate(over="ignore"):
        counter = rows * np.uint64(width) + cols + np.uint64(key) * _GOLDEN
    bits = _mix(counter) >> np.uint64(11)
    return bits.astype(np.float64) * (1.0 / (1 << 53))


def keyed_dropout(x: torch.Tensor, row_ids: np.ndarray, p: float, key: int) -> torch.Tensor:
    """Inverted dropout of ``x`` (rows = ``row_ids``) with a partition-independent mask."""
    if p <= 0.0:
        return x
    keep = torch.from_numpy(keyed_uniform(row_ids, x.shape[1], key) >= p)
    return x * keep.to(x.dtype) * (1.0 / (1.0 - p))
