"""Samplers (distgcn.sampling.reference): reproducibility, induced subgraphs, distributions, normalization.

The last section checks what the distributed samplers share with these (see
the docstring of distgcn.sampling): their draws differ, their weights and
walk steps do not.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from strategies import directed_a_hat

from distgcn.data import load_graph
from distgcn.data.graph import normalized_adjacency
from distgcn.errors import InputError
from distgcn.sampling.reference import (
    SAMPLERS,
    FenwickTree,
    SamplingGraph,
    estimate_normalization,
    frontier_walk_dashboard,
    frontier_walk_naive,
    frontier_walk_tree,
    make_sampler,
)

SMALL_OPTIONS = {"node": {}, "edge": {}, "rw": {"walk_length": 3}, "frontier": {"frontier_size": 4}}


def small_graphs() -> st.SearchStrategy[sp.csr_matrix]:
    return directed_a_hat(max_n=25, edges_per_vertex=4)


def sbm(n: int = 120, seed: int = 3) -> sp.csr_matrix:
    return normalized_adjacency(load_graph(f"synthetic:sbm,n={n},avg_degree=6,seed={seed}").adj)


def check_induced(a: sp.csr_matrix, sub) -> None:
    s = sub.vertices
    assert s.dtype == np.int64 and s.ndim == 1 and s.size > 0
    assert np.all(np.diff(s) > 0) and s[0] >= 0 and s[-1] < a.shape[0]
    assert sub.indptr[0] == 0 and sub.indptr[-1] == sub.num_edges and np.all(np.diff(sub.indptr) >= 0)
    expected = a[s][:, s].tocsr()
    expected.sort_indices()
    np.testing.assert_array_equal(sub.indptr, expected.indptr)
    np.testing.assert_array_equal(sub.indices, expected.indices)
    # edge_ids point at the same entries of Â: same row, same column, same value
    rows = s[sub.rows()]
    np.testing.assert_array_equal(a.indices[sub.edge_ids], s[sub.indices])
    np.testing.assert_array_equal(np.searchsorted(a.indptr, sub.edge_ids, side="right") - 1, rows)
    np.testing.assert_array_equal(sub.submatrix(a).data, expected.data)


# ---- interface --------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(SAMPLERS))
def test_same_seed_same_subgraph_and_different_seed_differs(name):
    a = sbm()
    sampler = make_sampler(name, a, 40, **SMALL_OPTIONS[name])
    first = sampler.sample(np.random.default_rng(7))
    again = make_sampler(name, a, 40, **SMALL_OPTIONS[name]).sample(np.random.default_rng(7))
    for field in ("vertices", "indptr", "indices", "edge_ids"):
        np.testing.assert_array_equal(getattr(first, field), getattr(again, field))
    others = [sampler.sample_vertices(np.random.default_rng(seed)) for seed in range(8, 12)]
    assert any(not np.array_equal(first.vertices, o) for o in others)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=small_graphs(), seed=st.integers(0, 2**32 - 1), batch=st.integers(5, 30))
def test_every_sampler_returns_the_induced_subgraph(a, seed, batch):
    g = SamplingGraph(a)
    for name in SAMPLERS:
        options = dict(SMALL_OPTIONS[name])
        if name == "frontier":
            options["frontier_size"] = 1
        if name in ("edge", "frontier") and g.deg.sum() == 0:  # no edge to sample or walk on
            with pytest.raises(InputError):
                make_sampler(name, g, batch, **options)
            continue
        sampler = make_sampler(name, g, batch, **options)
        sub = sampler.sample(np.random.default_rng(seed))
        check_induced(a, sub)
        draws = sampler.draw(np.random.default_rng(seed))
        np.testing.assert_array_equal(sub.vertices, np.unique(draws))
        expected_draws = {"node": batch, "edge": 2 * ((batch + 1) // 2), "rw": (batch // 3) * 4, "frontier": batch}
        assert draws.shape == (expected_draws[name],)


@settings(max_examples=40, deadline=None)
@given(a=small_graphs(), seed=st.integers(0, 2**32 - 1))
def test_walks_move_along_in_edges_and_stop_only_at_dead_ends(a, seed):
    g = SamplingGraph(a)
    h = 3
    sampler = make_sampler("rw", g, 12, walk_length=h)
    visits = sampler.draw(np.random.default_rng(seed)).reshape(h + 1, sampler.num_roots)
    walker = visits[0].copy()
    for step in range(1, h + 1):
        nxt = visits[step]
        for w, v in zip(walker, nxt):
            if g.deg[w] == 0:
                assert v == w
            else:
                assert v != w and a[w, v] != 0  # v is an in-neighbour of w: w aggregates from v
        walker = np.where(g.deg[nxt] > 0, nxt, walker)


def test_factory_names_options_and_batch_semantics():
    a = sbm()
    with pytest.raises(InputError, match="unknown sampler 'walk'"):
        make_sampler("walk", a, 10)
    with pytest.raises(InputError, match="no option 'depth'"):
        make_sampler("rw", a, 10, depth=2)
    with pytest.raises(InputError, match="smaller than the budget"):
        make_sampler("frontier", a, 10, frontier_size=10)
    with pytest.raises(InputError, match="batch size"):
        make_sampler("node", a, 0)
    rw = make_sampler("rw", a, 100)
    assert rw.walk_length == 2 and rw.num_roots == 50
    assert make_sampler("frontier", a, 100).frontier_size == 50
    assert make_sampler("node", a, 100).draw(np.random.default_rng(0)).shape == (100,)
    assert make_sampler("edge", a, 100).draw(np.random.default_rng(0)).shape == (100,)


# ---- distributions ----------------------------------------------------------------------

def test_node_sampler_inclusion_frequencies_match_p():
    """P(v in S) = 1 - (1 - P(v))^N for N draws with replacement, P(v) ∝ ‖Â[:, v]‖²."""
    a = sbm(n=40, seed=5)
    n, batch, trials = a.shape[0], 15, 20000
    sampler = make_sampler("node", a, batch)
    col_sq = np.asarray(a.multiply(a).sum(axis=0)).ravel()
    np.testing.assert_allclose(sampler.probabilities, col_sq / col_sq.sum())
    expected = 1.0 - (1.0 - sampler.probabilities) ** batch
    rng = np.random.default_rng(2024)
    counts = np.zeros(n)
    for _ in range(trials):
        counts[sampler.sample_vertices(rng)] += 1
    freq = counts / trials
    bound = 0.02  # >= 5.7 binomial standard deviations (sd <= 0.5 / sqrt(20000) = 0.0035)
    assert np.max(np.abs(freq - expected)) < bound
    # the bound discriminates: a uniform node sampler would miss it
    uniform = 1.0 - (1.0 - 1.0 / n) ** batch
    assert np.max(np.abs(uniform - expected)) > 3 * bound


def test_edge_sampler_draws_edges_with_p_proportional_to_inverse_degrees():
    """P(v, u) ∝ 1/d(u) + 1/d(v), d = in-degree + 1, over the off-diagonal entries of Â."""
    a = sbm(n=40, seed=6)
    g = SamplingGraph(a)
    sampler = make_sampler("edge", g, 40)
    coo = a.tocoo()
    off = coo.row != coo.col
    rows, cols = coo.row[off], coo.col[off]
    w = 1.0 / (g.deg[rows] + 1) + 1.0 / (g.deg[cols] + 1)
    exact = w / w.sum()
    key = rows * g.n + cols
    order = np.argsort(key)
    rng = np.random.default_rng(21)
    draws = np.concatenate([sampler.draw(rng).reshape(2, -1) for _ in range(3000)], axis=1)  # (dst, src)
    trials = draws.shape[1]
    idx = np.searchsorted(key[order], draws[0] * g.n + draws[1])
    assert np.array_equal(key[order][idx], draws[0] * g.n + draws[1])  # every draw is an edge of Â
    freq = np.bincount(order[idx], minlength=key.size) / trials
    sd = np.sqrt(exact * (1 - exact) / trials)
    assert np.all(np.abs(freq - exact) <= 5 * sd)
    uniform = 1.0 / key.size
    assert np.max(np.abs(uniform - exact) / sd) > 10  # uniform edges would fail the bound


@settings(max_examples=30, deadline=None)
@given(weights=st.lists(st.integers(0, 50), min_size=1, max_size=40),
       updates=st.lists(st.tuples(st.integers(0, 39), st.integers(0, 50)), max_size=30))
def test_fenwick_tree_matches_cumulative_sum(weights, updates):
    w = np.array(weights, dtype=np.int64)
    tree = FenwickTree(w)
    for slot, value in updates:
        slot %= len(w)
        tree.add(slot, value - int(w[slot]))
        w[slot] = value
        cdf = np.cumsum(w)
        assert tree.total == int(cdf[-1])
        for count in range(len(w) + 1):
            assert tree.prefix(count) == int(w[:count].sum())
        for target in range(int(cdf[-1])):
            assert tree.find(target) == int(np.searchsorted(cdf, target, side="right"))


@settings(max_examples=30, deadline=None)
@given(a=small_graphs(), seed=st.integers(0, 2**32 - 1), m=st.integers(1, 6))
def test_frontier_tree_and_naive_give_the_same_walk(a, seed, m):
    g = SamplingGraph(a)
    assume(int((g.deg > 0).sum()) >= m)
    frontier = np.random.default_rng(seed).choice(np.flatnonzero(g.deg > 0), size=m, replace=False)
    tree = frontier_walk_tree(g, frontier, 60, np.random.default_rng(seed))
    naive = frontier_walk_naive(g, frontier, 60, np.random.default_rng(seed))
    np.testing.assert_array_equal(tree, naive)
    dash = frontier_walk_dashboard(g, frontier, 60, np.random.default_rng(seed))
    np.testing.assert_array_equal(dash, frontier_walk_dashboard(g, frontier, 60, np.random.default_rng(seed)))
    dense = a.toarray() != 0
    np.fill_diagonal(dense, False)
    for walk in (tree, dash):  # each visit is an in-neighbour of a start or of an earlier visit
        for k, u in enumerate(walk):
            assert dense[np.r_[frontier, walk[:k]], u].any()
    tree_s = make_sampler("frontier", g, 40, frontier_size=m).sample(np.random.default_rng(seed))
    naive_s = make_sampler("frontier", g, 40, frontier_size=m, pop="naive").sample(np.random.default_rng(seed))
    np.testing.assert_array_equal(tree_s.vertices, naive_s.vertices)


WALKS = {"tree": frontier_walk_tree, "dashboard": frontier_walk_dashboard, "naive": frontier_walk_naive}


def star(n: int = 10) -> sp.csr_matrix:
    """Â of the undirected star: hub 0 with in-degree n-1, leaves with in-degree 1."""
    src = np.r_[np.arange(1, n), np.zeros(n - 1, dtype=int)]
    dst = np.r_[np.zeros(n - 1, dtype=int), np.arange(1, n)]
    return normalized_adjacency(sp.csr_matrix((np.ones(src.size), (dst, src)), shape=(n, n)))


@pytest.mark.parametrize("pop", list(WALKS))
def test_frontier_pops_proportionally_to_degree(pop):
    """Two walkers on a 10-vertex star, over a long walk (the Dashboard compacts many times).

    Let k = walkers on the hub. k=0 (weights 1,1) -> a leaf walker moves to the hub;
    k=2 -> a hub walker moves to a leaf; k=1 (weights 9,1) -> the hub walker moves to a
    leaf w.p. 9/10, the leaf walker to the hub w.p. 1/10. Stationary: P(k=0,1,2) =
    .45, .5, .05, so P(next visit is the hub | this one was) = .9 * .1 = .09.
    Popping uniformly instead would give .5 * .5 = .25.
    """
    g = SamplingGraph(star())
    visits = WALKS[pop](g, np.array([0, 1]), 40000, np.random.default_rng(5))
    hub = visits[1000:] == 0
    p_hub_after_hub = (hub[1:] & hub[:-1]).sum() / hub[:-1].sum()
    assert abs(p_hub_after_hub - 0.09) < 0.02, p_hub_after_hub  # sd ~ 0.002


def exact_visit_distributions(a: sp.csr_matrix, g: SamplingGraph, frontier, steps: int) -> list[np.ndarray]:
    """P(the k-th step reaches x), k = 1..steps, by enumerating frontier states (small cases only)."""
    states = {tuple(int(v) for v in frontier): 1.0}
    out = []
    for _ in range(steps):
        visit, nxt = np.zeros(g.n), {}
        for state, p in states.items():
            total = sum(int(g.deg[v]) for v in state)
            for slot, v in enumerate(state):
                row = a.indices[a.indptr[v]:a.indptr[v + 1]]
                for u in row[row != v]:
                    q = p * g.deg[v] / total / g.deg[v]
                    visit[u] += q
                    new = list(state)
                    if g.deg[u] > 0:
                        new[slot] = int(u)
                    nxt[tuple(new)] = nxt.get(tuple(new), 0.0) + q
        states = nxt
        out.append(visit)
    return out


@pytest.mark.parametrize("pop", list(WALKS))
def test_first_frontier_steps_have_the_exact_distribution(pop):
    """From a fixed frontier, the k-th step (k = 1, 2, 3) reaches x with the enumerated probability.

    Steps 2 and 3 pop from a frontier that has moved, so they check that a moved walker's old
    weight is gone (the Dashboard's dead cells must be rejected).
    """
    a = sbm(n=40, seed=4)
    g = SamplingGraph(a)
    frontier = np.array([3, 17, 29])
    exact = exact_visit_distributions(a, g, frontier, 3)
    trials = 6000
    rng = np.random.default_rng(13)
    visits = np.array([WALKS[pop](g, frontier, 3, rng) for _ in range(trials)])
    for k in range(3):
        freq = np.bincount(visits[:, k], minlength=g.n) / trials
        sd = np.sqrt(exact[k] * (1 - exact[k]) / trials)
        assert np.all(np.abs(freq - exact[k]) <= 5 * sd + 1e-12), k


def test_dashboard_and_tree_visit_with_the_same_distribution():
    """Visit frequencies over 20-step frontier walks from random frontiers: Dashboard vs tree.

    Measured (1000 walks each): TV distance 0.03 between two seeds of the tree walk, 0.04
    tree vs Dashboard, 0.15 tree vs uniform visits; the bound sits between.
    """
    g = SamplingGraph(sbm(n=60, seed=4))
    starts = np.flatnonzero(g.deg > 0)
    freq = {}
    for pop, seed in (("tree", 1), ("dashboard", 3)):
        rng = np.random.default_rng(seed)
        counts = np.zeros(g.n)
        for _ in range(1000):
            np.add.at(counts, WALKS[pop](g, rng.choice(starts, size=5, replace=False), 20, rng), 1)
        freq[pop] = counts / counts.sum()
    assert 0.5 * np.abs(freq["tree"] - freq["dashboard"]).sum() < 0.07
    assert 0.5 * np.abs(freq["tree"] - 1.0 / g.n).sum() > 0.1


# ---- normalization ----------------------------------------------------------------------

@pytest.mark.parametrize("name", list(SAMPLERS))
def test_normalized_aggregation_approaches_full_aggregation(name):
    """Average of Σ_u Â[v,u]/α(u,v) x_u over fresh samples containing v tends to (ÂX)_v."""
    a = sbm()
    options = {"frontier": {"frontier_size": 10}}.get(name, {})
    sampler = make_sampler(name, a, 40, **options)
    norm = estimate_normalization(sampler, np.random.default_rng(1), 10000)
    x = np.random.default_rng(0).standard_normal((a.shape[0], 4))
    full = a @ x
    rng = np.random.default_rng(2)  # independent of the pre-samples
    acc, raw, seen = np.zeros_like(x), np.zeros_like(x), np.zeros(a.shape[0])
    errors, raw_errors, done = [], [], 0
    for checkpoint in (100, 1000, 4000):
        while done < checkpoint:
            sub = sampler.sample(rng)
            xs = x[sub.vertices]
            acc[sub.vertices] += norm.normalized_submatrix(sub, a) @ xs
            raw[sub.vertices] += sub.submatrix(a) @ xs
            seen[sub.vertices] += 1
            done += 1
        s = seen > 0
        ref = np.linalg.norm(full[s])
        errors.append(np.linalg.norm(acc[s] / seen[s, None] - full[s]) / ref)
        raw_errors.append(np.linalg.norm(raw[s] / seen[s, None] - full[s]) / ref)
    assert (seen > 0)[SamplingGraph(a).deg > 0].all()
    assert errors[0] > errors[1] > errors[2], errors
    assert errors[2] < 0.08, errors
    assert min(raw_errors) > 0.3, raw_errors  # without normalization the batch aggregation is biased


def test_loss_weights_make_the_batch_loss_unbiased():
    a = sbm()
    sampler = make_sampler("node", a, 30)
    norm = estimate_normalization(sampler, np.random.default_rng(1), 10000)
    exact = 1.0 - (1.0 - sampler.probabilities) ** 30
    # the estimated inclusion probabilities behind λ(v) agree with the exact ones
    np.testing.assert_allclose(norm.inclusion_probabilities(), exact, atol=0.02)
    # losses larger where P(v in S) is small, so that ignoring P(v in S) is visibly biased
    losses = np.random.default_rng(0).exponential(size=a.shape[0]) / exact
    rng = np.random.default_rng(2)
    weighted, plain = [], []
    for _ in range(4000):
        s = sampler.sample(rng)
        weighted.append(float(losses[s.vertices] @ norm.loss_weights(s)))
        plain.append(float(losses[s.vertices].mean()))
    assert abs(np.mean(weighted) / losses.mean() - 1.0) < 0.02
    assert abs(np.mean(plain) / losses.mean() - 1.0) > 0.05  # measured: 0.07


# ---- what the distributed samplers share with these -------------------------------------

def _shards_and_a_hat(tmp_path, ranks: int, fn):
    """Run ``fn(shard, transport)`` on ``ranks`` in-process ranks over a directed graph with dead ends; return Â too."""
    from conftest import random_edge_file

    from distgcn.comm.transport.inprocess import run_ranks
    from distgcn.config import PartitionerConfig
    from distgcn.data.prepare import GraphOptions, prepare_graph
    from distgcn.shard.scatter import build_and_scatter

    options = GraphOptions(spec=random_edge_file(tmp_path / "g.txt", n=90, m=300, seed=4), features=4, classes=2,
                           seed=1)
    results = run_ranks(ranks, lambda t: fn(build_and_scatter(t, options, PartitionerConfig("random", seed=1)), t))
    return results, prepare_graph(options)[1]


@pytest.mark.parametrize("ranks", [1, 3])
def test_distributed_node_inclusion_is_the_poisson_form_of_the_reference_probabilities(tmp_path, ranks):
    """P(v in S) = 1 - exp(-N P(v)) with the reference's P(v) (equal up to the order of the float sums)."""
    from distgcn.sampling.distributed import NodeSampler

    batch = 20
    results, a = _shards_and_a_hat(tmp_path, ranks, lambda shard, t: (
        shard.global_ids.copy(), NodeSampler(shard, t, batch).inclusion))
    p = make_sampler("node", a, batch).probabilities
    for gids, inclusion in results:
        np.testing.assert_allclose(inclusion, -np.expm1(-batch * p[gids]), rtol=1e-12, atol=0)
    assert sorted(np.concatenate([gids for gids, _ in results]).tolist()) == list(range(a.shape[0]))


@pytest.mark.parametrize("ranks", [1, 3])
def test_distributed_walk_step_is_the_reference_step(tmp_path, ranks):
    """From v with uniform u, both go to the same in-neighbour: the floor(u·deg(v))-th by id, self loop skipped."""
    from distgcn.sampling.distributed import RandomWalkSampler

    u01 = np.random.default_rng(3).random(7)

    def steps(shard, transport):
        walk = RandomWalkSampler(shard, transport, 20, 2).walk
        cur = np.repeat(np.flatnonzero(walk.deg[:shard.n_owned] > 0), u01.size)
        u = np.tile(u01, cur.size // u01.size)
        return shard.global_ids[cur].astype(np.int64), u, walk.col_gid[walk.step(cur, u)]

    results, a = _shards_and_a_hat(tmp_path, ranks, steps)
    graph = SamplingGraph(a)
    for v, u, reached in results:
        np.testing.assert_array_equal(reached, graph.neighbor(v, u))
    starts = np.concatenate([v for v, _, _ in results])
    assert np.array_equal(np.unique(starts), np.flatnonzero(graph.deg > 0))  # every movable vertex checked
