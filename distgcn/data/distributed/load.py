"""A graph spec read by P ranks together: each rank holds a contiguous range of vertices with their rows of A
and Â and their features, labels and masks, and no rank holds the whole graph.

:func:`load_rank_graph` dispatches on the graph spec as :func:`distgcn.data.load_graph` does:

- a SNAP edge list (plain: byte ranges; gzipped: rank 0 reads it) and a directory of edge-list files
  (:mod:`.edge_list`), whose ids are numbered together (:mod:`.ids`);
- the project's ``.npz`` (:mod:`.npz_slices`: each rank reads its slice of every array, stored or compressed);
- an OGB dataset in the binary variant, ``raw/data.npz`` (:mod:`.ogb_slices`: the same, edges by ranges);
- ``synthetic:rmat,...`` (:mod:`.rmat`: each rank generates its share of the edges);
- every other format (Planetoid, MUSAE, OGB's CSV variant, Matrix Market, METIS, ``synthetic:sbm``) is read
  whole on rank 0, which keeps its rows and sends each rank its own (:func:`dealt_from_rank0`): these formats
  cannot be read in pieces, and the datasets shipped in them are small.

The result is, range by range, what one process's :func:`distgcn.data.prepare.prepare_graph` gives: the same
A, Â, training data (row-normalised as ``feature_norm`` says) and fingerprint, so that a partition made either
way is the same directory.
"""

from __future__ import annotations

from pathlib import Path

from distgcn.data.distributed.adjacency import normalized_rows
from distgcn.data.distributed.edge_list import read_edge_files, read_edge_range
from distgcn.data.distributed.graph import (
    VERTEX_ARRAYS,
    RankGraph,
    add_random_training_data,
    contiguous_ranges,
    from_edges,
    guarded,
    prepare_rank_graph,
)
from distgcn.data.distributed.ids import Exchanging
from distgcn.data.distributed.npz_slices import npz_on_ranks, splittable
from distgcn.data.distributed.ogb_slices import ogb_on_ranks
from distgcn.data.distributed.ogb_slices import splittable as ogb_splittable
from distgcn.data.distributed.rmat import rmat_on_ranks
from distgcn.errors import InputError

SPLIT_FORMATS = ("snap", "snap-directory", "npz", "ogb-binary", "synthetic:rmat")
"""What :func:`load_rank_graph` reads in pieces; every other format is read on rank 0 and dealt."""


def split_format(spec: str) -> str | None:
    """Which of :data:`SPLIT_FORMATS` ``spec`` is, or None (read on rank 0); bad specs are left to the loader."""
    from distgcn.data import detect_format
    from distgcn.data.synthetic import parse_spec

    try:
        if spec.startswith("synthetic:"):
            return "synthetic:rmat" if parse_spec(spec)[0] == "rmat" else None
        kind, path = detect_format(spec)
    except InputError:
        return None
    if kind == "npz":
        return kind if splittable(path) else None
    if kind == "ogb":
        return "ogb-binary" if ogb_splittable(path) else None
    return kind if kind in SPLIT_FORMATS else None


def load_rank_graph(group: Exchanging, options) -> RankGraph:
    """This rank's share of the prepared graph that ``options`` (:class:`distgcn.data.prepare.GraphOptions`)
    names, as one process's :func:`distgcn.data.prepare.prepare_graph` would give it; collective. Bad input on
    any rank is the same InputError on every rank."""
    from distgcn.data import wants_random_training_data

    spec = options.spec
    kind = guarded(group, lambda: split_format(spec))
    if kind is None:
        return dealt_from_rank0(group, options)
    if kind == "synthetic:rmat":
        from distgcn.data.prepare import _no_training_data
        from distgcn.data.synthetic import declares_training_data

        if not guarded(group, lambda: declares_training_data(spec, options.features, options.classes)):
            raise _no_training_data(spec)  # before generating it

        graph = rmat_on_ranks(group, spec, symmetrize=options.symmetrize, seed=options.seed,
                              features=options.features, classes=options.classes)
        return prepare_rank_graph(group, graph, spec, options.feature_norm)
    path = Path(spec)
    if kind == "npz":
        graph = npz_on_ranks(group, path, symmetrize=options.symmetrize)
    elif kind == "ogb-binary":
        graph = ogb_on_ranks(group, path, symmetrize=options.symmetrize)
    else:
        from distgcn.data.snap import file_stem

        src, dst = (read_edge_files(group, path) if kind == "snap-directory" else read_edge_range(group, path))
        graph = guarded(group, lambda: from_edges(group, src, dst, symmetrize=options.symmetrize,
                                                  name=path.name if path.is_dir() else file_stem(path), where=path))
        del src, dst
    if guarded(group, lambda: wants_random_training_data(graph, spec, options.features, options.classes,
                                                         rows=graph.rows)):
        add_random_training_data(graph, options.features, options.classes, options.seed)
    return prepare_rank_graph(group, graph, spec, options.feature_norm)


def dealt_from_rank0(group: Exchanging, options) -> RankGraph:
    """Rank 0 reads and prepares the graph as one process does, keeps its range of vertices and sends every rank
    its own (for the formats that cannot be read in pieces)."""
    from distgcn.data.prepare import prepare_graph

    def read():
        if group.rank != 0:
            return None
        graph, _a_hat = prepare_graph(options)
        return graph, graph.fingerprint()

    loaded = guarded(group, read)
    pieces = [None] * group.size
    if loaded is not None:
        whole, fingerprint = loaded
        firsts = contiguous_ranges(whole.num_vertices, group.size)
        for r in range(group.size):
            lo, hi = int(firsts[r]), int(firsts[r + 1])
            pieces[r] = {"name": whole.name, "n": whole.num_vertices, "first": lo, "fingerprint": fingerprint,
                         "vertex_ids": whole.vertex_ids[lo:hi], "adjacency": whole.adj[lo:hi],
                         **{key: getattr(whole, key)[lo:hi] for key in VERTEX_ARRAYS
                            if getattr(whole, key) is not None}}
        del whole
    mine = group.alltoall_object(pieces)[0]
    del pieces
    graph = RankGraph(**mine)
    graph.a_hat = normalized_rows(group, graph.adjacency, graph.first)
    graph.edges, graph.adjacency = int(graph.adjacency.nnz), None
    return graph
