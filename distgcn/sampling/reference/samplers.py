"""GraphSAINT's subgraph samplers (Zeng et al., ICLR 2020), vectorized and seeded.

Every sampler draws a vertex set S from a ``numpy.random.Generator`` and
returns the subgraph of Â induced by S (:class:`~.structure.Subgraph`). The
same generator state gives the same subgraph: all randomness comes from the
generator passed to :meth:`Sampler.sample`, never from global state, so ranks
that share a seed draw the same batches.

``batch_size`` N is the number of vertex *draws* (with repetition); the
subgraph keeps the distinct ones, so it has at most N vertices:

* ``node``: N vertices drawn with replacement, P(v) ∝ ‖Â[:, v]‖²;
* ``edge``: N/2 edges (off-diagonal entries of Â) drawn with replacement,
  P(v, u) ∝ 1/d(u) + 1/d(v) with d = deg + 1, their endpoints kept;
* ``rw``: N // h roots drawn uniformly with replacement, each walks h steps;
  the root and the h vertices reached are recorded (up to (h+1)·N/h);
* ``frontier``: m walkers, N − m steps of the multi-dimensional random walk
  of Zeng et al. (IPDPS 2019); the m starts and N − m vertices reached are
  recorded.

Degrees are off-diagonal in-degrees of Â (see :mod:`.structure` for why).
The edge sampler uses ``d = deg + 1``, the degree Â = D^-1/2 (A+I) D^-1/2 is
normalized with: it stays finite for vertices with no in-edge (sources of a
directed graph) and a rank can recover it for a halo vertex from Â's values
(``d(u) = 1 / (Â[v, u]² d(v))``) without asking its owner.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import scipy.sparse as sp

from distgcn.errors import InputError
from distgcn.sampling.reference.dashboard import (
    frontier_walk_dashboard,
    frontier_walk_naive,
    frontier_walk_tree,
)
from distgcn.sampling.reference.structure import SamplingGraph, Subgraph

if TYPE_CHECKING:
    from distgcn.config import SamplerSpec

__all__ = ["Sampler", "NodeSampler", "EdgeSampler", "RandomWalkSampler", "FrontierSampler",
           "SAMPLERS", "SAMPLER_OPTIONS", "make_sampler", "sampler_for"]


class _Table:
    """Draws indices i with probability ∝ weights[i] by inverse CDF: O(log n) per draw, no O(n) per call."""

    def __init__(self, weights: np.ndarray):
        weights = np.asarray(weights, dtype=np.float64)
        if np.any(~np.isfinite(weights)) or np.any(weights < 0):
            raise InputError("sampling weights must be finite and non-negative")
        self.support = np.flatnonzero(weights > 0)
        if self.support.size == 0:
            raise InputError("nothing to sample: every sampling weight is zero")
        self.cdf = np.cumsum(weights[self.support])
        self.total = float(self.cdf[-1])

    def draw(self, rng: np.random.Generator, size: int) -> np.ndarray:
        i = np.searchsorted(self.cdf, rng.random(size) * self.total, side="right")
        np.minimum(i, self.support.size - 1, out=i)  # guards x rounding up to total
        return self.support[i]


def _as_graph(adjacency: sp.spmatrix | SamplingGraph) -> SamplingGraph:
    return adjacency if isinstance(adjacency, SamplingGraph) else SamplingGraph(adjacency)


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InputError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


class Sampler(ABC):
    """A subgraph sampler over Â: ``sample(rng)`` gives the next minibatch's induced subgraph."""

    name: ClassVar[str]

    def __init__(self, adjacency: sp.spmatrix | SamplingGraph, batch_size: int):
        self.graph = _as_graph(adjacency)
        self.batch_size = _positive_int("batch size", batch_size)

    @abstractmethod
    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """The sampled vertices with repetition, in draw order (what the algorithm visits)."""

    def sample_vertices(self, rng: np.random.Generator) -> np.ndarray:
        """Sorted distinct sampled vertices."""
        return np.unique(self.draw(rng))

    def sample(self, rng: np.random.Generator) -> Subgraph:
        """The subgraph of Â induced by :meth:`sample_vertices`."""
        return self.graph.induced(self.sample_vertices(rng))


class NodeSampler(Sampler):
    """N draws with replacement, P(v) ∝ ‖Â[:, v]‖² (GraphSAINT's variance-reducing choice)."""

    name = "node"

    def __init__(self, adjacency: sp.spmatrix | SamplingGraph, batch_size: int):
        super().__init__(adjacency, batch_size)
        a = self.graph.matrix
        col_sq = np.bincount(a.indices, weights=np.square(a.data, dtype=np.float64), minlength=self.graph.n)
        self._table = _Table(col_sq)
        self.probabilities = col_sq / col_sq.sum()
        """float64 [n]: P(v) of one draw."""

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        return self._table.draw(rng, self.batch_size)


class EdgeSampler(Sampler):
    """ceil(N/2) edges with replacement, P(v, u) ∝ 1/d(u) + 1/d(v), d = deg + 1; keeps both endpoints."""

    name = "edge"

    def __init__(self, adjacency: sp.spmatrix | SamplingGraph, batch_size: int):
        super().__init__(adjacency, batch_size)
        g = self.graph
        rows = np.repeat(np.arange(g.n, dtype=np.int64), np.diff(g.indptr))
        inv = 1.0 / (g.deg + 1.0)
        w = inv[rows] + inv[g.indices]
        w[g.indices == rows] = 0.0  # self loops are not edges to sample
        self._table = _Table(w)
        self.num_edges = (self.batch_size + 1) // 2

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        pos = self._table.draw(rng, self.num_edges)
        dst = np.searchsorted(self.graph.indptr, pos, side="right") - 1
        return np.concatenate((dst, self.graph.indices[pos].astype(np.int64)))


class RandomWalkSampler(Sampler):
    """N // h uniform roots, h-step walks on in-neighbours, all visited vertices kept."""

    name = "rw"

    def __init__(self, adjacency: sp.spmatrix | SamplingGraph, batch_size: int, walk_length: int = 2):
        super().__init__(adjacency, batch_size)
        self.walk_length = _positive_int("walk length", walk_length)
        self.num_roots = max(1, self.batch_size // self.walk_length)

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        g = self.graph
        cur = rng.integers(0, g.n, size=self.num_roots, dtype=np.int64)
        visited = [cur]
        for _ in range(self.walk_length):
            nxt = g.neighbor(cur, rng.random(self.num_roots))
            visited.append(nxt)
            cur = np.where(g.deg[nxt] > 0, nxt, cur)  # a dead end is recorded, the walker stays
        return np.concatenate(visited)


class FrontierSampler(Sampler):
    """Multi-dimensional random walk (IPDPS 2019): m walkers, budget N, pop ∝ degree.

    ``pop`` picks how a walker is popped (:mod:`.dashboard`): ``"tree"``, a
    Fenwick tree, O(log m) per step; ``"dashboard"``, the paper's structure,
    O(1) expected probes; ``"naive"``, a cumulative sum, O(m) per step. Tree
    and naive consume the generator identically and return the same sample
    for the same state; the Dashboard has the same distribution.
    """

    name = "frontier"
    DEFAULT_FRONTIER = 1000
    WALKS = {"tree": frontier_walk_tree, "dashboard": frontier_walk_dashboard, "naive": frontier_walk_naive}

    def __init__(self, adjacency: sp.spmatrix | SamplingGraph, batch_size: int,
                 frontier_size: int | None = None, pop: str = "tree"):
        super().__init__(adjacency, batch_size)
        if frontier_size is None:
            frontier_size = max(1, min(self.DEFAULT_FRONTIER, self.batch_size // 2))
        self.frontier_size = _positive_int("frontier size", frontier_size)
        if self.frontier_size >= self.batch_size:
            raise InputError(f"frontier size {self.frontier_size} must be smaller than the budget "
                             f"(batch size) {self.batch_size}")
        self._starts = np.flatnonzero(self.graph.deg > 0)
        if self._starts.size < self.frontier_size:
            raise InputError(f"frontier size {self.frontier_size} exceeds the {self._starts.size} vertices "
                             "with an in-neighbour")
        if pop not in self.WALKS:
            raise InputError(f"pop must be one of {', '.join(self.WALKS)}, got {pop!r}")
        self.pop = pop

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        frontier = rng.choice(self._starts, size=self.frontier_size, replace=False)
        walk = self.WALKS[self.pop](self.graph, frontier, self.batch_size - self.frontier_size, rng)
        return np.concatenate((frontier, walk))


SAMPLERS: dict[str, type[Sampler]] = {
    cls.name: cls for cls in (NodeSampler, EdgeSampler, RandomWalkSampler, FrontierSampler)
}
SAMPLER_OPTIONS: dict[str, dict[str, Any]] = {
    "node": {},
    "edge": {},
    "rw": {"walk_length": 2},
    "frontier": {"frontier_size": None, "pop": "tree"},
}
"""Sampler-specific options and their defaults (None: derived from the batch size); CLI flags mirror them."""


def make_sampler(name: str, adjacency: sp.spmatrix | SamplingGraph, batch_size: int, **options: Any) -> Sampler:
    """Build sampler ``name`` (node, edge, rw, frontier) over Â with target batch size N.

    ``adjacency`` is Â (rows = destinations) or a :class:`SamplingGraph` built
    from it, to share one across samplers. Unknown names or options are input errors.
    """
    if name not in SAMPLERS:
        raise InputError(f"unknown sampler {name!r}; expected one of {', '.join(SAMPLERS)}")
    unknown = sorted(set(options) - set(SAMPLER_OPTIONS[name]))
    if unknown:
        allowed = ", ".join(SAMPLER_OPTIONS[name]) or "none"
        raise InputError(f"sampler {name!r} has no option {unknown[0]!r} (options: {allowed})")
    return SAMPLERS[name](adjacency, batch_size, **options)


def sampler_for(spec: SamplerSpec, adjacency: sp.spmatrix | SamplingGraph) -> Sampler:
    """The sampler a :class:`~distgcn.config.SamplerSpec` names (``--sampler``), over ``adjacency``."""
    return make_sampler(spec.name, adjacency, spec.batch_size, **spec.options)
