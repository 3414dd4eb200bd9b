"""Distributed samplers: every rank decides its own rows, with no global adjacency.

Poisson sampling with counter-based randomness. The single-process node
sampler makes N draws with replacement, P(v) ∝ ‖Â[:, v]‖². Here each vertex
is drawn a Poisson(N·P(v)) number of times, independently, which keeps the
expected draws per vertex and makes inclusions independent: v is in the batch
iff ``hash(key(seed, epoch, batch), v) < 1 - exp(-N·P(v))``. The owner of v
alone evaluates this, so a batch needs no sampling messages beyond one byte
per halo row, and the global vertex set depends only on (seed, epoch, batch),
never on P or the partition (up to the rounding of the global sums, see
docs/minibatch.md). The edge sampler does the same for the off-diagonal
entries of Â (its ceil(N/2) edge draws), keyed by the (v, u) global pair.
The walk-based samplers (rw, frontier) are in :mod:`.walks`, the keys in
:mod:`.keys`; :mod:`distgcn.training.sampler_choice` builds any of the four.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np

from distgcn.comm.transport import Transport
from distgcn.hashing import uniforms
from distgcn.shard.rank_shard import Shard
from distgcn.spmm.plan_bytes import PlanBytes

DISTRIBUTED_SAMPLERS = ("node", "edge", "rw", "frontier")


class DistributedSampler(ABC):
    """This rank's part of a sampler: ``sample(key)`` gives the owned and halo membership of batch ``key``."""

    name: str

    def __init__(self, shard: Shard, transport: Transport):
        self.shard = shard
        self.transport = transport
        self.bytes = PlanBytes(shard, transport)
        self.n_global = shard.n_global
        owned, halo = shard.owned_block.tocsr(), shard.halo_block.tocsr()
        self.rows = {"owned": np.repeat(np.arange(shard.n_owned), np.diff(owned.indptr)),
                     "halo": np.repeat(np.arange(shard.n_owned), np.diff(halo.indptr))}
        self.cols = {"owned": owned.indices.astype(np.int64), "halo": halo.indices.astype(np.int64)}
        self.traffic: dict[str, int] = {}
        """Sampler-specific message counters of this rank, cumulative (keys become per-batch metrics)."""

    @abstractmethod
    def sample(self, key: int) -> tuple[np.ndarray, np.ndarray]:
        """(owned membership [n_owned], halo membership [n_halo]) of the batch ``key`` (collective)."""


class NodeSampler(DistributedSampler):
    """Each vertex drawn Poisson(N·P(v)) times, P(v) ∝ ‖Â[:, v]‖²: decided by its owner alone."""

    name = "node"

    def __init__(self, shard: Shard, transport: Transport, batch_size: int):
        super().__init__(shard, transport)
        owned, halo = shard.owned_block.tocsr(), shard.halo_block.tocsr()
        sq_owned = np.bincount(self.cols["owned"], weights=np.square(owned.data, dtype=np.float64),
                               minlength=shard.n_owned)
        sq_halo = np.bincount(self.cols["halo"], weights=np.square(halo.data, dtype=np.float64),
                              minlength=shard.n_halo)
        col_sq = self.bytes.reverse_add(sq_owned, sq_halo)  # halo partials summed at the column's owner
        total = transport.allreduce([float(col_sq.sum())])[0]
        self.inclusion = -np.expm1(-batch_size * col_sq / total)
        """float64 [n_owned]: P(v ∈ S) of each owned vertex."""

    def sample(self, key: int) -> tuple[np.ndarray, np.ndarray]:
        owned_in = uniforms(key, self.shard.global_ids) < self.inclusion
        return owned_in, self.bytes.forward(owned_in.astype(np.uint8)) != 0


class EdgeSampler(DistributedSampler):
    """Each off-diagonal entry Â[v, u] drawn Poisson(ceil(N/2)·P(v, u)) times, decided by the owner of row v."""

    name = "edge"

    def __init__(self, shard: Shard, transport: Transport, batch_size: int):
        super().__init__(shard, transport)
        owned, halo = shard.owned_block.tocsr(), shard.halo_block.tocsr()
        d_owned = (np.diff(owned.indptr) + np.diff(halo.indptr)).astype(np.float64)  # rows of A + I
        d_halo = self.bytes.forward(d_owned)
        gid, hid = shard.global_ids.astype(np.int64), shard.halo_global_ids.astype(np.int64)
        weights, counters = {}, {}
        for block, d_col, col_ids in (("owned", d_owned, gid), ("halo", d_halo, hid)):
            rows, cols = self.rows[block], self.cols[block]
            w = 1.0 / d_owned[rows] + 1.0 / d_col[cols]
            if block == "owned":
                w[rows == cols] = 0.0  # self loops are not edges
            weights[block] = w
            counters[block] = gid[rows] * self.n_global + col_ids[cols]
        total = transport.allreduce([float(weights["owned"].sum() + weights["halo"].sum())])[0]
        draws = math.ceil(batch_size / 2)
        self.edge_inclusion = {b: -np.expm1(-draws * w / total) for b, w in weights.items()}
        self.edge_counters = counters

    def sample(self, key: int) -> tuple[np.ndarray, np.ndarray]:
        owned_in = np.zeros(self.shard.n_owned, dtype=bool)
        halo_in = np.zeros(self.shard.n_halo, dtype=bool)
        for block, marks in (("owned", owned_in), ("halo", halo_in)):
            chosen = uniforms(key, self.edge_counters[block]) < self.edge_inclusion[block]
            owned_in[self.rows[block][chosen]] = True
            marks[self.cols[block][chosen]] = True
        owned_in = self.bytes.reverse_or(owned_in, halo_in)  # tell owners of halo endpoints
        return owned_in, self.bytes.forward(owned_in.astype(np.uint8)) != 0
