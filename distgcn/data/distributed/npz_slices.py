"""The project's ``.npz`` graph (:mod:`distgcn.data.npz`) read on P ranks, each reading its slice of every array.

An ``.npz`` is a zip of ``.npy`` members. Rank r reads rows ``[n·r/P, n·(r+1)/P)`` of the CSR structure, the
vertex ids, features, labels and masks. A member numpy stored uncompressed (``np.savez``) has its rows at a
known offset in the file, and a rank seeks to its own; a compressed member (``np.savez_compressed``) is inflated
from its start and the bytes before the slice are dropped as they come, so a rank holds no more than its slice
either way (and spends the time of inflating what precedes it). The checks and messages are
:func:`distgcn.data.npz.load_npz`'s; a check of values (the row pointers rising, the ids in range) is made on
every slice and the first rank's finding is raised on every rank.
"""

from __future__ import annotations

import struct
import zipfile
from contextlib import ExitStack
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
    """An array of the archive: where its data starts, and its header."""

    name: str
    """Its file name in the archive."""
    offset: int
    """Where its data starts: in the file (stored) or in the member's inflated bytes (compressed)."""
    shape: tuple[int, ...]
    dtype: np.dtype
    stored: int
    """Bytes the member holds for its data (inflated)."""
    compressed: bool
    fortran: bool
    """Whether its elements are in column-major order (a slice of rows is then not one run of bytes)."""


def members(path: Path) -> dict[str, Member] | None:
    """Every array of the archive by name, or None if one is not a plain ``.npy``."""
    found: dict[str, Member] = {}
    with zipfile.ZipFile(path) as archive, path.open("rb") as fh:
        for info in archive.infolist():
            if not info.filename.endswith(".npy"):
                return None
            if info.compress_type == zipfile.ZIP_STORED:
                fh.seek(info.header_offset)
                signature, name_length, extra_length = _LOCAL_HEADER.unpack(fh.read(_LOCAL_HEADER.size))
                if signature != b"PK\x03\x04":
                    return None
                start = info.header_offset + _LOCAL_HEADER.size + name_length + extra_length
                fh.seek(start)
                header = read_npy_header(fh)
                offset, stored = fh.tell(), info.file_size - (fh.tell() - start)
            else:
                with archive.open(info) as stream:
                    header = read_npy_header(stream)
                    offset = stream.tell()
                stored = info.file_size - offset
            if header is None:
                return None
            found[info.filename.removesuffix(".npy")] = Member(
                info.filename, offset, header[0], header[2], stored, info.compress_type != zipfile.ZIP_STORED,
                bool(header[1]) and len(header[0]) > 1)
    return found


def splittable(path: Path) -> bool:
    """Whether every array of ``path`` can be read by slices of rows (plain ``.npy`` members in row-major order);
    unreadable archives are left to the loader to report."""
    try:
        arrays = members(path)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, NotImplementedError):
        return False
    return arrays is not None and not any(member.fortran for member in arrays.values())


def read_slice(path: Path, member: Member, lo: int, hi: int) -> np.ndarray:
    """Rows ``[lo, hi)`` of an array of the archive (row-major)."""
    row_shape = member.shape[1:]
    row_elements = int(np.prod(row_shape, dtype=np.int64))
    return read_elements(path, member, lo * row_elements, (hi - lo) * row_elements).reshape(hi - lo, *row_shape)


def read_elements(path: Path, member: Member, start: int, count: int) -> np.ndarray:
    """``count`` elements of an array of the archive from element ``start``, in the order they are stored."""
    out = np.empty(count, dtype=member.dtype)
    if not out.nbytes:
        return out
    position = member.offset + start * member.dtype.itemsize
    with ExitStack() as opened:
        if member.compressed:
            archive = opened.enter_context(zipfile.ZipFile(path))
            fh = opened.enter_context(archive.open(member.name))
        else:
            fh = opened.enter_context(path.open("rb"))
        fh.seek(position)  # a compressed member inflates what precedes, a chunk at a time
        view, done = memoryview(out).cast("B"), 0
        while done < out.nbytes:
            got = fh.readinto(view[done : done + _READ_BYTES])
            if not got:
                raise InputError(f"array declares shape {member.shape} but the archive holds less", path=path)
            done += got
    return out


_READ_BYTES = 1 << 24
"""How much of a slice one read asks for (a compressed member's reader inflates as much at once)."""


def npz_on_ranks(group: Exchanging, path: Path, *, symmetrize: bool = False) -> RankGraph:
    """This rank's share of the graph in ``path``: A's rows and the vertex arrays of ``[n·r/P, n·(r+1)/P)``."""
    arrays = guarded(group, lambda: checked_members(path, _REQUIRED))
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
        check_feature_matrix(declared(member), "features", path, rows=n)
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


def checked_members(path: Path, required: tuple[str, ...]) -> dict[str, Member]:
    """:func:`members` of an archive whose headers are checked against the bytes it holds, with ``required``
    among them; an InputError naming ``path`` otherwise."""
    try:
        arrays = members(path)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, NotImplementedError) as e:
        raise InputError(f"not a readable .npz archive ({' '.join(str(e).split())})", path=path) from None
    if arrays is None:
        raise InputError("not an archive of .npy arrays", path=path)
    for name, member in arrays.items():
        nbytes = int(np.prod(member.shape, dtype=object)) * member.dtype.itemsize
        if nbytes > member.stored:
            raise InputError(f"array {name} declares shape {member.shape} ({nbytes} bytes) but the archive holds "
                             f"{member.stored} bytes for it", path=path)
    missing = [key for key in required if key not in arrays]
    if missing:
        raise InputError(f"missing arrays {', '.join(missing)} (expected {', '.join(required)})", path=path)
    return arrays


def declared(member: Member) -> np.ndarray:
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
    return str(read_elements(path, member, 0, 1)[0])
