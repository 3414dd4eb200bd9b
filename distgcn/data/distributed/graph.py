"""One rank's share of a graph read by P ranks together: a contiguous range of vertices with their rows of A
and Â and their features, labels and masks (:class:`RankGraph`), and what the readers share: agreeing on errors,
random training data drawn by rows, the checks of the training data, and the whole graph's fingerprint, all as
one process would have them (:mod:`.load` reads a graph spec into a RankGraph).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from distgcn.data.adjacency import MAX_VERTICES
from distgcn.data.distributed.adjacency import normalized_rows, owned_adjacency_rows
from distgcn.data.distributed.ids import Exchanging, number_ids
from distgcn.errors import InputError

VERTEX_ARRAYS = ("features", "labels", "train_mask", "val_mask", "test_mask")
FINGERPRINT_CHUNK_BYTES = 1 << 24
"""How much of its arrays a rank sends rank 0 at a time while the graph's fingerprint is hashed."""
RANDOM_FEATURE_VALUES = 1 << 22
"""Random feature values drawn at a time by each rank (it keeps only its rows' values)."""


@dataclass
class RankGraph:
    """One rank's share of a prepared graph: the vertices ``first .. first + rows - 1``."""

    name: str
    n: int
    first: int
    vertex_ids: np.ndarray
    """The user's ids of this rank's vertices."""
    adjacency: sp.csr_matrix | None
    """This rank's rows of A (rows x n; sorted, ones, no self loops); None once Â's rows and the fingerprint,
    which hashes A, exist (:func:`prepare_rank_graph`)."""
    a_hat: sp.csr_matrix | None = None
    """This rank's rows of Â (rows x n), once :func:`prepare_rank_graph` has run."""
    features: np.ndarray | None = None
    labels: np.ndarray | None = None
    train_mask: np.ndarray | None = None
    val_mask: np.ndarray | None = None
    test_mask: np.ndarray | None = None
    fingerprint: str | None = None
    """The whole graph's :meth:`distgcn.data.graph.Graph.fingerprint` (rank 0 computed it and told every rank)."""
    edges: int = 0
    """This rank's nonzeros of A (kept when A's rows are dropped)."""

    @property
    def rows(self) -> int:
        return int(self.vertex_ids.shape[0])

    @property
    def num_vertices(self) -> int:
        return self.n


def contiguous_ranges(n: int, size: int) -> np.ndarray:
    """The first vertex of each of ``size`` ranks' ranges, and n: rank r holds ``[firsts[r], firsts[r + 1])``."""
    return (np.arange(size + 1, dtype=np.int64) * n) // size


# ---- agreeing on errors ----------------------------------------------------------------------------------------

def first_error(group: Exchanging, message: str | None) -> None:
    """Raise on every rank the first rank's message (in rank order), if any rank has one.

    The message is one process's, without a rank prefix: where several ranks find a problem, the first rank's
    is the one a process reading the graph in order would meet first.
    """
    messages = group.allgather_object(message)
    found = next((m for m in messages if m is not None), None)
    if found is not None:
        raise InputError(found)


def guarded(group: Exchanging, step):
    """``step()``'s result; an InputError on any rank is raised on every rank (the first rank's)."""
    result, message = None, None
    try:
        result = step()
    except InputError as exc:
        message = str(exc)
    first_error(group, message)
    return result


# ---- from numbered edges ---------------------------------------------------------------------------------------

def from_edges(group: Exchanging, src: np.ndarray, dst: np.ndarray, *, symmetrize: bool, name: str,
               where: str | Path) -> RankGraph:
    """A rank graph from id pairs (``adj[dst, src] = 1``) held anywhere: ids numbered together, rows to owners."""
    numbered = number_ids(group, src, dst)
    n = numbered.num_vertices
    if n > MAX_VERTICES:
        raise InputError(f"graph has {n} vertices; at most {MAX_VERTICES} are supported")
    src, dst = numbered.arrays
    adjacency = owned_adjacency_rows(group, src, dst, numbered.first, len(numbered.ids), n, symmetrize=symmetrize)
    del src, dst
    graph = RankGraph(name=name, n=n, first=numbered.first, vertex_ids=numbered.ids, adjacency=adjacency)
    require_edges_on_ranks(group, graph, where)
    return graph


def require_edges_on_ranks(group: Exchanging, graph: RankGraph, where: str | Path) -> None:
    """:func:`distgcn.data.adjacency.require_edges` of the whole graph."""
    if graph.n == 0:
        raise InputError("graph has no vertices", path=where)
    if sum(group.allgather_object(int(graph.adjacency.nnz))) == 0:
        raise InputError("graph has no edges (after dropping self loops)", path=where)


# ---- training data ---------------------------------------------------------------------------------------------

def add_random_training_data(graph: RankGraph, num_features: int, num_classes: int, seed: int) -> None:
    """This rank's rows of :func:`distgcn.data.features.random_training_data` (n, F, C, seed).

    Every rank draws the whole stream of features (a few values at a time, keeping its rows'), the labels and
    the split's permutation of n: the generator cannot skip ahead through normal draws, whose count per value
    varies, and the labels and the permutation are drawn whole by one process too.
    """
    from distgcn.data.features import UNLABELLED_SPLIT, split_masks

    rng = np.random.default_rng(seed)
    n, first, rows = graph.n, graph.first, graph.rows
    features = np.empty((rows, num_features), dtype=np.float32)
    per_draw = max(1, RANDOM_FEATURE_VALUES // max(num_features, 1))
    drawn = 0
    while drawn < first + rows:
        stop = min(drawn + per_draw, first + rows)
        block = rng.standard_normal((stop - drawn, num_features), dtype=np.float32)
        lo = max(drawn, first)
        if lo < stop:
            features[lo - first : stop - first] = block[lo - drawn :]
        drawn = stop
    # the rest of the stream, so that the labels are drawn where one process draws them
    _skip_normals(rng, (n - drawn) * num_features, per_draw * num_features)
    labels = rng.integers(0, num_classes, size=n, dtype=np.int64)
    graph.labels = labels[first : first + rows].copy()
    del labels
    masks = split_masks(n, UNLABELLED_SPLIT, rng)
    graph.train_mask, graph.val_mask, graph.test_mask = (m[first : first + rows].copy() for m in masks)
    graph.features = features


def _skip_normals(rng: np.random.Generator, count: int, per_draw: int) -> None:
    while count > 0:
        take = min(count, per_draw)
        rng.standard_normal(take, dtype=np.float32)
        count -= take


def check_training_data_on_ranks(group: Exchanging, graph: RankGraph, source: str) -> None:
    """:func:`distgcn.data.prepare.check_training_data` of the whole graph: the same messages, the first vertex
    in id order named, the counts over every rank."""
    from distgcn.data.features import check_feature_matrix

    n = graph.n
    check_feature_matrix(graph.features, "features", source, rows=graph.rows)
    finite_rows = np.isfinite(graph.features).all(axis=1)
    labels = graph.labels
    bad_label = (labels < -1) | (labels >= max(n, 2))
    unlabelled = graph.train_mask & (labels < 0)
    local = [(int(np.count_nonzero(~finite_rows)), _first_id(graph, ~finite_rows)),
             (int(np.count_nonzero(bad_label)), _first_label(graph, bad_label)),
             (int(np.count_nonzero(unlabelled)), _first_id(graph, unlabelled))]
    everyone = group.allgather_object(local)
    for check in range(3):
        count = sum(found[check][0] for found in everyone)
        if count == 0:
            continue
        first = next(found[check][1] for found in everyone if found[check][0])
        if check == 0:
            raise InputError(f"features of vertex {first} are NaN or infinite ({count} of {n} vertices); expected "
                             "finite numbers", path=source)
        if check == 1:
            label, vertex = first
            raise InputError(f"label {label} of vertex {vertex} is out of range: expected a class number 0..C-1 "
                             f"(C <= {max(n, 2)}, the vertex count) or -1 for unknown", path=source)
        raise InputError(f"training vertex {first} has no label (-1) ({count} unlabelled training vertices in all)",
                         path=source)


def _first_id(graph: RankGraph, where: np.ndarray) -> int | None:
    rows = np.flatnonzero(where)
    return int(graph.vertex_ids[rows[0]]) if rows.size else None


def _first_label(graph: RankGraph, where: np.ndarray) -> tuple[int, int] | None:
    rows = np.flatnonzero(where)
    return (int(graph.labels[rows[0]]), int(graph.vertex_ids[rows[0]])) if rows.size else None


def num_classes(group: Exchanging, graph: RankGraph) -> int:
    """:attr:`distgcn.data.graph.Graph.num_classes` of the whole graph."""
    if graph.labels is None:
        return 0
    tops = [t for t in group.allgather_object(int(graph.labels.max()) if graph.labels.size else None)
            if t is not None]
    return max(tops) + 1 if tops else 0


# ---- the fingerprint -------------------------------------------------------------------------------------------

def fingerprint_on_ranks(group: Exchanging, graph: RankGraph) -> str:
    """:meth:`distgcn.data.graph.Graph.fingerprint` of the whole graph: rank 0 hashes every rank's pieces in
    order, each sent a chunk at a time, so that it never holds more than its own share and one chunk."""
    counts = group.allgather_object(int(graph.adjacency.nnz))
    edges = sum(counts)
    index_dtype = np.int32 if edges <= MAX_VERTICES else np.int64
    before = sum(counts[: group.rank])
    indptr = graph.adjacency.indptr.astype(np.int64) + before
    segments: list[tuple[bytes, np.ndarray | None]] = [
        (b"", (indptr if group.rank == 0 else indptr[1:]).astype(index_dtype)),
        (b"", graph.adjacency.indices.astype(index_dtype)),
        (b"", np.ascontiguousarray(graph.adjacency.data)),
        (b"", np.ascontiguousarray(graph.vertex_ids, dtype=np.int64)),
    ]
    segments += [(b"|", getattr(graph, name)) for name in VERTEX_ARRAYS]
    digest = hashlib.sha256() if group.rank == 0 else None
    for marker, values in segments:
        if digest is not None:
            digest.update(marker)
        if values is None:
            continue
        raw = memoryview(np.ascontiguousarray(values)).cast("B")
        chunks = [raw[start : start + FINGERPRINT_CHUNK_BYTES]
                  for start in range(0, len(raw), FINGERPRINT_CHUNK_BYTES)]
        for sender, count in enumerate(group.allgather_object(len(chunks))):
            for k in range(count):
                outgoing = [None] * group.size
                if group.rank == sender and sender != 0:
                    outgoing[0] = bytes(chunks[k])
                received = group.alltoall_object(outgoing)
                if digest is not None:
                    digest.update(chunks[k] if sender == 0 else received[sender])
    return group.allgather_object(digest.hexdigest()[:32] if digest is not None else None)[0]


# ---- preparing -------------------------------------------------------------------------------------------------

def prepare_rank_graph(group: Exchanging, graph: RankGraph, source: str, feature_norm: str = "row") -> RankGraph:
    """:func:`distgcn.data.prepare.prepare_loaded_graph` on ranks: check, normalize features, build Â rows, and
    the fingerprint of the graph as prepared."""
    from distgcn.data.prepare import _no_training_data, normalize_rows

    if graph.features is None or graph.labels is None or graph.train_mask is None:
        raise _no_training_data(source, graph)
    guarded(group, lambda: check_training_data_on_ranks(group, graph, source))
    if feature_norm == "row":
        graph.features = normalize_rows(graph.features)
    elif feature_norm != "none":
        raise InputError(f"--feature-norm: expected row or none, got {feature_norm!r}")
    graph.fingerprint = fingerprint_on_ranks(group, graph)
    graph.a_hat = normalized_rows(group, graph.adjacency, graph.first)
    graph.edges, graph.adjacency = int(graph.adjacency.nnz), None
    return graph
