"""GraphSAINT normalization for distributed batches, from counts kept by the rows' owners.

The pre-sampling pass runs the distributed sampler for K batches (keys of
epoch 0, never used for training). A vertex's count C(v) and the count
C(u, v) of each entry Â[v, u] are incremented on the owner of row v, which
knows both memberships after the batch's halo byte exchange, so counting
needs no communication beyond sampling itself. Weights follow
:mod:`distgcn.sampling.reference.normalization` (counts floored at 1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch

from distgcn.sampling.distributed.keys import batch_key
from distgcn.sampling.distributed.samplers import DistributedSampler

Counts = TypeVar("Counts", np.ndarray, torch.Tensor)


@dataclass
class LocalNormalization:
    """The counts of one rank: numpy arrays for the host samplers, int64 tensors on the device for the device
    samplers (:mod:`distgcn.sampling.device`); the weights are float64 either way, bit for bit alike."""

    num_samples: int
    vertex_counts: Counts
    """int64 [n_owned]: C(v) of owned vertices."""
    owned_edge_counts: Counts
    """int64 [nnz of the owned block]: C(u, v) per entry."""
    halo_edge_counts: Counts

    def aggregator_scale(self, rows: Counts, entries: Counts, block: str) -> Counts:
        """1 / α(u, v) = C(v) / C(u, v) for selected entries (``rows``: each entry's owned row)."""
        counts = self.owned_edge_counts if block == "owned" else self.halo_edge_counts
        return _float64(_at_least_1(self.vertex_counts[rows])) / _float64(_at_least_1(counts[entries]))

    def loss_weights(self, rows: Counts, num_targets: int) -> Counts:
        """1 / λ(v) = K / (T · C(v)) for owned rows."""
        denominators = _float64(num_targets * _at_least_1(self.vertex_counts[rows]))
        if isinstance(denominators, np.ndarray):
            return self.num_samples / denominators
        # torch turns number / tensor into reciprocal and product, which rounds differently from numpy's quotient
        return torch.full_like(denominators, float(self.num_samples)) / denominators


def _at_least_1(counts: Counts) -> Counts:
    return np.maximum(counts, 1) if isinstance(counts, np.ndarray) else counts.clamp(min=1)


def _float64(counts: Counts) -> Counts:
    """int64 counts as float64 (exact below 2^53), so numpy and torch divide the same numbers."""
    return counts.astype(np.float64) if isinstance(counts, np.ndarray) else counts.double()


def presample(sampler: DistributedSampler, seed: int, num_samples: int,
              on_sample: Callable[[], None] | None = None) -> LocalNormalization:
    """Count inclusions over ``num_samples`` distributed batches (collective); ``on_sample`` after each.

    ``sampler``: a host sampler, or a device sampler whose counts then stay on its device.
    """
    c_v = np.zeros(sampler.shard.n_owned, dtype=np.int64)
    c_e = {b: np.zeros(sampler.rows[b].shape[0], dtype=np.int64) for b in ("owned", "halo")}
    for k in range(num_samples):
        owned_in, halo_in = sampler.sample(batch_key(seed, 0, k))
        if k == 0 and isinstance(owned_in, torch.Tensor):  # a device sampler: count where it samples
            c_v = torch.zeros(c_v.shape, dtype=torch.int64, device=owned_in.device)
            c_e = {b: torch.zeros(c.shape, dtype=torch.int64, device=owned_in.device) for b, c in c_e.items()}
        c_v += owned_in
        for block, col_in in (("owned", owned_in), ("halo", halo_in)):
            c_e[block] += owned_in[sampler.rows[block]] & col_in[sampler.cols[block]]
        if on_sample is not None:
            on_sample()
    return LocalNormalization(num_samples, c_v, c_e["owned"], c_e["halo"])
