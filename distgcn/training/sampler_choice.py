"""Which distributed sampler a run uses, with its options resolved and checked."""

from __future__ import annotations

from typing import Any

import torch

from distgcn.comm.transport import Transport
from distgcn.config import ConfigError
from distgcn.sampling.distributed import (
    DISTRIBUTED_SAMPLERS,
    DistributedSampler,
    EdgeSampler,
    FrontierSampler,
    NodeSampler,
    RandomWalkSampler,
)
from distgcn.sampling.reference import samplers as single_process
from distgcn.shard.rank_shard import Shard


def sampler_options(name: str, batch_size: int, given: dict[str, Any]) -> dict[str, Any]:
    """The sampler's options with defaults resolved (what a checkpoint records); unsupported ones are ConfigErrors."""
    if name not in DISTRIBUTED_SAMPLERS:
        raise ConfigError("minibatch.sampler", f"{{minibatch.sampler}} {name}: distributed minibatch training "
                                               f"supports {', '.join(DISTRIBUTED_SAMPLERS)}")
    if name == "rw":
        return {"walk_length": int(given.get("walk_length", single_process.SAMPLER_OPTIONS["rw"]["walk_length"]))}
    if name == "frontier":
        if given.get("pop", "tree") != "tree":
            raise ConfigError("minibatch.options.pop",
                              f"{{minibatch.options.pop}} {given['pop']}: distributed minibatch training pops with "
                              "the Fenwick tree only (the pop is a keyed integer target; docs/minibatch.md)")
        default = max(1, min(single_process.FrontierSampler.DEFAULT_FRONTIER, batch_size // 2))
        size = given.get("frontier_size") or default
        if size >= batch_size:
            raise ConfigError("minibatch.options.frontier_size",
                              f"{{minibatch.options.frontier_size}} {size} must be smaller than the budget "
                              f"({{minibatch.batch_size}}) {batch_size}")
        return {"frontier_size": int(size)}
    return {}


def make_distributed_sampler(name: str, shard: Shard, transport: Transport, batch_size: int,
                             options: dict[str, Any]) -> DistributedSampler:
    """This rank's part of sampler ``name`` (collective: setup exchanges over the plan)."""
    classes = {"node": NodeSampler, "edge": EdgeSampler, "rw": RandomWalkSampler, "frontier": FrontierSampler}
    return classes[name](shard, transport, batch_size, **sampler_options(name, batch_size, options))


def samples_on_device(choice: str, device: torch.device) -> bool:
    """Whether ``--sample-on`` ``choice`` draws batches with the device samplers (torch on ``device``).

    ``auto``: on a GPU, so that batches are cut where the model trains; on a CPU the host samplers, which
    docs/minibatch.md ("Where samplers run") measured faster there.
    """
    return choice == "device" or (choice == "auto" and device.type != "cpu")
