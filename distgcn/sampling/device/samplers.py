"""Device samplers: the base class, node and edge (Poisson inclusion by keyed hash, as the host samplers)."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from distgcn.hashing import uniforms_tensor
from distgcn.sampling.distributed import DistributedSampler, EdgeSampler, NodeSampler


def _on(array, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(array).to(device)


class DeviceSampler(ABC):
    """This rank's part of a sampler on ``device``: ``sample(key)`` gives bool tensors there.

    It shares the host sampler's plan exchanges (``bytes``) and traffic counters, and holds each block's entry
    rows and columns (``rows``, ``cols``) on the device, in the shard's scipy order, for normalization counts.
    """

    def __init__(self, host: DistributedSampler, device: torch.device):
        self.host = host
        self.name = host.name
        self.device = device
        self.shard = host.shard
        self.transport = host.transport
        self.bytes = host.bytes
        self.n_global = host.n_global
        self.traffic = host.traffic
        self.rows = {block: _on(rows, device) for block, rows in host.rows.items()}
        self.cols = {block: _on(cols, device) for block, cols in host.cols.items()}
        self.global_ids = _on(self.shard.global_ids.astype("int64"), device)

    @abstractmethod
    def sample(self, key: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(owned membership [n_owned], halo membership [n_halo]) of the batch ``key`` (collective)."""

    def _halo_copies(self, owned_in: torch.Tensor) -> torch.Tensor:
        """The halo rows' memberships, from their owners (one byte per halo row)."""
        return self.bytes.forward(owned_in.to(torch.uint8)) != 0


class DeviceNodeSampler(DeviceSampler):
    """node: v is in the batch iff its keyed uniform is below its inclusion probability."""

    def __init__(self, host: NodeSampler, device: torch.device):
        super().__init__(host, device)
        self.inclusion = _on(host.inclusion, device)

    def sample(self, key: int) -> tuple[torch.Tensor, torch.Tensor]:
        owned_in = uniforms_tensor(key, self.global_ids) < self.inclusion
        return owned_in, self._halo_copies(owned_in)


class DeviceEdgeSampler(DeviceSampler):
    """edge: each off-diagonal entry drawn by its keyed (v, u) uniform; both endpoints join the batch."""

    def __init__(self, host: EdgeSampler, device: torch.device):
        super().__init__(host, device)
        self.edge_inclusion = {b: _on(p, device) for b, p in host.edge_inclusion.items()}
        self.edge_counters = {b: _on(c, device) for b, c in host.edge_counters.items()}

    def sample(self, key: int) -> tuple[torch.Tensor, torch.Tensor]:
        owned_in = torch.zeros(self.shard.n_owned, dtype=torch.bool, device=self.device)
        halo_in = torch.zeros(self.shard.n_halo, dtype=torch.bool, device=self.device)
        for block, marks in (("owned", owned_in), ("halo", halo_in)):
            chosen = uniforms_tensor(key, self.edge_counters[block]) < self.edge_inclusion[block]
            owned_in[self.rows[block][chosen]] = True
            marks[self.cols[block][chosen]] = True
        owned_in = self.bytes.reverse_or(owned_in, halo_in)  # tell owners of halo endpoints
        return owned_in, self._halo_copies(owned_in)

