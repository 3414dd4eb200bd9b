"""Single-process minibatch GCN: the oracle that distributed minibatch training must equal.

Samples each batch from the whole Â, applies GraphSAINT normalization from
whole-graph counts and trains with plain torch. It shares with the runtime
only the counter-based hash that *defines* which vertices a batch holds
(``uniforms``/``batch_key``/``stream_key`` and the stream numbers of the walk
samplers) and the keyed dropout, as tests/oracles/reference.py does. Walks here run
on the whole Â, one walker array for all roots and a plain O(m) frontier pop.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from distgcn.hashing import uniforms
from distgcn.nn.dropout import dropout_key, keyed_dropout
from distgcn.nn.model import glorot_weights
from distgcn.sampling.distributed.keys import (
    MOVE,
    POP,
    ROOTS,
    START,
    STEP,
    batch_key,
    stream_key,
)


def _off_diagonal(a: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indptr, columns, degree) of Â without its diagonal, columns in increasing order."""
    n = a.shape[0]
    rows = np.repeat(np.arange(n), np.diff(a.indptr))
    off = a.indices != rows
    deg = np.bincount(rows[off], minlength=n)
    return np.concatenate(([0], np.cumsum(deg))), a.indices[off].astype(np.int64), deg


def _random_walks(a: sp.csr_matrix, batch_size: int, walk_length: int, key: int) -> np.ndarray:
    """Poisson(r/n) walks rooted at each vertex, walker j of root v named v + j·n, keyed steps."""
    n = a.shape[0]
    indptr, cols, deg = _off_diagonal(a)
    mean = max(1, batch_size // walk_length) / n
    cdf = np.cumsum([math.exp(-mean) * mean**k / math.factorial(k) for k in range(int(mean + 10 * np.sqrt(mean)) + 20)])
    counts = np.searchsorted(cdf, uniforms(stream_key(key, ROOTS), np.arange(n)), side="right")
    cur = np.repeat(np.arange(n), counts)
    walker = cur + (np.arange(cur.size) - np.repeat(np.cumsum(counts) - counts, counts)) * n
    seen = [cur]
    for t in range(walk_length):
        u = uniforms(stream_key(key, STEP, t), walker)
        nxt = cur.copy()
        d = deg[cur]
        live = d > 0
        nxt[live] = cols[indptr[cur[live]] + np.minimum((u[live] * d[live]).astype(np.int64), d[live] - 1)]
        seen.append(nxt)
        cur = np.where(deg[nxt] > 0, nxt, cur)
    return np.unique(np.concatenate(seen))


def _frontier(a: sp.csr_matrix, batch_size: int, frontier_size: int, key: int) -> np.ndarray:
    """m starts with the smallest keyed hashes among deg > 0; each step pops ∝ deg by a cumulative sum."""
    indptr, cols, deg = _off_diagonal(a)
    candidates = np.flatnonzero(deg > 0)
    h = uniforms(stream_key(key, START), candidates)
    front = candidates[np.lexsort((candidates, h))[:frontier_size]]
    seen = list(front)
    steps = np.arange(batch_size - frontier_size)
    for pop, move in zip(uniforms(stream_key(key, POP), steps), uniforms(stream_key(key, MOVE), steps)):
        cdf = np.cumsum(deg[front])
        slot = int(np.searchsorted(cdf, min(int(pop * cdf[-1]), cdf[-1] - 1), side="right"))
        v = front[slot]
        u = cols[indptr[v] + min(int(move * deg[v]), deg[v] - 1)]
        seen.append(u)
        if deg[u]:
            front[slot] = u
    return np.unique(np.asarray(seen, dtype=np.int64))


def batch_vertices(a_hat: sp.csr_matrix, sampler: str, batch_size: int, key: int, **options: int) -> np.ndarray:
    """Sorted global ids of one batch, from the whole graph (``options``: walk_length, frontier_size)."""
    a = sp.csr_matrix(a_hat)
    a.sort_indices()
    n = a.shape[0]
    if sampler == "rw":
        return _random_walks(a, batch_size, options.get("walk_length", 2), key)
    if sampler == "frontier":
        return _frontier(a, batch_size, options["frontier_size"], key)
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
                        seed: int, lr: float = 0.01, dropout: float = 0.5, weight_decay: float = 5e-4,
                        options: dict | None = None) -> list[float]:
    """Train with Adam on sampled batches; return every batch's loss, in order."""
    a = sp.csr_matrix(a_hat)
    n = a.shape[0]
    rows = np.repeat(np.arange(n), np.diff(a.indptr))
    c_v, c_e = np.zeros(n), np.zeros(a.nnz)
    for k in range(norm_samples):
        member = np.zeros(n, dtype=bool)
        member[batch_vertices(a, sampler, batch_size, batch_key(seed, 0, k), **(options or {}))] = True
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
            s = batch_vertices(a, sampler, batch_size, batch_key(seed, epoch, b), **(options or {}))
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
