"""From a graph spec to a graph ready to partition: load, check, normalize features, build Â."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from distgcn.data import load_graph
from distgcn.data.features import (
    check_feature_matrix,
    how_to_add,
    training_data_parts,
    words,
)
from distgcn.data.graph import Graph, normalized_adjacency
from distgcn.data.synthetic import declares_training_data
from distgcn.errors import InputError


@dataclass
class GraphOptions:
    """How to read a graph; shared by ``train --graph`` and ``partition``."""

    spec: str
    symmetrize: bool = False
    features: int | None = None
    classes: int | None = None
    seed: int = 0
    feature_norm: str = "row"


def normalize_rows(features: np.ndarray) -> np.ndarray:
    """Scale each row to unit L1 norm (Kipf & Welling's preprocessing); zero rows stay zero."""
    norms = np.abs(features).sum(axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (features / norms).astype(features.dtype, copy=False)


def prepare_graph(options: GraphOptions) -> tuple[Graph, sp.csr_matrix]:
    """Load the graph for training and return it with Â = D^-1/2 (A+I) D^-1/2."""
    if options.spec.startswith("synthetic:") and not declares_training_data(options.spec, options.features,
                                                                           options.classes):
        raise _no_training_data(options.spec)  # before generating it
    graph = load_graph(
        options.spec,
        symmetrize=options.symmetrize,
        features=options.features,
        classes=options.classes,
        seed=options.seed,
    )
    return prepare_loaded_graph(graph, options.spec, options.feature_norm)


def prepare_loaded_graph(graph: Graph, source: str, feature_norm: str = "row") -> tuple[Graph, sp.csr_matrix]:
    """Check and normalize a graph already in memory (in place); return it with Â.

    Split from :func:`prepare_graph` so that graphs built in Python (``distgcn.api``)
    get exactly the preparation the command line gives a file.
    """
    if not graph.has_training_data:
        raise _no_training_data(source, graph)
    check_training_data(graph, source)
    if feature_norm == "row":
        graph.features = normalize_rows(graph.features)
    elif feature_norm != "none":
        raise InputError(f"--feature-norm: expected row or none, got {feature_norm!r}")
    return graph, normalized_adjacency(graph.adj)


def _no_training_data(source: str, graph: Graph | None = None) -> InputError:
    """The error for a graph without what training needs, saying what it has and how to give the rest."""
    have, lack = training_data_parts(graph) if graph is not None else ([], [])
    if not have:
        return InputError(f"graph {source!r} has no features or labels: pass --features F --classes C "
                          "to train on random ones, as the paper does for unlabelled graphs")
    return InputError(f"graph {source!r} has {words(have)} but no {words(lack)}, which training needs: add "
                      f"{how_to_add(lack, graph.num_vertices)} to it")


def check_training_data(graph: Graph, source: str) -> None:
    """Refuse data that would train on garbage: non-finite features, impossible labels, unlabelled training rows.

    Loaders check their own formats; these are the checks every format needs,
    made once here so that no format can slip a NaN into the first layer.
    """
    n = graph.num_vertices
    check_feature_matrix(graph.features, "features", source, rows=n)  # loaders check theirs; a Graph built in Python
    finite_rows = np.isfinite(graph.features).all(axis=1)
    if not finite_rows.all():
        row = int(np.flatnonzero(~finite_rows)[0])
        raise InputError(f"features of vertex {graph.vertex_ids[row]} are NaN or infinite "
                         f"({int((~finite_rows).sum())} of {n} vertices); expected finite numbers", path=source)
    labels = graph.labels
    bad = (labels < -1) | (labels >= max(n, 2))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise InputError(f"label {labels[row]} of vertex {graph.vertex_ids[row]} is out of range: expected a class "
                         f"number 0..C-1 (C <= {max(n, 2)}, the vertex count) or -1 for unknown", path=source)
    unlabelled = graph.train_mask & (labels < 0)
    if unlabelled.any():
        row = int(np.flatnonzero(unlabelled)[0])
        raise InputError(f"training vertex {graph.vertex_ids[row]} has no label (-1) "
                         f"({int(unlabelled.sum())} unlabelled training vertices in all)", path=source)
