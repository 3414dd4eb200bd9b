"""``synthetic:rmat,...`` generated on P ranks: each rank draws its share of the edges, none the whole graph.

:func:`distgcn.data.synthetic.rmat` draws the edges in fixed chunks, each chunk one float32 per edge and bit
level, from one PCG64 stream. A float32 takes half of one 64-bit draw, and every chunk but the last has an
even count, so chunk k starts ``k · chunk · scale / 2`` draws into the stream: rank r jumps there
(``PCG64.advance``) and draws chunks ``[K·r/P, K·(r+1)/P)`` only. The relabelling permutation follows the last
chunk in the stream; every rank jumps past all the edges and draws it (n entries, the one array of n a rank
holds here). Each edge then travels to the owner of its row, so the rows are those one process builds.
"""

from __future__ import annotations

import numpy as np

from distgcn.data.distributed.adjacency import owned_adjacency_rows
from distgcn.data.distributed.graph import (
    RankGraph,
    add_random_training_data,
    contiguous_ranges,
    guarded,
    require_edges_on_ranks,
)
from distgcn.data.distributed.ids import Exchanging
from distgcn.data.synthetic import _RMAT_CHUNK, _merged_params, _rmat_chunk
from distgcn.errors import InputError
from distgcn.io.limits import check_declared_size


def rmat_on_ranks(group: Exchanging, spec: str, *, symmetrize: bool = False, seed: int = 0,
                  features: int | None = None, classes: int | None = None) -> RankGraph:
    """This rank's vertices ``[n·r/P, n·(r+1)/P)`` of the graph :func:`distgcn.data.synthetic.load_synthetic`
    generates for ``spec`` (an R-MAT spec), with their rows of A and random training data if it declares some."""
    _kind, params = _merged_params(spec, features, classes)
    graph_seed = params["seed"] if params["seed"] is not None else seed
    scale, edge_factor = int(params["scale"]), int(params["edge_factor"])
    a, b, c = float(params["a"]), float(params["b"]), float(params["c"])
    num_features, num_classes = int(params["features"]), int(params["classes"])
    undirected = bool(params["undirected"]) or symmetrize
    n = 1 << scale
    try:
        if a + b + c > 1 + 1e-9:
            raise InputError(f"rmat: a + b + c = {a + b + c:g} exceeds 1")
        if (num_features > 0) != (num_classes > 0):
            raise InputError("rmat: give both features and classes (or neither)")
        if num_classes > max(n, 2):
            raise InputError(f"rmat: classes={num_classes} exceeds the {n} vertices; random labels need at most "
                             "one class per vertex")
    except InputError as e:
        raise InputError(f"synthetic spec {spec!r}: {e}") from None
    m = edge_factor * n
    guarded(group, lambda: _check_share(spec, params, n, m, undirected, group.size))
    chunks = -(-m // _RMAT_CHUNK)
    mine = contiguous_ranges(chunks, group.size)[group.rank : group.rank + 2]
    rng = np.random.default_rng(graph_seed)
    rng.bit_generator.advance(int(mine[0]) * (_RMAT_CHUNK // 2) * scale)
    begin, end = int(mine[0]) * _RMAT_CHUNK, min(int(mine[1]) * _RMAT_CHUNK, m)
    src = np.empty(end - begin, dtype=np.int64)
    dst = np.empty(end - begin, dtype=np.int64)
    for start in range(begin, end, _RMAT_CHUNK):
        count = min(_RMAT_CHUNK, m - start)
        src[start - begin : start - begin + count], dst[start - begin : start - begin + count] = _rmat_chunk(
            rng, count, scale, a, b, c)
    if params["permute"]:
        rng = np.random.default_rng(graph_seed)
        rng.bit_generator.advance(m * scale // 2)  # m = edge_factor · 2^scale: m · scale is even
        relabel = rng.permutation(n)
        src, dst = relabel[src], relabel[dst]
        del relabel
    firsts = contiguous_ranges(n, group.size)
    lo, hi = int(firsts[group.rank]), int(firsts[group.rank + 1])
    adjacency = owned_adjacency_rows(group, src, dst, lo, hi - lo, n, symmetrize=undirected)
    del src, dst
    name = f"rmat-s{scale}-e{edge_factor}-s{graph_seed}" + ("-u" if undirected else "")
    graph = RankGraph(name=name, n=n, first=lo, vertex_ids=np.arange(lo, hi, dtype=np.int64), adjacency=adjacency)
    require_edges_on_ranks(group, graph, spec)
    if num_features > 0:
        add_random_training_data(graph, num_features, num_classes, graph_seed)
    return graph


def _check_share(spec: str, params: dict, n: int, m: int, undirected: bool, ranks: int) -> None:
    """Refuse, before generating, a share of the graph that cannot fit this rank's memory (its rows of A and Â,
    their features, the arrays of n entries every rank holds: the permutation, the labels, the part vector)."""
    rows = -(-n // ranks)
    check_declared_size(spec, None, f"the spec declares rmat scale={params['scale']}, "
                        f"edge_factor={params['edge_factor']}, features={params['features']}, "
                        f"of which each of {ranks} ranks holds a share", vertices=rows,
                        entries=-(-m // ranks) * (2 if undirected else 1),
                        extra_bytes=4 * rows * int(params["features"]) + 3 * 8 * n)
