"""The GCN model: ordinary torch modules over a pluggable aggregation Â·H."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from .config import TrainConfig
from .dropout import dropout_key, keyed_dropout, keyed_dropout_matmul
from .sparse_input import SparseRows

Aggregate = Callable[[torch.Tensor], torch.Tensor]


def glorot_matrices(shapes: list[tuple[int, int]], seed: int, dtype: torch.dtype) -> list[torch.Tensor]:
    """Glorot-uniform matrices of the given (fan_in, fan_out) shapes, drawn in order from one seeded generator.

    Every rank calls this with the same seed and gets identical weights, which
    is how ranks (and the single-process reference) start in agreement.
    """
    generator = torch.Generator().manual_seed(seed)
    weights = []
    for fan_in, fan_out in shapes:
        bound = math.sqrt(6.0 / (fan_in + fan_out))
        w = (torch.rand((fan_in, fan_out), generator=generator, dtype=torch.float64) * 2.0 - 1.0) * bound
        weights.append(w.to(dtype))
    return weights


def glorot_weights(widths: list[int], seed: int, dtype: torch.dtype) -> list[torch.Tensor]:
    """One Glorot-uniform weight per layer of ``widths``, in layer order (:func:`glorot_matrices`)."""
    return glorot_matrices(list(zip(widths[:-1], widths[1:])), seed, dtype)


class GCN(nn.Module):
    """H^{l+1} = σ(Â · dropout(H^l) · W^l + b^l); σ = ReLU except on the last layer (logits)."""

    def __init__(self, widths: list[int], dropout: float, seed: int, dtype: torch.dtype = torch.float32,
                 first_layer: str = "exact"):
        """``first_layer="cached"``: the input is already Â·X, so layer 0 only drops out and multiplies by W⁰."""
        super().__init__()
        self.first_layer = first_layer
        self.widths = list(widths)
        self.dropout = dropout
        self.seed = seed
        self.weights = nn.ParameterList(nn.Parameter(w) for w in glorot_weights(widths, seed, dtype))
        self.biases = nn.ParameterList(nn.Parameter(torch.zeros(w, dtype=dtype)) for w in widths[1:])

    @property
    def first_output_width(self) -> int:
        """Columns of layer 0's product with W⁰ (whether a sparse input pays off depends on it)."""
        return self.widths[1]

    def forward(self, x: torch.Tensor | SparseRows, aggregate: Aggregate, row_ids: np.ndarray,
                epoch: int) -> torch.Tensor:
        return self.layer_outputs(x, aggregate, row_ids, epoch)[-1]

    def layer_outputs(self, x: torch.Tensor | SparseRows, aggregate: Aggregate, row_ids: np.ndarray,
                      epoch: int) -> list[torch.Tensor]:
        """Each layer's output (hidden layers after ReLU, then the logits): embeddings come from here."""
        outputs = []
        h = x
        last = len(self.weights) - 1
        for layer, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            p = self.dropout if self.training else 0.0
            h = self._propagate(layer, h, weight, aggregate, row_ids, p, dropout_key(self.seed, epoch, layer)) + bias
            if layer != last:
                h = torch.relu(h)
            outputs.append(h)
        return outputs

    def _propagate(self, layer: int, h: torch.Tensor | SparseRows, weight: torch.Tensor, aggregate: Aggregate,
                   row_ids: np.ndarray, p: float, key: int) -> torch.Tensor:
        """Â · dropout(H) · W in the cheaper order; a cached layer 0 (H = Â·X already) skips Â."""
        local = layer == 0 and self.first_layer == "cached"
        if isinstance(h, SparseRows):  # sparse X wider than W⁰'s output: drop stored entries only, X·W first
            h = h.matmul(weight, p, key)
            return h if local else aggregate(h)
        # Multiply by the narrower side first: the SpMM (and its halo rows) then carry min(in, out) columns.
        if local or weight.shape[1] < weight.shape[0]:
            h = keyed_dropout_matmul(h, weight, row_ids, p, key)  # keeps H, not dropout(H), for the backward
            return h if local else aggregate(h)
        return aggregate(keyed_dropout(h, row_ids, p, key)) @ weight


def build_model(config: TrainConfig, widths: list[int], dtype: torch.dtype) -> nn.Module:
    """The model ``config.conv`` names (``train --conv``), with its weights drawn from ``config.seed``."""
    if config.conv == "sage":
        from .sage import GraphSAGE

        return GraphSAGE(widths, config.dropout, config.seed, dtype, root_weight=config.root_weight)
    if config.conv == "gat":
        from .gat import GAT

        return GAT(widths, config.dropout, config.seed, dtype, heads=config.heads, output_heads=config.output_heads,
                   attention_dropout=config.attention_dropout)
    return GCN(widths, config.dropout, config.seed, dtype, config.first_layer)
