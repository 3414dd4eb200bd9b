"""Single-process GraphSAINT samplers over the whole Â, and their normalization (see :mod:`distgcn.sampling`)."""

from .dashboard import FenwickTree, frontier_walk_dashboard, frontier_walk_naive, frontier_walk_tree
from .normalization import Normalization, estimate_normalization
from .samplers import (
    SAMPLER_OPTIONS,
    SAMPLERS,
    EdgeSampler,
    FrontierSampler,
    NodeSampler,
    RandomWalkSampler,
    Sampler,
    make_sampler,
)
from .structure import SamplingGraph, Subgraph

__all__ = [
    "FenwickTree", "frontier_walk_dashboard", "frontier_walk_naive", "frontier_walk_tree",
    "Normalization", "estimate_normalization",
    "SAMPLER_OPTIONS", "SAMPLERS", "EdgeSampler", "FrontierSampler", "NodeSampler", "RandomWalkSampler",
    "Sampler", "make_sampler",
    "SamplingGraph", "Subgraph",
]
