"""Distributed partitioners linked into the ranks: Zoltan (both models), PT-Scotch and ParMETIS (graph model).

Both are C libraries that partition a graph distributed over the processes of an MPI communicator; they are
called through ctypes on the communicator of this job (mpi4py's ``MPI._handleof``), each rank giving its own
rows and receiving the parts of its own vertices. Linking beats running the tools as their own MPI step:
PT-Scotch's ``dgpart`` reads distributed files but writes the whole mapping from one process, and Zoltan ships
no tool. Debian's packages (``libptscotch-dev``, ``libtrilinos-zoltan-dev``) are built against Debian's
OpenMPI, so mpi4py must be too (docs/cluster.md): :func:`engine_problem` says so when it is not. ParMETIS
(``libparmetis-dev``) is in Debian's non-free section, and on many clusters as a module.

- PT-Scotch 7 (F. Pellegrini, "Scotch and PT-Scotch graph partitioning software: an overview", 2012):
  ``SCOTCH_dgraphPart`` on the symmetrised pattern of Â without its diagonal, vertices weighted as the
  single-process graph model weighs them; the 64-bit build (``scotch-int64``) where it is installed, so
  that counts past 2^31 cannot overflow.
- ParMETIS 4 (Karypis and Kumar, "A coarse-grain parallel formulation of multilevel k-way graph partitioning
  algorithm", 1997): ``ParMETIS_V3_PartKway`` on the same graph, with the same weights; Debian builds it with
  32-bit indices, so the graph must have fewer than 2^31 edges.
- Zoltan PHG (Devine et al., "Parallel hypergraph partitioning for scientific computing", IPDPS 2006) with
  ``PHG_CUT_OBJECTIVE=CONNECTIVITY``: the column-net model's connectivity − 1, the exact volume. Each rank
  gives its vertices (rows of Â) with the nets they belong to (the columns of their nonzeros), Zoltan's
  compressed-vertex format, so no transpose is needed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from distgcn.config import PartitionerConfig
from distgcn.data.adjacency import sorted_unique
from distgcn.data.distributed.graph import RankGraph
from distgcn.data.distributed.ids import Exchanging
from distgcn.errors import InputError
from distgcn.io.page_cache import return_freed_heap, spill_matrix

LIB_DIR = Path("/usr/lib/x86_64-linux-gnu")
INSTALL = {"parmetis": "ParMETIS (Debian non-free: apt-get install libparmetis-dev)",
           "ptscotch": "PT-Scotch (Debian: apt-get install libptscotch-dev)",
           "zoltan": "Zoltan (Debian: apt-get install libtrilinos-zoltan-dev)"}


# ---- finding the libraries -------------------------------------------------------------------------------------

@functools.cache
def _scotch() -> ctypes.CDLL:
    """libptscotch, its 64-bit build if installed (its error handler first, as the library expects)."""
    for directory in (LIB_DIR / "scotch-int64", LIB_DIR):
        if (directory / "libptscotch.so").exists():
            ctypes.CDLL(str(directory / "libptscotcherr.so"), mode=ctypes.RTLD_GLOBAL)
            return ctypes.CDLL(str(directory / "libptscotch.so"), mode=ctypes.RTLD_GLOBAL)
    name = ctypes.util.find_library("ptscotch")
    if name is None:
        raise OSError("libptscotch not found")
    ctypes.CDLL(ctypes.util.find_library("ptscotcherr") or "libptscotcherr.so", mode=ctypes.RTLD_GLOBAL)
    return ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)


@functools.cache
def _zoltan() -> ctypes.CDLL:
    name = ctypes.util.find_library("trilinos_zoltan") or ctypes.util.find_library("zoltan")
    if name is None:
        raise OSError("libtrilinos_zoltan not found")
    return ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)


@functools.cache
def _parmetis() -> ctypes.CDLL:
    name = ctypes.util.find_library("parmetis")
    if name is None:
        raise OSError("libparmetis not found")
    return ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)


LOADERS = {"parmetis": _parmetis, "ptscotch": _scotch, "zoltan": _zoltan}


def engine_problem(engine: str, comm) -> str | None:
    """Why ``engine`` cannot run on ``comm`` (an mpi4py communicator, or None for ranks that are not MPI
    processes), or None if it can."""
    if comm is None:
        return f"{engine} runs on MPI ranks (mpiexec), not on these ranks"
    from mpi4py import MPI

    vendor = MPI.get_vendor()[0]
    if vendor != "Open MPI":
        return (f"{engine} is built against the system's OpenMPI, and this mpi4py against {vendor}: build mpi4py "
                "against the system's MPI to partition on the ranks (docs/cluster.md)")
    try:
        LOADERS[engine]()
    except OSError:
        return f"{INSTALL[engine]} is not installed"
    return None


def engine_parts(engine: str, group: Exchanging, config: PartitionerConfig, graph: RankGraph,
                 nparts: int) -> tuple[np.ndarray, dict, dict]:
    """(the parts of this rank's vertices, what the engine reports, its version); collective."""
    if engine == "zoltan" and config.preset is not None:
        raise InputError(f"--preset {config.preset}: Zoltan's PHG takes no preset")
    weights = rank_vertex_weights(group, graph.a_hat, config.vertex_weight)
    try:
        if engine == "parmetis":
            return _parmetis_parts(group, graph, weights, nparts, config.epsilon, config.seed)
        if engine == "ptscotch":
            return _scotch_parts(group, graph, weights, nparts, config.epsilon, config.seed,
                                 config.preset or "default")
        return _zoltan_parts(group, graph, weights, nparts, config.epsilon, config.seed,
                             (config.model or "").lower())
    finally:
        return_freed_heap()  # the engine's, before the shards are cut


def rank_vertex_weights(group: Exchanging, a_hat: sp.csr_matrix, scheme: str) -> np.ndarray:
    """:func:`distgcn.partitioning.weights.vertex_weights` of this rank's rows (the mean over every rank's)."""
    from distgcn.partitioning.weights import vertex_weights

    weights = vertex_weights(a_hat, "nonzeros")
    if scheme == "work":
        sums = group.allgather_object((int(weights.sum()), int(weights.shape[0])))
        total, count = (sum(column) for column in zip(*sums))
        if count:
            weights = weights + math.ceil(total / count)
    elif scheme != "nonzeros":
        vertex_weights(a_hat[:0], scheme)  # its error
    return weights


# ---- PT-Scotch -------------------------------------------------------------------------------------------------

def symmetric_rows(group: Exchanging, graph: RankGraph) -> sp.csr_matrix:
    """This rank's rows of the pattern of Â ∪ Âᵀ without the diagonal (what the graph model partitions);
    collective: each nonzero (i, j) also travels to the rank holding row j."""
    a_hat, first, n = graph.a_hat, graph.first, graph.n
    firsts = np.asarray(group.allgather_object(first), dtype=np.int64)
    rows = np.repeat(np.arange(first, first + graph.rows, dtype=np.int64), np.diff(a_hat.indptr))
    cols = a_hat.indices.astype(np.int64)
    keep = (rows != cols) & (a_hat.data != 0)
    rows, cols = rows[keep], cols[keep]
    order = np.argsort(cols, kind="stable")
    cuts = np.concatenate([np.searchsorted(cols[order], firsts), [len(order)]])
    flipped = cols[order] * n + rows[order]
    received = group.alltoall_object([flipped[cuts[d] : cuts[d + 1]] for d in range(group.size)])
    keys = sorted_unique(np.concatenate([rows * n + cols, *received]))
    indptr = np.searchsorted(keys, (np.arange(graph.rows + 1, dtype=np.int64) + first) * n)
    return sp.csr_matrix((np.ones(len(keys), dtype=np.int8), keys % n, indptr), shape=(graph.rows, n))


def _scotch_parts(group: Exchanging, graph: RankGraph, weights: np.ndarray, nparts: int, epsilon: float,
                  seed: int, preset: str) -> tuple[np.ndarray, dict, dict]:
    from mpi4py import MPI

    from distgcn.partitioning.models import PTSCOTCH_PRESETS

    lib = _scotch()
    num = {4: np.int32, 8: np.int64}[lib.SCOTCH_numSizeof()]
    c_num = {4: ctypes.c_int32, 8: ctypes.c_int64}[lib.SCOTCH_numSizeof()]
    sym = symmetric_rows(group, graph)
    if num is np.int32 and sum(group.allgather_object(int(sym.nnz))) > np.iinfo(np.int32).max:
        raise InputError("the graph has more than 2^31 - 1 edges for a 32-bit PT-Scotch: install its 64-bit build "
                         "(Debian: libptscotch-dev's scotch-int64)")
    vertloc = np.ascontiguousarray(sym.indptr, dtype=num)
    edgeloc = np.ascontiguousarray(sym.indices, dtype=num)
    veloloc = np.ascontiguousarray(weights, dtype=num)
    del sym
    parts = np.zeros(graph.rows, dtype=num)
    handle = ctypes.c_void_p(MPI._handleof(group.comm))
    dgraph = ctypes.create_string_buffer(lib.SCOTCH_dgraphSizeof())
    strat = ctypes.create_string_buffer(lib.SCOTCH_stratSizeof())

    def pointer(values: np.ndarray) -> ctypes.c_void_p:
        return values.ctypes.data_as(ctypes.c_void_p)

    lib.SCOTCH_randomSeed(c_num(seed))
    lib.SCOTCH_randomReset()
    _check(lib.SCOTCH_dgraphInit(dgraph, handle), "SCOTCH_dgraphInit")
    try:
        _check(lib.SCOTCH_dgraphBuild(dgraph, c_num(0), c_num(graph.rows), c_num(graph.rows), pointer(vertloc),
                                      None, pointer(veloloc), None, c_num(len(edgeloc)), c_num(len(edgeloc)),
                                      pointer(edgeloc), None, None), "SCOTCH_dgraphBuild")
        _check(lib.SCOTCH_stratInit(strat), "SCOTCH_stratInit")
        try:
            _check(lib.SCOTCH_stratDgraphMapBuild(strat, c_num(PTSCOTCH_PRESETS[preset]), c_num(group.size),
                                                  c_num(nparts), ctypes.c_double(epsilon)),
                   "SCOTCH_stratDgraphMapBuild")
            _check(lib.SCOTCH_dgraphPart(dgraph, c_num(nparts), strat, pointer(parts)), "SCOTCH_dgraphPart")
        finally:
            lib.SCOTCH_stratExit(strat)
    finally:
        lib.SCOTCH_dgraphExit(dgraph)
    major, minor, patch = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    lib.SCOTCH_version(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch))
    version = f"{major.value}.{minor.value}.{patch.value}"
    return parts.astype(np.int64), {"partitioner": "ptscotch", "preset": preset}, {"ptscotch": version}


# ---- ParMETIS -------------------------------------------------------------------------------------------------

def _parmetis_parts(group: Exchanging, graph: RankGraph, weights: np.ndarray, nparts: int, epsilon: float,
                    seed: int) -> tuple[np.ndarray, dict, dict]:
    """``ParMETIS_V3_PartKway`` on the symmetrised pattern of Â without its diagonal, vertices weighted as the
    single-process graph model weighs them."""
    from mpi4py import MPI

    lib = _parmetis()
    idx = np.int32  # Debian's build: IDXTYPEWIDTH 32, REALTYPEWIDTH 32 (metis.h)
    sym = symmetric_rows(group, graph)
    if sum(group.allgather_object(int(sym.nnz))) > np.iinfo(idx).max or graph.n > np.iinfo(idx).max:
        raise InputError("the graph has more than 2^31 - 1 vertices or edges for a 32-bit ParMETIS: use the "
                         "64-bit PT-Scotch (--partitioner ptscotch) or Zoltan")
    firsts = group.allgather_object(graph.first)
    vtxdist = np.array([*firsts, graph.n], dtype=idx)
    xadj = np.ascontiguousarray(sym.indptr, dtype=idx)
    adjncy = np.ascontiguousarray(sym.indices, dtype=idx)
    del sym
    vwgt = np.ascontiguousarray(weights, dtype=idx)
    tpwgts = np.full(nparts, 1.0 / nparts, dtype=np.float32)
    ubvec = np.array([1.0 + epsilon], dtype=np.float32)
    options = np.array([1, 0, seed % (2**31 - 1)], dtype=idx)  # use options: no debug output, this seed
    scalars = {name: ctypes.c_int32(value) for name, value in
               (("wgtflag", 2), ("numflag", 0), ("ncon", 1), ("nparts", nparts), ("edgecut", 0))}
    parts = np.zeros(max(graph.rows, 1), dtype=idx)
    handle = ctypes.c_void_p(MPI._addressof(group.comm))  # ParMETIS takes an MPI_Comm *

    def pointer(values: np.ndarray) -> ctypes.c_void_p:
        return values.ctypes.data_as(ctypes.c_void_p)

    code = lib.ParMETIS_V3_PartKway(pointer(vtxdist), pointer(xadj), pointer(adjncy), pointer(vwgt), None,
                                    ctypes.byref(scalars["wgtflag"]), ctypes.byref(scalars["numflag"]),
                                    ctypes.byref(scalars["ncon"]), ctypes.byref(scalars["nparts"]),
                                    pointer(tpwgts), pointer(ubvec), pointer(options),
                                    ctypes.byref(scalars["edgecut"]), pointer(parts), handle)
    _check(code, "ParMETIS_V3_PartKway", allowed=(1,))
    soname = ctypes.util.find_library("parmetis") or ""  # libparmetis.so.4.0: the library records no version
    return (parts[: graph.rows].astype(np.int64), {"partitioner": "parmetis"},
            {"parmetis": soname.partition(".so.")[2] or "unknown"})


# ---- Zoltan ----------------------------------------------------------------------------------------------------

_ID = ctypes.c_uint
_NUM_OBJ = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int))
_OBJ_LIST = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.POINTER(_ID),
                             ctypes.POINTER(_ID), ctypes.c_int, ctypes.POINTER(ctypes.c_float),
                             ctypes.POINTER(ctypes.c_int))
_HG_SIZE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int),
                            ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))
_HG_CS = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                          ctypes.POINTER(_ID), ctypes.POINTER(ctypes.c_int), ctypes.POINTER(_ID),
                          ctypes.POINTER(ctypes.c_int))
_COMPRESSED_VERTEX = 2
"""ZOLTAN_COMPRESSED_VERTEX (zoltan_types.h): each vertex listed with the nets it belongs to."""


_NUM_EDGES = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.POINTER(_ID),
                              ctypes.POINTER(_ID), ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))
_EDGE_LIST = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.POINTER(_ID),
                              ctypes.POINTER(_ID), ctypes.POINTER(ctypes.c_int), ctypes.POINTER(_ID),
                              ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.POINTER(ctypes.c_float),
                              ctypes.POINTER(ctypes.c_int))


def _zoltan_parts(group: Exchanging, graph: RankGraph, weights: np.ndarray, nparts: int, epsilon: float,
                  seed: int, model: str) -> tuple[np.ndarray, dict, dict]:
    """Zoltan's PHG on this rank's vertices: the column nets of its rows of Â (``hypergraph``, connectivity − 1),
    or the symmetric graph of Â without its diagonal (``graph``, Zoltan's GRAPH method on PHG: the edge cut)."""
    if graph.n > np.iinfo(np.uint32).max:
        raise InputError(f"Zoltan numbers vertices with 32-bit ids: {graph.n} vertices are too many")
    rows = graph.rows
    # every array a callback copies from stays referenced here until Zoltan returns
    ids = np.arange(graph.first, graph.first + rows, dtype=np.uint32)
    object_weights = np.ascontiguousarray(weights, dtype=np.float32)
    matrix = graph.a_hat if model == "hypergraph" else symmetric_rows(group, graph)
    if matrix.nnz > np.iinfo(np.int32).max:
        raise InputError(f"Zoltan takes at most 2^31 - 1 pins or edges per rank; this rank holds {matrix.nnz}: "
                         "use more ranks")
    pins = np.ascontiguousarray(matrix.indices, dtype=np.uint32)
    pointers = np.ascontiguousarray(matrix.indptr[:-1], dtype=np.int32)
    degrees = np.ascontiguousarray(np.diff(matrix.indptr), dtype=np.int32)
    firsts = np.asarray(group.allgather_object(graph.first), dtype=np.int64)
    owners = (np.searchsorted(firsts, matrix.indices, side="right") - 1).astype(np.int32) if model == "graph" \
        else np.zeros(0, dtype=np.int32)
    count = int(matrix.nnz)
    del matrix
    spill_matrix(graph.a_hat)  # Zoltan reads the arrays above: Â waits in the page cache until the cut

    def num_obj(_data, error):
        error[0] = 0
        return rows

    def obj_list(_data, _gid_size, _lid_size, gids, _lids, _weight_dim, obj_weights, error):
        ctypes.memmove(gids, ids.ctypes.data, ids.nbytes)
        ctypes.memmove(obj_weights, object_weights.ctypes.data, object_weights.nbytes)
        error[0] = 0

    def hg_size(_data, lists, pin_count, layout, error):
        lists[0], pin_count[0], layout[0], error[0] = rows, count, _COMPRESSED_VERTEX, 0

    def hg_cs(_data, _gid_size, _lists, _pins, _layout, vertex_gids, vertex_ptr, pin_gids, error):
        ctypes.memmove(vertex_gids, ids.ctypes.data, ids.nbytes)
        ctypes.memmove(vertex_ptr, pointers.ctypes.data, pointers.nbytes)
        ctypes.memmove(pin_gids, pins.ctypes.data, pins.nbytes)
        error[0] = 0

    def num_edges(_data, _gid_size, _lid_size, _count, _gids, _lids, edges, error):
        ctypes.memmove(edges, degrees.ctypes.data, degrees.nbytes)
        error[0] = 0

    def edge_list(_data, _gid_size, _lid_size, _count, _gids, _lids, _edges, neighbour_gids, neighbour_procs,
                  _weight_dim, _weights, error):
        ctypes.memmove(neighbour_gids, pins.ctypes.data, pins.nbytes)
        ctypes.memmove(neighbour_procs, owners.ctypes.data, owners.nbytes)
        error[0] = 0

    if model == "hypergraph":
        method = {"LB_METHOD": "HYPERGRAPH", "HYPERGRAPH_PACKAGE": "PHG", "PHG_CUT_OBJECTIVE": "CONNECTIVITY",
                  "PHG_EDGE_SIZE_THRESHOLD": f"{_largest_net_fraction(group, graph):.9g}"}
        callbacks = {"Zoltan_Set_HG_Size_CS_Fn": _HG_SIZE(hg_size), "Zoltan_Set_HG_CS_Fn": _HG_CS(hg_cs)}
    else:
        method = {"LB_METHOD": "GRAPH", "GRAPH_PACKAGE": "PHG", "CHECK_GRAPH": "0", "GRAPH_SYMMETRIZE": "NONE",
                  "PHG_EDGE_SIZE_THRESHOLD": f"{_largest_net_fraction(group, graph):.9g}"}
        callbacks = {"Zoltan_Set_Num_Edges_Multi_Fn": _NUM_EDGES(num_edges),
                     "Zoltan_Set_Edge_List_Multi_Fn": _EDGE_LIST(edge_list)}
    callbacks = {"Zoltan_Set_Num_Obj_Fn": _NUM_OBJ(num_obj), "Zoltan_Set_Obj_List_Fn": _OBJ_LIST(obj_list),
                 **callbacks}
    settings = {"DEBUG_LEVEL": "0", **method, "LB_APPROACH": "PARTITION", "NUM_GLOBAL_PARTS": str(nparts),
                "RETURN_LISTS": "PARTS", "IMBALANCE_TOL": f"{1 + epsilon:.6g}", "NUM_GID_ENTRIES": "1",
                "NUM_LID_ENTRIES": "0", "OBJ_WEIGHT_DIM": "1", "EDGE_WEIGHT_DIM": "0", "SEED": str(seed)}
    gids, got, version = _run_zoltan(group, settings, callbacks)
    if not np.array_equal(np.sort(gids), ids.astype(np.int64)):
        raise RuntimeError(f"Zoltan returned parts for {len(gids)} vertices of this rank's {rows}")
    parts = np.empty(rows, dtype=np.int64)
    parts[gids - graph.first] = got
    return parts, {"partitioner": "zoltan", "preset": "PHG"}, {"zoltan": version}


def _largest_net_fraction(group: Exchanging, graph: RankGraph) -> float:
    """Zoltan's PHG_EDGE_SIZE_THRESHOLD: the largest net it keeps, as a fraction of the vertices. Past
    AUTO_VCYCLES_MAX_PINS pins, nets of more than LARGE_NET_MEANS times the mean size are left out, as the
    single-process hypergraph model leaves them out of Mt-KaHyPar's input (partition/hypergraph.py); else all
    nets are kept."""
    from distgcn.partitioning.hypergraph import (
        AUTO_VCYCLES_MAX_PINS,
        LARGE_NET_MEANS,
        LARGE_NET_MIN_PINS,
    )

    pins = sum(group.allgather_object(int(graph.a_hat.nnz)))
    if pins <= AUTO_VCYCLES_MAX_PINS:
        return 1.0
    return min(1.0, max(LARGE_NET_MEANS * pins / graph.n, LARGE_NET_MIN_PINS) / graph.n)


def _run_zoltan(group: Exchanging, settings: dict[str, str], callbacks: dict) -> tuple[np.ndarray, np.ndarray, str]:
    """(the global ids Zoltan returned parts for, their parts, Zoltan's version) on ``group``'s communicator."""
    from mpi4py import MPI

    lib = _zoltan()
    version = ctypes.c_float()
    _check(lib.Zoltan_Initialize(0, None, ctypes.byref(version)), "Zoltan_Initialize")
    lib.Zoltan_Create.restype = ctypes.c_void_p
    zz = ctypes.c_void_p(lib.Zoltan_Create(ctypes.c_void_p(MPI._handleof(group.comm))))
    try:
        for key, value in settings.items():
            _check(lib.Zoltan_Set_Param(zz, key.encode(), value.encode()), f"Zoltan_Set_Param {key}")
        for setter, callback in callbacks.items():
            _check(getattr(lib, setter)(zz, callback, None), setter)
        changes, gid_size, lid_size, imports, exports = (ctypes.c_int() for _ in range(5))
        import_gids, import_lids, export_gids, export_lids = (ctypes.POINTER(_ID)() for _ in range(4))
        import_procs, import_parts, export_procs, export_parts = (ctypes.POINTER(ctypes.c_int)() for _ in range(4))
        _check(lib.Zoltan_LB_Partition(zz, *(ctypes.byref(x) for x in (
            changes, gid_size, lid_size, imports, import_gids, import_lids, import_procs, import_parts, exports,
            export_gids, export_lids, export_procs, export_parts))), "Zoltan_LB_Partition", allowed=(0, _WARN))
        try:
            found = exports.value
            gids = np.ctypeslib.as_array(export_gids, shape=(found,)).astype(np.int64) if found else np.zeros(0, int)
            got = np.ctypeslib.as_array(export_parts, shape=(found,)).astype(np.int64) if found else np.zeros(0, int)
        finally:
            lib.Zoltan_LB_Free_Part(*(ctypes.byref(x) for x in (import_gids, import_lids, import_procs,
                                                                 import_parts)))
            lib.Zoltan_LB_Free_Part(*(ctypes.byref(x) for x in (export_gids, export_lids, export_procs,
                                                                 export_parts)))
    finally:
        lib.Zoltan_Destroy(ctypes.byref(zz))
    return gids, got, f"{version.value:g}"


_WARN = 1
"""ZOLTAN_WARN: a result, with a warning Zoltan printed."""


def _check(code: int, call: str, allowed: tuple[int, ...] = (0,)) -> None:
    if code not in allowed:
        raise RuntimeError(f"{call} failed (code {code})")
