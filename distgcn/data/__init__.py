"""Graph input: detect a file's format from its path and load it into a :class:`Graph`.

``load_graph(spec)`` accepts
- ``synthetic:KIND,...``: a generated graph (:mod:`distgcn.data.synthetic`);
- a directory: Planetoid (``ind.NAME.*`` files), MUSAE (``NAME_edges.csv``,
  ``NAME_target.csv``, ``NAME.json``), an OGB node-property dataset (``raw/edge.csv.gz``
  or ``raw/data.npz``, and ``split/``: :mod:`distgcn.data.ogb`), or edge-list files only,
  read in name order as one list (how large graphs are shipped);
- a Planetoid prefix ``DIR/ind.NAME`` or any one of its files;
- a file, by suffix (optionally followed by ``.gz`` for the text formats):
  ``.txt``/``.edges``/``.el`` SNAP edge list, ``.mtx`` Matrix Market,
  ``.graph`` METIS, ``.npz`` the project's own format (:func:`save_npz`).

Every loader follows the conventions of :mod:`distgcn.data.graph`: an edge ``u v``
gives ``adj[v, u] = 1``, no self loops, no duplicates, sorted CSR of 1.0
float64. Undirected formats (METIS, Planetoid, MUSAE, symmetric ``.mtx``, the undirected OGB datasets) come
back symmetric; the others stay directed unless ``symmetrize``.

Structure-only graphs get seeded random features, labels and a 50/25/25 split
when both ``features`` and ``classes`` are given (see
:mod:`distgcn.data.features`). For graphs that carry their own training data
those two arguments are an error, not silently ignored, so that a user does not
believe the numbers they asked for were used.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from distgcn.data.features import (
    UNLABELLED_SPLIT,
    check_random_training_data,
    how_to_add,
    random_training_data,
    training_data_parts,
    words,
)
from distgcn.data.graph import Graph
from distgcn.data.npz import save_npz
from distgcn.errors import InputError, lookup_failure

__all__ = ["load_graph", "save_npz", "detect_format", "UNLABELLED_SPLIT"]

_EDGE_LIST_SUFFIXES = (".txt", ".edges", ".el")
_EXPECTED = (
    "expected a SNAP edge list (.txt, .edges, .el, optionally .gz), Matrix Market (.mtx[.gz]), "
    "METIS (.graph), .npz, a Planetoid, MUSAE or OGB directory, or synthetic:KIND,..."
)


def load_graph(
    spec: str,
    *,
    symmetrize: bool = False,
    features: int | None = None,
    classes: int | None = None,
    seed: int = 0,
) -> Graph:
    """Load (or generate) the graph that ``spec`` names.

    ``symmetrize`` replaces A by A ∪ Aᵀ. ``features``/``classes`` request random
    training data for a structure-only graph; ``seed`` drives every random choice
    (random features, the MUSAE split, synthetic generators without a seed key).
    """
    for name, value in (("features", features), ("classes", classes)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
            raise InputError(f"{name} must be a positive integer, got {value!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"seed must be a non-negative integer, got {seed!r}")
    if spec.startswith("synthetic:"):
        from distgcn.data.synthetic import load_synthetic

        graph = load_synthetic(spec, symmetrize=symmetrize, seed=seed, features=features, classes=classes)
        return _add_random_training_data(graph, spec, None, None, seed)
    kind, path = detect_format(spec)
    graph = _load_file(kind, path, symmetrize=symmetrize, seed=seed)
    return _add_random_training_data(graph, spec, features, classes, seed)


def detect_format(spec: str) -> tuple[str, Path]:
    """(format name, path to hand its loader): one of snap, snap-directory, mtx, metis, npz, planetoid, musae,
    ogb."""
    from distgcn.data import musae, ogb, planetoid

    path = Path(spec)
    if path.is_dir():
        prefix = planetoid.find_prefix(path)
        if prefix is not None:
            return "planetoid", prefix
        if musae.find_dataset(path) is not None:
            return "musae", path
        if ogb.is_ogb_directory(path):
            return "ogb", path
        if _holds_edge_lists(path):
            return "snap-directory", path
        raise InputError(
            "directory holds no known dataset: expected Planetoid files "
            "ind.NAME.{x,y,tx,ty,allx,ally,graph,test.index}, "
            "MUSAE files NAME_edges.csv, NAME_target.csv, NAME.json, "
            "an OGB dataset (raw/edge.csv.gz or raw/data.npz), "
            "or edge-list files only (.txt, .edges, .el, optionally .gz: read in name order as one list)",
            path=path,
        )
    prefix = planetoid.find_prefix(path)
    if prefix is not None:
        return "planetoid", prefix
    if not path.exists():
        raise InputError(f"{lookup_failure(path) or 'no such file or directory'} ({_EXPECTED})", path=path)
    if not path.is_file():
        raise InputError(f"not a regular file ({_EXPECTED})", path=path)
    name = path.name.lower()
    bare = name[:-3] if name.endswith(".gz") else name
    if bare.endswith(_EDGE_LIST_SUFFIXES):
        return "snap", path
    if bare.endswith(".mtx"):
        return "mtx", path
    if bare.endswith(".graph"):
        return "metis", path
    if name.endswith(".npz"):
        return "npz", path
    raise InputError(f"unknown graph format ({_EXPECTED})", path=path)


def _holds_edge_lists(directory: Path) -> bool:
    """Whether every visible entry of ``directory`` is an edge-list file (and there is one)."""
    try:
        entries = [p for p in directory.iterdir() if not p.name.startswith(".")]
    except OSError:
        return False
    return bool(entries) and all(p.is_file() and p.name.lower().removesuffix(".gz").endswith(_EDGE_LIST_SUFFIXES)
                                 for p in entries)


def _load_file(kind: str, path: Path, *, symmetrize: bool, seed: int) -> Graph:
    if kind == "snap-directory":
        from distgcn.data.distributed.edge_list import load_edge_directory

        return load_edge_directory(path, symmetrize=symmetrize)
    if kind == "snap":
        from distgcn.data.snap import load_snap

        return load_snap(path, symmetrize=symmetrize)
    if kind == "mtx":
        from distgcn.data.matrix_market import load_matrix_market

        return load_matrix_market(path, symmetrize=symmetrize)
    if kind == "metis":
        from distgcn.data.metis import load_metis

        return load_metis(path)
    if kind == "npz":
        from distgcn.data.npz import load_npz

        return load_npz(path, symmetrize=symmetrize)
    if kind == "planetoid":
        from distgcn.data.planetoid import load_planetoid

        return load_planetoid(path)
    if kind == "ogb":
        from distgcn.data.ogb import load_ogb

        return load_ogb(path, symmetrize=symmetrize)
    from distgcn.data.musae import find_dataset, load_musae

    return load_musae(path, find_dataset(path) or "", seed=seed)


def _add_random_training_data(
    graph: Graph, spec: str, features: int | None, classes: int | None, seed: int
) -> Graph:
    """Give a structure-only graph random training data when asked; refuse to override real data."""
    if wants_random_training_data(graph, spec, features, classes):
        (graph.features, graph.labels, graph.train_mask, graph.val_mask, graph.test_mask) = random_training_data(
            graph.num_vertices, features, classes, seed
        )
    return graph


def wants_random_training_data(graph, spec: str, features: int | None, classes: int | None,
                               rows: int | None = None) -> bool:
    """Whether ``graph`` (a Graph, or a rank's share of one holding ``rows`` of its vertices) is to get random
    training data: refuse to override real data, or half a request, or data that cannot be right."""
    if features is None and classes is None:
        return False
    if graph.features is not None or graph.labels is not None:
        have, lack = training_data_parts(graph)
        instead = f"; what it lacks is {words(lack)}: add {how_to_add(lack, graph.num_vertices)} to it" if lack else ""
        raise InputError(f"--features/--classes draw random features and labels for a graph that has neither, "
                         f"but this one has {words(have)}{instead}", path=spec)
    if features is None or classes is None:
        raise InputError("give both features and classes to generate random training data", path=spec)
    check_random_training_data(graph.num_vertices, features, classes, spec, rows=rows)
    return True
