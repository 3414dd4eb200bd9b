"""Distributed minibatch (GraphSAINT-style) training over the 1D row partition (docs/minibatch.md)."""

from .factory import make_distributed_sampler, sampler_options
from .trainer import MinibatchConfig, MinibatchTrainer

__all__ = ["MinibatchConfig", "MinibatchTrainer", "make_distributed_sampler", "sampler_options"]
