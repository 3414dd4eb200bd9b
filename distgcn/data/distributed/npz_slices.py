"""The project's ``.npz`` graph (:mod:`distgcn.data.npz`) read on P ranks, each reading its slice of every array.

numpy writes an ``.npz`` as a zip of ``.npy`` members stored uncompressed, so a member's rows lie at a known
offset in the file and a rank seeks to its own: rank r reads rows ``[n·r/P, n·(r+1)/P)`` of the CSR structure,
the vertex ids, features, labels and masks. A compressed member cannot be entered in the middle:
:func:`splittable` says so and the graph is then read on rank 0. The checks and messages are
:func:`distgcn.data.npz.load_npz`'s; a check of values (the row pointers rising, the ids in range) is made on
every slice and the first rank's finding is raised on every rank.
"""

from __future__ import annotations

import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from distgcn.data.distributed.adjacency import owned_adjacency_rows
from distgcn.data.distributed.graph import (
    RankGraph,
    contiguous_ranges,
    first_error,
    guarded,
    require_edges_on_ranks,
)
from distgcn.data.distributed.ids import Exchanging
from distgcn.data.features import check_feature_matrix
from distgcn.data.npz import _MASKS, _REQUIRED, _check_shape
from distgcn.data.snap import file_stem
from distgcn.errors import InputError
from distgcn.io.npy_files import read_npy_header

_LOCAL_HEADER = struct.Struct("<4s22xHH")
"""A zip local file header: its signature, then (after 22 bytes) the lengths of the name and the extra field."""


@dataclass(frozen=True)
class Member:
    """An array of the archive: where its data starts in the file, and its header."""

    offset: int
    shape: tuple[int, ...]
    dtype: np.dtype
    stored: int
    """Bytes the archive holds for its data."""


def members(path: Path) -> dict[str, Member] | None:
    """Every array of the archive by name, or None if one is compressed (or not a plain .npy)."""
    found: dict[str, Member] = {}
    with zipfile.ZipFile(path) as archive, path.open("rb") as fh:
        for info in archive.infolist():
            if info.compress_type != zipfile.ZIP_STORED or not info.filename.endswith(".npy"):
                return None
            fh.seek(info.header_offset)
            signature, name_length, extra_length = _LOCAL_HEADER.unpack(fh.read(_LOCAL_HEADER.size))
            if signature != b"PK\x03\x04":
                return None
            start = info.header_offset + _LOCAL_HEADER.size + name_length + extra_length
            fh.seek(start)
            header = read_npy_header(fh)
            if header is None or header[1]:
                return None
            offset = fh.tell()
            found[info.filename.removesuffix(".npy")] = Member(offset, header[0], header[2],
                                                               info.file_size - (offset - start))
    return found


def splittable(path: Path) -> bool:
    """Whether every array of ``path`` can be read by slices (stored, C-ordered); unreadable archives are left
    to the loader to report."""
    try:
        return members(path) is not None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return False


def read_slice(path: Path, member: Member, lo: int, hi: int) -> np.ndarray:
    """Rows ``[lo, hi)`` of an array of the archive."""
    row_shape = member.shape[1:]
    row_bytes = int(np.prod(row_shape, dtype=np.int64)) * member.dtype.itemsize
    out = np.empty((hi - lo, *row_shape), dtype=member.dtype)
    if out.nbytes:
        with path.open("rb") as fh:
            fh.seek(member.offset + lo * row_bytes)
            if fh.readinto(memoryview(out).cast("B")) != out.nbytes:
                raise InputError(f"array declares shape {member.shape} but the archive holds less", path=path)
    return out


def npz_on_ranks(group: Exchanging, path: Path, *, symmetrize: bool = False) -> RankGraph:
    """This rank's share of the graph in ``path``: A's rows and the vertex arrays of ``[n·r/P, n·(r+1)/P)``."""
    arrays = guarded(group, lambda: _checked_members(path))
    shape = read_slice(path, arrays["adj_shape"], 0, arrays["adj_shape"].shape[0])
    n = _check_shape(shape, path)
    firsts = contiguous_ranges(n, group.size)
    lo, hi = int(firsts[group.rank]), int(firsts[group.rank + 1])
    _integer_header(arrays, "adj_indptr", path, length=n + 1)
    _integer_header(arrays, "adj_indices", path, length=None)
    total = arrays["adj_indices"].shape[0]
    indptr = read_slice(path, arrays["adj_indptr"], lo, hi + 1).astype(np.int64)
    problem = None
    if (group.rank == 0 and indptr[0] != 0) or (group.rank == group.size - 1 and indptr[-1] != total) \
            or (np.diff(indptr) < 0).any() or (indptr.size and (indptr[0] < 0 or indptr[-1] > total)):
        problem = str(InputError(f"adj_indptr must rise from 0 to len(adj_indices)={total}", path=path))
    first_error(group, problem)
    indices = read_slice(path, arrays["adj_indices"], int(indptr[0]), int(indptr[-1])).astype(np.int64)
    first_error(group, str(InputError(f"adj_indices must lie in 0..{n - 1}", path=path))
                if indices.size and (indices.min() < 0 or indices.max() >= n) else None)
    rows = np.repeat(np.arange(lo, hi, dtype=np.int64), np.diff(indptr))
    adjacency = owned_adjacency_rows(group, indices, rows, lo, hi - lo, n, symmetrize=symmetrize)
    del indices, rows
    graph = RankGraph(name=_name(path, arrays), n=n, first=lo, vertex_ids=np.zeros(0, dtype=np.int64),
                      adjacency=adjacency)
    require_edges_on_ranks(group, graph, path)
    _integer_header(arrays, "vertex_ids", path, length=n)
    graph.vertex_ids = read_slice(path, arrays["vertex_ids"], lo, hi).astype(np.int64, copy=False)
    if "features" in arrays:
        member = arrays["features"]
        check_feature_matrix(_declared(member), "features", path, rows=n)
        graph.features = np.ascontiguousarray(read_slice(path, member, lo, hi), dtype=np.float32)
    if "labels" in arrays:
        _integer_header(arrays, "labels", path, length=n)
        labels = read_slice(path, arrays["labels"], lo, hi).astype(np.int64, copy=False)
        first_error(group, str(InputError("labels must be class numbers >= 0, or -1 for unknown", path=path))
                    if labels.size and labels.min() < -1 else None)
        graph.labels = labels
    for key in _MASKS:
        if key in arrays:
            member = arrays[key]
            if member.dtype != np.bool_ or member.shape != (n,):
                raise InputError(f"{key} must be a boolean array of length {n}, found {member.dtype} "
                                 f"{member.shape}", path=path)
            setattr(graph, key, read_slice(path, member, lo, hi))
    return graph


def _checked_members(path: Path) -> dict[str, Member]:
    try:
        arrays = members(path)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise InputError(f"not a readable .npz archive ({' '.join(str(e).split())})", path=path) from None
    assert arrays is not None, "split_format reads only archives whose arrays are stored"
    for name, member in arrays.items():
        nbytes = int(np.prod(member.shape, dtype=object)) * member.dtype.itemsize
        if nbytes > member.stored:
            raise InputError(f"array {name} declares shape {member.shape} ({nbytes} bytes) but the archive holds "
                             f"{member.stored} bytes for it", path=path)
    missing = [key for key in _REQUIRED if key not in arrays]
    if missing:
        raise InputError(f"missing arrays {', '.join(missing)} (expected {', '.join(_REQUIRED)})", path=path)
    return arrays


def _declared(member: Member) -> np.ndarray:
    """A view of one value with a member's declared shape and dtype, for checks that read only those."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype=member.dtype), shape=member.shape,
                                           strides=(0,) * len(member.shape))


def _integer_header(arrays: dict[str, Member], key: str, path: Path, *, length: int | None) -> None:
    member = arrays[key]
    if len(member.shape) != 1 or not np.issubdtype(member.dtype, np.integer):
        raise InputError(f"{key} must be a 1-d integer array, found {member.dtype} {member.shape}", path=path)
    if length is not None and member.shape[0] != length:
        raise InputError(f"{key} has length {member.shape[0]}, expected {length}", path=path)


def _name(path: Path, arrays: dict[str, Member]) -> str:
    member = arrays.get("name")
    if member is None or member.shape != ():
        return file_stem(path)
    return str(read_slice(path, Member(member.offset, (1,), member.dtype, member.stored), 0, 1)[0])
