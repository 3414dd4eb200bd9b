"""Device walk samplers: rw with walkers grouped by transit vertex, frontier with its sequential chain on the host.

rw follows NextDoor's transit-parallel idea (Jangda, Polisetty, Guha and
Serafini, *Accelerating Graph Sampling for Graph Machine Learning using
GPUs*, EuroSys 2021): before each step the walkers are sorted by the vertex
they stand on (their transit), so that the walkers of one vertex read its degree
and neighbour list together; which neighbour each takes is still its own keyed
hash, so grouping changes the order of the work and never the batch.

frontier: its N − m pops form one chain, each pop depending on the moves
before it (the Fenwick tree of walker degrees changes every step), so it has
no parallelism to give a GPU; a device loop would pay a kernel launch and a
device-to-host read per step. The chain runs on the host as in
:class:`distgcn.sampling.distributed.FrontierSampler`; the start selection (a
hash and a top-m over every candidate) and the memberships run on the device.
"""

from __future__ import annotations

import numpy as np
import torch

from distgcn.hashing import uniforms_tensor
from distgcn.sampling.device.samplers import DeviceSampler, _on
from distgcn.sampling.distributed import FrontierSampler, RandomWalkSampler
from distgcn.sampling.distributed.keys import ROOTS, START, STEP, stream_key


class DeviceRandomWalkSampler(DeviceSampler):
    """rw on the device: Poisson roots by inverse CDF, h keyed steps, walkers handed off between ranks."""

    def __init__(self, host: RandomWalkSampler, device: torch.device, group_by_transit: bool = False):
        super().__init__(host, device)
        self.walk_length = host.walk_length
        self.group_by_transit = group_by_transit
        walk = host.walk
        self.indptr, self.targets, self.deg = (_on(a, device) for a in (walk.indptr, walk.targets, walk.deg))
        self.roots_cdf = _on(host.roots_cdf, device)

    def _step(self, cur: torch.Tensor, u01: torch.Tensor) -> torch.Tensor:
        """:meth:`distgcn.sampling.distributed.walks.WalkRows.step` in tensors."""
        d = self.deg[cur]
        return self.targets[self.indptr[cur] + torch.minimum((u01 * d).long(), d - 1)]

    def sample(self, key: int) -> tuple[torch.Tensor, torch.Tensor]:
        n_owned = self.shard.n_owned
        counts = torch.searchsorted(self.roots_cdf, uniforms_tensor(stream_key(key, ROOTS), self.global_ids),
                                    right=True)
        owned_in = counts > 0
        halo_in = torch.zeros(self.shard.n_halo, dtype=torch.bool, device=self.device)
        cur = torch.repeat_interleave(torch.arange(n_owned, device=self.device), counts)
        first = torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
        walker = self.global_ids[cur] + (torch.arange(cur.shape[0], device=self.device) - first) * self.n_global
        moving = self.deg[cur] > 0  # a root without in-neighbours never moves
        cur, walker = cur[moving], walker[moving]
        for t in range(self.walk_length):
            if self.group_by_transit:
                cur, order = torch.sort(cur, stable=True)
                walker = walker[order]
            nxt = self._step(cur, uniforms_tensor(stream_key(key, STEP, t), walker))
            away = nxt >= n_owned
            owned_in[nxt[~away]] = True
            halo_in[nxt[away] - n_owned] = True
            cur = torch.where(self.deg[nxt] > 0, nxt, cur)
            if t + 1 < self.walk_length:
                cur, walker = self.host.hand_off(cur, walker)
        owned_in = self.bytes.reverse_or(owned_in, halo_in)  # halo vertices reached are recorded by their owners
        return owned_in, self._halo_copies(owned_in)


class DeviceFrontierSampler(DeviceSampler):
    """frontier: starts chosen and memberships marked on the device; the walk's chain on the host."""

    def __init__(self, host: FrontierSampler, device: torch.device):
        super().__init__(host, device)
        self.candidates = _on(host.candidates, device)
        self.candidate_ids = self.global_ids[self.candidates]
        self.halo_ids = _on(self.shard.halo_global_ids.astype(np.int64), device)

    def _local_best(self, key: int) -> tuple[np.ndarray, ...]:
        """The host's :meth:`~distgcn.sampling.distributed.FrontierSampler._local_best`, hashed and ranked here."""
        m, c, gid = self.host.frontier_size, self.candidates, self.candidate_ids
        h = uniforms_tensor(stream_key(key, START), gid)
        if h.shape[0] > m:  # ties with the m-th hash stay in, for the exact (hash, id) order below
            keep = h <= torch.kthvalue(h, m).values
            c, h, gid = c[keep], h[keep], gid[keep]
        by_id = torch.sort(gid, stable=True).indices
        best = by_id[torch.sort(h[by_id], stable=True).indices][:m]
        host = self.host
        c = c[best].cpu().numpy()
        return h[best].cpu().numpy(), gid[best].cpu().numpy(), host.walk.deg[c], host.col_rank[c], c

    def sample(self, key: int) -> tuple[torch.Tensor, torch.Tensor]:
        sampled = torch.from_numpy(self.host.visited(key, self._local_best(key))).to(self.device)
        return torch.isin(self.global_ids, sampled), torch.isin(self.halo_ids, sampled)
