"""The GCN model: ordinary torch modules over a pluggable aggregation Â·H, and what every model declares.

A model is a :class:`LayerStack` subclass in a module of this package and one line of ``config.MODELS``: the class
builds itself from the configuration (:meth:`LayerStack.from_config`), builds what it aggregates with
(:meth:`LayerStack.aggregation`), names its own settings for checkpoints (:meth:`LayerStack.identity`), and counts
the bytes it holds and the columns it exchanges for the memory model (:meth:`LayerStack.memory_terms`,
:meth:`LayerStack.epoch_exchange_widths`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from distgcn.config import ModelConfig, TrainConfig
from distgcn.kernels import Kernels, cpu_folds_relu
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
from distgcn.spmm.halo import HaloExchanger
from distgcn.spmm.product import DistributedAdjacency, spmm

Aggregate = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class LocalGraph:
    """A rank's rows of Â and how to reach the other ranks' rows: what a model builds its aggregation from."""

    owned_block: sp.csr_matrix
    halo_block: sp.csr_matrix
    global_ids: np.ndarray
    halo_global_ids: np.ndarray
    exchanger: HaloExchanger
    dtype: torch.dtype
    kernels: Kernels


class Product:
    """Aggregation by a distributed sparse matrix: ``self(h)`` = M·H, differentiable (:func:`distgcn.spmm.product.spmm`)."""

    def __init__(self, adjacency: DistributedAdjacency):
        self.adjacency = adjacency

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        return spmm(self.adjacency, h)


def exchanged_width(fan_in: int, fan_out: int) -> int:
    """Columns a layer's SpMM carries: it multiplies by the narrower side first."""
    return min(fan_in, fan_out)


def exchange_widths(widths: list[int]) -> list[int]:
    """Columns of each halo exchange of one full-batch epoch of a model whose layers multiply by Â (or D⁻¹A) on the
    narrower side: the training forward pass exchanges once per layer; the backward pass once per layer whose
    product input needs a gradient (every layer but the first, and the first too when it multiplies X by W first);
    the evaluation forward pass once per layer again."""
    layers = list(zip(widths[:-1], widths[1:]))
    forward = [exchanged_width(a, b) for a, b in layers]
    backward = [exchanged_width(a, b) for i, (a, b) in enumerate(layers) if i > 0 or b < a]
    return forward + backward + forward


def gcn_saved_bytes(n: int, widths: list[int], s: int, dropout: float, on_gpu: bool) -> int:
    """What a GCN's training forward pass over ``n`` rows keeps for its backward: per layer its ReLU output (the
    logits on the last layer) and, where a layer multiplies by Â first (b >= a), Â·dropout(H) for W's gradient,
    plus on a GPU the float mask of a dropout that feeds Â (not the input's). A layer that multiplies by W first
    keeps H, the previous layer's output, already counted (distgcn/nn/dropout.py)."""
    saved = 0
    for layer, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        if b >= a:
            mask = n * a * s if on_gpu and dropout > 0 and layer > 0 else 0
            saved += mask + n * a * s
        saved += n * b * s
    return saved


def gcn_activation_bytes(n: int, widths: list[int], s: int, dropout: float, on_gpu: bool) -> int:
    """Peak bytes of activations and their gradients over one training step of ``n`` rows (:class:`GCN`).

    On a GPU: everything the forward pass keeps (:func:`gcn_saved_bytes`) plus three arrays of the widest layer
    (an output gradient, Âᵀ G and a kernel temporary), an upper bound. On the CPU the step is walked as the
    layers allocate, in units of one row's width (:func:`_cpu_step_peak`).
    """
    if on_gpu:
        return gcn_saved_bytes(n, widths, s, dropout, True) + 3 * n * max(widths[1:]) * s
    return _cpu_step_peak(widths, dropout) * n * s


def _cpu_step_peak(widths: list[int], dropout: float) -> int:
    """The most columns of n-row arrays alive at once in a CPU training step, forward then backward.

    Forward, a layer that multiplies by Â first (b >= a) holds dropout(H) (a copy where p > 0) beside Â·dropout(H),
    keeps the latter, and adds its output; one that multiplies by W first adds dropout(H)·W beside Â·(that).
    Backward, each layer in turn frees its output once the output's gradient exists; Â-first: G·Wᵀ beside G,
    then Â·dropout(H) is freed, Âᵀ(G·Wᵀ) and, where p > 0, dropout's gradient and the previous ReLU's each beside
    the last; W-first: Âᵀ G beside G, then H's gradient beside it, and the previous ReLU's gradient where the
    next layer's kernels do not fold that ReLU (:func:`distgcn.kernels.cpu_folds_relu`). Layer 0's input needs
    no gradient. Small temporaries (row slices, W's gradient) are left out.
    """
    layers = list(zip(widths[:-1], widths[1:]))
    drops = dropout > 0
    alive = peak = 0
    kept = []
    for a, b in layers:  # forward
        if b < a:
            peak = max(peak, alive + 2 * b)
            kept.append(0)
        else:
            peak = max(peak, alive + (a if drops else 0) + a, alive + a + b)
            kept.append(a)
        alive += kept[-1] + b
    gradient = widths[-1]
    peak = max(peak, alive + gradient)  # the logits' gradient beside the logits
    for layer in reversed(range(len(layers))):
        a, b = layers[layer]
        alive -= b  # this layer's output, once its gradient exists (its ReLU's backward ran with the next layer)
        if b < a:
            peak = max(peak, alive + gradient + b)  # Âᵀ G beside G
            if layer > 0:
                peak = max(peak, alive + b + a)  # H's gradient beside Âᵀ G
                if not cpu_folds_relu(b, dropout):
                    peak = max(peak, alive + 2 * a)  # the ReLU's backward beside H's gradient
        else:
            peak = max(peak, alive + gradient + (a if layer > 0 else 0))  # G·Wᵀ beside G
            alive -= kept[layer]
            if layer > 0:
                peak = max(peak, alive + 2 * a)  # Âᵀ(G·Wᵀ), then dropout's and the ReLU's backward, each beside
        gradient = a
    return peak


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

    keeps_shard_adjacency = False
    """Whether the model multiplies by the shard's own blocks of Â (a kernel may then read their values in place)."""

    def __init__(self, widths: list[int], dropout: float, seed: int):
        super().__init__()
        self.widths = list(widths)
        self.dropout = dropout
        self.seed = seed

    @classmethod
    def from_config(cls, config: TrainConfig, widths: list[int], dtype: torch.dtype) -> LayerStack:
        """The model ``config`` describes, its weights drawn from ``config.seed``."""
        raise NotImplementedError

    @classmethod
    def aggregation(cls, graph: LocalGraph) -> Any:
        """What the model aggregates with on this rank (the ``aggregate`` its layers take); only that is built."""
        raise NotImplementedError

    @classmethod
    def identity(cls, config: TrainConfig) -> dict:
        """The layer type and its own settings, for a checkpoint's model identity (nothing for the GCN)."""
        return {}

    @classmethod
    def memory_terms(cls, sizes: Any, model: ModelConfig, widths: list[int], s: int, on_gpu: bool,
                     adjacency_bytes: Callable[[Any], int]) -> dict[str, Any]:
        """The memory model's model-dependent terms (:func:`distgcn.memory.prediction.predict`): ``parameters``
        (numbers), ``exchanged`` (the distinct widths that cross ranks), ``adjacency`` and ``activations`` (bytes).
        ``sizes`` is the rank's ShardSizes; ``adjacency_bytes(sizes)`` counts blocks of that shape in the kernel's
        form."""
        raise NotImplementedError

    @classmethod
    def epoch_exchange_widths(cls, model: ModelConfig, widths: list[int], parts: int) -> list[int]:
        """Columns of every halo exchange of one full-batch epoch (first layer exact) on ``parts`` ranks, as the
        trainer makes them."""
        return exchange_widths(widths)

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

    keeps_shard_adjacency = True

    @classmethod
    def from_config(cls, config: TrainConfig, widths: list[int], dtype: torch.dtype) -> GCN:
        return cls(widths, config.dropout, config.seed, dtype, config.first_layer)

    @classmethod
    def aggregation(cls, graph: LocalGraph) -> Product:
        """Â·H over the rank's blocks of Â."""
        return Product(DistributedAdjacency(graph.owned_block, graph.halo_block, graph.exchanger, graph.dtype,
                                            graph.kernels))

    @classmethod
    def memory_terms(cls, sizes: Any, model: ModelConfig, widths: list[int], s: int, on_gpu: bool,
                     adjacency_bytes: Callable[[Any], int]) -> dict[str, Any]:
        layers = list(zip(widths[:-1], widths[1:]))
        return {"parameters": sum(a * b + b for a, b in layers),
                "exchanged": {exchanged_width(a, b) for a, b in layers},
                "adjacency": adjacency_bytes(sizes),
                "activations": gcn_activation_bytes(sizes.rows, widths, s, model.dropout, on_gpu)}

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
