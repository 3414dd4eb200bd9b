"""Partitioning models: validity, balance, determinism, quality against random, errors."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
import scipy.sparse as sp

from distgcn.data.graph import normalized_adjacency
from distgcn.errors import InputError
from distgcn.partitioning import hypergraph as hg_mod
from distgcn.partitioning.external import external_parts
from distgcn.partitioning.metrics import partition_metrics
from distgcn.partitioning.models import (
    compute_parts,
    contiguous_parts,
    graph_parts,
    hypergraph_parts,
    random_parts,
    symmetric_graph,
)

EPS = 0.03


def grid(rows: int, cols: int) -> sp.csr_matrix:
    """4-neighbour 2D grid, no self loops."""
    idx = np.arange(rows * cols).reshape(rows, cols)
    e = np.concatenate([
        np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()], 1),
        np.stack([idx[:-1].ravel(), idx[1:].ravel()], 1),
    ])
    n = rows * cols
    a = sp.csr_matrix((np.ones(len(e)), (e[:, 0], e[:, 1])), shape=(n, n))
    return (a + a.T).tocsr()


def sbm(sizes, p_in, p_out, seed=0) -> sp.csr_matrix:
    """Undirected stochastic block model, no self loops."""
    rng = np.random.default_rng(seed)
    block = np.repeat(np.arange(len(sizes)), sizes)
    n = block.size
    prob = np.where(block[:, None] == block[None, :], p_in, p_out)
    upper = np.triu(rng.random((n, n)) < prob, 1)
    a = sp.csr_matrix(upper.astype(np.float64))
    return (a + a.T).tocsr()


@pytest.fixture(scope="module")
def grid_hat():
    return normalized_adjacency(grid(24, 24))


@pytest.fixture(scope="module")
def sbm_hat():
    return normalized_adjacency(sbm([60, 60, 60, 60], 0.15, 0.005, seed=1))


def check_valid(parts, n, nparts):
    assert isinstance(parts, np.ndarray) and parts.dtype == np.int64
    assert parts.shape == (n,)
    assert parts.min() >= 0 and parts.max() < nparts


def weight_bound(a_hat, nparts, eps=EPS):
    """The tools' guarantee, expressed as max/avg: max part weight <= (1+eps) ceil(W/k)."""
    w = float(np.diff(a_hat.indptr).sum())
    return (1 + eps) * math.ceil(w / nparts) / (w / nparts)


# ---------------------------------------------------------------------------
# random / contiguous
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n, k", [(1, 1), (10, 3), (577, 16), (100, 100)])
def test_random_parts_balanced_and_seeded(n, k):
    p = random_parts(n, k, seed=5)
    check_valid(p, n, k)
    sizes = np.bincount(p, minlength=k)
    assert sizes.max() - sizes.min() <= 1
    assert np.array_equal(p, random_parts(n, k, seed=5))
    if n >= 10 and k > 1:
        assert not np.array_equal(p, random_parts(n, k, seed=6))


@pytest.mark.parametrize("n, k", [(1, 1), (10, 3), (577, 16), (100, 100), (7, 5)])
def test_contiguous_parts_balanced_blocks(n, k):
    p = contiguous_parts(n, k)
    check_valid(p, n, k)
    sizes = np.bincount(p, minlength=k)
    assert sizes.max() - sizes.min() <= 1
    assert np.all(np.diff(p) >= 0)


@pytest.mark.parametrize("fn", [lambda n, k: random_parts(n, k, 0), contiguous_parts])
def test_trivial_models_validate(fn):
    with pytest.raises(InputError):
        fn(5, 0)
    with pytest.raises(InputError):
        fn(5, 6)


# ---------------------------------------------------------------------------
# graph model (METIS)
# ---------------------------------------------------------------------------


def test_symmetric_graph_drops_loops_and_symmetrises():
    a = sp.csr_matrix(np.array([[1.0, 2, 0], [0, 1, 0], [0, 3, 0]]))
    s = symmetric_graph(a).toarray()
    assert np.array_equal(s, [[0, 1, 0], [1, 0, 1], [0, 1, 0]])


@pytest.mark.parametrize("k", [2, 4, 7])
def test_graph_parts(grid_hat, k):
    n = grid_hat.shape[0]
    p = graph_parts(grid_hat, k, epsilon=EPS, seed=1)
    check_valid(p, n, k)
    m = partition_metrics(grid_hat, p, k)
    assert m["imbalance"] <= weight_bound(grid_hat, k) + 1e-9
    assert m["empty_parts"] == []
    assert np.array_equal(p, graph_parts(grid_hat, k, epsilon=EPS, seed=1))
    rnd = partition_metrics(grid_hat, random_parts(n, k, 1), k)
    assert m["volume"]["total"] < 0.5 * rnd["volume"]["total"]
    assert m["edge_cut"] < 0.5 * rnd["edge_cut"]


def test_graph_parts_trivial_and_errors(grid_hat):
    assert np.array_equal(graph_parts(grid_hat, 1), np.zeros(grid_hat.shape[0], dtype=np.int64))
    with pytest.raises(InputError, match="epsilon"):
        graph_parts(grid_hat, 2, epsilon=0)
    with pytest.raises(InputError, match="nparts <= n"):
        graph_parts(sp.identity(3, format="csr"), 4)


# ---------------------------------------------------------------------------
# hypergraph model
# ---------------------------------------------------------------------------


def test_column_net_is_the_csc_pattern():
    a = sp.csr_matrix(np.array([[1.0, 2, 0], [0, 1, 0], [4, 3, 1]]))
    indptr, pins, w = hg_mod.column_net(a)
    csc = a.tocsc()
    assert np.array_equal(indptr, csc.indptr) and np.array_equal(pins, csc.indices)
    assert w.tolist() == [2, 1, 3]


@pytest.mark.parametrize("partitioner, preset", [
    ("mtkahypar", "default"), ("mtkahypar", "quality_v3"), ("mtkahypar", "deterministic"), ("kahypar", "fast"),
])
@pytest.mark.parametrize("k", [2, 5])
def test_hypergraph_parts(grid_hat, partitioner, preset, k):
    n = grid_hat.shape[0]
    p, info = hypergraph_parts(grid_hat, k, epsilon=EPS, seed=3, partitioner=partitioner,
                               preset=preset, return_info=True)
    check_valid(p, n, k)
    m = partition_metrics(grid_hat, p, k)
    # the tools' own km1 is our exact volume (diagonal present): the model is exact
    assert info["km1_reported"] == m["connectivity_minus_one"] == m["volume"]["total"]
    assert m["imbalance"] <= weight_bound(grid_hat, k) + 1e-9
    rnd = partition_metrics(grid_hat, random_parts(n, k, 3), k)
    assert m["volume"]["total"] < 0.5 * rnd["volume"]["total"]


def test_kahypar_quality_preset_runs(grid_hat):
    p = hypergraph_parts(grid_hat, 3, epsilon=EPS, seed=0, partitioner="kahypar", preset="quality")
    check_valid(p, grid_hat.shape[0], 3)
    assert partition_metrics(grid_hat, p, 3)["imbalance"] <= weight_bound(grid_hat, 3) + 1e-9


@pytest.mark.parametrize("partitioner, preset", [("mtkahypar", "deterministic"), ("kahypar", "fast")])
def test_hypergraph_deterministic_for_a_seed(sbm_hat, partitioner, preset):
    a = hypergraph_parts(sbm_hat, 4, seed=11, partitioner=partitioner, preset=preset)
    b = hypergraph_parts(sbm_hat, 4, seed=11, partitioner=partitioner, preset=preset)
    assert np.array_equal(a, b)


def test_hypergraph_finds_planted_blocks(sbm_hat):
    n = sbm_hat.shape[0]
    p = hypergraph_parts(sbm_hat, 4, seed=0)
    m = partition_metrics(sbm_hat, p, 4)
    rnd = partition_metrics(sbm_hat, random_parts(n, 4, 0), 4)
    assert m["volume"]["total"] < 0.3 * rnd["volume"]["total"]


def test_default_is_mtkahypar_auto(grid_hat):
    _, info = hypergraph_parts(grid_hat, 3, return_info=True)
    assert (info["partitioner"], info["preset"]) == ("mtkahypar", "auto")
    assert (info["resolved_preset"], info["mtkahypar_preset"], info["vcycles"]) == ("quality_v5", "QUALITY", 5)
    _, info = hypergraph_parts(grid_hat, 9, return_info=True)
    assert (info["resolved_preset"], info["vcycles"]) == ("default", 0)
    _, info = hypergraph_parts(grid_hat, 3, preset="quality", vcycles=1, return_info=True)
    assert info["vcycles"] == 1 and info["mtkahypar_preset"] == "QUALITY"


def test_hypergraph_one_part_skips_the_tool(grid_hat, monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("the partitioner must not run for nparts == 1")

    monkeypatch.setattr(hg_mod, "_partition_mtkahypar", boom)
    monkeypatch.setattr(hg_mod, "_partition_kahypar", boom)
    for tool in ("mtkahypar", "kahypar"):
        p = hypergraph_parts(grid_hat, 1, partitioner=tool)
        assert np.array_equal(p, np.zeros(grid_hat.shape[0], dtype=np.int64))


@pytest.mark.parametrize("kwargs, match", [
    ({"nparts": 2, "epsilon": 0.0}, "epsilon"),
    ({"nparts": 2, "epsilon": -0.1}, "epsilon"),
    ({"nparts": 0}, "at least 1|>= 1"),
    ({"nparts": 10**6}, "nparts <= n"),
    ({"nparts": 2, "partitioner": "patoh"}, "partitioner"),
    ({"nparts": 2, "partitioner": "mtkahypar", "preset": "fast"}, "preset"),
    ({"nparts": 2, "partitioner": "kahypar", "preset": "quality_max"}, "preset"),
    ({"nparts": 2, "vcycles": -1}, "vcycles"),
])
def test_hypergraph_errors(grid_hat, kwargs, match):
    with pytest.raises(InputError, match=match):
        hypergraph_parts(grid_hat, **kwargs)


# ---------------------------------------------------------------------------
# external files
# ---------------------------------------------------------------------------


def test_external_parts_reads_any_whitespace(tmp_path):
    f = tmp_path / "p.txt"
    f.write_text("0\n1 2\r\n\t3\n\n+1  0\n")
    assert external_parts(f, 6, 4).tolist() == [0, 1, 2, 3, 1, 0]


@pytest.mark.parametrize("text, match, line", [
    ("0\n1\n2\n", "found 3 part ids, expected 4", 3),
    ("0\n1\n2\n3\n1\n", "more part ids than vertices", 5),
    ("0\n1\nx\n3\n", "'x' is not a part id", 3),
    ("0\n1\n1.5\n3\n", "'1.5' is not a part id", 3),
    ("0\n1\n1_0\n3\n", "'1_0' is not a part id", 3),
    ("0 1\n2 3-1\n", "'3-1' is not a part id", 2),
    ("0\n-\n1\n2\n", "'-' is not a part id", 2),
    ("0\n1\n2\n4\n", "part id 4 of vertex 3 is out of range", 4),
    ("0\n1\n\n-1\n2\n", "part id -1 of vertex 2 is out of range", 4),
    ("0\n1\n2\n99999999999999999999999\n", "out of range", 4),
])
def test_external_parts_errors_name_file_and_line(tmp_path, text, match, line):
    f = tmp_path / "parts.txt"
    f.write_text(text)
    with pytest.raises(InputError, match=match) as err:
        external_parts(f, 4, 4)
    assert err.value.line == line
    assert str(err.value).startswith(f"{f}:{line}: ")


def test_external_parts_missing_file(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        external_parts(tmp_path / "nope.txt", 3, 2)


def test_external_parts_large_is_fast(tmp_path):
    rng = np.random.default_rng(0)
    want = rng.integers(0, 512, 1_000_000)
    f = tmp_path / "big.txt"
    f.write_text("\n".join(map(str, want.tolist())) + "\n")
    assert np.array_equal(external_parts(f, want.size, 512), want)


# ---------------------------------------------------------------------------
# dispatcher
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("model, kwargs", [
    ("random", {}),
    ("contiguous", {}),
    ("graph", {}),
    ("hypergraph", {}),
    ("hypergraph", {"partitioner": "kahypar", "preset": "fast"}),
])
def test_compute_parts(grid_hat, model, kwargs):
    parts, info = compute_parts(model, grid_hat, 4, epsilon=EPS, seed=2, **kwargs)
    check_valid(parts, grid_hat.shape[0], 4)
    assert info["model"] == model and info["nparts"] == 4
    assert info["partition_s"] >= 0
    assert "numpy" in info["versions"]
    if model in ("graph", "hypergraph"):
        assert info["epsilon"] == EPS and info["seed"] == 2 and info["partitioner"]
        tool = "pymetis" if model == "graph" else info["partitioner"]
        assert tool in info["versions"]
    if model == "hypergraph":
        assert info["preset"]
    import json

    json.dumps(info)


def test_compute_parts_external(grid_hat, tmp_path):
    n = grid_hat.shape[0]
    f = tmp_path / "p.txt"
    f.write_text("\n".join(str(i % 3) for i in range(n)))
    parts, info = compute_parts("external", grid_hat, 3, parts_file=f)
    assert parts.tolist() == [i % 3 for i in range(n)]
    assert info["parts_file"] == str(f) and len(info["parts_file_sha256"]) == 64
    with pytest.raises(InputError, match="part file"):
        compute_parts("external", grid_hat, 3)


def test_compute_parts_unknown_and_incomplete(grid_hat):
    with pytest.raises(InputError, match="needs a sampler"):
        compute_parts("stochastic", grid_hat, 2)
    with pytest.raises(InputError, match="unknown partitioning model"):
        compute_parts("spectral", grid_hat, 2)
    with pytest.raises(InputError) as err:
        compute_parts("graph", grid_hat, 2, partitioner="kahypar")
    assert str(err.value) == ("--partitioner kahypar: the graph model uses metis or kaminpar "
                              "(kahypar partitions --model hypergraph and stochastic)")


def test_work_weights_add_the_mean_row_and_the_partition_balances_them() -> None:
    from distgcn.partitioning.weights import vertex_weights

    a = sp.csr_matrix(np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]], dtype=float))
    a.data[0] = 0.0  # an explicit zero is not a nonzero
    np.testing.assert_array_equal(vertex_weights(a), [3, 2, 2, 1])
    np.testing.assert_array_equal(vertex_weights(a, "work"), [5, 4, 4, 3])  # + ceil(mean 2.0)
    with pytest.raises(InputError, match="vertex weight: expected one of nonzeros, work"):
        vertex_weights(a, "rows")
    # The partitioner balances the weights asked for (hub row: 60 nonzeros, the others ~4).
    hub = sp.csr_matrix(np.vstack([np.ones((1, 60)), sp.random(59, 60, density=0.05, random_state=0).toarray()]))
    for scheme in ("nonzeros", "work"):
        parts = graph_parts(hub + sp.identity(60), 2, epsilon=0.05, seed=0, vertex_weight=scheme)
        weights = vertex_weights(hub + sp.identity(60), scheme)
        assert np.bincount(parts, weights=weights).max() <= 1.05 * weights.sum() / 2 + weights.max()


def test_vertex_weight_is_refused_where_the_model_has_none() -> None:
    from distgcn.partitioning.models import compute_parts

    with pytest.raises(InputError, match="--vertex-weight: the random model balances vertex counts"):
        compute_parts("random", sp.identity(10, format="csr"), 2, vertex_weight="work")


# ---------------------------------------------------------------------------
# the trivial models and the METIS call against their definitions
# ---------------------------------------------------------------------------


def test_random_parts_deal_the_seeded_permutation_round_robin():
    """The docstring's definition, written as a loop: vertex perm[i] goes to part i % nparts."""
    perm = np.random.default_rng(7).permutation(11)
    want = [0] * 11
    for i, v in enumerate(perm):
        want[v] = i % 4
    assert random_parts(11, 4, seed=7).tolist() == want


def test_contiguous_parts_by_hand():
    # floor(i * 3 / 7) for i = 0..6: 0, 0, 0 (6/7), 1 (9/7), 1 (12/7), 2 (15/7), 2 (18/7)
    assert contiguous_parts(7, 3).tolist() == [0, 0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize("n, nparts, message", [
    (5, True, "the number of parts must be an integer, got True"),
    (5, 2.5, "the number of parts must be an integer, got 2.5"),
    (5, 0, "the number of parts must be at least 1, got 0"),
    (5, 6, "cannot split 5 vertices into 6 non-empty parts (need nparts <= n)"),
])
def test_part_count_messages(n, nparts, message):
    for model in (lambda: random_parts(n, nparts), lambda: contiguous_parts(n, nparts),
                  lambda: graph_parts(sp.identity(n, format="csr"), nparts)):
        with pytest.raises(InputError) as err:
            model()
        assert str(err.value) == message


@pytest.mark.parametrize("epsilon", [0.0, -0.5, float("inf"), float("nan")])
def test_epsilon_message(epsilon):
    with pytest.raises(InputError) as err:
        graph_parts(sp.identity(4, format="csr"), 2, epsilon=epsilon)
    assert str(err.value) == f"epsilon (allowed imbalance) must be > 0, got {epsilon}"


@pytest.mark.parametrize("matrix", [np.eye(3), sp.csr_matrix((3, 4))])
def test_matrix_message(matrix):
    for call in (lambda: graph_parts(matrix, 2), lambda: compute_parts("random", matrix, 2)):
        with pytest.raises(InputError) as err:
            call()
        assert str(err.value) == "the normalized adjacency must be a square scipy sparse matrix"


def test_symmetric_graph_ignores_stored_zeros_and_sorts_int8_ones():
    # stored entries: (0, 2) = 0.0 is no edge; (2, 1) and (1, 2) are one edge; (1, 0) gives {0, 1}
    a = sp.csr_matrix((np.array([0.0, 5.0, 1.0, 2.0, 3.0]), np.array([2, 1, 2, 0, 1]), np.array([0, 1, 4, 5])),
                      shape=(3, 3))
    s = symmetric_graph(a)
    assert s.dtype == np.int8 and s.has_sorted_indices
    assert s.indptr.tolist() == [0, 1, 3, 4] and s.indices.tolist() == [1, 0, 2, 1]
    assert s.data.tolist() == [1, 1, 1, 1]
    assert a.nnz == 5  # the caller's matrix keeps its stored zero


def test_graph_parts_hands_metis_the_documented_graph_weights_and_options(monkeypatch):
    """pymetis receives the symmetrised pattern, the nonzeros per row, ufactor = round(1000 epsilon), the seed,
    k-way; a membership of the wrong length is an error, not a partition."""
    import pymetis

    seen = {}

    def fake_part_graph(nparts, adjacency, vweights, recursive, options):
        seen.update(nparts=nparts, xadj=list(adjacency.adj_starts), adjncy=list(adjacency.adjacent),
                    vweights=list(vweights), recursive=recursive, ufactor=options.ufactor, seed=options.seed)
        return 0, seen.get("membership", [1, 0, 1])

    monkeypatch.setattr(pymetis, "part_graph", fake_part_graph)
    a = sp.csr_matrix(np.array([[1.0, 1, 0], [0, 1, 1], [0, 0, 1]]))  # path 0 - 1 - 2, rows of 2, 2, 1 nonzeros
    parts = graph_parts(a, 2, epsilon=0.0304, seed=9)
    assert parts.dtype == np.int64 and parts.tolist() == [1, 0, 1]
    assert seen == {"nparts": 2, "xadj": [0, 1, 3, 4], "adjncy": [1, 0, 2, 1], "vweights": [2, 2, 1],
                    "recursive": False, "ufactor": 30, "seed": 9}
    graph_parts(a, 2, epsilon=0.0004)
    assert seen["ufactor"] == 1  # at least 1
    graph_parts(a, 2, epsilon=0.0016, vertex_weight="work")
    assert (seen["ufactor"], seen["vweights"]) == (2, [4, 4, 3])  # + ceil(mean 5/3) = 2
    graph_parts(a, 2, epsilon=0.8)
    assert seen["ufactor"] == 800  # not round(1000.x * epsilon)
    graph_parts(a, 2)
    assert (seen["ufactor"], seen["seed"]) == (30, 0)  # the defaults: epsilon 0.03, seed 0
    assert graph_parts(a, 1).dtype == np.int64
    seen["membership"] = [0, 1]
    with pytest.raises(RuntimeError) as err:
        graph_parts(a, 2)
    assert str(err.value) == "METIS returned a partition of the wrong length"


# ---------------------------------------------------------------------------
# compute_parts: what meta.json records, and the messages of bad combinations
# ---------------------------------------------------------------------------


def _path(n: int) -> sp.csr_matrix:
    a = sp.diags([np.ones(n - 1), np.ones(n), np.ones(n - 1)], [-1, 0, 1], format="csr")
    return sp.csr_matrix(a)


def test_compute_parts_records_each_model_in_meta():
    from importlib import metadata

    import scipy

    a = _path(8)
    versions = {"numpy": np.__version__, "scipy": metadata.version("scipy")}
    assert versions["scipy"] == scipy.__version__
    parts, info = compute_parts("Random", a, 3, seed=4)
    assert parts.tolist() == random_parts(8, 3, 4).tolist()
    assert info.pop("partition_s") >= 0
    assert info == {"model": "random", "nparts": 3, "epsilon": None, "seed": 4,
                    "partitioner": "numpy.random.default_rng", "preset": None, "versions": versions}
    parts, info = compute_parts("contiguous", a, 3, seed=4, epsilon=0.5)
    assert parts.tolist() == [0, 0, 0, 1, 1, 1, 2, 2]  # floor(3 i / 8)
    info.pop("partition_s")
    assert info == {"model": "contiguous", "nparts": 3, "epsilon": None, "seed": None, "partitioner": None,
                    "preset": None, "versions": versions}
    _, info = compute_parts("graph", a, 2, seed=4, epsilon=0.0504, vertex_weight="work")
    info.pop("partition_s")
    assert info == {"model": "graph", "nparts": 2, "epsilon": 0.0504, "seed": 4, "partitioner": "metis",
                    "preset": None, "objective": "cut", "vertex_weight": "work", "ufactor": 50,
                    "versions": dict(versions, pymetis=metadata.version("pymetis"))}
    _, info = compute_parts("hypergraph", a, 2, seed=4, epsilon=0.25, partitioner="KaHyPar", preset="fast")
    assert (info["model"], info["partitioner"], info["preset"], info["epsilon"], info["seed"],
            info["vertex_weight"]) == ("hypergraph", "kahypar", "fast", 0.25, 4, "nonzeros")
    assert "version" not in info and info["versions"]["kahypar"] not in ("", None)


def test_compute_parts_stochastic_records_the_sampler_and_names_the_tool_only_when_it_runs():
    from distgcn.config import SamplerSpec

    spec = SamplerSpec("node", 4)
    parts, info = compute_parts("stochastic", _path(8), 1, sampler=spec, seed=3)
    assert parts.tolist() == [0] * 8
    assert (info["sampler"], info["epsilon"], info["seed"], info["vertex_weight"]) == (spec.as_dict(), 0.03, 3,
                                                                                     "nonzeros")
    assert set(info["versions"]) == {"numpy", "scipy"}
    _, info = compute_parts("stochastic", _path(8), 2, sampler=spec, partitioner="kahypar", preset="fast",
                            shp={"shp_samples": 3})
    assert info["partitioner"] == "kahypar" and "kahypar" in info["versions"] and "version" not in info
    assert info["shp"]["samples"] == 3


@pytest.mark.parametrize("model, kwargs, message", [
    ("graph", {"sampler": "node"}, "--sampler: only --model stochastic samples subgraphs, not the graph model"),
    (None, {"sampler": "node"}, "--sampler: only --model stochastic samples subgraphs, not the unnamed model"),
    ("random", {"shp": {"shp_samples": 3}},
     "--shp-epsilon, --shp-delta and --shp-samples: only --model stochastic samples subgraphs, not the random model"),
    ("contiguous", {"vertex_weight": "work"},
     "--vertex-weight: the contiguous model balances vertex counts, not weights"),
    ("", {"vertex_weight": "work"}, "--vertex-weight: the unnamed model balances vertex counts, not weights"),
    ("graph", {"preset": "fast"},
     "--preset fast: the graph model's presets are KaMinPar's; add --partitioner kaminpar (METIS has none)"),
    ("graph", {"partitioner": "metis", "preset": "fast"},
     "--preset fast: the graph model's presets are KaMinPar's; add --partitioner kaminpar (METIS has none)"),
    ("graph", {"partitioner": "kaminpar", "preset": "terapart"},
     "unknown kaminpar preset 'terapart': expected one of default, fast, eco, strong"),
    ("graph", {"partitioner": "kahypar"},
     "--partitioner kahypar: the graph model uses metis or kaminpar (kahypar partitions --model hypergraph and "
     "stochastic)"),
    ("hypergraph", {"partitioner": "kaminpar"},
     "--partitioner kaminpar: the hypergraph model uses mtkahypar or kahypar (kaminpar partitions --model graph)"),
    ("stochastic", {"partitioner": "metis"},
     "--partitioner metis: the stochastic model uses mtkahypar or kahypar (metis partitions --model graph)"),
    ("random", {"partitioner": "kaminpar"},
     "--partitioner kaminpar: the random model runs no partitioner (kaminpar partitions --model graph)"),
    ("graph", {"partitioner": "ptscotch"},
     "--partitioner ptscotch partitions on the ranks of an MPI job, each holding its share of the graph: run "
     "mpiexec -n 2 distgcn partition ... (docs/scale.md)"),
    ("hypergraph", {"partitioner": "zoltan"},
     "--partitioner zoltan partitions on the ranks of an MPI job, each holding its share of the graph: run "
     "mpiexec -n 2 distgcn partition ... (docs/scale.md)"),
    ("hypergraph", {"partitioner": "ptscotch"},
     "--partitioner ptscotch: it partitions --model graph (on MPI ranks), not the hypergraph model"),
    ("stochastic", {"partitioner": "zoltan"},
     "--partitioner zoltan: it partitions --model graph and hypergraph (on MPI ranks), not the stochastic model"),
    ("graph", {"partitioner": "ptscotch", "preset": "fast"},
     "--preset fast: PT-Scotch's presets are default, quality, speed, balance, scalability"),
    ("contiguous", {"partitioner": "patoh"}, "--partitioner patoh: the contiguous model runs no partitioner"),
    ("hypergraph", {"epsilon": 0.0}, "epsilon (allowed imbalance) must be > 0, got 0.0"),
    ("stochastic", {"sampler": "node", "epsilon": float("inf")}, "epsilon (allowed imbalance) must be > 0, got inf"),
    ("stochastic", {}, "the stochastic model needs a sampler (--sampler and --batch-size)"),
    ("external", {}, "the external model needs a part file (parts_file)"),
    ("spectral", {}, "unknown partitioning model 'spectral': expected one of random, contiguous, graph, hypergraph, "
                     "stochastic, external"),
])
def test_compute_parts_messages(model, kwargs, message):
    from distgcn.config import SamplerSpec

    if kwargs.get("sampler") == "node":
        kwargs = dict(kwargs, sampler=SamplerSpec("node", 4))
    with pytest.raises(InputError) as err:
        compute_parts(model, _path(8), 2, **kwargs)
    assert str(err.value) == message


def test_random_parts_default_seed_is_0():
    perm = np.random.default_rng(0).permutation(9)
    want = [0] * 9
    for i, v in enumerate(perm):
        want[v] = i % 2
    assert random_parts(9, 2).tolist() == want
    parts, info = compute_parts("random", _path(9), 2)
    assert parts.tolist() == want and info["seed"] == 0


def test_compute_parts_times_the_call():
    import time

    before = time.perf_counter()
    _, info = compute_parts("contiguous", _path(8), 2)
    assert 0 <= info["partition_s"] <= time.perf_counter() - before


def _spy(monkeypatch, name, result):
    """Replace distgcn.partitioning.models.<name> by a recorder of its arguments that returns ``result``."""
    import distgcn.partitioning.models as models

    calls = []

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return result

    monkeypatch.setattr(models, name, spy)
    return calls


def test_compute_parts_hands_every_option_to_the_graph_model(monkeypatch):
    from importlib import metadata

    a = _path(8)
    _, info = compute_parts("graph", a, 2, epsilon=0.8, seed=5, partitioner="metis", vertex_weight="work")
    assert info["ufactor"] == 800  # round(1000 epsilon)
    assert info["versions"]["pymetis"] == metadata.version("pymetis")
    _, info = compute_parts("graph", a, 2, epsilon=0.0004)
    assert info["ufactor"] == 1  # at least 1
    extra = {"partitioner": "kaminpar", "objective": "cut", "threads": 3, "preset": "fast"}
    calls = _spy(monkeypatch, "graph_parts", (np.zeros(8, dtype=np.int64), extra))
    _, info = compute_parts("graph", a, 2, epsilon=0.8, seed=5, partitioner="KaMinPar", preset="fast", threads=3,
                            vertex_weight="work")
    assert calls == [((a, 2), {"epsilon": 0.8, "seed": 5, "vertex_weight": "work", "partitioner": "KaMinPar",
                               "preset": "fast", "threads": 3, "return_info": True})]
    assert {k: info[k] for k in extra} == extra and info["epsilon"] == 0.8 and info["seed"] == 5
    assert info["versions"]["kaminpar"] == metadata.version("kaminpar") and "pymetis" not in info["versions"]


@pytest.mark.parametrize("tool_version", ["9.9.9", None])
def test_compute_parts_hands_every_option_to_the_hypergraph_model(monkeypatch, tool_version):
    from importlib import metadata

    a = _path(8)
    extra = {"partitioner": "kahypar", "preset": "quality", "km1_reported": 3}
    if tool_version:
        extra["version"] = tool_version
    calls = _spy(monkeypatch, "hypergraph_parts", (np.zeros(8, dtype=np.int64), extra))
    def hook():
        return contextlib.nullcontext()

    _, info = compute_parts("hypergraph", a, 2, epsilon=0.2, seed=5, partitioner="KaHyPar", preset="quality",
                            threads=3, vcycles=4, vertex_weight="work", while_tool_runs=hook)
    assert calls == [((a, 2), {"epsilon": 0.2, "seed": 5, "partitioner": "kahypar", "preset": "quality",
                               "threads": 3, "vcycles": 4, "return_info": True, "vertex_weight": "work",
                               "while_tool_runs": hook})]
    assert info["versions"]["kahypar"] == (tool_version or metadata.version("kahypar"))
    assert "version" not in info and info["km1_reported"] == 3
    assert ("version" in extra) == bool(tool_version)  # the tool's answer is left as it was


@pytest.mark.parametrize("tool_version", ["9.9.9", None])
def test_compute_parts_hands_every_option_to_the_stochastic_model(monkeypatch, tool_version):
    from importlib import metadata

    import distgcn.partitioning.stochastic as stochastic
    from distgcn.config import SamplerSpec

    a = _path(8)
    spec = SamplerSpec("node", 4)
    extra = {"partitioner": "kahypar", "preset": "fast"}
    if tool_version:
        extra["version"] = tool_version
    calls = []

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return np.zeros(8, dtype=np.int64), extra

    monkeypatch.setattr(stochastic, "stochastic_parts", spy)
    _, info = compute_parts("stochastic", a, 2, epsilon=0.2, seed=5, partitioner="KaHyPar", preset="fast",
                            threads=3, vcycles=4, sampler=spec, shp={"shp_samples": 7}, vertex_weight="work")
    assert calls == [((a, 2, spec), {"shp_samples": 7, "epsilon": 0.2, "seed": 5, "partitioner": "kahypar",
                                     "preset": "fast", "threads": 3, "vcycles": 4, "vertex_weight": "work"})]
    assert info["versions"]["kahypar"] == (tool_version or metadata.version("kahypar"))
    assert "version" not in info


def test_compute_parts_accepts_unset_shp_values_for_other_models():
    parts, _ = compute_parts("contiguous", _path(4), 2, shp={"shp_samples": None, "shp_epsilon": None})
    assert parts.tolist() == [0, 0, 1, 1]


def test_a_missing_distribution_is_reported_not_raised():
    from distgcn.partitioning.models import _version

    assert _version("no-such-distribution-for-distgcn") == "not installed"


def test_work_weights_round_a_fractional_mean_up_and_leave_the_callers_matrix_alone() -> None:
    from distgcn.partitioning.weights import vertex_weights

    # rows of 2, 1, 1 nonzeros (a stored zero in row 2 is none): mean 4/3, rounded up to 2
    a = sp.csr_matrix((np.array([1.0, 1.0, 1.0, 1.0, 0.0]), np.array([0, 1, 1, 2, 0]), np.array([0, 2, 3, 5])),
                      shape=(3, 3))
    assert vertex_weights(a).tolist() == [2, 1, 1]
    assert vertex_weights(a, "work").tolist() == [4, 3, 3]
    assert vertex_weights(a, "work").dtype == np.int64
    assert a.nnz == 5
    assert vertex_weights(sp.csr_matrix((0, 0)), "work").tolist() == []
    with pytest.raises(InputError) as err:
        vertex_weights(a, "edges")
    assert str(err.value) == "vertex weight: expected one of nonzeros, work, got 'edges'"
