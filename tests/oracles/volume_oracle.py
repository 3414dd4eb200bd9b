"""The communication an SpMM of a 1D row partition needs, counted pair by pair: the oracle that the measured
halo traffic must equal (tests/training/test_training.py, test_models.py, test_torch_transport.py)."""

from __future__ import annotations

import numpy as np


def brute_volume(a_hat, parts: np.ndarray) -> tuple[int, int]:
    """Rows and messages of one SpMM, counted pair by pair: part p needs row u of H once if some row v of p has a
    nonzero in column u owned elsewhere, and one message from each part that owns such a u."""
    coo = a_hat.tocoo()
    pairs = {(int(parts[v]), int(u)) for v, u in zip(coo.row, coo.col) if parts[v] != parts[u]}
    messages = {(p, int(parts[u])) for p, u in pairs}
    return len(pairs), len(messages)
