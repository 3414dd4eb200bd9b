"""Each rank's part of the minibatch samplers, keyed by global ids so that every P draws the same batches.

See :mod:`distgcn.sampling` for how they relate to the single-process
reference samplers; :mod:`distgcn.training.sampler_choice` picks one for a run.
"""

from distgcn.sampling.distributed.keys import batch_key, stream_key
from distgcn.sampling.distributed.normalization import LocalNormalization, presample
from distgcn.sampling.distributed.samplers import (
           DISTRIBUTED_SAMPLERS,
           DistributedSampler,
           EdgeSampler,
           NodeSampler,
)
from distgcn.sampling.distributed.walks import FrontierSampler, RandomWalkSampler

__all__ = ["batch_key", "stream_key", "LocalNormalization", "presample",
           "DISTRIBUTED_SAMPLERS", "DistributedSampler", "EdgeSampler", "NodeSampler",
           "FrontierSampler", "RandomWalkSampler"]
