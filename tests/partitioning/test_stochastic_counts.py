"""partition/stochastic.py's counts, stopping rules, records and messages, on minibatches scripted by hand.

The graph is the 6-cycle 0-1-2-3-4-5-0 (Â with its diagonal, 12 off-diagonal entries); a scripted sampler
draws the minibatches listed in each test, so every count below is worked out from the batches alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import scipy.sparse as sp

import distgcn.partitioning.stochastic as stochastic
from distgcn.data.graph import normalized_adjacency
from distgcn.errors import InputError
from distgcn.partitioning.stochastic import (
    hoeffding_nets,
    merge_identical_nets,
    sample_nets,
    sampling_report,
    stochastic_parts,
)
from distgcn.sampling.reference import Sampler

CYCLE = normalized_adjacency(sp.csr_matrix(
    (np.ones(12), (np.r_[0:6, 0:6], np.r_[np.roll(np.arange(6), 1), np.roll(np.arange(6), -1)])), shape=(6, 6)))

BATCHES = [(3, 4, 5), (0, 5), (0, 3), (1, 2, 4, 5), (0, 1)]
"""Column nets of each Â[S, S] (pins: the rows of S with a nonzero in the column, the diagonal included):
(3, 4, 5): {3, 4} {3, 4, 5} {4, 5}, covering the entries 3-4, 4-3, 4-5, 5-4;  (0, 5): {0, 5} {0, 5}, covering
0-5, 5-0;  (0, 3): {0} {3}, no edge;  (1, 2, 4, 5): {1, 2} {1, 2} {4, 5} {4, 5}, adding 1-2, 2-1;
(0, 1): {0, 1} {0, 1}, adding 0-1, 1-0."""


class _Scripted(Sampler):
    name = "scripted"

    def __init__(self, a_hat: sp.spmatrix, batches=BATCHES):
        super().__init__(a_hat, batch_size=1)
        self._batches = iter(batches)

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        return np.array(next(self._batches))


@dataclass(frozen=True)
class _ScriptedSpec:
    batches: tuple = tuple(BATCHES)

    def build(self, a_hat: sp.spmatrix) -> Sampler:
        return _Scripted(a_hat, self.batches)

    def as_dict(self) -> dict:
        return {"name": "scripted"}

@pytest.fixture(autouse=True)
def _scripted_specs_build_their_own_sampler(monkeypatch):
    """stochastic_parts draws from ``sampler_for(spec, Â)``; a scripted spec hands it the scripted sampler."""
    real = stochastic.sampler_for
    monkeypatch.setattr(stochastic, "sampler_for",
                        lambda spec, a_hat: spec.build(a_hat) if isinstance(spec, _ScriptedSpec) else real(spec, a_hat))



def _sample(**kwargs):
    return sample_nets(_Scripted(CYCLE), np.random.default_rng(0), **kwargs)


def test_counts_of_four_scripted_batches():
    nets = _sample(samples=4)
    assert (nets.samples, nets.nets, nets.cuttable_nets, nets.cuttable_pins) == (4, 3 + 2 + 2 + 4, 3 + 2 + 4,
                                                                                   7 + 4 + 8)
    assert nets.edge_coverage == 8 / 12
    merged = {tuple(nets.pins[a:b].tolist()): int(w) for a, b, w in zip(nets.indptr, nets.indptr[1:],
                                                                         nets.net_weights)}
    assert merged == {(3, 4): 1, (3, 4, 5): 1, (4, 5): 3, (0, 5): 2, (1, 2): 2}
    assert nets.indptr.dtype == nets.net_weights.dtype == np.int64


@pytest.mark.parametrize("kwargs, samples", [
    ({"min_nets": 5}, 2),  # 3, then 5 nets counted: the bound is met exactly
    ({"min_nets": 6}, 3),  # 3, 5, 7
    ({"coverage": 0.5}, 2),  # ceil(6) entries: 4, then 6
    ({"coverage": 0.6}, 4),  # ceil(7.2) = 8 entries: 4, 6, 6, 8
    ({"coverage": 1.0, "max_samples": 3}, 3),  # the cap
    ({"min_nets": 9, "coverage": 0.5}, 4),  # nets 3, 5, 7, 11 rule; coverage was met at 2
    ({"min_nets": 3, "coverage": 0.6}, 4),  # coverage rules
])
def test_sampling_stops_at_the_first_sample_that_meets_every_target(kwargs, samples):
    assert _sample(**kwargs).samples == samples


def test_sample_count_message():
    with pytest.raises(InputError) as err:
        _sample(samples=0)
    assert str(err.value) == "--shp-samples must be a positive integer, got 0"


@pytest.mark.parametrize("args, message", [
    ((0, 0.1, 0.1), "the number of parts must be a positive integer, got 0"),
    ((2.5, 0.1, 0.1), "the number of parts must be a positive integer, got 2.5"),
    ((2, 0.0, 0.1), "--shp-epsilon must be a positive number, got 0.0"),
    ((2, float("nan"), 0.1), "--shp-epsilon must be a positive number, got nan"),
    ((2, 0.1, 1.0), "--shp-delta must lie in (0, 1), got 1.0"),
    ((2, 0.1, 0.0), "--shp-delta must lie in (0, 1), got 0.0"),
])
def test_hoeffding_messages(args, message):
    with pytest.raises(InputError) as err:
        hoeffding_nets(*args)
    assert str(err.value) == message


def test_no_nets_merge_to_no_nets():
    indptr, pins, weights = merge_identical_nets(np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64))
    assert indptr.tolist() == [0] and pins.size == 0 and weights.tolist() == []
    assert weights.dtype == np.int64


def test_colliding_hashes_never_merge_different_nets(monkeypatch):
    """With a hash that maps every pin set to one value, only equal pin lists may still be merged."""
    monkeypatch.setattr(stochastic, "mix64", lambda x: np.zeros_like(x))
    nets = [(0, 1), (2, 3), (0, 1), (1, 2), (2, 3), (0, 1), (0, 1, 2)]
    indptr = np.concatenate(([0], np.cumsum([len(net) for net in nets]))).astype(np.int64)
    pins = np.array([p for net in nets for p in net], dtype=np.int64)
    m_indptr, m_pins, weights = merge_identical_nets(indptr, pins)
    merged = [(tuple(m_pins[a:b].tolist()), int(w)) for a, b, w in zip(m_indptr, m_indptr[1:], weights)]
    # every net is still there as often as it was drawn; the copies of the group's first net are merged
    assert sorted(net for net, w in merged for _ in range(w)) == sorted(nets)
    assert ((0, 1), 3) in merged


def test_one_part_samples_nothing_and_records_the_bound():
    parts, info = stochastic_parts(CYCLE, 1, _ScriptedSpec(), seed=5)
    assert parts.tolist() == [0] * 6 and parts.dtype == np.int64
    assert info == {"partitioner": None, "preset": None,
                    "shp": {"samples": 0, "nets_bound": 0, "epsilon": 0.02, "delta": 0.05, "coverage_target": 0.5}}
    _, info = stochastic_parts(CYCLE, 1, _ScriptedSpec(), shp_samples=3)
    assert info["shp"] == {"samples": 0, "nets_bound": None, "epsilon": None, "delta": None, "coverage_target": None}
    _, info = stochastic_parts(CYCLE, 1, _ScriptedSpec(), shp_delta=0.5)
    assert info["shp"] == {"samples": 0, "nets_bound": 0, "epsilon": 0.02, "delta": 0.5, "coverage_target": None}


def test_two_parts_record_what_was_sampled():
    _, info = stochastic_parts(CYCLE, 2, _ScriptedSpec(), shp_samples=4, partitioner="kahypar", preset="fast")
    shp = info["shp"]
    assert shp.pop("sample_s") >= 0 and shp.pop("partitioner_s") >= 0
    assert shp == {"samples": 4, "nets_bound": None, "epsilon": None, "delta": None, "coverage_target": None,
                   "nets": 11, "cuttable_nets": 9, "cuttable_pins": 19, "merged_nets": 5, "merged_pins": 11,
                   "edge_coverage": 8 / 12}
    _, info = stochastic_parts(CYCLE, 2, _ScriptedSpec(), shp_epsilon=0.5, shp_delta=0.5, partitioner="kahypar",
                               preset="fast")
    # (2 - 1)^2 ln(2 / 0.5) / (2 * 0.25) = 2.77: 3 nets, met by the first batch
    assert (info["shp"]["nets_bound"], info["shp"]["samples"], info["shp"]["epsilon"]) == (3, 1, 0.5)


def test_samples_and_a_bound_together_are_refused():
    with pytest.raises(InputError) as err:
        stochastic_parts(CYCLE, 2, _ScriptedSpec(), shp_samples=2, shp_epsilon=0.1)
    assert str(err.value) == "give either --shp-samples or --shp-epsilon/--shp-delta, not both"


def test_edgeless_samples_message():
    with pytest.raises(InputError) as err:
        stochastic_parts(CYCLE, 2, _ScriptedSpec(((0, 3), (1, 4))), shp_samples=2)
    assert str(err.value) == ("none of the 2 sampled subgraphs has an edge between two sampled vertices, so no "
                              "partition communicates less than another; raise --batch-size or --shp-samples")


_BOUND = {"samples": 12, "nets_bound": 100, "epsilon": 0.02, "delta": 0.05}


@pytest.mark.parametrize("shp, line, warning", [
    ({"samples": 0}, "stochastic model: one part, nothing sampled", None),
    (dict(_BOUND, coverage_target=0.5, edge_coverage=0.5),
     "stochastic model: 12 sampled subgraphs (Hoeffding bound of 100 nets and edge coverage target 0.5); "
     "edge coverage 0.500", None),
    (dict(_BOUND, coverage_target=0.5, edge_coverage=0.25),
     "stochastic model: 12 sampled subgraphs (Hoeffding bound of 100 nets and edge coverage target 0.5); "
     "edge coverage 0.250",
     "warning: the samples contain only 25.0% of the edges (below 50%), so the rest of the graph is placed by "
     "balance alone, no better than at random: the sampler reached no more in 12 samples; raise --batch-size"),
    (dict(_BOUND, coverage_target=None, edge_coverage=0.4996),
     "stochastic model: 12 sampled subgraphs (Hoeffding bound of 100 nets (--shp-epsilon 0.02, --shp-delta 0.05)); "
     "edge coverage 0.500",
     "warning: the samples contain only 50.0% of the edges (below 50%), so the rest of the graph is placed by "
     "balance alone, no better than at random: leave out --shp-samples, --shp-epsilon and --shp-delta to sample "
     "up to coverage 0.5, or raise --shp-samples"),
    ({"samples": 3, "nets_bound": None, "coverage_target": None, "edge_coverage": 0.75},
     "stochastic model: 3 sampled subgraphs (--shp-samples); edge coverage 0.750", None),
])
def test_sampling_report_lines(shp, line, warning):
    assert sampling_report(shp) == (line, warning)


def test_minibatch_volume_and_messages_by_hand():
    """Batch (0, 1, 5) of the cycle, parts 0 | 1 1: row 0 reads 1 and 5, rows 1 and 5 read 0: transfers
    (receiver 0, u = 1), (0, 5), (1, 0): volume 3; messages 1 -> 0 and 0 -> 1: 2. Batch (0, 3) has no edge."""
    from distgcn.partitioning.minibatch_metrics import minibatch_comm

    sampler = _Scripted(CYCLE, [(0, 1, 5), (0, 3)])
    subs = [sampler.sample(np.random.default_rng(0)) for _ in range(2)]
    volume, messages = minibatch_comm(subs, [0, 1, 0, 0, 1, 1], 2)
    assert volume.dtype == messages.dtype == np.int64
    assert (volume.tolist(), messages.tolist()) == ([3, 0], [2, 0])
    with pytest.raises(InputError) as err:
        minibatch_comm(subs, [0, 1, 0, 0, 1], 2)
    assert str(err.value) == "a minibatch has a vertex id >= 5, the length of the part vector"
    with pytest.raises(InputError) as err:
        minibatch_comm([], [0, 1, 0, 0, 1, 1], 2)
    assert str(err.value) == "no minibatches to measure"


def test_no_target_draws_nothing():
    nets = sample_nets(_Scripted(CYCLE), np.random.default_rng(0))
    assert (nets.samples, nets.nets, nets.cuttable_nets, nets.cuttable_pins, nets.edge_coverage) == (0, 0, 0, 0, 0.0)
    assert nets.indptr.tolist() == [0] and nets.pins.dtype == np.int64 and nets.pins.size == 0


def test_one_sample_is_enough_and_a_graph_without_edges_is_covered():
    assert _sample(samples=1).samples == 1
    assert sample_nets(_Scripted(sp.identity(6, format="csr")), np.random.default_rng(0), samples=1).edge_coverage \
        == 1.0


def test_a_vertex_without_a_diagonal_still_has_its_net():
    """Without self loops, batch (0, 3) has two columns and no entry: two nets, neither cuttable."""
    no_loops = sp.csr_matrix(CYCLE - sp.diags(CYCLE.diagonal()))
    no_loops.eliminate_zeros()
    nets = sample_nets(_Scripted(no_loops, [(0, 3)]), np.random.default_rng(0), samples=1)
    assert (nets.nets, nets.cuttable_nets) == (2, 0)


def test_nets_equal_to_another_than_the_first_of_their_size_are_merged_by_their_own_hash(monkeypatch):
    """A first hash that sees the pins and a second one that is constant: (2, 3) and (2, 3) share their first
    hash, not the first hash of (0, 1), and must be merged with each other."""
    monkeypatch.setattr(stochastic, "mix64", lambda x: np.where(x >= stochastic.GOLDEN, x, np.uint64(0)))
    indptr = np.array([0, 2, 4, 6])
    m_indptr, m_pins, weights = merge_identical_nets(indptr, np.array([2, 3, 0, 1, 2, 3]))
    merged = {tuple(m_pins[a:b].tolist()): int(w) for a, b, w in zip(m_indptr, m_indptr[1:], weights)}
    assert merged == {(0, 1): 1, (2, 3): 2}


def test_a_net_that_differs_from_its_group_in_one_pin_is_kept_apart(monkeypatch):
    monkeypatch.setattr(stochastic, "mix64", lambda x: np.zeros_like(x))
    m_indptr, m_pins, weights = merge_identical_nets(np.array([0, 2, 4, 6]), np.array([0, 1, 0, 2, 0, 1]))
    merged = sorted((tuple(m_pins[a:b].tolist()), int(w)) for a, b, w in zip(m_indptr, m_indptr[1:], weights))
    assert merged == [((0, 1), 2), ((0, 2), 1)]


def test_stochastic_parts_hands_every_option_on(monkeypatch):
    import time

    seen = {}
    real_sample_nets = stochastic.sample_nets

    def sample_spy(sampler, rng, **kwargs):
        seen["draw"] = rng.integers(2**62)
        seen["sample"] = kwargs
        return real_sample_nets(sampler, np.random.default_rng(0), samples=4)

    def partition_spy(indptr, pins, weights, nparts, **kwargs):
        seen["weights"] = weights.tolist()
        seen["partition"] = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in kwargs.items()}
        return np.zeros(6, dtype=np.int64), {}

    monkeypatch.setattr(stochastic, "sample_nets", sample_spy)
    monkeypatch.setattr(stochastic, "partition_nets", partition_spy)
    before = time.perf_counter()
    _, info = stochastic_parts(CYCLE, 2, _ScriptedSpec(), epsilon=0.5, seed=4, partitioner="kahypar", preset="fast",
                               threads=2, vcycles=1, vertex_weight="work")
    wall = time.perf_counter() - before
    assert seen["draw"] == np.random.default_rng(4).integers(2**62)
    assert seen["sample"] == {"min_nets": hoeffding_nets(2, 0.02, 0.05), "samples": None, "coverage": 0.5}
    assert seen["weights"] == [6] * 6  # 3 nonzeros per row + ceil(mean 3)
    assert seen["partition"] == {"net_weights": [1, 1, 3, 2, 2], "epsilon": 0.5, "seed": 4, "partitioner": "kahypar",
                                 "preset": "fast", "threads": 2, "vcycles": 1}
    assert 0 <= info["shp"]["sample_s"] <= wall and 0 <= info["shp"]["partitioner_s"] <= wall
    stochastic_parts(CYCLE, 2, _ScriptedSpec(), shp_samples=4)
    assert seen["draw"] == np.random.default_rng(0).integers(2**62)  # the default seed
    assert seen["sample"] == {"min_nets": 0, "samples": 4, "coverage": 0.0}
    assert seen["weights"] == [3] * 6


def test_batch_entries_of_no_batches_count_nothing():
    from distgcn.partitioning.minibatch_metrics import batch_entries

    volume, messages = batch_entries([]).comm(np.array([0, 1]), 2)
    assert volume.tolist() == messages.tolist() == [] and volume.dtype == np.int64


def test_minibatch_parts_are_checked_against_the_part_count():
    from distgcn.partitioning.minibatch_metrics import minibatch_comm

    subs = [_Scripted(CYCLE, [(0, 1)]).sample(np.random.default_rng(0))]
    with pytest.raises(InputError, match="part id 2 of vertex 2 is out of range: expected 0 <= id < 2"):
        minibatch_comm(subs, [0, 1, 2, 0, 1, 1], 2)
