"""Vertex weights: what a partition balances across ranks, one integer per row of Â."""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from distgcn.config import VERTEX_WEIGHT, VERTEX_WEIGHTS
from distgcn.errors import InputError

__all__ = ["VERTEX_WEIGHTS", "vertex_weights"]


def vertex_weights(a_hat: sp.spmatrix, scheme: str = VERTEX_WEIGHT) -> np.ndarray:
    """int64 weight of each row under ``scheme``.

    ``nonzeros``: the row's nonzeros (at least 1, so an empty row still
    counts), its share of the SpMM: the paper's weight. ``work``: that plus
    the mean of it over all rows, rounded up. A row also costs work that does
    not grow with its degree (its rows of X·W and of every activation,
    dropout, the loss); on a skewed graph, balancing nonzeros alone gave one
    of two ranks 79% of the rows and left the other waiting (the
    10^6-vertex R-MAT at P = 2; ``benchmarks/bench.py --partition-dir``).
    """
    if scheme not in VERTEX_WEIGHTS:
        raise InputError(f"vertex weight: expected one of {', '.join(VERTEX_WEIGHTS)}, got {scheme!r}")
    a = sp.csr_matrix(a_hat)
    if not np.all(a.data):  # a stored zero is no nonzero (np.all of no entries is True)
        a = a.copy()
        a.eliminate_zeros()
    nonzeros = np.maximum(np.diff(a.indptr), 1).astype(np.int64)
    if scheme == "work" and nonzeros.size:
        nonzeros += math.ceil(nonzeros.mean())
    return nonzeros
