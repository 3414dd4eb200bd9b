"""An OGB dataset in the binary variant (``raw/data.npz``, the form ogbn-papers100M ships in) read on P ranks.

Rank r reads edges ``[E·r/P, E·(r+1)/P)`` of ``edge_index`` (both of its rows) and sends each to the rank that
owns its target (:func:`owned_adjacency_rows`); it reads its own vertices' rows ``[n·r/P, n·(r+1)/P)`` of
``node_feat`` and of ``raw/node-label.npz``, and keeps the ids of the split files that fall in its range. OGB
writes these archives with ``np.savez_compressed``: each rank inflates a member from its start up to the end of
its slice, holding one chunk at a time (:mod:`.npz_slices`). The CSV variant (``raw/edge.csv.gz``) is one gzip
stream per file and is read on rank 0.

The checks and messages are :func:`distgcn.data.ogb.load_ogb`'s; a bad value found in any slice is raised on
every rank, the first rank's, with the edge number or line one process would name.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from distgcn.data import ogb
from distgcn.data.distributed.adjacency import owned_adjacency_rows
from distgcn.data.distributed.graph import (
    RankGraph,
    contiguous_ranges,
    first_error,
    guarded,
    require_edges_on_ranks,
)
from distgcn.data.distributed.ids import Exchanging
from distgcn.data.distributed.npz_slices import (
    Member,
    checked_members,
    declared,
    members,
    read_elements,
    read_slice,
)
from distgcn.data.features import check_feature_matrix
from distgcn.errors import InputError
from distgcn.io.limits import check_declared_size


def splittable(directory: Path) -> bool:
    """Whether ``directory`` is a binary OGB dataset whose arrays can be read by slices."""
    raw = directory / "raw"
    if not (raw / "data.npz").is_file():
        return False
    try:
        arrays = members(raw / "data.npz")
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, NotImplementedError):
        return False  # the loader on rank 0 says what is wrong
    return arrays is not None and not (arrays.get("node_feat") is not None and arrays["node_feat"].fortran)


def ogb_on_ranks(group: Exchanging, directory: Path, *, symmetrize: bool = False) -> RankGraph:
    """This rank's share of the binary OGB dataset in ``directory``; collective."""
    name = ogb.dataset_name(directory)
    raw = directory / "raw"
    path = raw / "data.npz"
    arrays = guarded(group, lambda: checked_members(path, ("edge_index", "num_nodes_list")))
    edge_index = arrays["edge_index"]
    if len(edge_index.shape) != 2 or edge_index.shape[0] != 2 or not np.issubdtype(edge_index.dtype, np.integer):
        raise InputError(f"edge_index must be an integer [2, E] array, found {edge_index.dtype} {edge_index.shape}",
                         path=path)
    n = _count(path, arrays["num_nodes_list"], "num_nodes_list")
    total = edge_index.shape[1]
    if "num_edges_list" in arrays:
        listed = _count(path, arrays["num_edges_list"], "num_edges_list")
        if listed != total:
            raise InputError(f"num_edges_list says {listed} edges, edge_index holds {total}", path=path)
    vertex_firsts, edge_firsts = contiguous_ranges(n, group.size), contiguous_ranges(total, group.size)
    lo, hi = int(vertex_firsts[group.rank]), int(vertex_firsts[group.rank + 1])
    a, b = int(edge_firsts[group.rank]), int(edge_firsts[group.rank + 1])
    guarded(group, lambda: check_declared_size(path, None, f"num_nodes_list {n}, of which each of {group.size} ranks "
                                               "holds a share", vertices=hi - lo, entries=b - a))
    src, dst = _edges(path, edge_index, a, b)
    first_error(group, _bad_id(np.stack([src, dst], axis=1), n, path, first=a))
    adjacency = owned_adjacency_rows(group, src, dst, lo, hi - lo, n,
                                     symmetrize=symmetrize or ogb.UNDIRECTED.get(name, False))
    del src, dst
    graph = RankGraph(name=name, n=n, first=lo, vertex_ids=np.arange(lo, hi, dtype=np.int64), adjacency=adjacency)
    require_edges_on_ranks(group, graph, path)
    if "node_feat" in arrays:
        member = arrays["node_feat"]
        check_feature_matrix(declared(member), "node_feat", path, rows=n)
        graph.features = np.ascontiguousarray(read_slice(path, member, lo, hi), dtype=np.float32)
    label_path = raw / "node-label.npz"
    labels = None
    if label_path.is_file():
        labels = _labels(group, label_path, n, lo, hi)
        graph.labels = labels
    masks = guarded(group, lambda: ogb.split_masks(directory, name, n, labels, lo, hi))
    graph.train_mask, graph.val_mask, graph.test_mask = masks
    return graph


def _count(path: Path, member: Member, key: str) -> int:
    count = int(np.prod(member.shape, dtype=object))
    values = read_elements(path, member, 0, min(count, 4)) if count else np.zeros(0, dtype=member.dtype)
    if count != 1:
        raise InputError(f"{key} must hold one count (a dataset of one graph), found {values.tolist()}", path=path)
    return ogb._single_count(values, path, key)


def _edges(path: Path, member: Member, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """Sources and targets of edges ``[a, b)``: two runs of a row-major [2, E] array, one of a column-major."""
    if member.fortran:
        pairs = read_elements(path, member, 2 * a, 2 * (b - a)).reshape(b - a, 2)
        return pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64)
    total = member.shape[1]
    return (read_elements(path, member, a, b - a).astype(np.int64),
            read_elements(path, member, total + a, b - a).astype(np.int64))


def _bad_id(pairs: np.ndarray, n: int, path: Path, *, first: int) -> str | None:
    try:
        ogb._check_ids(pairs, n, path, rows_are_lines=False, first=first)
    except InputError as exc:
        return str(exc)
    return None


def _labels(group: Exchanging, path: Path, n: int, lo: int, hi: int) -> np.ndarray:
    """This rank's labels from node-label.npz (-1 where NaN), checked as one process checks all of them."""
    member = guarded(group, lambda: checked_members(path, ("node_label",)))["node_label"]
    shape = member.shape if len(member.shape) != 1 else (member.shape[0], 1)
    if len(shape) != 2 or not (np.issubdtype(member.dtype, np.integer) or np.issubdtype(member.dtype, np.floating)):
        raise InputError(f"node_label must be a numeric [n, 1] array of real numbers, found {member.dtype} "
                         f"{member.shape}", path=path)
    if shape[1] != 1:
        raise InputError(f"expected one label per line, found {shape[1]} columns (multi-task datasets such as "
                         "ogbn-proteins are not supported)", path=path)
    if shape[0] != n:
        raise InputError(f"{shape[0]} labels for {n} vertices (expected one line per vertex)", path=path)
    table = read_elements(path, member, lo, hi - lo).astype(np.float64).reshape(-1, 1)
    try:
        labels = ogb._labels(table, path, first_line=lo)
        problem = None
    except InputError as exc:
        labels, problem = None, str(exc)
    first_error(group, problem)
    return labels

