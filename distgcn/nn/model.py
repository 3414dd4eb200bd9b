"""The GCN model: ordinary torch modules over a pluggable aggregation Â·H."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from distgcn.config import TrainConfig
from distgcn.kernels.dense import affine
from distgcn.nn.dropout import (
    PreActivation,
    activation,
    dropout_key,
    keyed_dropout,
    keyed_dropout_matmul,
    relu_or_deferred,
)
from distgcn.nn.sparse_input import SparseRows

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


class LayerStack(nn.Module):
    """What every model shares: layers applied in order, each one's output kept (embeddings come from here),
    dropout on only in training. A model defines :meth:`layer`, and what ``aggregate`` is: :class:`Aggregate`
    (GCN, GraphSAGE) or the GAT's :class:`~distgcn.nn.gat.AttentionGraph`."""

    def __init__(self, widths: list[int], dropout: float, seed: int):
        super().__init__()
        self.widths = list(widths)
        self.dropout = dropout
        self.seed = seed

    @property
    def first_output_width(self) -> int:
        """Columns of layer 0's product with its weight (whether a sparse input pays off depends on it)."""
        return self.widths[1]

    def forward(self, x: torch.Tensor | SparseRows, aggregate: Any, row_ids: np.ndarray,
                epoch: int) -> torch.Tensor:
        return self.layer_outputs(x, aggregate, row_ids, epoch)[-1]

    def layer_outputs(self, x: torch.Tensor | SparseRows, aggregate: Any, row_ids: np.ndarray,
                      epoch: int) -> list[torch.Tensor]:
        """Each layer's output, the logits last; ``aggregate`` is what the model aggregates with (trainer.py)."""
        outputs = []
        h = x
        for layer in range(len(self.widths) - 1):
            h = self.layer(layer, h, aggregate, row_ids, epoch, self.dropout if self.training else 0.0)
            outputs.append(activation(h))  # a deferred ReLU is applied in place by the next layer
        return outputs

    def layer(self, layer: int, h: torch.Tensor | SparseRows, aggregate: Any,
              row_ids: np.ndarray, epoch: int, p: float) -> torch.Tensor:
        """Layer ``layer``'s output from its input ``h``, with dropout probability ``p`` (0 when evaluating)."""
        raise NotImplementedError


class GCN(LayerStack):
    """H^{l+1} = σ(Â · dropout(H^l) · W^l + b^l); σ = ReLU except on the last layer (logits)."""

    def __init__(self, widths: list[int], dropout: float, seed: int, dtype: torch.dtype = torch.float32,
                 first_layer: str = "exact"):
        """``first_layer="cached"``: the input is already Â·X, so layer 0 only drops out and multiplies by W⁰."""
        super().__init__(widths, dropout, seed)
        self.first_layer = first_layer
        self.weights = nn.ParameterList(nn.Parameter(w) for w in glorot_weights(widths, seed, dtype))
        self.biases = nn.ParameterList(nn.Parameter(torch.zeros(w, dtype=dtype)) for w in widths[1:])

    def layer(self, layer: int, h: torch.Tensor | SparseRows | PreActivation, aggregate: Aggregate,
              row_ids: np.ndarray, epoch: int, p: float) -> torch.Tensor | PreActivation:
        key = dropout_key(self.seed, epoch, layer)
        h = self._propagate(layer, h, self.weights[layer], self.biases[layer], aggregate, row_ids, p, key)
        if layer == len(self.weights) - 1:
            return h
        # the next layer's kernels may apply the ReLU where it multiplies by its weight first
        return relu_or_deferred(h, self.weights[layer + 1] if self._multiplies_first(layer + 1) else None, p)

    def _multiplies_first(self, layer: int) -> bool:
        """Whether layer ``layer`` multiplies by W before Â: by the narrower side first, so that the SpMM (and its
        halo rows) carry min(in, out) columns; a cached layer 0 (its input is Â·X already) has no Â."""
        weight = self.weights[layer]
        return (layer == 0 and self.first_layer == "cached") or weight.shape[1] < weight.shape[0]

    def _propagate(self, layer: int, h: torch.Tensor | SparseRows | PreActivation, weight: torch.Tensor,
                   bias: torch.Tensor, aggregate: Aggregate, row_ids: np.ndarray, p: float, key: int) -> torch.Tensor:
        """Â · dropout(H) · W + b in the cheaper order; a cached layer 0 (H = Â·X already) skips Â.

        The bias is added by the dense product (:func:`~distgcn.kernels.dense.affine`) or in place into the last product's
        fresh output.
        """
        local = layer == 0 and self.first_layer == "cached"
        if isinstance(h, SparseRows):  # sparse X wider than W⁰'s output: drop stored entries only, X·W first
            h = h.matmul(weight, p, key)
            return (h if local else aggregate(h)).add_(bias)
        if self._multiplies_first(layer):  # a deferred ReLU (PreActivation) is applied by the same kernels
            h = keyed_dropout_matmul(h, weight, row_ids, p, key)  # keeps H, not dropout(H), for the backward
            return (h if local else aggregate(h)).add_(bias)
        return affine(aggregate(keyed_dropout(h, row_ids, p, key)), weight, bias)
