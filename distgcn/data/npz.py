"""The project's own ``.npz`` graph format: a Graph saved as plain numpy arrays.

Keys: ``adj_indptr``, ``adj_indices``, ``adj_shape`` (the CSR structure; all
values are 1), ``vertex_ids``, and optionally ``features``, ``labels``,
``train_mask``, ``val_mask``, ``test_mask`` and ``name`` (a 0-d string array).
It is read with ``allow_pickle=False``, so a file cannot run code. On load the
structure is re-canonicalized (sorted, no duplicates, no self loops) and every
array's length is checked against the vertex count.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from distgcn.data.adjacency import edges_to_adjacency, require_edges
from distgcn.data.features import feature_matrix
from distgcn.data.graph import Graph
from distgcn.data.snap import file_stem
from distgcn.errors import InputError
from distgcn.io.limits import check_npz_arrays
from distgcn.io.npy_files import read_npz
from distgcn.io.safe_io import GRAPH, write_npz

_REQUIRED = ("adj_indptr", "adj_indices", "adj_shape", "vertex_ids")
_MASKS = ("train_mask", "val_mask", "test_mask")


def save_npz(graph: Graph, path: str | Path) -> None:
    """Write ``graph`` to exactly ``path`` (no ``.npz`` is appended), uncompressed for speed."""
    adj = graph.adj.tocsr()
    arrays: dict[str, np.ndarray] = {
        "adj_indptr": np.asarray(adj.indptr, dtype=np.int64),
        "adj_indices": np.asarray(adj.indices, dtype=np.int64),
        "adj_shape": np.asarray(adj.shape, dtype=np.int64),
        "vertex_ids": np.asarray(graph.vertex_ids, dtype=np.int64),
        "name": np.array(graph.name),
    }
    for key in ("features", "labels", *_MASKS):
        value = getattr(graph, key)
        if value is not None:
            arrays[key] = np.asarray(value)
    write_npz(Path(path), GRAPH, **arrays)  # replaces only a graph distgcn wrote (distgcn.io.safe_io)


def load_npz(path: Path, *, symmetrize: bool = False) -> Graph:
    """Read a graph written by :func:`save_npz` (or by anything producing the same keys)."""
    if path.is_file():
        check_npz_arrays(path)
    try:
        arrays = read_npz(path)
    except FileNotFoundError:
        raise InputError("file not found", path=path) from None
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise InputError(f"not a readable .npz archive ({' '.join(str(e).split())})", path=path) from None
    missing = [key for key in _REQUIRED if key not in arrays]
    if missing:
        raise InputError(f"missing arrays {', '.join(missing)} (expected {', '.join(_REQUIRED)})", path=path)

    n = _check_shape(arrays["adj_shape"], path)
    indptr = _integer_array(arrays, "adj_indptr", path, length=n + 1)
    indices = _integer_array(arrays, "adj_indices", path, length=None)
    if indptr[0] != 0 or indptr[-1] != len(indices) or (np.diff(indptr) < 0).any():
        raise InputError(f"adj_indptr must rise from 0 to len(adj_indices)={len(indices)}", path=path)
    if indices.size and (indices.min() < 0 or indices.max() >= n):
        raise InputError(f"adj_indices must lie in 0..{n - 1}", path=path)
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    adj = edges_to_adjacency(indices, rows, n, symmetrize=symmetrize)
    require_edges(adj, path)

    graph = Graph(
        adj=adj,
        vertex_ids=_integer_array(arrays, "vertex_ids", path, length=n),
        name=str(arrays["name"]) if "name" in arrays and arrays["name"].ndim == 0 else file_stem(path),
    )
    if "features" in arrays:
        graph.features = feature_matrix(arrays["features"], "features", path, rows=n)
    if "labels" in arrays:
        graph.labels = _integer_array(arrays, "labels", path, length=n)
        if graph.labels.size and graph.labels.min() < -1:
            raise InputError("labels must be class numbers >= 0, or -1 for unknown", path=path)
    for key in _MASKS:
        if key in arrays:
            mask = arrays[key]
            if mask.dtype != np.bool_ or mask.shape != (n,):
                raise InputError(
                    f"{key} must be a boolean array of length {n}, found {mask.dtype} {mask.shape}", path=path
                )
            setattr(graph, key, mask)
    return graph


def _check_shape(shape: np.ndarray, path: Path) -> int:
    if shape.shape != (2,) or not np.issubdtype(shape.dtype, np.integer) or shape[0] != shape[1] or shape[0] < 0:
        raise InputError(f"adj_shape must be [n, n], found {shape.tolist()}", path=path)
    return int(shape[0])


def _integer_array(arrays: dict[str, np.ndarray], key: str, path: Path, *, length: int | None) -> np.ndarray:
    value = arrays[key]
    if value.ndim != 1 or not np.issubdtype(value.dtype, np.integer):
        raise InputError(f"{key} must be a 1-d integer array, found {value.dtype} {value.shape}", path=path)
    if length is not None and len(value) != length:
        raise InputError(f"{key} has length {len(value)}, expected {length}", path=path)
    return value.astype(np.int64, copy=False)
