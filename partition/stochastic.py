"""The stochastic hypergraph model (SHP) of minibatch communication.

Demirci, Haldar, Ferhatosmanoglu, "Scalable Graph Convolutional Network
Training on Distributed-Memory Systems", PVLDB 16(4), 2023, Algorithm 3. A
minibatch multiplies by the induced ``Â[S, S]``, so the rows of H it moves
are the connectivity−1 of the column nets *of that subgraph*, not of Â. The
model samples b subgraphs with the training sampler, takes one net per
column of each (pins: the subgraph's rows with a nonzero in that column),
and partitions the union of all these nets, over the full vertex set, for
connectivity−1. Its cut is then b times an unbiased estimate of the expected
volume per minibatch.

Number of nets: with P parts a net's connectivity−1 lies in [0, P − 1], so by
Hoeffding's inequality the mean over |N| independent nets is within ε of its
expectation with probability ≥ 1 − δ once |N| ≥ (P − 1)² ln(2/δ) / (2ε²).
Each sample contributes |S| nets (one per column, including those whose only
pin is the diagonal), and samples are drawn until the count reaches the
bound; b is the number drawn. A net with one pin can never be cut, so it is
counted but not handed to the partitioner, and identical nets (same pins,
from different samples) are merged into one net whose weight is their count,
which leaves the km1 objective unchanged.

Number of samples by default: the bound counts nets, most of which have one
pin, and at small P it is met by a handful of samples that contain a few
percent of the edges; the rest of the graph is then placed by the balance
constraint alone, no better than at random (docs/minibatch.md). Without
``shp_samples``, ``shp_epsilon`` or ``shp_delta``, samples are therefore
drawn until the bound is met *and* the edge coverage (the fraction of Â's
off-diagonal entries in at least one sample) reaches
``DEFAULT_SHP_COVERAGE``, at most ``MAX_COVERAGE_SAMPLES`` samples.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from distgcn.config import EPSILON, VERTEX_WEIGHT, SamplerSpec
from distgcn.errors import InputError
from distgcn.hashing import GOLDEN, mix64
from distgcn.partitioning.hypergraph import partition_nets
from distgcn.partitioning.weights import vertex_weights
from distgcn.sampling.reference import Sampler, Subgraph
from distgcn.sampling.reference.samplers import sampler_for

__all__ = ["DEFAULT_SHP_EPSILON", "DEFAULT_SHP_DELTA", "DEFAULT_SHP_COVERAGE", "MAX_COVERAGE_SAMPLES",
           "hoeffding_nets", "SampledNets", "subgraph_nets",
           "sample_nets", "merge_identical_nets", "stochastic_parts", "sampling_report"]

DEFAULT_SHP_EPSILON = 0.02
DEFAULT_SHP_DELTA = 0.05
DEFAULT_SHP_COVERAGE = 0.5
"""Edge coverage the default sample count reaches: measured, b = 500 samples (coverage 0.45 and 0.49) already
beat HP on soc-Slashdot0902 and musae-facebook at every P (docs/minibatch.md), 3-9 samples (0.01-0.03) did not."""
MAX_COVERAGE_SAMPLES = 4000
"""At most this many samples for the coverage target (a sampler that never draws some edges cannot reach it)."""
_SECOND_SALT = np.uint64(0x632BE59BD9B4E019)
"""Added to pin ids for the second of the two pin-set hashes (the first adds GOLDEN), so that they differ."""


def hoeffding_nets(nparts: int, epsilon: float, delta: float) -> int:
    """Smallest |N| with (P − 1)² ln(2/δ) / (2ε²) ≤ |N| (P = ``nparts``)."""
    if int(nparts) != nparts or nparts < 1:
        raise InputError(f"the number of parts must be a positive integer, got {nparts}")
    if not (epsilon > 0) or not math.isfinite(epsilon):
        raise InputError(f"--shp-epsilon must be a positive number, got {epsilon}")
    if not (0 < delta < 1):
        raise InputError(f"--shp-delta must lie in (0, 1), got {delta}")
    bound = (nparts - 1) ** 2 * math.log(2.0 / delta) / (2.0 * epsilon ** 2)
    return int(math.ceil(bound - 1e-9 * bound))  # absorb rounding of an exact integer bound


def subgraph_nets(sub: Subgraph) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, pins) of the column nets of ``Â[S, S]``, pins in global ids, sorted within each net."""
    k = sub.num_vertices
    pattern = sp.csr_matrix((np.ones(sub.num_edges, dtype=np.int8), sub.indices, sub.indptr), shape=(k, k))
    csc = pattern.tocsc()
    csc.sort_indices()
    return csc.indptr.astype(np.int64), sub.vertices[csc.indices]


@dataclass(frozen=True)
class SampledNets:
    """The merged nets of b sampled subgraphs, with the counts meta.json reports."""

    indptr: np.ndarray
    pins: np.ndarray
    net_weights: np.ndarray
    samples: int
    nets: int
    """nets sampled, one per column of every subgraph (what the Hoeffding bound counts)"""
    cuttable_nets: int
    """nets with two pins or more, before merging"""
    cuttable_pins: int
    edge_coverage: float
    """fraction of Â's off-diagonal entries that occur in at least one sampled subgraph"""


def sample_nets(sampler: Sampler, rng: np.random.Generator, *, min_nets: int = 0,
                samples: int | None = None, coverage: float = 0.0,
                max_samples: int = MAX_COVERAGE_SAMPLES) -> SampledNets:
    """Draw subgraphs until ``samples`` are drawn (when given), else until ``min_nets`` nets are counted and the
    edge coverage reaches ``coverage`` (at most ``max_samples`` samples for the coverage)."""
    if samples is not None and samples < 1:
        raise InputError(f"--shp-samples must be a positive integer, got {samples}")
    graph = sampler.graph
    diagonal = graph.diag_pos[graph.has_diag]
    off_diagonal_entry = np.ones(graph.nnz, dtype=bool)
    off_diagonal_entry[diagonal] = False
    off_diagonal = graph.nnz - diagonal.shape[0]
    wanted = math.ceil(coverage * off_diagonal)
    sizes_list, pins_list = [], []
    drawn = counted = covered = 0
    seen = np.zeros(graph.nnz, dtype=bool)

    def more() -> bool:
        if samples is not None:
            return drawn < samples
        return counted < min_nets or (covered < wanted and drawn < max_samples)

    while more():
        sub = sampler.sample(rng)
        new = np.unique(sub.edge_ids[~seen[sub.edge_ids]])
        covered += int(np.count_nonzero(off_diagonal_entry[new]))
        seen[new] = True
        indptr, pins = subgraph_nets(sub)
        sizes = np.diff(indptr)
        keep = sizes >= 2
        drawn += 1
        counted += int(sizes.shape[0])
        sizes_list.append(sizes[keep])
        pins_list.append(pins[np.repeat(keep, sizes)])
    sizes = np.concatenate(sizes_list) if sizes_list else np.zeros(0, dtype=np.int64)
    pins = np.concatenate(pins_list) if pins_list else np.zeros(0, dtype=np.int64)
    indptr = np.zeros(sizes.shape[0] + 1, dtype=np.int64)
    np.cumsum(sizes, out=indptr[1:])
    merged_indptr, merged_pins, weights = merge_identical_nets(indptr, pins)
    reached = covered / off_diagonal if off_diagonal else 1.0
    return SampledNets(merged_indptr, merged_pins, weights, drawn, counted, int(sizes.shape[0]), int(pins.shape[0]),
                       reached)


def merge_identical_nets(indptr: np.ndarray, pins: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge nets with equal pin lists (sorted pins, no empty net): (indptr, pins, weights = multiplicity).

    Nets are grouped by (size, two 64-bit hashes of the pin set), then every
    net is compared pin by pin with its group's first net, so a hash
    collision can only keep two nets apart, never merge different ones.
    """
    m = int(indptr.shape[0]) - 1
    if m == 0:
        return indptr, pins, np.zeros(0, dtype=np.int64)
    sizes = np.diff(indptr)
    starts = indptr[:-1]
    pin_ids = pins.astype(np.uint64)
    h1 = np.add.reduceat(mix64(pin_ids + GOLDEN), starts)
    h2 = np.add.reduceat(mix64(pin_ids + _SECOND_SALT), starts)
    order = np.lexsort((h2, h1, sizes))
    head = np.ones(m, dtype=bool)
    head[1:] = (np.diff(sizes[order]) != 0) | (np.diff(h1[order]) != 0) | (np.diff(h2[order]) != 0)
    rep = np.empty(m, dtype=np.int64)
    rep[order] = order[np.maximum.accumulate(np.where(head, np.arange(m), 0))]
    net_of_pin = np.repeat(np.arange(m, dtype=np.int64), sizes)
    offset = np.arange(pins.shape[0], dtype=np.int64) - starts[net_of_pin]
    differs = pins != pins[starts[rep][net_of_pin] + offset]
    collided = np.bincount(net_of_pin[differs], minlength=m) > 0
    rep[collided] = np.flatnonzero(collided)
    is_rep = rep == np.arange(m)
    weights = np.bincount(rep, minlength=m)[is_rep].astype(np.int64)
    new_indptr = np.zeros(int(is_rep.sum()) + 1, dtype=np.int64)
    np.cumsum(sizes[is_rep], out=new_indptr[1:])
    return new_indptr, pins[is_rep[net_of_pin]], weights


def stochastic_parts(a_hat: sp.spmatrix, nparts: int, spec: SamplerSpec, *, shp_epsilon: float | None = None,
                     shp_delta: float | None = None, shp_samples: int | None = None, epsilon: float = EPSILON,
                     seed: int = 0, partitioner: str | None = None, preset: str | None = None,
                     threads: int | None = None, vcycles: int | None = None,
                     vertex_weight: str = VERTEX_WEIGHT) -> tuple[np.ndarray, dict]:
    """Partition Â's rows by the stochastic hypergraph of ``spec``'s minibatches; return (parts, info).

    Subgraphs are drawn from ``numpy.random.default_rng(seed)``; ``shp_samples``
    fixes b, otherwise the Hoeffding bound with ``shp_epsilon`` and
    ``shp_delta`` (defaults 0.02 and 0.05) sets the number of nets, and when
    neither is given, the coverage target ``DEFAULT_SHP_COVERAGE`` too.
    """
    if shp_samples is not None and (shp_epsilon is not None or shp_delta is not None):
        raise InputError("give either --shp-samples or --shp-epsilon/--shp-delta, not both")
    n = int(a_hat.shape[0])
    chosen = shp_samples is None and shp_epsilon is None and shp_delta is None
    shp: dict = {"samples": None, "nets_bound": None, "epsilon": None, "delta": None,
                 "coverage_target": DEFAULT_SHP_COVERAGE if chosen else None}
    if shp_samples is None:
        shp["epsilon"] = DEFAULT_SHP_EPSILON if shp_epsilon is None else float(shp_epsilon)
        shp["delta"] = DEFAULT_SHP_DELTA if shp_delta is None else float(shp_delta)
        shp["nets_bound"] = hoeffding_nets(nparts, shp["epsilon"], shp["delta"])
    sampler = sampler_for(spec, a_hat)  # checks the sampler's name and options, also when P = 1
    if nparts == 1:
        shp["samples"] = 0
        return np.zeros(n, dtype=np.int64), {"partitioner": None, "preset": None, "shp": shp}
    t0 = time.perf_counter()
    nets = sample_nets(sampler, np.random.default_rng(seed), min_nets=shp["nets_bound"] or 0, samples=shp_samples,
                       coverage=shp["coverage_target"] or 0.0)
    sample_s = time.perf_counter() - t0
    shp.update(samples=nets.samples, nets=nets.nets, cuttable_nets=nets.cuttable_nets,
               cuttable_pins=nets.cuttable_pins, merged_nets=int(nets.net_weights.shape[0]),
               merged_pins=int(nets.pins.shape[0]), edge_coverage=nets.edge_coverage, sample_s=sample_s)
    if nets.cuttable_nets == 0:
        raise InputError(f"none of the {nets.samples} sampled subgraphs has an edge between two sampled vertices, "
                         "so no partition communicates less than another; raise --batch-size or --shp-samples")
    t1 = time.perf_counter()
    parts, info = partition_nets(nets.indptr, nets.pins, vertex_weights(a_hat, vertex_weight), nparts,
                                 net_weights=nets.net_weights, epsilon=epsilon, seed=seed, partitioner=partitioner,
                                 preset=preset, threads=threads, vcycles=vcycles)
    shp["partitioner_s"] = time.perf_counter() - t1
    info["shp"] = shp
    return parts, info


def sampling_report(shp: dict) -> tuple[str, str | None]:
    """What the model sampled, as one line, and a warning line when the samples cover too few edges to be sound.

    ``shp`` is ``info["shp"]`` of :func:`stochastic_parts`.
    """
    coverage = shp.get("edge_coverage")
    if coverage is None:  # P = 1: nothing sampled
        return "stochastic model: one part, nothing sampled", None
    if shp["coverage_target"] is not None:
        why = f"Hoeffding bound of {shp['nets_bound']} nets and edge coverage target {shp['coverage_target']:g}"
    elif shp["nets_bound"] is not None:
        why = f"Hoeffding bound of {shp['nets_bound']} nets (--shp-epsilon {shp['epsilon']:g}, " \
              f"--shp-delta {shp['delta']:g})"
    else:
        why = "--shp-samples"
    line = f"stochastic model: {shp['samples']} sampled subgraphs ({why}); edge coverage {coverage:.3f}"
    if coverage >= DEFAULT_SHP_COVERAGE:
        return line, None
    fix = ("the sampler reached no more in " + str(shp["samples"]) + " samples; raise --batch-size"
           if shp["coverage_target"] is not None else
           "leave out --shp-samples, --shp-epsilon and --shp-delta to sample up to coverage "
           f"{DEFAULT_SHP_COVERAGE:g}, or raise --shp-samples")
    return line, (f"warning: the samples contain only {coverage:.1%} of the edges (below {DEFAULT_SHP_COVERAGE:.0%}), "
                  f"so the rest of the graph is placed by balance alone, no better than at random: {fix}")
