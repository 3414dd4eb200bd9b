"""The graph model's edge-cut partition computed by KaMinPar (Gottesbüren, Heuer, Sanders, Schulz, Seemaier, ESA 2021).

KaMinPar's Python binding has no constructor from arrays: a graph enters only
through a file. We write the symmetrised pattern and the vertex weights in
the binary ParHIP format with numpy (one pass over the arrays, no text) into
a temporary directory, load it, and delete the file before partitioning.

The ParHIP header is three uint64: a version bitfield, n and m (directed
adjacency entries); bit ``i`` set means "absent" for bit 0 (edge weights)
and 1 (vertex weights), "32-bit" for bit 2 (edge offsets), 3 (vertex ids),
4 (vertex weights). The offsets that follow are byte addresses in the file,
not row pointers (read from KaMinPar's parser, apps/io/parhip_parser.cc).

KaMinPar's call keeps the GIL until it returns (the binding releases it
nowhere), and its partition is reproducible from the seed on one thread only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from distgcn.errors import InputError
from distgcn.io.leftovers import scratch_directory
from distgcn.runtime.threads import available_cores

__all__ = ["KAMINPAR_PRESETS", "DEFAULT_KAMINPAR_PRESET", "kaminpar_preset", "write_parhip", "load_graph",
           "kaminpar_parts"]

KAMINPAR_PRESETS = ("default", "fast", "eco", "strong")
"""KaMinPar's own contexts that partition an uncompressed graph (its terapart contexts need a compressed one)."""
DEFAULT_KAMINPAR_PRESET = "default"

_HEADER_BYTES = 24
_NO_EDGE_WEIGHTS = 1
_NO_VERTEX_WEIGHTS = 2
_VERTEX_IDS_32BIT = 8


def kaminpar_preset(preset: str | None) -> str:
    """The checked preset name, the default for None."""
    name = (preset or DEFAULT_KAMINPAR_PRESET).lower()
    if name not in KAMINPAR_PRESETS:
        raise InputError(f"unknown kaminpar preset '{preset}': expected one of {', '.join(KAMINPAR_PRESETS)}")
    return name


def write_parhip(path: str | Path, indptr: np.ndarray, indices: np.ndarray, weights: np.ndarray | None) -> None:
    """Write the graph ``indices[indptr[v]:indptr[v+1]]`` (each edge in both directions) as a ParHIP file.

    64-bit offsets, 32-bit vertex ids when they fit (half the bytes of the
    largest array), 64-bit vertex weights when ``weights`` is given.
    """
    n = int(indptr.shape[0]) - 1
    m = int(indptr[-1])
    narrow = n <= np.iinfo(np.uint32).max
    id_dtype = np.uint32 if narrow else np.uint64
    version = _NO_EDGE_WEIGHTS | (_VERTEX_IDS_32BIT if narrow else 0) | (_NO_VERTEX_WEIGHTS if weights is None else 0)
    first_id_byte = _HEADER_BYTES + (n + 1) * 8
    id_bytes = np.dtype(id_dtype).itemsize
    with open(path, "wb") as out:
        np.array([version, n, m], dtype=np.uint64).tofile(out)
        (first_id_byte + id_bytes * indptr.astype(np.uint64)).tofile(out)
        same_width = indices.dtype.itemsize == id_bytes and indices.dtype.kind in "iu"
        # a view, not a copy, when the ids already have the width (they are non-negative)
        (indices.view(id_dtype) if same_width else indices.astype(id_dtype)).tofile(out)
        if weights is not None:
            np.asarray(weights, dtype=np.int64).tofile(out)


def load_graph(indptr: np.ndarray, indices: np.ndarray, weights: np.ndarray | None):
    """The graph as a ``kaminpar.Graph``, through a ParHIP file deleted once loaded (the caller may then free
    its arrays before the long partitioning call)."""
    import kaminpar

    with scratch_directory("kaminpar") as folder:
        path = folder / "graph.parhip"
        try:
            write_parhip(path, indptr, indices, weights)
        except OSError as error:  # a full disk: say where the file went and how large it is
            size = _HEADER_BYTES + 8 * indptr.shape[0] + 4 * int(indptr[-1]) + 8 * (indptr.shape[0] - 1)
            raise InputError(f"could not write KaMinPar's input file ({size / 1e9:.2f} GB) in {folder} "
                             f"({error.strerror}): point TMPDIR at a folder with room for it") from error
        return kaminpar.load_graph(str(path), kaminpar.GraphFileFormat.PARHIP)


def kaminpar_parts(graph, nparts: int, *, epsilon: float, seed: int, threads: int | None = None,
                   preset: str | None = None) -> tuple[np.ndarray, dict]:
    """KaMinPar's k-way edge-cut partition of a graph from :func:`load_graph`.

    Every part's weight stays within ``(1 + epsilon)`` times the average
    (KaMinPar's balance constraint). ``threads`` defaults to all cores.
    Returns int64 part ids and the settings for meta.json.
    """
    import kaminpar

    preset = kaminpar_preset(preset)
    nthreads = int(threads) if threads else available_cores()
    n = int(graph.n())
    kaminpar.reseed(int(seed))
    solver = kaminpar.KaMinPar(nthreads, kaminpar.context_by_name(preset))
    parts = np.asarray(solver.compute_partition(graph, int(nparts), float(epsilon)), dtype=np.int64)
    if parts.shape != (n,) or (n and (parts.min() < 0 or parts.max() >= nparts)):
        raise RuntimeError("KaMinPar returned an invalid partition")
    return parts, {"threads": nthreads, "preset": preset}
