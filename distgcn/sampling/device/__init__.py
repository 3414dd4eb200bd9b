"""The distributed samplers again, as tensor operations on the transport's device: a GPU rank samples where it trains.

:mod:`distgcn.sampling.distributed` draws each rank's part of a batch with
numpy and numba on the host. Here the same four samplers run as torch
operations on any device, so that a GPU rank's batches, their restricted plan,
blocks and normalization weights (:func:`distgcn.spmm.restricted.build_batch_on_device`)
never leave the GPU. Every decision is the same keyed hash of the same
counters (:func:`distgcn.hashing.uniforms_tensor` equals
:func:`distgcn.hashing.uniforms` bit for bit), so a device sampler draws
exactly the host sampler's batches; tests/sampling/test_device_samplers.py checks it.

A device sampler wraps the host sampler of the same name: the setup (inclusion
probabilities, walk rows, degrees) is computed once on the host and copied;
only ``sample(key)`` runs on the device. Where each one runs and why (the
frontier walk's chain stays on the host): docs/minibatch.md, "Where samplers run".
"""

import torch

from distgcn.sampling.device.samplers import (
    DeviceEdgeSampler,
    DeviceNodeSampler,
    DeviceSampler,
)
from distgcn.sampling.device.walks import DeviceFrontierSampler, DeviceRandomWalkSampler
from distgcn.sampling.distributed import DistributedSampler

__all__ = ["DeviceSampler", "DeviceNodeSampler", "DeviceEdgeSampler", "DeviceRandomWalkSampler",
           "DeviceFrontierSampler", "on_device"]


def on_device(host: DistributedSampler, device: torch.device, group_by_transit: bool = False) -> DeviceSampler:
    """The device form of a host sampler (``group_by_transit``: rw walkers sorted by the vertex they stand on
    before each step, NextDoor's transit order; measured no faster, docs/minibatch.md)."""
    if host.name == "rw":
        return DeviceRandomWalkSampler(host, device, group_by_transit)
    classes = {"node": DeviceNodeSampler, "edge": DeviceEdgeSampler, "frontier": DeviceFrontierSampler}
    return classes[host.name](host, device)
