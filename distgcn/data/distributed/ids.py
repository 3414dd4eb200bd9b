"""Numbering arbitrary vertex ids 0..n-1 in increasing order of id, by all ranks together.

A sample sort (Blelloch et al., "A comparison of sorting algorithms for the
Connection Machine CM-2", 1991): each rank sorts its distinct ids, P - 1
splitters drawn from every rank's sample cut the id range into P buckets,
rank b collects bucket b's ids from every rank (one all-to-all), and its
distinct ids are numbered from the count held by the ranks before it. The
number of each id then travels back to every rank that sent it (a second
all-to-all, in the order it came). This is :func:`distgcn.data.adjacency.remap_ids`
of the union of every rank's ids: the ids sorted, each mapped to its position.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from distgcn.data.adjacency import sorted_unique

SAMPLES_PER_RANK = 64
"""Ids each rank offers for choosing the splitters: evenly spaced through its sorted distinct ids."""


class Exchanging(Protocol):
    """What numbering needs of the ranks: a transport, or the torch-free MPIGroup."""

    rank: int
    size: int

    def allgather_object(self, value: Any) -> list[Any]: ...

    def alltoall_object(self, values: Sequence[Any]) -> list[Any]: ...


@dataclass
class Numbered:
    """The result on one rank."""

    arrays: list[np.ndarray]
    """Each input array with every id replaced by its number (int64)."""
    num_vertices: int
    """n: the distinct ids of all ranks."""
    ids: np.ndarray
    """This rank's bucket: the ids numbered first .. first + len(ids) - 1, sorted (the ranks' buckets in rank
    order are the sorted distinct ids, ``Graph.vertex_ids``, held in P pieces)."""
    first: int
    """The number of this rank's first id."""


def number_ids(group: Exchanging, *id_arrays: np.ndarray) -> Numbered:
    """Number the ids of ``id_arrays`` (held by this rank) among the ids all ranks hold; collective."""
    local = sorted_unique(np.concatenate([np.asarray(a, dtype=np.int64).ravel() for a in id_arrays])
                          if id_arrays else np.zeros(0, dtype=np.int64))
    splitters = _splitters(group, local)
    cuts = np.searchsorted(local, splitters, side="left")
    bounds = np.concatenate([[0], cuts, [len(local)]])
    asked = group.alltoall_object([local[bounds[b]:bounds[b + 1]] for b in range(group.size)])
    bucket = sorted_unique(np.concatenate(asked))
    counts = group.allgather_object(len(bucket))
    first = int(sum(counts[:group.rank]))
    answers = group.alltoall_object([first + np.searchsorted(bucket, ids) for ids in asked])
    numbers = np.concatenate(answers) if answers else np.zeros(0, dtype=np.int64)
    numbers = numbers.astype(np.int64, copy=False)
    arrays = [numbers[np.searchsorted(local, np.asarray(a, dtype=np.int64))] for a in id_arrays]
    return Numbered(arrays=arrays, num_vertices=int(sum(counts)), ids=bucket, first=first)


def _splitters(group: Exchanging, local: np.ndarray) -> np.ndarray:
    """P - 1 ids, the same on every rank, cutting the ids into buckets of about equal size."""
    if group.size == 1:
        return np.zeros(0, dtype=np.int64)
    take = np.linspace(0, len(local) - 1, num=min(SAMPLES_PER_RANK, len(local))).round().astype(np.int64)
    samples = np.sort(np.concatenate(group.allgather_object(local[take] if len(local) else local)))
    if len(samples) == 0:
        return np.zeros(group.size - 1, dtype=np.int64)
    at = (np.arange(1, group.size) * len(samples)) // group.size
    return samples[at]
