"""Communication of one minibatch SpMM under a 1D row partition, vectorized over many batches.

A minibatch multiplies by ``Â[S, S]``, the subgraph induced by the sampled
vertex set S. The rank owning row v ∈ S needs row u of H for every u ∈ S
with ``Â[v, u] != 0``; when ``parts[u] != parts[v]`` that row travels from
``parts[u]`` to ``parts[v]``, once per (receiving rank, u) pair. So

* volume = number of distinct (receiver, u) pairs = connectivity−1 of the
  subgraph's column nets (each net holds its own column's diagonal entry);
* messages = number of distinct (sender, receiver) pairs.

Evaluating 10⁴ batches under a dozen partitions is the benchmark's inner
loop, so batches are concatenated and counted with dense marks and
``np.bincount`` (no sort, no Python loop over batches or entries).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from distgcn.errors import InputError
from distgcn.partitioning.metrics import validate_parts
from distgcn.sampling.reference import Subgraph

__all__ = ["BatchEntries", "batch_entries", "minibatch_comm"]


@dataclass(frozen=True)
class BatchEntries:
    """The off-diagonal entries of several subgraphs, concatenated, in global ids.

    Built once per group of batches and evaluated under any number of part
    vectors. ``slot[k]`` numbers the (batch, column) of entry k densely, so
    that (slot, receiver) marks fit in an array of ``slots × P`` bytes;
    ``batch_of_slot`` maps a slot back to its batch.
    """

    rows: np.ndarray
    cols: np.ndarray
    slot: np.ndarray
    batch: np.ndarray
    batch_of_slot: np.ndarray
    num_batches: int

    def comm(self, parts: np.ndarray, nparts: int) -> tuple[np.ndarray, np.ndarray]:
        """(volume, messages) per batch, int64 arrays of length ``num_batches``."""
        recv = parts[self.rows]
        send = parts[self.cols]
        remote = recv != send
        recv = recv[remote]
        slot = self.slot[remote]
        batch = self.batch[remote]
        pair_mark = np.zeros(self.batch_of_slot.shape[0] * nparts, dtype=bool)
        pair_mark[slot * nparts + recv] = True
        slot_of_pair = np.flatnonzero(pair_mark) // nparts
        volume = np.bincount(self.batch_of_slot[slot_of_pair], minlength=self.num_batches)
        msg_mark = np.zeros(self.num_batches * nparts * nparts, dtype=bool)
        msg_mark[(batch * nparts + send[remote]) * nparts + recv] = True
        messages = np.bincount(np.flatnonzero(msg_mark) // (nparts * nparts), minlength=self.num_batches)
        return volume.astype(np.int64), messages.astype(np.int64)


def batch_entries(subgraphs: Sequence[Subgraph]) -> BatchEntries:
    """Concatenate the off-diagonal entries of ``subgraphs`` (self loops never communicate)."""
    sizes = np.array([sg.num_vertices for sg in subgraphs], dtype=np.int64)
    slot_offset = np.zeros(len(subgraphs) + 1, dtype=np.int64)
    np.cumsum(sizes, out=slot_offset[1:])
    rows, cols, slots, batches = [], [], [], []
    for b, sg in enumerate(subgraphs):
        local_rows = sg.rows()
        off = local_rows != sg.indices
        local_cols = sg.indices[off].astype(np.int64, copy=False)
        rows.append(sg.vertices[local_rows[off]])
        cols.append(sg.vertices[local_cols])
        slots.append(local_cols + slot_offset[b])
        batches.append(np.full(local_cols.shape[0], b, dtype=np.int64))

    def cat(arrays: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)

    batch_of_slot = np.repeat(np.arange(len(subgraphs), dtype=np.int64), sizes)
    return BatchEntries(cat(rows), cat(cols), cat(slots), cat(batches), batch_of_slot, len(subgraphs))


def minibatch_comm(subgraphs: Sequence[Subgraph], parts, nparts: int) -> tuple[np.ndarray, np.ndarray]:
    """(volume, messages) of each minibatch SpMM ``Â[S, S] H[S]`` under ``parts``."""
    if not subgraphs:
        raise InputError("no minibatches to measure")
    n = int(np.asarray(parts).shape[0])
    parts = validate_parts(parts, n, nparts)
    if any(sg.num_vertices and int(sg.vertices[-1]) >= n for sg in subgraphs):
        raise InputError(f"a minibatch has a vertex id >= {n}, the length of the part vector")
    return batch_entries(subgraphs).comm(parts, int(nparts))
