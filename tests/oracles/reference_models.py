"""Single-process GraphSAGE and GAT in plain, dense PyTorch: the oracles that distributed training must equal.

Independent of the runtime's aggregation: the mean is a dense D⁻¹A built from the graph's adjacency (not from
Â's blocks), the attention a dense n x n masked softmax per head (not an edge list, a scatter or a halo
gather). Shared with the runtime, because they define *which* model is trained: the seeded initialisation and
the keyed dropout masks (input rows, and attention edges keyed by the global ids of both ends).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from distgcn.nn.dropout import dropout_key, keyed_dropout
from distgcn.nn.gat import attention_key, edge_keep_mask, gat_parameters
from distgcn.nn.sage import sage_weights


def _setup(features, labels, train_mask, hidden, layers, dtype):
    x = torch.from_numpy(features).to(dtype)
    y = torch.from_numpy(labels.astype(np.int64))
    mask = torch.from_numpy(train_mask.astype(bool))
    hidden_widths = [hidden] * (layers - 1) if isinstance(hidden, int) else list(hidden)
    widths = [features.shape[1]] + hidden_widths + [int(labels.max()) + 1]
    return x, y, mask, widths


def _fit(params, forward, y, mask, epochs, lr, weight_decay, optimizer):
    opt = (torch.optim.Adam(params, lr=lr, weight_decay=weight_decay) if optimizer == "adam"
           else torch.optim.SGD(params, lr=lr, weight_decay=weight_decay))
    losses = []
    for epoch in range(1, epochs + 1):
        opt.zero_grad()
        loss = F.cross_entropy(forward(epoch)[mask], y[mask])
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses, [p.detach().numpy().copy() for p in params]


def reference_sage(adj: sp.spmatrix, features: np.ndarray, labels: np.ndarray, train_mask: np.ndarray, *,
                   layers: int = 2, hidden: int | list[int] = 16, epochs: int = 10, lr: float = 0.01,
                   dropout: float = 0.5, weight_decay: float = 5e-4, optimizer: str = "adam", seed: int = 0,
                   root_weight: bool = True, dtype: torch.dtype = torch.float64):
    """GraphSAGE-mean on the whole graph (``adj[v, u] != 0``: v aggregates from u); losses and final parameters."""
    pattern = (sp.csr_matrix(adj) != 0).toarray().astype(np.float64)
    np.fill_diagonal(pattern, 0.0)
    degree = pattern.sum(axis=1, keepdims=True)
    mean = torch.from_numpy(np.divide(pattern, degree, out=np.zeros_like(pattern), where=degree > 0)).to(dtype)
    x, y, mask, widths = _setup(features, labels, train_mask, hidden, layers, dtype)
    neigh, own = sage_weights(widths, seed, dtype, root_weight)
    neigh = [w.clone().requires_grad_(True) for w in neigh]
    own = [w.clone().requires_grad_(True) for w in own]
    biases = [torch.zeros(w, dtype=dtype, requires_grad=True) for w in widths[1:]]
    rows = np.arange(adj.shape[0])

    def forward(epoch: int) -> torch.Tensor:
        h = x
        for layer in range(layers):
            h = keyed_dropout(h, rows, dropout, dropout_key(seed, epoch, layer))
            out = mean @ h @ neigh[layer] + biases[layer]
            if root_weight:
                out = out + h @ own[layer]
            h = torch.relu(out) if layer < layers - 1 else out
        return h

    return _fit(neigh + own + biases, forward, y, mask, epochs, lr, weight_decay, optimizer)


def reference_gat(adj: sp.spmatrix, features: np.ndarray, labels: np.ndarray, train_mask: np.ndarray, *,
                  layers: int = 2, hidden: int | list[int] = 8, heads: int = 8, output_heads: int = 1,
                  epochs: int = 10, lr: float = 0.005, dropout: float = 0.6, attention_dropout: float | None = None,
                  weight_decay: float = 5e-4, optimizer: str = "adam", seed: int = 0,
                  dtype: torch.dtype = torch.float64):
    """GAT on the whole graph, one dense masked softmax per head; losses and final parameters."""
    n = adj.shape[0]
    pattern = (sp.csr_matrix(adj) != 0).toarray()
    np.fill_diagonal(pattern, True)  # every vertex attends to itself
    dst, src = np.nonzero(pattern)
    edges = torch.from_numpy(pattern)
    p_att = dropout if attention_dropout is None else attention_dropout
    x, y, mask, widths = _setup(features, labels, train_mask, hidden, layers, dtype)
    drawn = gat_parameters(widths, heads, output_heads, seed, dtype)
    weights = [w.clone().requires_grad_(True) for w, _, _ in drawn]
    att_src = [a.clone().requires_grad_(True) for _, a, _ in drawn]
    att_dst = [a.clone().requires_grad_(True) for _, _, a in drawn]
    head_counts = [output_heads if layer == layers - 1 else heads for layer in range(layers)]
    biases = [torch.zeros(k * w if layer < layers - 1 else w, dtype=dtype, requires_grad=True)
              for layer, (k, w) in enumerate(zip(head_counts, widths[1:]))]
    rows = np.arange(n)

    def forward(epoch: int) -> torch.Tensor:
        h = x
        for layer in range(layers):
            k, width = head_counts[layer], widths[layer + 1]
            h = keyed_dropout(h, rows, dropout, dropout_key(seed, epoch, layer))
            z = (h @ weights[layer]).view(n, k, width)
            keep = torch.zeros((n, n, k), dtype=dtype)
            if p_att > 0:
                kept = edge_keep_mask(dst, src, k, p_att, attention_key(seed, epoch, layer))
                keep[dst, src] = torch.from_numpy(kept).to(dtype) / (1.0 - p_att)
            else:
                keep[dst, src] = 1.0
            heads_out = []
            for head in range(k):
                source = z[:, head] @ att_src[layer][head]
                target = z[:, head] @ att_dst[layer][head]
                scores = F.leaky_relu(target[:, None] + source[None, :], 0.2).masked_fill(~edges, -torch.inf)
                alpha = torch.softmax(scores, dim=1) * keep[:, :, head]
                heads_out.append(alpha @ z[:, head])
            if layer < layers - 1:
                h = F.elu(torch.cat(heads_out, dim=1) + biases[layer])
            else:
                h = torch.stack(heads_out).mean(dim=0) + biases[layer]
        return h

    return _fit(weights + att_src + att_dst + biases, forward, y, mask, epochs, lr, weight_decay, optimizer)
