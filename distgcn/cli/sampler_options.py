"""Command-line options that choose a minibatch sampler.

Shared by every command that samples (``partition --model stochastic`` and
minibatch ``train``), so that the flags and their checks are the same
everywhere; the sampler they choose is a :class:`distgcn.config.SamplerSpec`.
"""

from __future__ import annotations

import argparse

from distgcn.cli.options import checked_type, positive_int
from distgcn.config import PartitionerConfig, SamplerSpec
from distgcn.sampling.reference.samplers import (
    SAMPLER_OPTIONS,
    SAMPLERS,
    FrontierSampler,
)

__all__ = ["add_sampler_options", "sampler_spec", "add_shp_options"]

_positive_float = checked_type(float, lambda v: v > 0 and v != float("inf"), "a positive number")
_open_probability = checked_type(float, lambda v: 0 < v < 1, "a probability in (0, 1)")


def add_sampler_options(parser: argparse.ArgumentParser, required_by: str | None = None) -> None:
    """--sampler, --batch-size and the sampler-specific options (docs/minibatch.md, "Samplers"); ``required_by``
    names the setting that requires the first two, in the group's title."""
    title = "minibatch sampler" + (f" ({required_by} requires --sampler and --batch-size)" if required_by else "")
    group = parser.add_argument_group(title)
    group.add_argument("--sampler", choices=list(SAMPLERS), help="subgraph sampler for minibatches")
    group.add_argument("--batch-size", type=positive_int, metavar="N",
                       help="target vertices per minibatch (node, edge: vertices drawn; rw: roots x walk "
                            "length; frontier: the budget)")
    group.add_argument("--walk-length", type=positive_int, metavar="H",
                       help=f"rw: steps per walk (default: {SAMPLER_OPTIONS['rw']['walk_length']})")
    group.add_argument("--frontier-size", type=positive_int, metavar="M",
                       help="frontier: number of walkers (default: min(1000, N/2))")
    group.add_argument("--frontier-pop", dest="pop", choices=list(FrontierSampler.WALKS),
                       help=f"frontier: how a walker is popped (default: {SAMPLER_OPTIONS['frontier']['pop']})")


def sampler_spec(args: argparse.Namespace) -> SamplerSpec | None:
    """The sampler the options ask for, None when there is no --sampler; inconsistent flags are ConfigErrors
    (distgcn.config.sampler_spec), worded with the flags."""
    from distgcn.training.settings import sampler_of

    return sampler_of(PartitionerConfig.SECTION, vars(args))


def add_shp_options(parser: argparse.ArgumentParser) -> None:
    """How many sampled subgraphs the stochastic hypergraph model draws (docs/minibatch.md)."""
    group = parser.add_argument_group("stochastic hypergraph model (--model stochastic)")
    group.add_argument("--shp-epsilon", type=_positive_float, metavar="EPS",
                       help="the Hoeffding bound alone, no coverage target: error of the mean connectivity-1 per "
                            "net (default: 0.02)")
    group.add_argument("--shp-delta", type=_open_probability, metavar="DELTA",
                       help="the Hoeffding bound alone, no coverage target: probability that the error exceeds "
                            "EPS (default: 0.05)")
    group.add_argument("--shp-samples", type=positive_int, metavar="B",
                       help="draw exactly B subgraphs (default: until the Hoeffding bound is met and the "
                            "subgraphs contain half of the edges, at most 4000 subgraphs; the count and the edge "
                            "coverage reached are printed)")
