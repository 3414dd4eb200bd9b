"""Synthetic generators reached through load_graph("synthetic:...")."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from distgcn.data import load_graph
from distgcn.data.graph import Graph
from distgcn.data.synthetic import SBM_SPLIT, parse_spec
from distgcn.errors import InputError


def assert_canonical(graph: Graph) -> None:
    adj = graph.adj
    assert isinstance(adj, sp.csr_matrix) and adj.dtype == np.float64
    assert np.all(adj.data == 1.0)
    assert adj.diagonal().sum() == 0
    assert adj.has_sorted_indices
    copy = adj.copy()
    copy.sum_duplicates()
    assert copy.nnz == adj.nnz
    np.testing.assert_array_equal(graph.vertex_ids, np.arange(graph.num_vertices))


def nearest_mean_accuracy(x: np.ndarray, graph: Graph) -> float:
    y = graph.labels
    means = np.stack([x[graph.train_mask & (y == c)].mean(axis=0) for c in range(graph.num_classes)])
    distances = ((x[:, None, :] - means[None, :, :]) ** 2).sum(axis=-1)
    predicted = distances.argmin(axis=1)
    return float((predicted[graph.test_mask] == y[graph.test_mask]).mean())


# --- stochastic block model ----------------------------------------------------------------


def test_sbm_defaults():
    graph = load_graph("synthetic:sbm")
    assert_canonical(graph)
    assert graph.name == "sbm-n2000-c4-f32-d10-p0.8-s0"
    assert graph.num_vertices == 2000
    assert (graph.adj != graph.adj.T).nnz == 0
    assert 9.0 < graph.num_edges / 2000 <= 10.5
    assert graph.features.shape == (2000, 32) and graph.features.dtype == np.float32
    assert graph.labels.dtype == np.int64
    assert np.bincount(graph.labels).tolist() == [500] * 4
    sizes = [int(m.sum()) for m in (graph.train_mask, graph.val_mask, graph.test_mask)]
    assert sizes == [int(f * 2000) for f in SBM_SPLIT]
    assert (graph.train_mask.astype(int) + graph.val_mask + graph.test_mask).max() == 1


def test_sbm_keys_and_intra_fraction():
    graph = load_graph("synthetic:sbm,n=3000,classes=3,features=8,avg_degree=20,p_in=0.7,seed=5")
    assert graph.num_vertices == 3000 and graph.features.shape == (3000, 8) and graph.num_classes == 3
    coo = graph.adj.tocoo()
    inside = (graph.labels[coo.row] == graph.labels[coo.col]).mean()
    assert abs(inside - 0.7) < 0.03
    assert abs(graph.num_edges / 3000 - 20) < 1


def test_sbm_is_deterministic_and_seeded():
    a = load_graph("synthetic:sbm,n=500")
    assert a.fingerprint() == load_graph("synthetic:sbm,n=500").fingerprint()
    assert a.fingerprint() != load_graph("synthetic:sbm,n=500,seed=1").fingerprint()
    # without a seed key, load_graph's seed is used; with one, the key wins
    from_argument = load_graph("synthetic:sbm,n=500", seed=1)
    assert from_argument.fingerprint() == load_graph("synthetic:sbm,n=500,seed=1").fingerprint()
    assert load_graph("synthetic:sbm,n=500,seed=0", seed=7).fingerprint() == a.fingerprint()


def test_sbm_labels_learnable_and_graph_helps():
    graph = load_graph("synthetic:sbm,n=4000")
    degree = np.maximum(np.asarray(graph.adj.sum(axis=1)).ravel(), 1)
    neighbour_mean = sp.diags(1.0 / degree) @ graph.adj @ graph.features
    features_only = nearest_mean_accuracy(graph.features, graph)
    with_graph = nearest_mean_accuracy((graph.features + neighbour_mean) / 2, graph)
    assert features_only > 0.4  # chance is 0.25
    assert with_graph > 0.8
    assert with_graph > features_only + 0.1


def test_sbm_single_class_and_feature_argument():
    graph = load_graph("synthetic:sbm,n=100,classes=1,avg_degree=4")
    assert graph.num_classes == 1
    assert load_graph("synthetic:sbm,n=100", features=5).features.shape == (100, 5)


# --- R-MAT ----------------------------------------------------------------------------------


def test_rmat_sizes_and_direction():
    graph = load_graph("synthetic:rmat,scale=10,edge_factor=8")
    assert_canonical(graph)
    assert graph.name == "rmat-s10-e8-s0"
    assert graph.num_vertices == 1024
    assert 0.5 * 8 * 1024 < graph.num_edges <= 8 * 1024
    assert (graph.adj != graph.adj.T).nnz > 0
    assert graph.features is None
    in_degree = np.diff(graph.adj.indptr)
    assert in_degree.max() > 5 * in_degree.mean()  # skewed, as R-MAT should be


def test_rmat_undirected():
    a = load_graph("synthetic:rmat,scale=9,undirected=1")
    b = load_graph("synthetic:rmat,scale=9", symmetrize=True)
    assert (a.adj != a.adj.T).nnz == 0
    assert (a.adj != b.adj).nnz == 0
    directed = load_graph("synthetic:rmat,scale=9").adj
    assert (a.adj != ((directed + directed.T) > 0)).nnz == 0


def test_rmat_deterministic_permute_and_quadrants():
    a = load_graph("synthetic:rmat,scale=10,seed=3")
    assert a.fingerprint() == load_graph("synthetic:rmat,scale=10,seed=3").fingerprint()
    assert a.fingerprint() != load_graph("synthetic:rmat,scale=10,seed=4").fingerprint()
    # without permutation, a=1 puts every edge at (0, 0): all self loops, so no edges
    with pytest.raises(InputError, match="no edges"):
        load_graph("synthetic:rmat,scale=6,a=1,b=0,c=0,permute=0")
    # only quadrant b: every edge goes from vertex 0 to the last vertex
    only_b = load_graph("synthetic:rmat,scale=6,a=0,b=1,c=0,permute=0")
    assert only_b.num_edges == 1 and only_b.adj[63, 0] == 1


def test_rmat_training_data():
    graph = load_graph("synthetic:rmat,scale=8,features=6,classes=3")
    assert graph.features.shape == (256, 6) and graph.labels.max() < 3 and graph.train_mask.sum() == 128
    same = load_graph("synthetic:rmat,scale=8", features=6, classes=3)
    assert same.fingerprint() == graph.fingerprint()
    with pytest.raises(InputError, match="features=6 conflicts"):
        load_graph("synthetic:rmat,scale=8,features=6,classes=3", features=7)


# --- spec errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("synthetic:grid", "unknown generator 'grid'"),
        ("synthetic:sbm,nodes=5", "unknown key 'nodes'"),
        ("synthetic:sbm,n=abc", "n='abc' is invalid"),
        ("synthetic:sbm,n=0", "n='0' is invalid"),
        ("synthetic:sbm,p_in=1.5", "p_in='1.5' is invalid"),
        ("synthetic:sbm,avg_degree=nan", "avg_degree='nan' is invalid"),
        ("synthetic:sbm,n", "expected key=value"),
        ("synthetic:sbm,n=5,n=6", "'n' given twice"),
        ("synthetic:sbm,n=3,classes=4", "classes=4 exceeds n=3"),
        ("synthetic:rmat,scale=40", "scale='40' is invalid"),
        ("synthetic:rmat,undirected=maybe", "undirected='maybe' is invalid"),
        ("synthetic:rmat,a=0.5,b=0.5,c=0.5", "exceeds 1"),
        ("synthetic:rmat,scale=5,features=3", "give both features and classes"),
    ],
)
def test_spec_errors(spec, fragment):
    with pytest.raises(InputError) as info:
        load_graph(spec)
    message = str(info.value)
    assert fragment in message and spec in message and "\n" not in message


def test_parse_spec_defaults():
    kind, params = parse_spec("synthetic:rmat, scale = 12 ,")
    assert kind == "rmat"
    assert params["scale"] == 12 and params["edge_factor"] == 16 and params["seed"] is None
    assert params["undirected"] is False and params["permute"] is True


def test_sbm_labelled_graph_rejects_classes_conflict():
    with pytest.raises(InputError, match="classes=4 conflicts"):
        load_graph("synthetic:sbm,n=100,classes=4", classes=3)


@pytest.mark.parametrize("spec, features, classes, declared", [
    ("synthetic:rmat,scale=30", None, None, False),
    ("synthetic:rmat,scale=30,features=4", None, None, False),
    ("synthetic:rmat,scale=30", 4, None, False),
    ("synthetic:rmat,scale=30,features=4,classes=2", None, None, True),
    ("synthetic:rmat,scale=30", 4, 2, True),
    ("synthetic:sbm,n=100", None, None, True),
])
def test_an_unlabelled_rmat_is_refused_before_it_is_generated(monkeypatch, spec, features, classes, declared):
    """prepare_graph (partition, train --graph) says the graph needs --features/--classes without generating it
    (2^30 vertices here: generating would take hours and more memory than a machine has)."""
    from distgcn.data import synthetic
    from distgcn.data.prepare import GraphOptions, prepare_graph

    assert synthetic.declares_training_data(spec, features, classes) is declared
    if not declared:
        monkeypatch.setattr(synthetic, "rmat", lambda **_: pytest.fail("generated the graph before refusing it"))
        with pytest.raises(InputError, match="has no features or labels: pass --features F --classes C"):
            prepare_graph(GraphOptions(spec=spec, features=features, classes=classes))
