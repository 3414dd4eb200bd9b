"""GAT (Veličković et al., ICLR 2018) over the same 1D plan as the GCN: attention on the edges of Â's pattern.

Per layer and head k: z = dropout(h)·W, e_ij = LeakyReLU_0.2(a_dstᵏ·z_i + a_srcᵏ·z_j) for every entry (i, j)
of Â's pattern (the neighbours i aggregates from, and i itself), α_ij = softmax over j of e_ij, then attention
dropout, and h'_i = Σ_j α_ij z_j. Hidden layers concatenate their heads and apply ELU; the last layer averages its
heads (the logits).

Distributed: z crosses ranks once per layer over the GCN's halo plan, and so do the source terms a_srcᵏ·z_j,
K columns computed by each row's owner (:func:`distgcn.spmm.halo_gather.gather_halo`). Row i's whole
neighbourhood is on i's rank in a 1D partition, so the softmax needs no further exchange, and the halo rows of z
only stream through the weighted sum, sender by sender (:class:`_HaloEdgeSum`). Backward, the gradients of the
halo rows and of their source terms return over the reverse exchange; α's gradient on a halo edge needs the row
itself, kept from the forward pass with the whole halo and fetched again with a halo window. Attention
dropout is keyed by the global ids of both endpoints, so P ranks drop the edges one process would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from torch import nn

from distgcn.config import ModelConfig, TrainConfig, attention_heads
from distgcn.hashing import GOLDEN, as_int64, derive_key, mix64, mix64_int64_inplace
from distgcn.kernels.dense import matmul
from distgcn.nn.dropout import (
    dropout_key,
    keyed_dropout,
    keyed_keep_mask,
    scaled,
    scaled_keep_mask_torch,
)
from distgcn.nn.model import LayerStack, LocalGraph, glorot_matrices
from distgcn.nn.sparse_input import SparseRows
from distgcn.spmm.halo import HaloExchanger
from distgcn.spmm.halo_gather import gather_halo
from distgcn.spmm.window import streams

NEGATIVE_SLOPE = 0.2
"""LeakyReLU's slope in the attention scores (the GAT paper's)."""
_ATTENTION_STREAM = 1
"""Keys attention dropout apart from the input dropout of the same (seed, epoch, layer)."""


def attention_key(seed: int, epoch: int, layer: int) -> int:
    """The key of a layer's attention dropout in an epoch."""
    return derive_key(seed, epoch, layer, _ATTENTION_STREAM)


def edge_keep_mask(dst_ids: np.ndarray, src_ids: np.ndarray, heads: int, p: float, key: int) -> np.ndarray:
    """Boolean [edges, heads]: True where head k keeps edge (dst_ids[e], src_ids[e]) (probability 1 - p).

    A function of the two global ids, so the mask does not depend on the partition.
    """
    with np.errstate(over="ignore"):
        edge = mix64(np.asarray(dst_ids, dtype=np.uint64) * GOLDEN + np.uint64(key)) \
            + np.asarray(src_ids, dtype=np.uint64)
    return keyed_keep_mask(edge, heads, p, key)


def scaled_edge_mask(dst_ids: np.ndarray, src_ids: np.ndarray, heads: int, p: float, key: int,
                     like: torch.Tensor) -> torch.Tensor:
    """:func:`edge_keep_mask` · 1/(1 - p) in ``like``'s dtype on its device; a GPU hashes it there (int64 form)."""
    if like.device.type == "cpu":
        return scaled(edge_keep_mask(dst_ids, src_ids, heads, p, key), like.dtype, p)
    return scaled_edge_mask_torch(torch.as_tensor(dst_ids, dtype=torch.int64, device=like.device),
                                  torch.as_tensor(src_ids, dtype=torch.int64, device=like.device),
                                  heads, p, key, like.dtype)


def scaled_edge_mask_torch(dst_ids: torch.Tensor, src_ids: torch.Tensor, heads: int, p: float, key: int,
                           dtype: torch.dtype) -> torch.Tensor:
    """:func:`edge_keep_mask` · 1/(1 - p), computed by torch on the ids' device, bit for bit the numpy mask."""
    edge = mix64_int64_inplace(dst_ids * as_int64(int(GOLDEN)) + as_int64(key)).add_(src_ids)
    return scaled_keep_mask_torch(edge, heads, p, key, dtype)


@dataclass(frozen=True)
class AttentionGraph:
    """This rank's edges of Â's pattern, and how to reach the halo rows they read (what GAT aggregates over).

    Edges come owned columns first, then the halo columns grouped by sender in the order the exchanger delivers
    them (its rounds), so that every sum over edges runs in one order whether the halo rows come whole or a few
    senders at a time.
    """

    exchanger: HaloExchanger
    dst: torch.Tensor
    """int64 [E]: the local row of each edge (who aggregates)."""
    src: torch.Tensor
    """int64 [E]: the column of each edge in [owned; halo] numbering (whom it reads)."""
    dst_ids: np.ndarray
    """Global ids of dst and src: they key attention dropout."""
    src_ids: np.ndarray
    n_owned: int
    owned_edges: slice
    """The edges whose column is owned."""
    sender_edges: list[slice]
    """Per receive k of the plan: its edges (a slice of the edge lists)."""
    sender_src: torch.Tensor
    """int64 [E - owned edges]: each halo edge's row within its sender's message."""

    @classmethod
    def from_blocks(cls, owned_block: sp.csr_matrix, halo_block: sp.csr_matrix, global_ids: np.ndarray,
                    halo_global_ids: np.ndarray, exchanger: HaloExchanger) -> AttentionGraph:
        """The edges of a shard's blocks: owned columns first, then halo columns (numbered after the owned rows)
        sender by sender in round order, each sender's in row order."""
        plan = exchanger.plan
        owned, halo = owned_block.tocoo(), halo_block.tocoo()
        sender_of = np.repeat(np.arange(len(plan.recv_slices)), [s.stop - s.start for s in plan.recv_slices])
        rank_in_order = np.empty(len(plan.recv_slices), dtype=np.int64)
        rank_in_order[exchanger.receive_order] = np.arange(len(plan.recv_slices))
        halo_order = np.lexsort((halo.col, halo.row, rank_in_order[sender_of[halo.col]])) if halo.nnz else \
            np.zeros(0, dtype=np.int64)
        halo_row, halo_col = halo.row[halo_order].astype(np.int64), halo.col[halo_order].astype(np.int64)
        dst = np.concatenate([owned.row.astype(np.int64), halo_row])
        src = np.concatenate([owned.col.astype(np.int64), halo_col + owned_block.shape[0]])
        column_ids = np.concatenate([global_ids, halo_global_ids]).astype(np.int64)
        counts = np.bincount(sender_of[halo_col], minlength=len(plan.recv_slices))
        starts = np.empty_like(counts)
        ordered = np.cumsum(counts[exchanger.receive_order]) - counts[exchanger.receive_order] + owned.nnz
        starts[exchanger.receive_order] = ordered
        starts_of = np.array([s.start for s in plan.recv_slices], dtype=np.int64)
        device = exchanger.device
        return cls(exchanger=exchanger, dst=torch.from_numpy(dst).to(device), src=torch.from_numpy(src).to(device),
                   dst_ids=np.asarray(global_ids, dtype=np.int64)[dst], src_ids=column_ids[src],
                   n_owned=int(owned_block.shape[0]), owned_edges=slice(0, int(owned.nnz)),
                   sender_edges=[slice(int(a), int(a + c)) for a, c in zip(starts, counts)],
                   sender_src=torch.from_numpy(halo_col - starts_of[sender_of[halo_col]]).to(device))

    def gather_rows(self, h: torch.Tensor) -> torch.Tensor:
        """[h; its halo rows] (collective, differentiable)."""
        return gather_halo(self.exchanger, h)


def gat_parameters(widths: list[int], heads: int, output_heads: int, seed: int,
                   dtype: torch.dtype) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(W, a_src, a_dst) per layer, Glorot-uniform from one seeded generator in layer order.

    Layer l maps its input (widths[0], or widths[l] x heads after a hidden layer) to K heads of widths[l+1]
    columns: W is in x (K·out), a_src and a_dst are K x out.
    """
    shapes = []
    for layer, (out, k) in enumerate(zip(widths[1:], attention_heads(len(widths) - 1, heads, output_heads))):
        fan_in = widths[0] if layer == 0 else widths[layer] * heads
        shapes += [(fan_in, k * out), (k, out), (k, out)]
    drawn = glorot_matrices(shapes, seed, dtype)
    return [(drawn[i], drawn[i + 1], drawn[i + 2]) for i in range(0, len(drawn), 3)]


INDEX_BYTES = 8
"""int64 edge lists."""


def gat_activation_bytes(n: int, halo: int, edges: int, widths: list[int], heads: list[int], s: int,
                         dropout: float, attention_dropout: float, window: bool = False) -> int:
    """GAT's saved activations, per layer: dropout(X) where dropout made a copy (layer 0), z and the halo rows of z
    (none with a halo ``window``: they are fetched again), ELU's
    input and the next layer's input (dropped or not) after a hidden layer (the logits after the last), and per
    edge and head four values (the score sum, exp, the row sums it divides by, α), five with attention dropout
    (measured: tests/memory/test_memory_model.py counts what autograd saves). The edge sum keeps no gathered row per edge
    (_HaloEdgeSum). Backward adds, at the widest layer, four edge-by-head gradients, three gradients of
    z and the kept halo rows and two 16 MiB slices of gathered rows."""
    saved, widest = 0, 0
    last = len(widths) - 2
    for layer, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        fan_in = a if layer == 0 else a * heads[layer - 1]
        k = heads[layer]
        kept = n + (0 if window else halo)
        saved += (n * fan_in if dropout > 0 and layer == 0 else 0) + kept * k * b
        saved += n * b if layer == last else 2 * n * k * b
        saved += (5 if attention_dropout > 0 else 4) * edges * k
        widest = max(widest, 4 * edges * k + 3 * kept * k * b)
    return (saved + widest) * s + 2 * CHUNK_BYTES


def gat_parameter_count(widths: list[int], heads: list[int]) -> int:
    """W (in x K·out), a_src and a_dst (K x out) and the bias, per layer (:func:`gat_parameters`)."""
    total = 0
    for layer, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        fan_in = a if layer == 0 else a * heads[layer - 1]
        k = heads[layer]
        total += fan_in * k * b + 2 * k * b + (b if layer == len(widths) - 2 else k * b)
    return total


class GAT(LayerStack):
    """Multi-head graph attention; hidden heads concatenated (ELU), output heads averaged."""

    @classmethod
    def from_config(cls, config: TrainConfig, widths: list[int], dtype: torch.dtype) -> GAT:
        return cls(widths, config.dropout, config.seed, dtype, heads=config.heads, output_heads=config.output_heads,
                   attention_dropout=config.attention_dropout)

    @classmethod
    def aggregation(cls, graph: LocalGraph) -> AttentionGraph:
        """The rank's edges and its halo rows, gathered: a GAT rank holds no kernel copy of Â."""
        return AttentionGraph.from_blocks(graph.owned_block, graph.halo_block, graph.global_ids,
                                          graph.halo_global_ids, graph.exchanger)

    @classmethod
    def identity(cls, config: TrainConfig) -> dict:
        return {"conv": "gat", "heads": config.heads, "output_heads": config.output_heads,
                "attention_dropout": config.attention_p}

    @classmethod
    def memory_terms(cls, sizes: Any, model: ModelConfig, widths: list[int], s: int, on_gpu: bool,
                     adjacency_bytes: Callable[[Any], int]) -> dict[str, Any]:
        """No kernel copy of Â but its edges: dst, src (torch) and their global ids (numpy), int64."""
        heads = attention_heads(len(widths) - 1, model.heads, model.output_heads)
        edges = sizes.nnz_owned + sizes.nnz_halo
        return {"parameters": gat_parameter_count(widths, heads),
                "exchanged": {w for k, b in zip(heads, widths[1:]) for w in (k * b, k)},
                "adjacency": edges * 4 * INDEX_BYTES,
                "activations": gat_activation_bytes(sizes.rows, sizes.halo_rows, edges, widths, heads, s,
                                                    model.dropout, model.attention_p,
                                                    window=streams(model.halo_window, sizes.parts))}

    @classmethod
    def epoch_exchange_widths(cls, model: ModelConfig, widths: list[int], parts: int) -> list[int]:
        """Per layer, forward: z (K heads x out columns) and its source terms (K); backward: their gradients, and
        with a halo window z's halo rows again; then the forward again to evaluate."""
        heads = attention_heads(len(widths) - 1, model.heads, model.output_heads)
        forward = [width for k, b in zip(heads, widths[1:]) for width in (k * b, k)]
        refetch = streams(model.halo_window, parts)
        backward = [width for k, b in zip(heads, widths[1:]) for width in (k, k * b, *([k * b] if refetch else []))]
        return forward + backward + forward

    def __init__(self, widths: list[int], dropout: float, seed: int, dtype: torch.dtype = torch.float32,
                 heads: int = 8, output_heads: int = 1, attention_dropout: float | None = None):
        super().__init__(widths, dropout, seed)
        self.attention_dropout = dropout if attention_dropout is None else attention_dropout
        self.heads = attention_heads(len(widths) - 1, heads, output_heads)
        params = gat_parameters(widths, heads, output_heads, seed, dtype)
        self.weights = nn.ParameterList(nn.Parameter(w) for w, _, _ in params)
        self.att_src = nn.ParameterList(nn.Parameter(a) for _, a, _ in params)
        self.att_dst = nn.ParameterList(nn.Parameter(a) for _, _, a in params)
        widths_out = [k * out for k, out in zip(self.heads[:-1], widths[1:-1])] + [widths[-1]]
        self.biases = nn.ParameterList(nn.Parameter(torch.zeros(w, dtype=dtype)) for w in widths_out)

    @property
    def first_output_width(self) -> int:
        return self.heads[0] * self.widths[1]

    def layer(self, layer: int, h: torch.Tensor | SparseRows, graph: AttentionGraph, row_ids: np.ndarray, epoch: int,
              p: float) -> torch.Tensor:
        """Hidden layers' heads concatenated, then ELU; the last layer's averaged (the logits)."""
        weight = self.weights[layer]
        key = dropout_key(self.seed, epoch, layer)
        z = h.matmul(weight, p, key) if isinstance(h, SparseRows) else matmul(keyed_dropout(h, row_ids, p, key), weight)
        p_att = self.attention_dropout if self.training else 0.0
        out = self._attend(z, layer, graph, p_att, attention_key(self.seed, epoch, layer))
        if layer == len(self.weights) - 1:
            return out.mean(dim=1) + self.biases[layer]
        return F.elu(out.flatten(1) + self.biases[layer])

    def _attend(self, z: torch.Tensor, layer: int, graph: AttentionGraph, p: float, key: int) -> torch.Tensor:
        """Σ_j α_ij z_j per head, [n_owned, K, out], from this rank's rows of z.

        The source terms a_srcᵏ·z_j are computed by the rows' owners and gathered (K columns per row); the halo rows
        of z themselves only stream through the weighted sum (:class:`_HaloEdgeSum`).
        """
        k = self.heads[layer]
        z = z.view(-1, k, self.widths[layer + 1])
        source_terms = graph.gather_rows((z * self.att_src[layer]).sum(dim=-1))
        target_terms = (z * self.att_dst[layer]).sum(dim=-1)
        scores = F.leaky_relu(target_terms[graph.dst] + source_terms[graph.src], NEGATIVE_SLOPE)
        alpha = _softmax_by_row(scores, graph.dst, graph.n_owned)
        if p > 0.0:
            alpha = alpha * scaled_edge_mask(graph.dst_ids, graph.src_ids, k, p, key, alpha)
        return _HaloEdgeSum.apply(alpha, z, graph)


CHUNK_BYTES = 1 << 24
"""Edges of :class:`_EdgeWeightedSum` are taken about 16 MiB of gathered rows at a time."""


def _edge_chunks(edges: int, row_bytes: int) -> list[slice]:
    step = max(1, CHUNK_BYTES // max(1, row_bytes))
    return [slice(start, start + step) for start in range(0, edges, step)]


def _add_weighted_rows(out: torch.Tensor, dst: torch.Tensor, alpha: torch.Tensor, rows: torch.Tensor,
                       src: torch.Tensor) -> None:
    """out[dst_e] += α_e · rows[src_e] for every edge e, about 16 MiB of gathered rows at a time."""
    for edges in _edge_chunks(dst.shape[0], rows[0].numel() * rows.element_size()):
        out.index_add_(0, dst[edges], alpha[edges].unsqueeze(-1) * rows[src[edges]])


def _edge_gradients(grad: torch.Tensor, dst: torch.Tensor, alpha: torch.Tensor, rows: torch.Tensor,
                    src: torch.Tensor, grad_alpha: torch.Tensor | None, grad_rows: torch.Tensor | None) -> None:
    """grad_alpha_e = grad[dst_e] · rows[src_e] and grad_rows[src_e] += α_e · grad[dst_e], a slice of edges at a
    time (either may be None: not needed)."""
    for edges in _edge_chunks(dst.shape[0], rows[0].numel() * rows.element_size()):
        gathered = grad[dst[edges]]
        if grad_alpha is not None:
            grad_alpha[edges] = (gathered * rows[src[edges]]).sum(dim=-1)
        if grad_rows is not None:
            grad_rows.index_add_(0, src[edges], gathered.mul_(alpha[edges].unsqueeze(-1)))


class _HaloEdgeSum(torch.autograd.Function):
    """out[i, k] = Σ_{e: dst_e = i} α[e, k] · z[src_e, k] over [z; halo rows of z], the halo rows streamed.

    Forward posts the exchange of z's halo rows, adds the owned edges while they fly, then each sender's edges as
    its rows land. Backward: the gradient of each halo row goes back to its owner as partial sums over the
    reverse exchange; α's gradient on a halo edge needs the row itself, so with the whole halo the rows are kept
    from the forward pass, and with a window (``train --halo-window``) they are fetched again, sender by sender,
    and nothing of the halo outlives its window. Edges are taken a slice at a time both ways, so no gathered row
    per edge is held for all edges.
    """

    @staticmethod
    def forward(ctx, alpha: torch.Tensor, z: torch.Tensor, graph: AttentionGraph) -> torch.Tensor:  # type: ignore[override]
        exchanger = graph.exchanger
        width = z.shape[1:]
        keep = exchanger.requested_window is None and exchanger.plan.n_halo > 0
        kept = z.new_empty((exchanger.plan.n_halo, *width)) if keep else None
        exchange = exchanger.start_forward(z.flatten(1))
        out = z.new_zeros((graph.n_owned, *width))
        owned = graph.owned_edges
        _add_weighted_rows(out, graph.dst[owned], alpha[owned], z, graph.src[owned])
        for k, rows in exchange.arrivals():
            rows = rows.view(-1, *width)
            edges = graph.sender_edges[k]
            local = graph.sender_src[edges.start - owned.stop:edges.stop - owned.stop]
            _add_weighted_rows(out, graph.dst[edges], alpha[edges], rows, local)
            if kept is not None:
                kept[exchanger.plan.recv_slices[k]] = rows
        exchange.finish()
        ctx.graph = graph
        ctx.save_for_backward(alpha, z, *([] if kept is None else [kept]))
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        graph: AttentionGraph = ctx.graph
        alpha, z, *kept = ctx.saved_tensors
        exchanger = graph.exchanger
        plan = exchanger.plan
        width = z.shape[1:]
        owned = graph.owned_edges
        grad_alpha = torch.empty_like(alpha) if ctx.needs_input_grad[0] else None
        grad_z = torch.zeros_like(z) if ctx.needs_input_grad[1] else None
        _edge_gradients(grad, graph.dst[owned], alpha[owned], z, graph.src[owned],
                        None if grad_alpha is None else grad_alpha[owned], grad_z)

        def local(edges: slice) -> torch.Tensor:
            return graph.sender_src[edges.start - owned.stop:edges.stop - owned.stop]

        if grad_alpha is not None and plan.n_halo:
            if kept:
                arrivals = ((k, kept[0][s]) for k, s in enumerate(plan.recv_slices))
                exchange = None
            else:  # rematerialise: the halo rows again, sender by sender
                exchange = exchanger.start_forward(z.flatten(1))
                arrivals = exchange.arrivals()
            for k, rows in arrivals:
                edges = graph.sender_edges[k]
                _edge_gradients(grad, graph.dst[edges], alpha[edges], rows.view(-1, *width), local(edges),
                                grad_alpha[edges], None)
            if exchange is not None:
                exchange.finish()
        if grad_z is not None:
            def partials(k: int, out: torch.Tensor) -> None:  # the gradient of sender k's rows, summed here
                out.zero_()
                edges = graph.sender_edges[k]
                _edge_gradients(grad, graph.dst[edges], alpha[edges], z, local(edges), None, out.view(-1, *width))

            reverse = exchanger.start_reverse(z[0].numel(), z.dtype, partials)
            flat = grad_z.view(grad_z.shape[0], -1)
            reverse.add_into(flat)
            reverse.finish()
        return grad_alpha, grad_z, None


def _softmax_by_row(scores: torch.Tensor, rows: torch.Tensor, n_rows: int) -> torch.Tensor:
    """Softmax of each head's scores over the edges of each row (every row has its self loop, so none is empty).

    Shifted by the row's maximum, taken outside autograd: the softmax does not depend on the shift.
    """
    index = rows.unsqueeze(1).expand_as(scores)
    peak = scores.new_full((n_rows, scores.shape[1]), -torch.inf)
    peak = peak.scatter_reduce(0, index, scores.detach(), reduce="amax")
    exp = torch.exp(scores - peak[rows])
    total = exp.new_zeros((n_rows, scores.shape[1])).index_add(0, rows, exp)
    return exp / total[rows]
