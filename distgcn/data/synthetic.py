"""Synthetic graphs for demos and scaling runs, generated with vectorized numpy.

Spec syntax (what ``load_graph`` accepts): ``synthetic:KIND[,key=value...]``.
Every key is optional; unknown keys and bad values raise InputError naming the key.

``synthetic:sbm`` — a stochastic block model with features a GCN can learn from:
    n=2000           vertices
    classes=4        communities; label = community (balanced sizes)
    features=32      feature width
    avg_degree=10    expected degree (undirected; a little lower after merging duplicates)
    p_in=0.8         fraction of each vertex's expected degree inside its community
    signal=1.5       norm of each class's mean feature vector; noise is N(0, 1) per entry
    seed=<seed>      defaults to load_graph's ``seed``
  Features = class mean + noise, weak on their own, so neighbourhood aggregation
  visibly helps. Split (random, seeded): :data:`SBM_SPLIT` = 10% train, 20% val,
  70% test.

``synthetic:rmat`` — an R-MAT (recursive Kronecker) graph without labels:
    scale=16         2**scale vertices
    edge_factor=16   edge_factor * 2**scale edges drawn (before dropping self loops / duplicates)
    a=0.57 b=0.19 c=0.19   quadrant probabilities (d = 1 - a - b - c)
    undirected=0     1: symmetrize (as does load_graph's ``symmetrize``)
    permute=1        shuffle vertex numbers, so that degree does not follow the id
    features=0 classes=0   both > 0: seeded random features/labels/split as for
                     any unlabelled graph (see :mod:`distgcn.data.features`)
    seed=<seed>
  An edge drawn as (src, dst) means dst aggregates from src; directed unless asked.

For both kinds, load_graph's ``features``/``classes`` arguments act as defaults
for the keys of the same name (giving both, with different values, is an error).
The same spec and seed always give the same graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from distgcn.data.adjacency import edges_to_adjacency, require_edges
from distgcn.data.features import random_training_data, split_masks
from distgcn.data.graph import Graph
from distgcn.errors import InputError
from distgcn.io.limits import check_declared_size

PREFIX = "synthetic:"
SBM_SPLIT = (0.1, 0.2, 0.7)


@dataclass(frozen=True)
class _Key:
    parse: Callable[[str], object]
    default: object
    check: Callable[[object], bool]
    expected: str


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes"):
        return True
    if lowered in ("0", "false", "no"):
        return False
    raise ValueError(text)


_SEED = _Key(int, None, lambda v: v >= 0, "an integer >= 0")
_KEYS: dict[str, dict[str, _Key]] = {
    "sbm": {
        "n": _Key(int, 2000, lambda v: 1 <= v <= 2**31 - 1, "an integer >= 1"),
        "classes": _Key(int, 4, lambda v: v >= 1, "an integer >= 1"),
        "features": _Key(int, 32, lambda v: v >= 1, "an integer >= 1"),
        "avg_degree": _Key(float, 10.0, lambda v: 0 < v <= 1e4, "a number in (0, 10000]"),
        "p_in": _Key(float, 0.8, lambda v: 0 <= v <= 1, "a number in [0, 1]"),
        "signal": _Key(float, 1.5, lambda v: v >= 0, "a number >= 0"),
        "seed": _SEED,
    },
    "rmat": {
        "scale": _Key(int, 16, lambda v: 1 <= v <= 30, "an integer in 1..30"),
        "edge_factor": _Key(int, 16, lambda v: 1 <= v <= 1024, "an integer in 1..1024"),
        "a": _Key(float, 0.57, lambda v: 0 <= v <= 1, "a probability in [0, 1]"),
        "b": _Key(float, 0.19, lambda v: 0 <= v <= 1, "a probability in [0, 1]"),
        "c": _Key(float, 0.19, lambda v: 0 <= v <= 1, "a probability in [0, 1]"),
        "undirected": _Key(_parse_bool, False, lambda v: True, "0 or 1"),
        "permute": _Key(_parse_bool, True, lambda v: True, "0 or 1"),
        "features": _Key(int, 0, lambda v: v >= 0, "an integer >= 0"),
        "classes": _Key(int, 0, lambda v: v >= 0, "an integer >= 0"),
        "seed": _SEED,
    },
}


def parse_spec(spec: str) -> tuple[str, dict[str, object]]:
    """(kind, {key: value}) with defaults filled in, except an absent seed (None)."""
    body = spec[len(PREFIX) :] if spec.startswith(PREFIX) else spec
    kind, *items = [part.strip() for part in body.split(",")]
    if kind not in _KEYS:
        raise InputError(f"synthetic spec {spec!r}: unknown generator {kind!r} (expected one of {', '.join(_KEYS)})")
    keys = _KEYS[kind]
    given: dict[str, object] = {}
    for item in items:
        if not item:
            continue
        name, sep, text = (s.strip() for s in item.partition("="))
        if not sep:
            raise InputError(f"synthetic spec {spec!r}: expected key=value, found {item!r}")
        if name not in keys:
            raise InputError(f"synthetic spec {spec!r}: unknown key {name!r} for {kind} (known: {', '.join(keys)})")
        if name in given:
            raise InputError(f"synthetic spec {spec!r}: key {name!r} given twice")
        key = keys[name]
        try:
            value = key.parse(text)
        except (ValueError, OverflowError):
            value = None
        if value is None or not key.check(value):
            raise InputError(f"synthetic spec {spec!r}: {name}={text!r} is invalid, expected {key.expected}")
        given[name] = value
    return kind, {name: given.get(name, key.default) for name, key in keys.items()}


def load_synthetic(
    spec: str,
    *,
    symmetrize: bool = False,
    seed: int = 0,
    features: int | None = None,
    classes: int | None = None,
) -> Graph:
    """Generate the graph a ``synthetic:...`` spec describes."""
    kind, params = _merged_params(spec, features, classes)
    if params["seed"] is None:
        params["seed"] = seed
    _check_size(spec, kind, params)
    try:
        if kind == "sbm":
            graph = sbm(**params)
        else:
            undirected = bool(params.pop("undirected")) or symmetrize
            graph = rmat(**params, undirected=undirected)
    except InputError as e:
        raise InputError(f"synthetic spec {spec!r}: {e}") from None
    require_edges(graph.adj, spec)
    return graph


def declares_training_data(spec: str, features: int | None = None, classes: int | None = None) -> bool:
    """Whether the graph of ``spec`` (with load_synthetic's ``features``/``classes``) will have features and labels:
    known before generating it, which takes minutes at scale 23 and more."""
    kind, params = _merged_params(spec, features, classes)
    return kind == "sbm" or (int(params["features"]) > 0 and int(params["classes"]) > 0)


def _merged_params(spec: str, features: int | None, classes: int | None) -> tuple[str, dict[str, object]]:
    """parse_spec's (kind, params) with the ``features``/``classes`` arguments in, refusing ones the spec contradicts."""
    kind, params = parse_spec(spec)
    explicit = _explicit_keys(spec)
    for name, value in (("features", features), ("classes", classes)):
        if value is None:
            continue
        if name in explicit and params[name] != value:
            raise InputError(
                f"synthetic spec {spec!r}: {name}={params[name]} conflicts with the {name} argument {value}"
            )
        params[name] = value
    return kind, params


def _check_size(spec: str, kind: str, params: dict[str, object]) -> None:
    """Refuse, before generating, a graph whose edges and float32 features cannot fit this node's memory."""
    if kind == "sbm":
        n, edges = int(params["n"]), int(round(int(params["n"]) * float(params["avg_degree"])))  # both directions
        declared = f"sbm n={n}, avg_degree={params['avg_degree']:g}, features={params['features']}"
    else:
        n, edges = 1 << int(params["scale"]), int(params["edge_factor"]) << int(params["scale"])
        declared = f"rmat scale={params['scale']}, edge_factor={params['edge_factor']}, features={params['features']}"
    check_declared_size(spec, None, f"the spec declares {declared}", vertices=n, entries=edges,
                        extra_bytes=4 * n * int(params["features"]))


def _explicit_keys(spec: str) -> set[str]:
    return {item.partition("=")[0].strip() for item in spec.split(",")[1:]}


def sbm(
    n: int = 2000,
    classes: int = 4,
    features: int = 32,
    avg_degree: float = 10.0,
    p_in: float = 0.8,
    signal: float = 1.5,
    seed: int = 0,
) -> Graph:
    """Stochastic block model with community-correlated features (see module docstring)."""
    if classes > n:
        raise InputError(f"sbm: classes={classes} exceeds n={n}; every community needs a vertex")
    if features < 1 or classes < 1:
        raise InputError("sbm: features and classes must be at least 1")
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(n, dtype=np.int64) % classes)

    # Each drawn edge adds 1 to the degree of both ends, so n * avg_degree / 2 edges.
    m = int(round(n * avg_degree / 2))
    u = rng.integers(0, n, size=m)
    v = _sbm_partners(rng, labels, u, classes, p_in)
    adj = edges_to_adjacency(u, v, n, symmetrize=True)
    del u, v  # 1.6 GB at n = 10^7, freed before the features are drawn

    means = rng.standard_normal((classes, features))
    means *= signal / np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-12)
    x = rng.standard_normal((n, features), dtype=np.float32)
    x += means.astype(np.float32)[labels]
    train, val, test = split_masks(n, SBM_SPLIT, rng)
    return Graph(
        adj=adj,
        vertex_ids=np.arange(n, dtype=np.int64),
        name=f"sbm-n{n}-c{classes}-f{features}-d{avg_degree:g}-p{p_in:g}-s{seed}",
        features=x,
        labels=labels,
        train_mask=train,
        val_mask=val,
        test_mask=test,
    )


def _sbm_partners(rng: np.random.Generator, labels: np.ndarray, u: np.ndarray, classes: int,
                  p_in: float) -> np.ndarray:
    """The other end of each edge from ``u``: a uniform member of u's community with probability ``p_in``, else of
    one of the other communities, picked uniformly.

    A function of its own so that its temporaries (four arrays as long as ``u``) are freed before the adjacency is
    built.
    """
    members = np.argsort(labels, kind="stable")
    sizes = np.bincount(labels, minlength=classes)
    first = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    u_class = labels[u]
    if classes > 1:
        outside = rng.random(u.shape[0]) >= p_in
        shift = rng.integers(1, classes, size=u.shape[0])
        v_class = np.where(outside, (u_class + shift) % classes, u_class)
    else:
        v_class = u_class
    return members[first[v_class] + rng.integers(0, sizes[v_class])]


_RMAT_CHUNK = 1 << 16
"""Edges generated per batch; fixed, so that the graph does not depend on the machine."""


def _rmat_chunk(
    rng: np.random.Generator, count: int, scale: int, a: float, b: float, c: float
) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) of ``count`` R-MAT edges: one uniform draw per edge and bit level picks the quadrant."""
    a_, ab, abc = np.float32(a), np.float32(a + b), np.float32(a + b + c)
    src = np.zeros(count, dtype=np.int64)
    dst = np.zeros(count, dtype=np.int64)
    for level in range(scale):
        r = rng.random(count, dtype=np.float32)
        lower = r >= ab  # quadrants c, d: source bit set
        right = (r >= a_) ^ lower ^ (r >= abc)  # quadrants b (a <= r < a+b) and d (r >= a+b+c): target bit set
        bit = np.int64(1) << level
        src += lower * bit
        dst += right * bit
    return src, dst


def rmat(
    scale: int = 16,
    edge_factor: int = 16,
    a: float = 0.57,
    b: float = 0.19,
    c: float = 0.19,
    undirected: bool = False,
    permute: bool = True,
    features: int = 0,
    classes: int = 0,
    seed: int = 0,
) -> Graph:
    """R-MAT graph: each edge picks one quadrant per bit level with probabilities a, b, c, d."""
    if a + b + c > 1 + 1e-9:
        raise InputError(f"rmat: a + b + c = {a + b + c:g} exceeds 1")
    if (features > 0) != (classes > 0):
        raise InputError("rmat: give both features and classes (or neither)")
    n = 1 << scale
    if classes > max(n, 2):
        raise InputError(f"rmat: classes={classes} exceeds the {n} vertices; random labels need at most one class "
                         "per vertex")
    m = edge_factor * n
    rng = np.random.default_rng(seed)
    src = np.empty(m, dtype=np.int64)
    dst = np.empty(m, dtype=np.int64)
    for begin in range(0, m, _RMAT_CHUNK):  # chunks keep the temporaries in cache
        src[begin : begin + _RMAT_CHUNK], dst[begin : begin + _RMAT_CHUNK] = _rmat_chunk(
            rng, min(_RMAT_CHUNK, m - begin), scale, a, b, c
        )
    if permute:
        relabel = rng.permutation(n)
        src, dst = relabel[src], relabel[dst]
    adj = edges_to_adjacency(src, dst, n, symmetrize=undirected)
    graph = Graph(
        adj=adj,
        vertex_ids=np.arange(n, dtype=np.int64),
        name=f"rmat-s{scale}-e{edge_factor}-s{seed}" + ("-u" if undirected else ""),
    )
    if features > 0:
        (graph.features, graph.labels, graph.train_mask, graph.val_mask, graph.test_mask) = random_training_data(
            n, features, classes, seed
        )
    return graph
