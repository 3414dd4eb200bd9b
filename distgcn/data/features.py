"""Seeded random training data and splits, for graphs that come without them.

Structure-only graphs (SNAP, Matrix Market, METIS, R-MAT) carry no features or
labels; benchmarking training on them still needs some, so they are drawn from
``numpy.random.default_rng(seed)`` and are the same for the same seed.
"""

from __future__ import annotations

import numpy as np

UNLABELLED_SPLIT = (0.5, 0.25, 0.25)
"""train / val / test fractions for graphs given random labels."""


def split_masks(
    n: int, fractions: tuple[float, float, float], rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint boolean train/val/test masks over a random permutation of the n vertices.

    Each part gets ``floor(fraction * n)`` vertices; any remainder is in no mask.
    """
    order = rng.permutation(n)
    masks = []
    start = 0
    for fraction in fractions:
        count = int(np.floor(fraction * n))
        mask = np.zeros(n, dtype=bool)
        mask[order[start : start + count]] = True
        masks.append(mask)
        start += count
    return masks[0], masks[1], masks[2]


def random_training_data(
    n: int, num_features: int, num_classes: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(features, labels, train, val, test) for n vertices.

    Features are float32 standard normal [n, num_features], labels uniform in
    [0, num_classes), the split is :data:`UNLABELLED_SPLIT`. Drawn in that order
    from one ``default_rng(seed)``.
    """
    rng = np.random.default_rng(seed)
    features = rng.standard_normal((n, num_features), dtype=np.float32)
    labels = rng.integers(0, num_classes, size=n, dtype=np.int64)
    train, val, test = split_masks(n, UNLABELLED_SPLIT, rng)
    return features, labels, train, val, test
