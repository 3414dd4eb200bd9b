"""Each rank's part of the minibatch samplers, keyed by global ids so that every P draws the same batches.

See :mod:`distgcn.sampling` for how they relate to the single-process
reference samplers; :mod:`distgcn.minibatch.factory` picks one for a run.
"""

from .keys import batch_key, stream_key
from .normalization import LocalNormalization, presample
from .plan_bytes import PlanBytes
from .samplers import DISTRIBUTED_SAMPLERS, DistributedSampler, EdgeSampler, NodeSampler
from .walks import FrontierSampler, RandomWalkSampler

__all__ = ["batch_key", "stream_key", "LocalNormalization", "presample", "PlanBytes",
           "DISTRIBUTED_SAMPLERS", "DistributedSampler", "EdgeSampler", "NodeSampler",
           "FrontierSampler", "RandomWalkSampler"]
