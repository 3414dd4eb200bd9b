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

from distgcn.sampling.device.samplers import (
    DeviceEdgeSampler,
    DeviceNodeSampler,
    DeviceSampler,
    on_device,
)
from distgcn.sampling.device.walks import DeviceFrontierSampler, DeviceRandomWalkSampler

__all__ = ["DeviceSampler", "DeviceNodeSampler", "DeviceEdgeSampler", "DeviceRandomWalkSampler",
           "DeviceFrontierSampler", "on_device"]
