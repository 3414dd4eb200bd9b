"""GraphSAINT normalization (Zeng et al., ICLR 2020, Section 3.2), estimated by pre-sampling.

A sampled subgraph over-represents the vertices and edges the sampler likes.
GraphSAINT corrects both the aggregation and the loss with inclusion counts
estimated from K pre-sampled subgraphs: C(v) = samples containing v, C(u, v)
= samples containing the edge (both endpoints, as subgraphs are induced).

* aggregation: in a batch, v aggregates ``Â[v, u] / α(u, v) · x_u`` with
  ``α(u, v) = C(u, v) / C(v)``, an estimate of P(u ∈ S | v ∈ S). Given v is
  sampled, the expected normalized aggregation is then the full ``(Â X)_v``;
* loss: vertex v's loss is divided by ``λ(v) = T · C(v) / K`` (T = number of
  loss targets), an estimate of T · P(v ∈ S), so the batch loss
  ``Σ_{v∈S} L_v / λ(v)`` estimates the full-graph mean loss without bias.

Counts of zero (never seen in pre-sampling) are floored at 1 before dividing,
so a rarely sampled edge gets a large but finite weight rather than a
division by zero. Self loops are entries of Â like the others: C(v, v) = C(v), α = 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from distgcn.errors import InputError
from distgcn.sampling.reference.samplers import Sampler
from distgcn.sampling.reference.structure import Subgraph


@dataclass
class Normalization:
    """Inclusion counts from ``num_samples`` pre-sampled subgraphs, and the weights derived from them."""

    num_samples: int
    vertex_counts: np.ndarray
    """int64 [n]: C(v)."""
    edge_counts: np.ndarray
    """int64 [nnz(Â)]: C(u, v) of the entry Â[v, u], indexed like Â's CSR arrays."""

    def inclusion_probabilities(self) -> np.ndarray:
        """Estimated P(v ∈ S) = C(v) / K."""
        return self.vertex_counts / self.num_samples

    def aggregator_weights(self, sub: Subgraph) -> np.ndarray:
        """α(u, v) = C(u, v) / C(v) for each local entry (v, u) of ``sub``."""
        c_e = np.maximum(self.edge_counts[sub.edge_ids], 1)
        c_v = np.maximum(self.vertex_counts[sub.vertices], 1)
        return c_e / np.repeat(c_v, np.diff(sub.indptr))

    def normalized_submatrix(self, sub: Subgraph, a_hat: sp.csr_matrix) -> sp.csr_matrix:
        """The batch's aggregation matrix: ``Â[v, u] / α(u, v)`` on the entries of ``sub``."""
        return sub.matrix(a_hat.data[sub.edge_ids] / self.aggregator_weights(sub))

    def loss_weights(self, sub: Subgraph, num_targets: int | None = None) -> np.ndarray:
        """1 / λ(v) for the vertices of ``sub``: multiply each vertex's loss by it and sum.

        ``num_targets``: the number of vertices the full loss averages over
        (e.g. training vertices); defaults to n.
        """
        t = self.vertex_counts.shape[0] if num_targets is None else num_targets
        c_v = np.maximum(self.vertex_counts[sub.vertices], 1)
        return self.num_samples / (t * c_v)


def estimate_normalization(sampler: Sampler, rng: np.random.Generator, num_samples: int,
                           chunk_entries: int = 1 << 24) -> Normalization:
    """Pre-sample ``num_samples`` subgraphs and count vertex and edge inclusions.

    Edge ids are buffered and counted with one ``bincount`` per ~``chunk_entries``
    ids, not one O(nnz) pass per sample.
    """
    if isinstance(num_samples, bool) or int(num_samples) != num_samples or num_samples < 1:
        raise InputError(f"the number of pre-samples must be a positive integer, got {num_samples!r}")
    n, nnz = sampler.graph.n, sampler.graph.nnz
    c_v = np.zeros(n, dtype=np.int64)
    c_e = np.zeros(nnz, dtype=np.int64)
    v_buf: list[np.ndarray] = []
    e_buf: list[np.ndarray] = []
    buffered = 0

    def flush() -> None:
        nonlocal buffered
        if v_buf:
            c_v[:] += np.bincount(np.concatenate(v_buf), minlength=n)
            c_e[:] += np.bincount(np.concatenate(e_buf), minlength=nnz)
        v_buf.clear()
        e_buf.clear()
        buffered = 0

    for _ in range(int(num_samples)):
        sub = sampler.sample(rng)
        v_buf.append(sub.vertices)
        e_buf.append(sub.edge_ids)
        buffered += sub.num_edges + sub.num_vertices
        if buffered >= chunk_entries:
            flush()
    flush()
    return Normalization(num_samples=int(num_samples), vertex_counts=c_v, edge_counts=c_e)
