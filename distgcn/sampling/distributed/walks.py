"""Distributed walk samplers: random walks handed between ranks, and a replicated frontier.

Both follow the single-process samplers' rules (:mod:`distgcn.sampling.reference.samplers`:
a step from v goes to an off-diagonal in-neighbour of row v of Â; a step into
a vertex without in-neighbours records it and leaves the walker where it was)
with every random choice a keyed hash of P-independent counters, so a batch is
a function of (seed, epoch, batch) only, the same for every P and partition:

* ``rw``: vertex v roots Poisson(r / n) walks (r = N // h), decided by its
  owner; walker j of root v has the global id ``v + j·n``. Step t of a walker
  picks neighbour ``floor(u · deg)`` of its vertex's row, in global-id order,
  with ``u = uniform(stream_key(key, STEP, t), walker id)``. Only the owner of
  a vertex holds its row, so a walker that steps onto a halo vertex is sent to
  that vertex's owner (reverse direction of the halo plan, one message per
  peer per step); h steps need h − 1 hand-off rounds.
* ``frontier``: every rank replicates the m frontier vertices, their degrees
  and owners (O(m)); the pop is a keyed integer target in a replicated Fenwick
  tree, so every rank pops the same walker; the owner of the popped vertex
  picks the neighbour and broadcasts it with one allreduce per step. The walk
  stays sequential: N − m steps, each a collective when P > 1.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import torch

from distgcn.comm.transport import Transport
from distgcn.errors import InputError
from distgcn.hashing import uniforms
from distgcn.sampling.distributed.keys import MOVE, POP, ROOTS, START, STEP, stream_key
from distgcn.sampling.distributed.samplers import DistributedSampler
from distgcn.sampling.reference.dashboard import FenwickTree
from distgcn.shard.rank_shard import Shard
from distgcn.spmm.plan_bytes import PlanBytes

Walkers = TypeVar("Walkers", np.ndarray, torch.Tensor)
"""Walkers' local columns or ids: numpy arrays on the host, tensors on a device."""


class WalkRows:
    """Each owned row's off-diagonal in-neighbours in global-id order, as local columns (halo h: n_owned + h).

    Global-id order makes "the k-th neighbour" mean the same vertex on every
    partition (the shard's halo columns are grouped by sender, not sorted).
    """

    def __init__(self, shard: Shard, plan_bytes: PlanBytes):
        owned, halo = shard.owned_block.tocsr(), shard.halo_block.tocsr()
        n_owned = shard.n_owned
        rows = np.concatenate((np.repeat(np.arange(n_owned), np.diff(owned.indptr)),
                               np.repeat(np.arange(n_owned), np.diff(halo.indptr))))
        cols = np.concatenate((owned.indices.astype(np.int64), halo.indices.astype(np.int64) + n_owned))
        self.col_gid = np.concatenate((shard.global_ids, shard.halo_global_ids)).astype(np.int64)
        """int64 [n_owned + n_halo]: global id of each local column."""
        off = rows != cols  # halo columns are >= n_owned > any row, so only owned self loops go
        rows, cols = rows[off], cols[off]
        order = np.lexsort((self.col_gid[cols], rows))
        self.targets = cols[order]
        self.indptr = np.zeros(n_owned + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n_owned), out=self.indptr[1:])
        deg_owned = np.diff(self.indptr)
        self.deg = np.concatenate((deg_owned, plan_bytes.forward(deg_owned)))
        """int64 [n_owned + n_halo]: deg (off-diagonal in-degree) of each local column, halo ones from their owners."""

    def step(self, cur: np.ndarray, u01: np.ndarray) -> np.ndarray:
        """The local column of neighbour ``floor(u01 · deg)`` of each owned row ``cur`` (all with deg > 0)."""
        d = self.deg[cur]
        return self.targets[self.indptr[cur] + np.minimum((u01 * d).astype(np.int64), d - 1)]


def root_count_cdf(mean: float) -> np.ndarray:
    """P(Poisson(mean) <= k) for k = 0 .. K − 1, K = floor(mean + 10·sqrt(mean)) + 20 (tail below 2^-53).

    A vertex with uniform u roots ``searchsorted(cdf, u, side="right")`` walks
    (inverse-CDF sampling, vectorized over the owned vertices). The pmf is
    summed in log space so that a large mean does not underflow exp(−mean).
    """
    k = np.arange(int(mean + 10 * np.sqrt(mean)) + 20)
    log_factorial = np.concatenate(([0.0], np.cumsum(np.log(k[1:]))))
    return np.cumsum(np.exp(k * np.log(mean) - mean - log_factorial))


class RandomWalkSampler(DistributedSampler):
    """rw: Poisson roots decided by their owners; walkers cross ranks by hand-off over the halo plan."""

    name = "rw"

    def __init__(self, shard: Shard, transport: Transport, batch_size: int, walk_length: int = 2):
        super().__init__(shard, transport)
        self.walk_length = walk_length
        self.walk = WalkRows(shard, self.bytes)
        self.roots_cdf = root_count_cdf(max(1, batch_size // walk_length) / shard.n_global)
        self.traffic = {"walker_messages": 0, "walkers_handed_off": 0}

    def sample(self, key: int) -> tuple[np.ndarray, np.ndarray]:
        n_owned = self.shard.n_owned
        gid = self.shard.global_ids.astype(np.int64)
        counts = np.searchsorted(self.roots_cdf, uniforms(stream_key(key, ROOTS), gid), side="right")
        owned_in = counts > 0
        halo_in = np.zeros(self.shard.n_halo, dtype=bool)
        cur = np.repeat(np.arange(n_owned), counts)
        walker = gid[cur] + (np.arange(cur.size) - np.repeat(np.cumsum(counts) - counts, counts)) * self.n_global
        moving = self.walk.deg[cur] > 0  # a root without in-neighbours never moves
        cur, walker = cur[moving], walker[moving]
        for t in range(self.walk_length):
            nxt = self.walk.step(cur, uniforms(stream_key(key, STEP, t), walker))
            away = nxt >= n_owned
            owned_in[nxt[~away]] = True
            halo_in[nxt[away] - n_owned] = True
            cur = np.where(self.walk.deg[nxt] > 0, nxt, cur)
            if t + 1 < self.walk_length:
                cur, walker = self.hand_off(cur, walker)
        owned_in = self.bytes.reverse_or(owned_in, halo_in)  # halo vertices reached are recorded by their owners
        return owned_in, self.bytes.forward(owned_in.astype(np.uint8)) != 0

    def hand_off(self, cur: Walkers, walker: Walkers) -> tuple[Walkers, Walkers]:
        """Walkers standing on halo vertices continue on those vertices' owners (collective).

        numpy arrays here; the device sampler (:mod:`distgcn.sampling.device.walks`) passes tensors on its device.
        """
        n_owned = self.shard.n_owned
        away = cur >= n_owned
        rows, ids, messages = self.bytes.to_owners(cur[away] - n_owned, walker[away])
        self.traffic["walker_messages"] += messages
        self.traffic["walkers_handed_off"] += int(away.sum())
        join = np.concatenate if isinstance(cur, np.ndarray) else torch.cat
        return join((cur[~away], rows)), join((walker[~away], ids))


class FrontierSampler(DistributedSampler):
    """frontier: the multi-dimensional random walk with a replicated frontier and one allreduce per step."""

    name = "frontier"

    def __init__(self, shard: Shard, transport: Transport, batch_size: int, frontier_size: int):
        super().__init__(shard, transport)
        self.frontier_size = frontier_size
        self.steps = batch_size - frontier_size
        self.walk = WalkRows(shard, self.bytes)
        self.candidates = np.flatnonzero(self.walk.deg[:shard.n_owned] > 0)
        available = int(transport.allreduce([self.candidates.size])[0])
        if available < frontier_size:
            raise InputError(f"--frontier-size {frontier_size} exceeds the {available} vertices with an "
                             "in-neighbour")
        peer = self.bytes.halo_peer
        self.col_rank = np.concatenate((np.full(shard.n_owned, transport.rank),
                                        np.asarray(shard.recv_peers)[peer])).astype(np.int64)
        """int64 [n_owned + n_halo]: owner rank of each local column."""
        halo_position = np.arange(shard.n_halo) - self.bytes.recv_start[peer]
        self.col_index = np.concatenate((np.arange(shard.n_owned), halo_position)).astype(np.int64)
        """int64 [n_owned + n_halo]: an owned column's local row; a halo column's position in its owner's
        send list for this rank, which the owner maps to its local row without any global lookup."""
        self.send_start_by_rank = {p: s.start for p, s in self.bytes.send}

    def _local_best(self, key: int) -> tuple[np.ndarray, ...]:
        """This rank's offer of start vertices: its (at most) m candidates with the smallest keyed hashes, in
        (hash, global id) order, as (hashes, global ids, degrees, owner ranks, owners' local rows)."""
        m, c = self.frontier_size, self.candidates
        h = uniforms(stream_key(key, START), self.shard.global_ids[c])
        if h.size > m:  # O(n) selection; ties with the m-th hash stay in, for the exact (hash, id) order below
            keep = h <= np.partition(h, m - 1)[m - 1]
            c, h = c[keep], h[keep]
        gid = self.shard.global_ids[c].astype(np.int64)
        best = np.lexsort((gid, h))[:m]
        return h[best], gid[best], self.walk.deg[c[best]], self.col_rank[c[best]], c[best]

    def _starts(self, key: int, mine: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        """Global ids, degrees, owner ranks and owners' local rows of the m start vertices.

        The starts are the m vertices with deg > 0 and the smallest keyed
        hashes, a uniform m-subset without replacement, in hash order; each
        rank offers its m best (``mine``) and one allgather merges them (O(m·P) values, not O(n)).
        """
        pieces = self.transport.allgather_object(mine) if self.transport.size > 1 else [mine]
        h, gid, deg, rank, local = (np.concatenate(parts) for parts in zip(*pieces))
        first = np.lexsort((gid, h))[:self.frontier_size]
        return gid[first], deg[first], rank[first], local[first]

    def sample(self, key: int) -> tuple[np.ndarray, np.ndarray]:
        sampled = self.visited(key)
        return (np.isin(self.shard.global_ids, sampled, assume_unique=True),
                np.isin(self.shard.halo_global_ids, sampled, assume_unique=True))

    def visited(self, key: int, offer: tuple[np.ndarray, ...] | None = None) -> np.ndarray:
        """The batch's global ids, sorted: the m starts and every vertex the walk reached (collective).

        ``offer``: this rank's :meth:`_local_best` of ``key``, where it was computed elsewhere (on a device).
        """
        starts, start_deg, start_rank, start_local = self._starts(key, offer if offer is not None else self._local_best(key))
        here, size = self.transport.rank, self.transport.size
        owner, local, weight = start_rank.tolist(), start_local.tolist(), start_deg.tolist()
        tree = FenwickTree(start_deg)
        counters = np.arange(self.steps, dtype=np.int64)
        pop_u = uniforms(stream_key(key, POP), counters).tolist()
        move_u = uniforms(stream_key(key, MOVE), counters).tolist()
        indptr, targets, send_index = (memoryview(a) for a in (self.walk.indptr, self.walk.targets,
                                                                self.bytes.send_index))
        columns = [memoryview(a) for a in (self.walk.col_gid, self.walk.deg, self.col_rank, self.col_index)]
        visited = [0] * self.steps
        for k in range(self.steps):
            slot = tree.find(min(int(pop_u[k] * tree.total), tree.total - 1))
            picker = owner[slot]
            if picker == here:
                v = local[slot]
                d = indptr[v + 1] - indptr[v]
                col = targets[indptr[v] + min(int(move_u[k] * d), d - 1)]
                reached = [c[col] for c in columns]
            else:
                reached = [0, 0, 0, 0]
            if size > 1:  # a broadcast from the picker: the others add zeros (ids < 2^53 are exact)
                reached = [int(x) for x in self.transport.allreduce(reached)]
            u, du, ur, index = reached
            visited[k] = u
            if du:  # a walker never moves onto a vertex without in-neighbours
                tree.add(slot, du - weight[slot])
                weight[slot], owner[slot] = du, ur
                if ur == here:
                    local[slot] = index if picker == here else send_index[self.send_start_by_rank[picker] + index]
        return np.unique(np.concatenate((starts, np.asarray(visited, dtype=np.int64))))
