"""Seeded random training data and splits, for graphs that come without them.

Structure-only graphs (SNAP, Matrix Market, METIS, R-MAT) carry no features or
labels; benchmarking training on them still needs some, so they are drawn from
``numpy.random.default_rng(seed)`` and are the same for the same seed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from distgcn.errors import InputError
from distgcn.io.limits import check_fits

if TYPE_CHECKING:
    from distgcn.data.graph import Graph

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


def check_random_training_data(n: int, num_features: int, num_classes: int, where: str | Path,
                               rows: int | None = None) -> None:
    """Refuse, before drawing anything, random training data that cannot be right for the ``n`` vertices of
    the graph ``where``: more classes than vertices (a label would be out of range), or features that cannot
    fit this node's memory (``rows`` of them: a rank's share; None: all n). The messages name the flags, since
    the numbers are the user's, not the file's."""
    if num_classes > max(n, 2):
        raise InputError(f"--classes {num_classes} is more than the {n} vertices of {where}: random labels "
                         f"need at most one class per vertex (give --classes {max(n, 2)} or fewer)")
    held = n if rows is None else rows
    check_fits(None, None, f"--features {num_features} on the {held} vertices of {where} ({held} x {num_features} "
               "float32 random features)", held * num_features * np.dtype(np.float32).itemsize + n * (8 + 3))


def feature_matrix(values: np.ndarray, name: str, path: str | Path | None, rows: int | None = None, *,
                   column: str = "feature") -> np.ndarray:
    """A feature array read from a file, checked by :func:`check_feature_matrix`, as float32 [rows, F]."""
    check_feature_matrix(values, name, path, rows, column=column)
    return np.ascontiguousarray(values, dtype=np.float32)


def check_feature_matrix(values: np.ndarray, name: str, path: str | Path | None, rows: int | None = None, *,
                         column: str = "feature") -> None:
    """Refuse a feature array that training would read as something else than it holds: another shape, a
    type that is not real numbers (complex values would lose their imaginary part, booleans and strings are
    no features), or no column at all (the model would train at chance, as it would with ``--features 0``,
    which is refused). ``name`` and ``path`` say which array of which file; ``column`` what a column is."""
    shape = "[n, F]" if rows is None else f"[{rows}, F]"
    if values.ndim != 2 or (rows is not None and values.shape[0] != rows):
        raise InputError(f"{name} must be a numeric {shape} array, found {values.dtype} {values.shape}", path=path)
    if np.iscomplexobj(values):
        raise InputError(f"{name} holds complex numbers ({values.dtype}): expected real numbers (the imaginary "
                         "part would be dropped)", path=path)
    if not real_numbers(values):
        raise InputError(f"{name} must be a numeric {shape} array of real numbers, found {values.dtype}", path=path)
    if values.shape[1] == 0:
        raise InputError(f"{name} has 0 columns: expected at least one {column} per vertex", path=path)


def real_numbers(values: np.ndarray) -> bool:
    """Whether an array holds integers or floats: not complex numbers (converting them drops the imaginary
    part), booleans, strings or objects."""
    return np.issubdtype(values.dtype, np.integer) or np.issubdtype(values.dtype, np.floating)


TRAINING_ARRAYS = ("features", "labels", "train_mask")
"""What training needs of a graph; ``val_mask`` and ``test_mask`` are optional (no evaluation without them)."""
_TO_ADD = {"features": "features (a [{n}, F] array of numbers)",
           "labels": "labels ({n} class numbers, -1 where unknown)",
           "train_mask": "train_mask ({n} booleans marking the vertices to train on; val_mask and test_mask "
                         "the same way, to evaluate)"}


def training_data_parts(graph: Graph) -> tuple[list[str], list[str]]:
    """(what of :data:`TRAINING_ARRAYS`, val_mask and test_mask the graph has; what of TRAINING_ARRAYS it lacks)."""
    have = [key for key in (*TRAINING_ARRAYS, "val_mask", "test_mask") if getattr(graph, key) is not None]
    return have, [key for key in TRAINING_ARRAYS if getattr(graph, key) is None]


def how_to_add(lack: list[str], n: int) -> str:
    """What to add to a graph's file for each array of ``lack``, for a message."""
    return ", ".join(_TO_ADD[key].format(n=n) for key in lack)


def words(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
