"""Graphs to and from scipy.sparse, networkx and PyTorch Geometric.

distgcn's convention is ``adj[v, u] != 0`` when ``v`` aggregates from ``u``
(an edge ``u -> v``). networkx's ``DiGraph`` edge ``(u, v)`` and PyG's
``edge_index[:, k] = (source, target)`` both mean the same thing here: the
target aggregates from the source, as in PyG's default ``flow="source_to_target"``.
Edge weights are not carried over: Â is built from the pattern alone.

networkx (a dependency of torch) and torch_geometric are imported only by the
functions that need them, so ``import distgcn`` stays cheap.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from distgcn.data.adjacency import canonicalize, edges_to_adjacency, require_edges
from distgcn.data.features import feature_matrix
from distgcn.data.graph import Graph, normalized_adjacency
from distgcn.errors import InputError

if TYPE_CHECKING:
    import networkx as nx

MASKS = ("train_mask", "val_mask", "test_mask")


def from_scipy(
    adj: sp.spmatrix | sp.sparray,
    features: np.ndarray | None = None,
    labels: np.ndarray | None = None,
    *,
    train_mask: np.ndarray | None = None,
    val_mask: np.ndarray | None = None,
    test_mask: np.ndarray | None = None,
    vertex_ids: np.ndarray | None = None,
    symmetrize: bool = False,
    name: str = "scipy",
) -> Graph:
    """A Graph whose edges are the nonzero pattern of ``adj`` (``adj[v, u] != 0``: v aggregates from u).

    Values, explicit zeros, self loops and duplicates are dropped, as every loader does.
    """
    if not sp.issparse(adj) or adj.ndim != 2 or adj.shape[0] != adj.shape[1]:
        raise InputError(f"adj must be a square scipy sparse matrix, got {type(adj).__name__} "
                         f"of shape {getattr(adj, 'shape', None)}")
    pattern = sp.csr_matrix(adj, copy=True)
    pattern.eliminate_zeros()
    n = pattern.shape[0]
    graph = Graph(adj=canonicalize(pattern, symmetrize=symmetrize), vertex_ids=np.arange(n, dtype=np.int64),
                  name=name)
    require_edges(graph.adj, name)
    if vertex_ids is not None:
        graph.vertex_ids = _ids(vertex_ids, n)
    return _with_data(graph, features, labels, (train_mask, val_mask, test_mask))


def to_scipy(graph: Graph, normalized: bool = False) -> sp.csr_matrix:
    """A copy of A (no self loops, entries 1.0), or of Â = D^-1/2 (A + I) D^-1/2 when ``normalized``."""
    return normalized_adjacency(graph.adj) if normalized else graph.adj.copy()


def from_networkx(
    g: nx.Graph,
    *,
    feature_key: str = "x",
    label_key: str = "y",
    mask_keys: Iterable[str] = MASKS,
    symmetrize: bool = False,
) -> Graph:
    """A Graph from a networkx graph; node attributes give features, labels and masks.

    An undirected graph gives both directions of each edge; a ``DiGraph``
    edge ``(u, v)`` means v aggregates from u. Integer node labels become
    ``vertex_ids`` and are ordered by value (as the file loaders do); other
    labels keep ``g.nodes`` order, with ``vertex_ids`` = 0..n-1. An attribute
    must be on every node or on none; ``mask_keys`` are read in the order
    train, val, test.
    """
    nodes = list(g.nodes)
    if not nodes:
        raise InputError("the networkx graph has no nodes")
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in nodes):
        vertex_ids = np.sort(np.asarray(nodes, dtype=np.int64))
        nodes = [int(v) for v in vertex_ids]
    else:
        vertex_ids = np.arange(len(nodes), dtype=np.int64)
    position = {v: i for i, v in enumerate(nodes)}
    pairs = np.array([(position[u], position[v]) for u, v in g.edges()], dtype=np.int64).reshape(-1, 2)
    adj = edges_to_adjacency(pairs[:, 0], pairs[:, 1], len(nodes), symmetrize=symmetrize or not g.is_directed())
    name = str(g.graph.get("name") or "networkx")
    require_edges(adj, name)
    graph = Graph(adj=adj, vertex_ids=vertex_ids, name=name)
    attrs = [g.nodes[v] for v in nodes]
    masks = [_node_attribute(attrs, key) for key in mask_keys]
    if len(masks) != len(MASKS):
        raise InputError(f"mask_keys: expected {len(MASKS)} names (train, val, test), got {len(masks)}")
    return _with_data(graph, _node_attribute(attrs, feature_key), _node_attribute(attrs, label_key), masks)


def to_networkx(graph: Graph) -> nx.DiGraph:
    """A ``DiGraph`` on ``vertex_ids`` with an edge (u, v) for every ``adj[v, u]``; data as node attributes.

    Attributes: ``x`` (a feature row), ``y`` (an int label) and the three
    masks (bools), each only when the graph has it. Call ``.to_undirected()``
    for an undirected graph.
    """
    import networkx as nx

    out = nx.DiGraph(name=graph.name)
    ids = [int(v) for v in graph.vertex_ids]
    columns: dict[str, Any] = {}
    if graph.features is not None:
        columns["x"] = list(graph.features)
    if graph.labels is not None:
        columns["y"] = [int(c) for c in graph.labels]
    for key in MASKS:
        mask = getattr(graph, key)
        if mask is not None:
            columns[key] = [bool(m) for m in mask]
    out.add_nodes_from((v, {key: values[i] for key, values in columns.items()}) for i, v in enumerate(ids))
    coo = graph.adj.tocoo()
    out.add_edges_from(zip(graph.vertex_ids[coo.col].tolist(), graph.vertex_ids[coo.row].tolist()))
    return out


def from_pyg(data: Any, *, symmetrize: bool = False) -> Graph:
    """A Graph from a PyTorch Geometric ``Data`` object (homogeneous, node-level, single-label).

    Reads ``edge_index`` ([2, E]: row 0 sources, row 1 targets; the target
    aggregates from the source), ``num_nodes``, and ``x``, ``y``,
    ``train_mask``, ``val_mask``, ``test_mask`` when present. Edge attributes
    are ignored. A float ``y`` (OGB's ogbn-papers100M) gives label -1 where it
    is NaN, and such vertices are taken out of the masks.
    """
    try:
        from torch_geometric.data import Data
    except ImportError:
        raise ImportError("from_pyg needs PyTorch Geometric: pip install torch_geometric "
                          "(see https://pytorch-geometric.readthedocs.io)") from None
    if not isinstance(data, Data):
        raise InputError(f"from_pyg expects a torch_geometric.data.Data object, got {type(data).__name__} "
                         "(for HeteroData, convert one node type with .to_homogeneous() first)")
    n = data.num_nodes
    if n is None or n < 1:
        raise InputError("the Data object has no nodes (num_nodes is not set)")
    edge_index = _numpy(data.edge_index)
    if edge_index is None or edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise InputError(f"edge_index must have shape [2, E], got {getattr(edge_index, 'shape', None)}")
    if edge_index.size and (edge_index.min() < 0 or edge_index.max() >= n):
        raise InputError(f"edge_index holds node indices outside 0..{n - 1}")
    adj = edges_to_adjacency(edge_index[0], edge_index[1], int(n), symmetrize=symmetrize)
    require_edges(adj, "Data")
    graph = Graph(adj=adj, vertex_ids=np.arange(n, dtype=np.int64), name=type(data).__name__)
    labels = _numpy(getattr(data, "y", None))
    if labels is not None and labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    masks = [_numpy(getattr(data, key, None)) for key in MASKS]
    if labels is not None and np.issubdtype(labels.dtype, np.floating):
        labels, known = _float_labels(labels)
        masks = [m & known if m is not None and m.shape == known.shape else m for m in masks]
    return _with_data(graph, _numpy(getattr(data, "x", None)), labels, masks)


def is_pyg_data(value: Any) -> bool:
    """Whether ``value`` is a PyTorch Geometric ``Data`` (checked without importing PyG)."""
    return any(cls.__module__.startswith("torch_geometric.") and cls.__name__ == "Data" for cls in type(value).__mro__)


def _float_labels(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int64 labels with -1 for NaN, known mask) from float labels, as OGB's PyG datasets give ogbn-papers100M."""
    known = ~np.isnan(values)
    whole = values[known]
    if whole.size and ((whole < 0) | (whole != np.round(whole))).any():
        raise InputError("y must hold class numbers (float y may hold whole numbers >= 0, or NaN for unknown)")
    labels = np.full(values.shape, -1, dtype=np.int64)
    labels[known] = whole.astype(np.int64)
    return labels, known


def _numpy(value: Any) -> np.ndarray | None:
    """A tensor (on any device) or array as a numpy array; None stays None."""
    if value is None:
        return None
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def _node_attribute(attrs: list[dict], key: str) -> np.ndarray | None:
    """The attribute ``key`` of every node as one array, None if no node has it."""
    present = sum(key in a for a in attrs)
    if present == 0:
        return None
    if present != len(attrs):
        raise InputError(f"node attribute {key!r} is on {present} of {len(attrs)} nodes; expected all or none")
    return np.asarray([_numpy(a[key]) for a in attrs])


def _ids(values: np.ndarray, n: int) -> np.ndarray:
    ids = np.asarray(values)
    if ids.shape != (n,) or not np.issubdtype(ids.dtype, np.integer):
        raise InputError(f"vertex_ids must be {n} integers, got {ids.dtype} {ids.shape}")
    if np.unique(ids).size != n:
        raise InputError("vertex_ids must be distinct")
    return ids.astype(np.int64)


def _with_data(graph: Graph, features: np.ndarray | None, labels: np.ndarray | None,
               masks: Iterable[np.ndarray | None]) -> Graph:
    """Attach checked copies of the vertex data; shapes and types as :class:`Graph` documents them."""
    n = graph.num_vertices
    if features is not None:
        features = np.asarray(features)
        checked = feature_matrix(features, "features", None, rows=n)
        graph.features = checked.copy() if checked is features else checked
    if labels is not None:
        labels = np.asarray(labels)
        if labels.shape != (n,) or not np.issubdtype(labels.dtype, np.integer):
            raise InputError(f"labels must be {n} integers (one class per vertex, -1 unknown), "
                             f"got {labels.dtype} {labels.shape}")
        graph.labels = labels.astype(np.int64)
    for key, mask in zip(MASKS, masks):
        if mask is not None:
            mask = np.asarray(mask)
            if mask.shape != (n,) or mask.dtype != np.bool_:
                raise InputError(f"{key} must be {n} booleans, got {mask.dtype} {mask.shape} "
                                 "(for several splits, pass one column)")
            setattr(graph, key, mask.copy())
    return graph
