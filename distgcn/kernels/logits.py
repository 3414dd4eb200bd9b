"""The loss and the predictions from a CPU rank's logits, each in one compiled pass over them.

torch ran them as several passes of its own, each over few columns (a GCN's
logits have as many as there are classes), and they scaled poorly with
threads (Slashdot's 82,168 rows of 8 classes, one thread: ``argmax`` 4.2 ms
with torch, 0.9 ms here; ``benchmarks/logits_passes.py``). Each row is computed alone
(:mod:`distgcn.kernels.logits_loops`), so the results do not depend on the number of
threads. Other devices and dtypes keep torch's operations (the callers).
"""

from __future__ import annotations

import numpy as np
import torch

from distgcn.runtime.threads import follow_torch_threads


def _loops():
    """The compiled loops, imported on first use like the other kernels (numba's import costs ~1 s)."""
    from distgcn.kernels import logits_loops

    return logits_loops


def compiled(logits: torch.Tensor) -> bool:
    """Whether ``logits`` take the compiled passes (CPU, float32 or float64, 2D)."""
    return logits.device.type == "cpu" and logits.dtype in (torch.float32, torch.float64) and logits.dim() == 2


def _positions(rows: torch.Tensor | None) -> tuple[np.ndarray, bool]:
    return (np.empty(0, dtype=np.int64), False) if rows is None else (rows.numpy().astype(np.int64, copy=False), True)


def cross_entropies(logits: torch.Tensor, labels: torch.Tensor,
                    rows: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(each row's log Σ exp(z) − z[label], softmax(z) − onehot(label)) for the rows z of ``logits`` at positions
    ``rows`` (all rows if None), one label each."""
    array = logits.detach().contiguous().numpy()
    picked = array.shape[0] if rows is None else rows.shape[0]
    classes = array.shape[1]
    label_array = labels.numpy().astype(np.int64, copy=False)
    if label_array.shape != (picked,):
        raise ValueError(f"cross_entropies: {label_array.shape[0]} labels for {picked} rows of logits")
    if picked and (label_array.min() < 0 or label_array.max() >= classes):
        raise IndexError(f"cross_entropies: labels must lie in [0, {classes}), got {label_array.min()} to "
                         f"{label_array.max()}")
    positions, use_rows = _positions(rows)
    if use_rows and picked and (positions.min() < 0 or positions.max() >= array.shape[0]):
        raise IndexError(f"cross_entropies: rows must lie in [0, {array.shape[0]})")
    losses = np.empty(picked, dtype=array.dtype)
    gradient = np.empty((picked, classes), dtype=array.dtype)
    follow_torch_threads()
    _loops().cross_entropies(array, positions, use_rows, label_array, losses, gradient)
    return torch.from_numpy(losses), torch.from_numpy(gradient)


def scatter_scaled_rows(values: torch.Tensor, scales: torch.Tensor, rows: torch.Tensor | None,
                        out: torch.Tensor) -> torch.Tensor:
    """out = 0, then row rows[k] of out (row k if rows is None) = values[k] · scales[k]; rows distinct."""
    positions, use_rows = _positions(rows)
    follow_torch_threads()
    _loops().scatter_scaled_rows(values.numpy(), scales.contiguous().numpy(), positions, use_rows, out.numpy())
    return out


def predicted_classes(logits: torch.Tensor) -> torch.Tensor:
    """``logits.argmax(dim=1)``: the first largest column of each row (a NaN counts as the largest)."""
    if not compiled(logits) or logits.shape[1] == 0:
        return logits.argmax(dim=1)
    out = np.empty(logits.shape[0], dtype=np.int64)
    follow_torch_threads()
    _loops().row_argmax(logits.detach().contiguous().numpy(), out)
    return torch.from_numpy(out)


def compile_now(dtype: np.dtype) -> None:
    """Compile (or load from numba's cache) the passes for ``dtype`` on tiny arrays, before a rank's shard is loaded
    (as :func:`distgcn.kernels.dropout.compile_now`, for the same reason)."""
    logits = torch.zeros((2, 2), dtype=torch.from_numpy(np.empty(0, dtype=dtype)).dtype)
    labels = torch.zeros(1, dtype=torch.int64)
    for rows in (None, torch.zeros(1, dtype=torch.int64)):
        _, gradient = cross_entropies(logits[:1] if rows is None else logits, labels, rows)
        scatter_scaled_rows(gradient, torch.ones(1, dtype=logits.dtype), rows, torch.empty_like(logits))
    predicted_classes(logits)
