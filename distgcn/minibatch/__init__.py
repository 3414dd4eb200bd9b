"""Distributed minibatch (GraphSAINT-style) training over the 1D row partition (docs/minibatch.md)."""

from .factory import make_distributed_sampler, sampler_options
from .source import SampledBatches

__all__ = ["SampledBatches", "make_distributed_sampler", "sampler_options"]
