"""Single-process minibatch GCN: the oracle that distributed minibatch training must equal.

Samples each batch from the whole Â, applies GraphSAINT normalization from
whole-graph counts and trains with plain torch. It shares with the runtime
only the counter-based hash that *defines* which vertices a batch holds
(``uniforms``/``batch_key``) and the keyed dropout, as tests/reference.py does.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from distgcn.dropout import dropout_key, keyed_dropout
from distgcn.minibatch.sampling import batch_key, uniforms
from distgcn.model import glorot_weights


def batch_vertices(a_hat: sp.csr_matrix, sampler: str, batch_size: int, key: int) -> np.ndarray:
    """Sorted global ids of one batch, from the whole graph."""
    a = sp.csr_matrix(a_hat)
    n = a.shape[0]
    rows = np.repeat(np.arange(n), np.diff(a.indptr))
    cols = a.indices.astype(np.int64)
    if sampler == "node":
        col_sq = np.bincount(cols, weights=a.data.astype(np.float64) ** 2, minlength=n)
        return np.flatnonzero(uniforms(key, np.arange(n)) < -np.expm1(-batch_size * col_sq / col_sq.sum()))
    d = np.diff(a.indptr).astype(np.float64)
    w = 1.0 / d[rows] + 1.0 / d[cols]
    w[rows == cols] = 0.0
    chosen = uniforms(key, rows * n + cols) < -np.expm1(-math.ceil(batch_size / 2) * w / w.sum())
    return np.union1d(rows[chosen], cols[chosen])


def reference_minibatch(a_hat: sp.csr_matrix, features: np.ndarray, labels: np.ndarray, train_mask: np.ndarray,
                        *, sampler: str, batch_size: int, epochs: int, norm_samples: int, hidden: int,
                        seed: int, lr: float = 0.01, dropout: float = 0.5,
                        weight_decay: float = 5e-4) -> list[float]:
    """Train with Adam on sampled batches; return every batch's loss, in order."""
    a = sp.csr_matrix(a_hat)
    n = a.shape[0]
    rows = np.repeat(np.arange(n), np.diff(a.indptr))
    c_v, c_e = np.zeros(n), np.zeros(a.nnz)
    for k in range(norm_samples):
        member = np.zeros(n, dtype=bool)
        member[batch_vertices(a, sampler, batch_size, batch_key(seed, 0, k))] = True
        c_v += member
        c_e += member[rows] & member[a.indices]
    scaled = sp.csr_matrix((a.data * np.maximum(c_v[rows], 1) / np.maximum(c_e, 1), a.indices, a.indptr),
                           shape=a.shape)
    widths = [features.shape[1], hidden, int(labels.max()) + 1]
    params = [w.clone().requires_grad_(True) for w in glorot_weights(widths, seed, torch.float64)]
    params += [torch.zeros(w, dtype=torch.float64, requires_grad=True) for w in widths[1:]]
    opt = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    batches = math.ceil(n / batch_size)
    t = int(train_mask.sum())
    losses = []
    for epoch in range(1, epochs + 1):
        for b in range(batches):
            s = batch_vertices(a, sampler, batch_size, batch_key(seed, epoch, b))
            sub = torch.from_numpy(scaled[s][:, s].toarray())
            h = torch.from_numpy(features[s]).to(torch.float64)
            step = (epoch - 1) * batches + b + 1
            opt.zero_grad()
            for layer in range(2):
                h = keyed_dropout(h, s, dropout, dropout_key(seed, step, layer))
                h = sub @ (h @ params[layer]) + params[2 + layer]
                if layer == 0:
                    h = torch.relu(h)
            train = train_mask[s]
            weights = torch.from_numpy(norm_samples / (t * np.maximum(c_v[s[train]], 1)))
            loss = (F.cross_entropy(h[torch.from_numpy(train)], torch.from_numpy(labels[s][train].astype(np.int64)),
                                    reduction="none") * weights).sum()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    return losses
