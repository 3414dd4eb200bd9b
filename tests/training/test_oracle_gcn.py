"""Â and the GCN layer against oracles that share no code with distgcn's formulas.

The distributed-equals-single-process tests take Â and the layer from the
project on both sides, so a wrong formula would be wrong on both and pass.
Here the oracles are Â written out by hand for two 4-vertex graphs (as
literal square roots) with the forward pass and the gradients of the first
SGD step computed by dense torch autograd from that Â, and PyTorch
Geometric's ``gcn_norm`` and ``GCNConv`` loaded with the same weights.

The convention is distgcn's: ``adj[v, u] = 1`` when v aggregates from u,
D is the row sums of A + I (v's in-degree plus one) and
Â[v, u] = 1 / sqrt(D[v] D[u]) for every nonzero of A + I (Kipf & Welling, 2017).
Only the initial weights come from the project (``glorot_weights``, checked
against its definition in tests/nn/test_oracle_init.py), and in the dropout test
the keyed masks (tests/nn/test_dropout.py): they say which model is trained.
"""

from __future__ import annotations

import importlib.util
from math import sqrt

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.nn.functional as F

import distgcn
from distgcn.data.graph import normalized_adjacency
from distgcn.nn.dropout import dropout_key, keyed_dropout
from distgcn.nn.model import glorot_weights

SEED = 4
HIDDEN = 3
LR = 0.5


def _adjacency(aggregates_from: list[tuple[int, int]], n: int = 4) -> sp.csr_matrix:
    """``adj[v, u] = 1`` for each (v, u)."""
    v, u = zip(*aggregates_from)
    return sp.csr_matrix((np.ones(len(v)), (v, u)), shape=(n, n))


# Undirected star around vertex 1: D = [2, 4, 2, 2].
STAR = _adjacency([(0, 1), (1, 0), (1, 2), (2, 1), (1, 3), (3, 1)])
STAR_HAT = [
    [1 / 2, 1 / sqrt(8), 0, 0],
    [1 / sqrt(8), 1 / 4, 1 / sqrt(8), 1 / sqrt(8)],
    [0, 1 / sqrt(8), 1 / 2, 0],
    [0, 1 / sqrt(8), 0, 1 / 2],
]
# Directed: 1 reads 0; 2 reads 0 and 1; 3 reads 2. D = [1, 2, 3, 2], so Â is not symmetric and
# D^-1 (A + I) or column degrees would give other numbers.
CHAIN = _adjacency([(1, 0), (2, 0), (2, 1), (3, 2)])
CHAIN_HAT = [
    [1, 0, 0, 0],
    [1 / sqrt(2), 1 / 2, 0, 0],
    [1 / sqrt(3), 1 / sqrt(6), 1 / 3, 0],
    [0, 0, 1 / sqrt(6), 1 / 2],
]
GRAPHS = {"undirected-star": (STAR, STAR_HAT), "directed-chain": (CHAIN, CHAIN_HAT)}

FEATURES = np.array([[0.3, -1.2, 0.5], [1.0, 0.4, -0.7], [-0.6, 0.9, 0.2], [0.8, -0.1, 1.1]], dtype=np.float32)
"""float32, as a Graph holds them, so that the oracle reads the same numbers."""
LABELS = np.array([0, 1, 1, 0])
TRAIN = np.array([True, True, False, True])


def _graph(adj: sp.csr_matrix, features: np.ndarray = FEATURES, labels: np.ndarray = LABELS,
           train: np.ndarray = TRAIN) -> distgcn.Graph:
    return distgcn.from_scipy(adj, features, labels, train_mask=train)


def _one_sgd_step(graph: distgcn.Graph, feature_norm: str = "none", hidden: tuple[int, ...] = (HIDDEN,),
                  dropout: float = 0.0, first_layer: str = "exact"):
    """distgcn's first epoch: plain SGD, no weight decay, float64; by default no dropout and features as given."""
    return distgcn.train(graph, epochs=1, optimizer="sgd", lr=LR, dropout=dropout, weight_decay=0.0,
                         layers=len(hidden) + 1, hidden=hidden, first_layer=first_layer, feature_norm=feature_norm,
                         dtype="float64", seed=SEED, threads=1)


def _no_dropout(layer: int, h: torch.Tensor) -> torch.Tensor:
    return h


def _dense_gcn(a_hat: torch.Tensor, x: torch.Tensor, params: list[torch.Tensor], drop=_no_dropout,
               cached: bool = False) -> list[torch.Tensor]:
    """H_{l+1} = relu(Â drop(H_l) W_l + b_l), no ReLU on the last layer, in dense torch; ``params``: weights
    then biases. ``cached``: x is Â X already, so layer 0 is drop(x) W_0 + b_0."""
    layers = len(params) // 2
    outputs, h = [], x
    for layer in range(layers):
        h = drop(layer, h)
        h = (h if cached and layer == 0 else a_hat @ h) @ params[layer] + params[layers + layer]
        outputs.append(h if layer == layers - 1 else torch.relu(h))
        h = outputs[-1]
    return outputs


def _oracle_step(a_hat: np.ndarray, features: np.ndarray, labels: np.ndarray, train: np.ndarray,
                 hidden: tuple[int, ...] = (HIDDEN,), drop=_no_dropout, cached: bool = False):
    """(loss at the initial weights, parameters after one SGD step) by dense autograd from ``a_hat``."""
    widths = [features.shape[1], *hidden, int(labels.max()) + 1]
    params = [w.clone().requires_grad_(True) for w in glorot_weights(widths, SEED, torch.float64)]
    params += [torch.zeros(w, dtype=torch.float64, requires_grad=True) for w in widths[1:]]
    a_hat, x = torch.tensor(a_hat, dtype=torch.float64), torch.tensor(features, dtype=torch.float64)
    logits = _dense_gcn(a_hat, a_hat @ x if cached else x, params, drop, cached)[-1]
    mask = torch.tensor(train)
    loss = F.cross_entropy(logits[mask], torch.tensor(labels)[mask])
    loss.backward()
    return loss.item(), [(p - LR * p.grad).detach().numpy() for p in params]


@pytest.mark.parametrize("name", GRAPHS)
def test_normalized_adjacency_is_the_hand_computed_one(name):
    adj, hand = GRAPHS[name]
    np.testing.assert_allclose(distgcn.to_scipy(_graph(adj), normalized=True).toarray(), hand, rtol=0, atol=1e-15)


@pytest.mark.parametrize("name", GRAPHS)
def test_first_training_step_matches_the_hand_computed_forward_and_gradients(name):
    """The loss at the initial weights, every parameter after one SGD step, and the forward pass with them."""
    adj, hand = GRAPHS[name]
    result = _one_sgd_step(_graph(adj))
    loss, stepped = _oracle_step(np.array(hand), FEATURES, LABELS, TRAIN)
    assert result.history[0]["loss"] == pytest.approx(loss, rel=1e-12)
    for got, want in zip(result.weights, stepped, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-13)
    outputs = _dense_gcn(torch.tensor(hand, dtype=torch.float64), torch.tensor(FEATURES, dtype=torch.float64),
                         [torch.tensor(w) for w in result.weights])
    for got, want in zip(result.layer_outputs, outputs, strict=True):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-10, atol=1e-13)


def test_row_normalisation_divides_each_row_by_its_l1_norm():
    """The default --feature-norm row: X[v] / sum |X[v]| (a zero row stays zero), then the same first step."""
    raw = np.array([[1, -2, 1], [0, 0, 0], [3, 0, 1], [-1, -1, 2]], dtype=np.float32)
    by_hand = np.array([[1 / 4, -1 / 2, 1 / 4], [0, 0, 0], [3 / 4, 0, 1 / 4], [-1 / 4, -1 / 4, 1 / 2]],
                       dtype=np.float32)
    result = _one_sgd_step(_graph(STAR, features=raw), feature_norm="row")
    loss, stepped = _oracle_step(np.array(STAR_HAT), by_hand, LABELS, TRAIN)
    assert result.history[0]["loss"] == pytest.approx(loss, rel=1e-12)
    for got, want in zip(result.weights, stepped, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("first_layer", ["exact", "cached"])
def test_three_layers_with_dropout_on_sparse_features(first_layer):
    """Three layers, dropout 0.5, and X sparse and wider than W0's output, so that layer 0 takes the sparse
    path (and, cached, drops out of Â X). The masks are distgcn's keyed ones (tests/nn/test_dropout.py checks them
    against the definition): they say which entries are dropped, as the seed says which weights start.
    Evaluation (the layer outputs after training) runs without dropout."""
    features = np.zeros((4, 60), dtype=np.float32)
    features[np.repeat(np.arange(4), 2), [2, 40, 11, 33, 19, 50, 27, 5]] = [1.5, -0.5, 2.0, 0.7, -1.1, 0.9, 0.4, 1.3]

    def keyed(layer: int, h: torch.Tensor) -> torch.Tensor:
        return keyed_dropout(h, np.arange(4), 0.5, dropout_key(SEED, 1, layer))

    result = _one_sgd_step(_graph(STAR, features=features), hidden=(6, 6), dropout=0.5, first_layer=first_layer)
    cached = first_layer == "cached"
    loss, stepped = _oracle_step(np.array(STAR_HAT), features, LABELS, TRAIN, hidden=(6, 6), drop=keyed,
                                 cached=cached)
    initial = glorot_weights([60, 6, 6, 2], SEED, torch.float64)
    assert all(not np.allclose(w, w0.numpy()) for w, w0 in zip(stepped, initial))  # every layer has a gradient
    assert result.history[0]["loss"] == pytest.approx(loss, rel=1e-12)
    for got, want in zip(result.weights, stepped, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-13)
    a_hat = torch.tensor(STAR_HAT, dtype=torch.float64)
    x = torch.tensor(features, dtype=torch.float64)
    outputs = _dense_gcn(a_hat, a_hat @ x if cached else x, [torch.tensor(w) for w in result.weights], cached=cached)
    for got, want in zip(result.layer_outputs, outputs, strict=True):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-10, atol=1e-13)


def test_the_hand_oracle_tells_the_normalisations_apart():
    """Â = D^-1 (A + I), the plausible slip, differs from the hand Â on both graphs (so the tests above can fail)."""
    for adj, hand in GRAPHS.values():
        a = adj.toarray() + np.eye(4)
        assert not np.allclose(a / a.sum(axis=1, keepdims=True), hand)


# ---------------------------------------------------------------------------
# PyTorch Geometric
# ---------------------------------------------------------------------------

needs_pyg = pytest.mark.skipif(importlib.util.find_spec("torch_geometric") is None,
                               reason="torch_geometric not installed: pip install '.[test]' installs it")


def _random_graph(directed: bool, n: int = 30, m: int = 90, seed: int = 7) -> distgcn.Graph:
    rng = np.random.default_rng(seed)
    v, u = rng.integers(0, n, m), rng.integers(0, n, m)
    adj = sp.csr_matrix((np.ones(m), (v, u)), shape=(n, n))
    features = rng.normal(size=(n, 5))
    labels = rng.integers(0, 3, n)
    labels[:3] = [0, 1, 2]
    return distgcn.from_scipy(adj, features, labels, train_mask=rng.random(n) < 0.5, symmetrize=not directed)


def _edge_index(graph: distgcn.Graph) -> torch.Tensor:
    """PyG's (source, target) pairs: v aggregates from u is the edge u -> v."""
    coo = graph.adj.tocoo()
    return torch.tensor(np.vstack([coo.col, coo.row]), dtype=torch.long)


@needs_pyg
@pytest.mark.parametrize("directed", [True, False], ids=["directed", "undirected"])
def test_normalized_adjacency_equals_pyg_gcn_norm(directed):
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    graph = _random_graph(directed)
    n = graph.num_vertices
    index, weight = gcn_norm(_edge_index(graph), num_nodes=n, add_self_loops=True, dtype=torch.float64)
    pyg = sp.csr_matrix((weight.numpy(), (index[1].numpy(), index[0].numpy())), shape=(n, n)).toarray()
    ours = distgcn.to_scipy(graph, normalized=True).toarray()
    np.testing.assert_allclose(ours, pyg, rtol=1e-13, atol=1e-15)
    assert directed != np.allclose(ours, ours.T)  # the directed case really is directed


@needs_pyg
@pytest.mark.parametrize("directed", [True, False], ids=["directed", "undirected"])
def test_training_step_equals_pyg_gcnconv_with_the_same_weights(directed):
    """Two GCNConv layers holding distgcn's initial weights: same loss, same parameters after one SGD step."""
    from torch_geometric.nn import GCNConv

    graph = _random_graph(directed)
    result = _one_sgd_step(graph)
    widths = [graph.features.shape[1], HIDDEN, graph.num_classes]
    convs = [GCNConv(i, o).double() for i, o in zip(widths[:-1], widths[1:])]
    with torch.no_grad():
        for conv, w in zip(convs, glorot_weights(widths, SEED, torch.float64)):
            conv.lin.weight.copy_(w.T)
            conv.bias.zero_()
    edges, x = _edge_index(graph), torch.tensor(graph.features, dtype=torch.float64)
    mask, y = torch.tensor(graph.train_mask), torch.tensor(graph.labels)
    loss = F.cross_entropy(convs[1](torch.relu(convs[0](x, edges)), edges)[mask], y[mask])
    loss.backward()
    assert result.history[0]["loss"] == pytest.approx(loss.item(), rel=1e-12)
    stepped = [c.lin.weight - LR * c.lin.weight.grad for c in convs] + [c.bias - LR * c.bias.grad for c in convs]
    for got, want, is_weight in zip(result.weights, stepped, [True, True, False, False], strict=True):
        want = want.detach().numpy()
        np.testing.assert_allclose(got, want.T if is_weight else want, rtol=1e-10, atol=1e-13)


def test_normalized_adjacency_in_float32_rounds_the_same_entries():
    """The dtype argument (float32 for the SpMM kernel benchmarks): the hand Â rounded once to float32."""
    a_hat = normalized_adjacency(CHAIN, dtype=np.float32)
    assert a_hat.dtype == np.float32
    np.testing.assert_array_equal(a_hat.toarray(), np.array(CHAIN_HAT, dtype=np.float32))

