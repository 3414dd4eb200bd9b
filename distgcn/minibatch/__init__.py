"""Distributed minibatch (GraphSAINT-style) training over the 1D row partition (docs/minibatch.md)."""

from .factory import make_distributed_sampler, sampler_options
from .sampling import DISTRIBUTED_SAMPLERS, DistributedSampler, PlanBytes
from .trainer import MinibatchTrainer

__all__ = ["DISTRIBUTED_SAMPLERS", "DistributedSampler", "PlanBytes", "MinibatchTrainer",
           "make_distributed_sampler", "sampler_options"]
