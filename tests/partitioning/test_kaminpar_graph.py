"""The graph model on KaMinPar: the ParHIP file it reads, its partitions, the size rule, the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import distgcn_in_process

from distgcn.data.graph import normalized_adjacency
from distgcn.errors import InputError
from distgcn.partitioning import models
from distgcn.partitioning.kaminpar_graph import load_graph, write_parhip
from distgcn.partitioning.metrics import partition_metrics
from distgcn.partitioning.models import (
    compute_parts,
    graph_partitioner,
    graph_parts,
    random_parts,
    symmetric_graph,
)
from distgcn.partitioning.weights import vertex_weights


def planted(blocks: int = 4, size: int = 50, seed: int = 3) -> sp.csr_matrix:
    """Â of ``blocks`` dense random blocks joined by a few edges: the good cut is the blocks."""
    rng = np.random.default_rng(seed)
    n = blocks * size
    block = np.repeat(np.arange(blocks), size)
    prob = np.where(block[:, None] == block[None, :], 0.2, 0.004)
    upper = sp.csr_matrix(np.triu(rng.random((n, n)) < prob, 1).astype(np.float64))
    return normalized_adjacency((upper + upper.T).tocsr())


def read_parhip(path) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """(version, row pointers, ids, weights) of a ParHIP file, read by the format's definition."""
    raw = path.read_bytes()
    version, n, m = np.frombuffer(raw[:24], dtype=np.uint64)
    id_bytes = 4 if version & 8 else 8
    offsets = np.frombuffer(raw[24:24 + 8 * (n + 1)], dtype=np.uint64)
    first = 24 + 8 * (n + 1)
    indptr = (offsets - first) // id_bytes  # byte addresses of each row's first id
    ids = np.frombuffer(raw[first:first + id_bytes * m], dtype=np.uint32 if id_bytes == 4 else np.uint64)
    weights = np.frombuffer(raw[first + id_bytes * m:], dtype=np.int64)
    return int(version), indptr, ids, weights


def test_parhip_file_by_the_format_and_as_kaminpar_reads_it(tmp_path):
    # path 0 - 1 - 2 plus the edge 0 - 2; weights 5, 1, 7
    indptr, indices = np.array([0, 2, 4, 6]), np.array([1, 2, 0, 2, 0, 1], dtype=np.int32)
    path = tmp_path / "g.parhip"
    write_parhip(path, indptr, indices, np.array([5, 1, 7]))
    version, got_indptr, ids, weights = read_parhip(path)
    assert version == 1 | 8  # no edge weights, vertex weights, 64-bit offsets, 32-bit ids, 64-bit weights
    assert got_indptr.tolist() == [0, 2, 4, 6] and ids.tolist() == [1, 2, 0, 2, 0, 1]
    assert weights.tolist() == [5, 1, 7]
    write_parhip(path, indptr, indices, None)
    version, _, _, weights = read_parhip(path)
    assert version == 1 | 2 | 8 and weights.size == 0
    graph = load_graph(indptr, indices, np.array([5, 1, 7]))
    assert (graph.n(), graph.m(), graph.is_node_weighted()) == (3, 6, True)
    assert [graph.node_weight(v) for v in range(3)] == [5, 1, 7]
    assert sorted(v for v, _ in graph.neighbors(1)) == [0, 2]


def test_kaminpar_reads_the_graph_model_hands_it():
    a = planted()
    sym = symmetric_graph(a)
    graph = load_graph(sym.indptr, sym.indices, vertex_weights(a))
    assert (graph.n(), graph.m()) == (a.shape[0], sym.nnz)
    for v in (0, 77, a.shape[0] - 1):
        assert sorted(u for u, _ in graph.neighbors(v)) == sym.indices[sym.indptr[v]:sym.indptr[v + 1]].tolist()
        assert graph.node_weight(v) == a.indptr[v + 1] - a.indptr[v]


@pytest.mark.parametrize("nparts", [2, 4, 7])
def test_kaminpar_partition_is_balanced_and_beats_random(nparts):
    a = planted()
    parts, info = graph_parts(a, nparts, epsilon=0.03, seed=1, partitioner="kaminpar", threads=1, return_info=True)
    assert parts.dtype == np.int64 and parts.shape == (a.shape[0],)
    assert sorted(np.unique(parts)) == list(range(nparts))
    weights = vertex_weights(a)
    assert np.bincount(parts, weights=weights).max() <= 1.03 * weights.sum() / nparts + weights.max()
    assert info == {"partitioner": "kaminpar", "objective": "cut", "threads": 1, "preset": "default"}
    random = partition_metrics(a, random_parts(a.shape[0], nparts, 1), nparts)["volume"]["total"]
    assert partition_metrics(a, parts, nparts)["volume"]["total"] < 0.5 * random


def test_kaminpar_finds_the_planted_blocks():
    a = planted()  # the blocks' weights differ by a few percent: epsilon 0.2 lets the planted cut be balanced
    parts = graph_parts(a, 4, epsilon=0.2, seed=0, partitioner="kaminpar", threads=1)
    owners = [np.unique(parts[block * 50:(block + 1) * 50]) for block in range(4)]
    assert all(len(owner) == 1 for owner in owners) and sorted(int(o[0]) for o in owners) == [0, 1, 2, 3]


def test_kaminpar_balances_the_weights_asked_for():
    hub = sp.csr_matrix(np.vstack([np.ones((1, 60)), sp.random(59, 60, density=0.05, random_state=0).toarray()]))
    a = (hub + sp.identity(60)).tocsr()
    for scheme in ("nonzeros", "work"):
        parts = graph_parts(a, 2, epsilon=0.05, seed=0, vertex_weight=scheme, partitioner="kaminpar", threads=1)
        weights = vertex_weights(a, scheme)
        assert np.bincount(parts, weights=weights).max() <= 1.05 * weights.sum() / 2 + weights.max()


def test_same_seed_same_parts_on_one_thread():
    a = planted(blocks=6, size=40, seed=8)
    first = graph_parts(a, 5, seed=11, partitioner="kaminpar", threads=1)
    for _ in range(3):
        assert np.array_equal(graph_parts(a, 5, seed=11, partitioner="kaminpar", threads=1), first)


@pytest.mark.parametrize("preset", ["fast", "eco", "strong"])
def test_each_preset_runs_its_kaminpar_context(preset, monkeypatch):
    import kaminpar

    asked = []
    real = kaminpar.context_by_name

    def recording(name):
        asked.append(name)
        return real(name)

    monkeypatch.setattr(kaminpar, "context_by_name", recording)
    a = planted()
    parts, info = graph_parts(a, 4, seed=0, partitioner="kaminpar", preset=preset, threads=1, return_info=True)
    assert asked == [preset] and info["preset"] == preset and sorted(np.unique(parts)) == [0, 1, 2, 3]


def test_the_size_rule_picks_kaminpar_from_the_threshold(monkeypatch):
    threshold = models.KAMINPAR_MIN_NNZ
    assert graph_partitioner(None, threshold - 1) == "metis"
    assert graph_partitioner(None, threshold) == "kaminpar"
    assert graph_partitioner("METIS", threshold) == "metis" and graph_partitioner("kaminpar", 0) == "kaminpar"
    a = planted()
    monkeypatch.setattr(models, "KAMINPAR_MIN_NNZ", a.nnz)
    _, info = compute_parts("graph", a, 2)
    assert info["partitioner"] == "kaminpar" and "kaminpar" in info["versions"]
    monkeypatch.setattr(models, "KAMINPAR_MIN_NNZ", a.nnz + 1)
    _, info = compute_parts("graph", a, 2)
    assert info["partitioner"] == "metis" and "pymetis" in info["versions"]


def edge_list(tmp_path) -> str:
    a = planted()
    rows, cols = sp.triu(a, 1).nonzero()
    path = tmp_path / "g.txt"
    path.write_text("".join(f"{r} {c}\n" for r, c in zip(rows, cols)))
    return str(path)


def test_partition_command_with_kaminpar_writes_its_settings(tmp_path):
    graph = edge_list(tmp_path)
    common = ["partition", graph, "--parts", "3", "--model", "graph", "--features", "4", "--classes", "2", "--quiet"]
    runs = []
    for name in ("a", "b"):
        proc = distgcn_in_process([*common, "--partitioner", "kaminpar", "--preset", "fast", "--threads", "1",
                                   "--seed", "4", "--out", str(tmp_path / name)])
        assert proc.returncode == 0, proc.stderr
        runs.append(json.loads((tmp_path / name / "meta.json").read_text()))
    meta = runs[0]
    assert (meta["partitioner"], meta["preset"], meta["seed"]) == ("kaminpar", "fast", 4)
    assert meta["partition_info"]["threads"] == 1 and meta["partition_info"]["objective"] == "cut"
    assert "kaminpar" in meta["tool_versions"]
    assert runs[1]["parts_sha256"] == meta["parts_sha256"]  # one thread, one seed: one partition
    proc = distgcn_in_process([*common, "--partitioner", "metis", "--out", str(tmp_path / "m")])
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "m" / "meta.json").read_text())["partitioner"] == "metis"


def test_partition_command_refuses_kaminpar_for_another_model_before_loading(tmp_path):
    missing = str(tmp_path / "no-such-graph.txt")  # the refusal comes before the graph is read
    proc = distgcn_in_process(["partition", missing, "--parts", "2", "--model", "hypergraph", "--partitioner",
                               "kaminpar", "--out", str(tmp_path / "out")])
    assert proc.returncode == 2
    assert ("--partitioner kaminpar: the hypergraph model uses mtkahypar or kahypar (kaminpar partitions --model "
            "graph)") in proc.stderr
    assert not (tmp_path / "out").exists()


def test_training_that_partitions_at_startup_runs_kaminpar_on_one_thread(tmp_path, monkeypatch):
    """train --graph --partition graph must partition the same way again on resume: KaMinPar on one thread."""
    from distgcn.partitioning import kaminpar_graph

    seen = []
    real = kaminpar_graph.kaminpar_parts

    def recording(graph, nparts, **kwargs):
        seen.append(kwargs["threads"])
        return real(graph, nparts, **kwargs)

    monkeypatch.setattr(kaminpar_graph, "kaminpar_parts", recording)
    monkeypatch.setattr(models, "KAMINPAR_MIN_NNZ", 0)  # the size rule picks KaMinPar for this small graph
    proc = distgcn_in_process(["train", "--graph", edge_list(tmp_path), "--features", "4", "--classes", "2",
                               "--partition", "graph", "--epochs", "1", "--quiet"], ranks=2)
    assert proc.returncode == 0, proc.stderr
    assert seen == [1]


def test_a_full_temporary_folder_is_named_with_the_size_needed(monkeypatch):
    from distgcn.partitioning import kaminpar_graph

    def no_room(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(kaminpar_graph, "write_parhip", no_room)
    with pytest.raises(InputError, match=r"could not write KaMinPar's input file \(0\.00 GB\) in "
                                         r".*distgcn-[0-9a-f]{8}-[0-9]+-[0-9a-f]{8}\.kaminpar "
                                         r"\(No space left on device\): point TMPDIR at a folder with room for it"):
        load_graph(np.array([0, 1, 2]), np.array([1, 0], dtype=np.int32), np.array([1, 1]))
