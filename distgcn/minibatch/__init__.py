"""Distributed minibatch (GraphSAINT-style) training over the 1D row partition (docs/minibatch.md)."""

from .sampling import DISTRIBUTED_SAMPLERS, DistributedSampler, PlanBytes
from .trainer import MinibatchConfig, MinibatchTrainer

__all__ = ["DISTRIBUTED_SAMPLERS", "DistributedSampler", "PlanBytes", "MinibatchConfig", "MinibatchTrainer"]
