"""The frontier sampler's inner loop: pop a frontier vertex with probability ∝ degree.

The multi-dimensional random walk of Zeng et al. (IPDPS 2019, "Accurate,
Efficient and Scalable Graph Embedding") keeps m walkers (the frontier); each
step pops one walker with probability ∝ deg(its vertex), moves it to a random
neighbour and records the new vertex. Done naively (:func:`frontier_walk_naive`),
each pop rebuilds the cumulative degree of the m walkers: O(m) per step.

Two structures make the pop cheaper than O(m); both are here and
``benchmarks/samplers.py`` measures them against the naive version:

* the paper's **Dashboard** (:func:`frontier_walk_dashboard`): each walker
  owns deg(v) cells of a large array; a pop probes uniform cells until it hits
  a live one (O(1) expected probes when at least a fixed fraction of cells is
  live); a move kills the walker's old cells at once by issuing it a new
  ticket and appends deg(u) cells (O(deg u) writes, plus an amortized
  compaction when the array is full or mostly dead cells);
* a **Fenwick (binary indexed) tree** over the m integer walker weights
  (:func:`frontier_walk_tree`): a pop descends the tree to the slot whose
  weight interval holds an integer target in ``[0, total)`` and a move adds
  ``deg(u) - deg(v)`` along one root path, both O(log m) worst case, with no
  retries, m + 1 integers of memory (the Dashboard holds about η·Σdeg cells)
  and a cost independent of deg(u), which matters on hubs.

Because the weights are integers, the tree and the naive cumulative sum pick
*the same slot for the same target*, exactly, so :func:`frontier_walk_tree`
and :func:`frontier_walk_naive` return identical walks for the same
generator state (the tests rely on that); the Dashboard draws a variable
number of random numbers per pop, so it matches them in distribution only.

Conventions shared with :mod:`.structure`: deg = off-diagonal
in-degree (row of Â); a move picks neighbour ``floor(u * deg(v))`` of v's row,
skipping the diagonal. A move into a vertex with deg 0 (possible on directed
graphs) records that vertex but leaves the walker where it was, since a walker
there could never move again and its slot would be dead.
"""

from __future__ import annotations

import numpy as np

from distgcn.sampling.reference.structure import SamplingGraph


class FenwickTree:
    """Prefix sums of m non-negative integers with O(log m) update and search.

    Kept as a plain Python list: the frontier loop is sequential Python, and
    list indexing returns Python ints much faster than numpy scalar indexing.
    """

    def __init__(self, weights: np.ndarray):
        m = int(len(weights))
        tree = [0] + [int(w) for w in weights]
        for i in range(1, m + 1):
            j = i + (i & -i)
            if j <= m:
                tree[j] += tree[i]
        self.m = m
        self.tree = tree
        self.total = int(np.sum(weights, dtype=np.int64)) if m else 0
        self.top = 1 << (m.bit_length() - 1) if m else 0

    def add(self, slot: int, delta: int) -> None:
        """weights[slot] += delta."""
        tree, m = self.tree, self.m
        i = slot + 1
        while i <= m:
            tree[i] += delta
            i += i & -i
        self.total += delta

    def find(self, target: int) -> int:
        """The slot s with ``sum(w[:s]) <= target < sum(w[:s+1])``, for 0 <= target < total."""
        tree, m = self.tree, self.m
        pos, mask = 0, self.top
        while mask:
            nxt = pos + mask
            if nxt <= m and tree[nxt] <= target:
                pos = nxt
                target -= tree[nxt]
            mask >>= 1
        return pos

    def prefix(self, count: int) -> int:
        """sum(w[:count])."""
        tree, s, i = self.tree, 0, count
        while i > 0:
            s += tree[i]
            i -= i & -i
        return s


def _views(graph: SamplingGraph):
    return (memoryview(np.ascontiguousarray(graph.indptr)), memoryview(np.ascontiguousarray(graph.indices)),
            memoryview(np.ascontiguousarray(graph.diag_pos)), memoryview(np.ascontiguousarray(graph.deg)))


def frontier_walk_tree(graph: SamplingGraph, frontier: np.ndarray, steps: int,
                       rng: np.random.Generator) -> np.ndarray:
    """Run ``steps`` frontier steps with the Fenwick tree; return the vertex each step reached.

    ``frontier``: m start vertices, all with deg > 0. Draws ``rng.random((steps, 2))``:
    column 0 picks the walker, column 1 its neighbour.
    """
    uniforms = rng.random((steps, 2))
    indptr, indices, diag, deg = _views(graph)
    front = [int(v) for v in frontier]
    m = len(front)
    fen = FenwickTree(np.asarray([deg[v] for v in front], dtype=np.int64))
    tree, total, top = fen.tree, fen.total, fen.top
    pop_u = uniforms[:, 0].tolist()
    nb_u = uniforms[:, 1].tolist()
    out = [0] * steps
    for k in range(steps):
        target = int(pop_u[k] * total)
        if target >= total:
            target = total - 1
        pos, mask = 0, top  # Fenwick descent, inlined for speed
        while mask:
            nxt = pos + mask
            if nxt <= m:
                t = tree[nxt]
                if t <= target:
                    pos = nxt
                    target -= t
            mask >>= 1
        v = front[pos]
        d = deg[v]
        j = int(nb_u[k] * d)
        if j >= d:
            j = d - 1
        p = indptr[v] + j
        if p >= diag[v]:
            p += 1
        u = indices[p]
        out[k] = u
        du = deg[u]
        if du:
            front[pos] = u
            delta = du - d
            if delta:
                i = pos + 1
                while i <= m:
                    tree[i] += delta
                    i += i & -i
                total += delta
    return np.asarray(out, dtype=np.int64)


def frontier_walk_naive(graph: SamplingGraph, frontier: np.ndarray, steps: int,
                        rng: np.random.Generator) -> np.ndarray:
    """Same walk as :func:`frontier_walk_tree`, popping with an O(m) cumulative sum per step (the baseline)."""
    uniforms = rng.random((steps, 2))
    indptr, indices, diag, deg = _views(graph)
    front = np.asarray(frontier, dtype=np.int64).copy()
    w = graph.deg[front].astype(np.int64)
    pop_u = uniforms[:, 0].tolist()
    nb_u = uniforms[:, 1].tolist()
    out = [0] * steps
    for k in range(steps):
        cdf = np.cumsum(w)
        total = int(cdf[-1])
        target = int(pop_u[k] * total)
        if target >= total:
            target = total - 1
        slot = int(np.searchsorted(cdf, target, side="right"))
        v = int(front[slot])
        d = deg[v]
        j = int(nb_u[k] * d)
        if j >= d:
            j = d - 1
        p = indptr[v] + j
        if p >= diag[v]:
            p += 1
        u = indices[p]
        out[k] = u
        du = deg[u]
        if du:
            front[slot] = u
            w[slot] = du
    return np.asarray(out, dtype=np.int64)


def frontier_walk_dashboard(graph: SamplingGraph, frontier: np.ndarray, steps: int, rng: np.random.Generator,
                            eta: float = 2.0, block: int | None = None) -> np.ndarray:
    """The same random process with the paper's Dashboard: O(1) expected pop by rejection.

    Each walker's current position owns deg(v) cells of ``cells``, all holding
    the walker's current *ticket*; a move issues a new ticket and appends
    deg(u) cells, which kills the old cells without touching them. A pop draws
    a uniform cell among the ``used`` ones and accepts it when its ticket is
    still current: a uniform live cell, hence a walker with probability ∝ deg.
    When the appended cells would overflow the array (sized ``eta`` x live
    cells) or leave less than 1/eta of the used cells live (walkers moving to
    lower degrees shrink the live count), the array is compacted to the live
    cells, so a pop needs at most ``eta`` probes on average.
    Random numbers are drawn in blocks as probes need them, so the walk has the
    distribution of :func:`frontier_walk_tree`, not the same values.
    """
    indptr, indices, diag, deg = _views(graph)
    front = [int(v) for v in frontier]
    m = len(front)
    current = list(range(m))  # ticket of each walker
    owner = list(range(m))  # walker of each ticket
    front_deg = graph.deg[np.asarray(front, dtype=np.int64)]
    live = int(front_deg.sum())

    def compact(extra: int) -> tuple[np.ndarray, memoryview, int, int]:
        fd = graph.deg[np.asarray(front, dtype=np.int64)]
        n_live = int(fd.sum())
        cap = max(int(eta * n_live), n_live + extra, 1)
        arr = np.empty(cap, dtype=np.int64)
        arr[:n_live] = np.repeat(np.asarray(current, dtype=np.int64), fd)
        return arr, memoryview(arr), n_live, cap

    cells, cell_view, used, capacity = compact(0)
    if block is None:  # random numbers per call: about (probes + 1) per step
        block = max(256, min(8192, 3 * steps))
    ubuf = rng.random(block).tolist()
    bi = 0
    out = [0] * steps
    for k in range(steps):
        while True:  # rejection: probe uniform used cells until one is live
            if bi == block:
                ubuf = rng.random(block).tolist()
                bi = 0
            c = int(ubuf[bi] * used)
            bi += 1
            if c == used:
                c -= 1
            t = cell_view[c]
            s = owner[t]
            if current[s] == t:
                break
        if bi == block:
            ubuf = rng.random(block).tolist()
            bi = 0
        v = front[s]
        d = deg[v]
        j = int(ubuf[bi] * d)
        bi += 1
        if j >= d:
            j = d - 1
        p = indptr[v] + j
        if p >= diag[v]:
            p += 1
        u = indices[p]
        out[k] = u
        du = deg[u]
        if du:
            front[s] = u
            t = len(owner)
            owner.append(s)
            current[s] = t
            live += du - d
            if used + du > capacity or eta * live < used + du:  # full, or under 1/eta live
                cells, cell_view, used, capacity = compact(du)
            else:
                cells[used:used + du] = t
                used += du
    return np.asarray(out, dtype=np.int64)
