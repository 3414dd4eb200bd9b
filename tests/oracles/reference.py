"""Single-process GCN in plain PyTorch: the oracle that distributed training must equal.

Deliberately independent of the runtime's SpMM, halo exchange, shards and
trainer: a whole-graph sparse Â, a full-batch loop. It shares only the seeded
weight initialization and the keyed dropout mask, which define *which* model
is trained, not how.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from distgcn.nn.dropout import dropout_key, keyed_dropout
from distgcn.nn.model import glorot_weights


def reference_epochs(a_hat: sp.csr_matrix, features: np.ndarray, labels: np.ndarray, train_mask: np.ndarray,
                     *, layers: int = 2, hidden: int | list[int] = 16, epochs: int = 10, lr: float = 0.01,
                     dropout: float = 0.5, weight_decay: float = 5e-4, optimizer: str = "adam", seed: int = 0,
                     dtype: torch.dtype = torch.float64):
    """Train on the whole graph, yielding after each epoch's step ``(epoch, loss, optimizer, params, evaluate)``;
    ``evaluate()`` gives the logits without dropout. The caller may change the optimizer's rate between epochs."""
    coo = a_hat.tocoo()
    adj = torch.sparse_coo_tensor(np.vstack([coo.row, coo.col]), coo.data, size=a_hat.shape,
                                  check_invariants=True).to(dtype)
    x = torch.from_numpy(features).to(dtype)
    y = torch.from_numpy(labels.astype(np.int64))
    mask = torch.from_numpy(train_mask.astype(bool))
    hidden_widths = [hidden] * (layers - 1) if isinstance(hidden, int) else list(hidden)
    widths = [features.shape[1]] + hidden_widths + [int(labels.max()) + 1]
    weights = [w.clone().requires_grad_(True) for w in glorot_weights(widths, seed, dtype)]
    biases = [torch.zeros(w, dtype=dtype, requires_grad=True) for w in widths[1:]]
    params = weights + biases
    opt = (torch.optim.Adam(params, lr=lr, weight_decay=weight_decay) if optimizer == "adam"
           else torch.optim.SGD(params, lr=lr, weight_decay=weight_decay))
    row_ids = np.arange(a_hat.shape[0])

    def forward(epoch: int, p: float) -> torch.Tensor:
        h = x
        for layer in range(layers):
            h = keyed_dropout(h, row_ids, p, dropout_key(seed, epoch, layer))
            h = torch.sparse.mm(adj, h) @ weights[layer] + biases[layer]
            if layer < layers - 1:
                h = torch.relu(h)
        return h

    @torch.no_grad()
    def evaluate() -> torch.Tensor:
        return forward(0, 0.0)

    for epoch in range(1, epochs + 1):
        opt.zero_grad()
        loss = F.cross_entropy(forward(epoch, dropout)[mask], y[mask])
        loss.backward()
        opt.step()
        yield epoch, float(loss.detach()), opt, params, evaluate


def reference_train(a_hat: sp.csr_matrix, features: np.ndarray, labels: np.ndarray, train_mask: np.ndarray,
                    **settings) -> tuple[list[float], list[np.ndarray]]:
    """Train on the whole graph (:func:`reference_epochs`' settings); return the loss of every epoch and the
    final parameters."""
    losses, params = [], []
    for _epoch, loss, _opt, params, _evaluate in reference_epochs(a_hat, features, labels, train_mask, **settings):
        losses.append(loss)
    return losses, [p.detach().numpy().copy() for p in params]
