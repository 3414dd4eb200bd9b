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

import numpy as np

from distgcn.sampling.distributed.keys import batch_key
from distgcn.sampling.distributed.samplers import DistributedSampler


@dataclass
class LocalNormalization:
    num_samples: int
    vertex_counts: np.ndarray
    """int64 [n_owned]: C(v) of owned vertices."""
    owned_edge_counts: np.ndarray
    """int64 [nnz of the owned block]: C(u, v) per entry."""
    halo_edge_counts: np.ndarray

    def aggregator_scale(self, rows: np.ndarray, entries: np.ndarray, block: str) -> np.ndarray:
        """1 / α(u, v) = C(v) / C(u, v) for selected entries (``rows``: each entry's owned row)."""
        counts = self.owned_edge_counts if block == "owned" else self.halo_edge_counts
        c_e = np.maximum(counts[entries], 1)
        return np.maximum(self.vertex_counts[rows], 1) / c_e

    def loss_weights(self, rows: np.ndarray, num_targets: int) -> np.ndarray:
        """1 / λ(v) = K / (T · C(v)) for owned rows."""
        return self.num_samples / (num_targets * np.maximum(self.vertex_counts[rows], 1))


def presample(sampler: DistributedSampler, seed: int, num_samples: int,
              on_sample: Callable[[], None] | None = None) -> LocalNormalization:
    """Count inclusions over ``num_samples`` distributed batches (collective); ``on_sample`` after each."""
    c_v = np.zeros(sampler.shard.n_owned, dtype=np.int64)
    c_e = {b: np.zeros(sampler.rows[b].shape[0], dtype=np.int64) for b in ("owned", "halo")}
    for k in range(num_samples):
        owned_in, halo_in = sampler.sample(batch_key(seed, 0, k))
        c_v += owned_in
        for block, col_in in (("owned", owned_in), ("halo", halo_in)):
            c_e[block] += owned_in[sampler.rows[block]] & col_in[sampler.cols[block]]
        if on_sample is not None:
            on_sample()
    return LocalNormalization(num_samples, c_v, c_e["owned"], c_e["halo"])
