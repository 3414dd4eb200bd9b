"""GraphSAINT's normalization from scripted samples, against the definitions counted here by brute force.

Zeng et al. (ICLR 2020, Section 3.2): over K pre-sampled induced subgraphs,
C(v) counts the samples holding v and C(u, v) those holding both endpoints of
the entry Â[v, u]; the aggregator divides Â[v, u] by α(u, v) = C(u, v) / C(v)
and the loss of v is weighted by 1 / λ(v) = K / (T · C(v)), every count
floored at 1. The samplers here replay fixed vertex sets, so every count is
known exactly (test_sampling.py checks the statistics of real samplers).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from distgcn.errors import InputError
from distgcn.sampling.distributed.keys import batch_key
from distgcn.sampling.distributed.normalization import LocalNormalization, presample
from distgcn.sampling.reference.normalization import (
    Normalization,
    estimate_normalization,
)
from distgcn.sampling.reference.structure import SamplingGraph, Subgraph

# 5 vertices; vertex 4 is never sampled, and the entry (0, 3) never has both ends in one sample.
DENSE = np.array([[0.5, 0.2, 0.0, 0.1, 0.0],
                  [0.3, 0.4, 0.6, 0.0, 0.0],
                  [0.0, 0.7, 0.8, 0.9, 0.0],
                  [0.2, 0.0, 0.5, 0.3, 0.4],
                  [0.0, 0.0, 0.0, 0.6, 0.7]])
SAMPLES = [[0, 1], [1, 2, 3], [0, 1, 2], [2, 3], [1, 2]]


class ScriptedSampler:
    """Returns the induced subgraphs of :data:`SAMPLES`, in order, whatever the generator."""

    def __init__(self):
        self.graph = SamplingGraph(sp.csr_matrix(DENSE))
        self._next = iter(SAMPLES)

    def sample(self, rng: np.random.Generator) -> Subgraph:
        return self.graph.induced(np.array(next(self._next)))


def counts_by_definition() -> tuple[np.ndarray, np.ndarray]:
    """C(v) per vertex and C(u, v) per entry Â[v, u] (dense), counted sample by sample."""
    c_v, c_e = np.zeros(5), np.zeros((5, 5))
    for s in SAMPLES:
        for v in s:
            c_v[v] += 1
            for u in s:
                c_e[v, u] += DENSE[v, u] != 0
    return c_v, c_e


@pytest.mark.parametrize("chunk_entries", [1, 6, 1 << 24])  # a flush after every sample, every few, at the end
def test_counts_and_weights_are_the_definitions(chunk_entries):
    norm = estimate_normalization(ScriptedSampler(), np.random.default_rng(0), len(SAMPLES), chunk_entries)
    c_v, c_e = counts_by_definition()
    a = sp.csr_matrix(DENSE)
    rows = np.repeat(np.arange(5), np.diff(a.indptr))
    assert norm.num_samples == 5
    assert norm.vertex_counts.dtype == norm.edge_counts.dtype == np.int64  # documented int64 counts
    np.testing.assert_array_equal(norm.vertex_counts, c_v)
    np.testing.assert_array_equal(norm.edge_counts, c_e[rows, a.indices])
    np.testing.assert_array_equal(norm.inclusion_probabilities(), c_v / 5)

    sub = SamplingGraph(a).induced(np.array([0, 1, 3, 4]))  # holds the never-sampled vertex and entry
    batch = sorted(sub.vertices.tolist())
    alpha = np.maximum(c_e, 1) / np.maximum(c_v, 1)[:, None]  # α(u, v) at [v, u]
    expected = np.zeros((4, 4))
    for i, v in enumerate(batch):
        for j, u in enumerate(batch):
            if DENSE[v, u]:
                expected[i, j] = DENSE[v, u] / alpha[v, u]
    np.testing.assert_allclose(norm.normalized_submatrix(sub, a).toarray(), expected, rtol=1e-15)
    k = sub.rows()
    np.testing.assert_allclose(norm.aggregator_weights(sub), alpha[sub.vertices[k], sub.vertices[sub.indices]],
                               rtol=1e-15)
    floored = np.maximum(c_v[batch], 1)
    np.testing.assert_allclose(norm.loss_weights(sub), 5 / (5 * floored), rtol=1e-15)  # T defaults to n = 5
    np.testing.assert_allclose(norm.loss_weights(sub, num_targets=2), 5 / (2 * floored), rtol=1e-15)


def test_hand_worked_weights_of_one_entry_and_one_vertex():
    """Vertex 1 is in 4 of 5 samples, the entry Â[1, 0] in 2: α = 2/4, so 0.3 becomes 0.6; 1/λ(1) = 5/(5·4)."""
    a = sp.csr_matrix(DENSE)
    norm = estimate_normalization(ScriptedSampler(), np.random.default_rng(0), 5)
    sub = SamplingGraph(a).induced(np.array([0, 1]))
    assert norm.normalized_submatrix(sub, a).toarray()[1, 0] == pytest.approx(0.6, rel=1e-15)
    assert norm.loss_weights(sub)[1] == pytest.approx(0.25, rel=1e-15)


def test_a_single_pre_sample_is_enough():
    norm = estimate_normalization(ScriptedSampler(), np.random.default_rng(0), 1)
    assert norm.num_samples == 1
    np.testing.assert_array_equal(norm.vertex_counts, [1, 1, 0, 0, 0])  # SAMPLES[0] = [0, 1]


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3"])
def test_a_count_of_pre_samples_that_is_not_a_positive_integer_is_refused(bad):
    with pytest.raises(InputError) as info:
        estimate_normalization(ScriptedSampler(), np.random.default_rng(0), bad)
    assert str(info.value) == f"the number of pre-samples must be a positive integer, got {bad!r}"


def test_distributed_weights_are_the_definitions_with_counts_floored_at_1():
    norm = LocalNormalization(num_samples=6, vertex_counts=np.array([3, 0, 2]),
                              owned_edge_counts=np.array([1, 0, 2, 3]), halo_edge_counts=np.array([2, 1, 0]))
    rows, entries = np.array([0, 1, 2, 0]), np.array([3, 1, 2, 1])
    np.testing.assert_allclose(norm.aggregator_scale(rows, entries, "owned"), [3 / 3, 1 / 1, 2 / 2, 3 / 1],
                               rtol=1e-15)
    np.testing.assert_allclose(norm.aggregator_scale(np.array([2, 0, 1]), np.array([0, 1, 2]), "halo"),
                               [2 / 2, 3 / 1, 1 / 1], rtol=1e-15)
    np.testing.assert_allclose(norm.loss_weights(np.array([2, 1, 0]), num_targets=4),
                               [6 / (4 * 2), 6 / (4 * 1), 6 / (4 * 3)], rtol=1e-15)


class ScriptedDistributedSampler:
    """Two owned rows with three owned and two halo entries; memberships replayed per pre-sample."""

    class Shard:
        n_owned = 2

    shard = Shard()
    rows = {"owned": np.array([0, 0, 1]), "halo": np.array([0, 1])}
    cols = {"owned": np.array([0, 1, 1]), "halo": np.array([1, 0])}
    memberships = [([1, 0], [0, 1]), ([1, 1], [1, 1]), ([0, 1], [1, 0])]

    def __init__(self):
        self.keys: list[int] = []

    def sample(self, key: int) -> tuple[np.ndarray, np.ndarray]:
        owned, halo = self.memberships[len(self.keys)]
        self.keys.append(key)
        return np.array(owned, dtype=bool), np.array(halo, dtype=bool)


def test_presampling_counts_each_row_and_entry_by_definition():
    sampler = ScriptedDistributedSampler()
    ticks = []
    norm = presample(sampler, seed=5, num_samples=3, on_sample=lambda: ticks.append(1))
    assert sampler.keys == [batch_key(5, 0, k) for k in range(3)] and len(set(sampler.keys)) == 3 and ticks == [1] * 3
    assert norm.num_samples == 3
    assert {counts.dtype for counts in (norm.vertex_counts, norm.owned_edge_counts, norm.halo_edge_counts)} == {
        np.dtype(np.int64)}  # documented int64 counts
    np.testing.assert_array_equal(norm.vertex_counts, [2, 2])  # row 0 in samples 0 and 1, row 1 in 1 and 2
    # owned entries (row, col): (0, 0) in samples 0, 1; (0, 1) in 1; (1, 1) in 1, 2
    np.testing.assert_array_equal(norm.owned_edge_counts, [2, 1, 2])
    # halo entries (row, halo col): (0, 1) in samples 0, 1; (1, 0) in 1, 2
    np.testing.assert_array_equal(norm.halo_edge_counts, [2, 2])
