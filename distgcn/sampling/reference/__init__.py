"""Single-process GraphSAINT samplers over the whole Â, and their normalization (see :mod:`distgcn.sampling`)."""

from distgcn.sampling.reference.dashboard import (
    FenwickTree,
    frontier_walk_dashboard,
    frontier_walk_naive,
    frontier_walk_tree,
)
from distgcn.sampling.reference.normalization import (
    Normalization,
    estimate_normalization,
)
from distgcn.sampling.reference.samplers import (
    SAMPLER_OPTIONS,
    SAMPLERS,
    EdgeSampler,
    FrontierSampler,
    NodeSampler,
    RandomWalkSampler,
    Sampler,
    make_sampler,
)
from distgcn.sampling.reference.structure import SamplingGraph, Subgraph

__all__ = [
    "FenwickTree", "frontier_walk_dashboard", "frontier_walk_naive", "frontier_walk_tree",
    "Normalization", "estimate_normalization",
    "SAMPLER_OPTIONS", "SAMPLERS", "EdgeSampler", "FrontierSampler", "NodeSampler", "RandomWalkSampler",
    "Sampler", "make_sampler",
    "SamplingGraph", "Subgraph",
]
