"""A graph read by P ranks together (distgcn.data.distributed.graph.load_rank_graph) against one process's
prepare_graph, which every other test checks: in every splittable format and the formats dealt from rank 0,
the ranks' pieces stacked in rank order are one process's Â (to the bit), training data and vertex ids, and
every rank holds the whole graph's fingerprint, which hashes A's arrays. Bad input is one process's error on every rank."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from ogb_files import write_ogb_binary

from distgcn.comm.transport.inprocess import run_ranks
from distgcn.data import load_graph, save_npz
from distgcn.data.distributed import graph as rank_graph
from distgcn.data.distributed.load import load_rank_graph, split_format
from distgcn.data.prepare import GraphOptions, prepare_graph
from distgcn.errors import InputError

ARRAYS = ("vertex_ids", "features", "labels", "train_mask", "val_mask", "test_mask")


def edges(seed: int, n: int = 120, m: int = 600) -> np.ndarray:
    """Edges between sparse, large ids, with repeats and self loops."""
    rng = np.random.default_rng(seed)
    ids = rng.choice(10**9, size=n, replace=False)
    return ids[rng.integers(0, n, size=(m, 2))]


def write_edges(path: Path, pairs: np.ndarray) -> Path:
    text = "# src dst\n" + "".join(f"{u}\t{v}\n" for u, v in pairs)
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def graphs(tmp_path: Path) -> dict[str, tuple[str, dict]]:
    """Each format's spec and the options that give it training data."""
    pairs = edges(3)
    specs = {"edge list": (str(write_edges(tmp_path / "g.txt", pairs)), {"features": 4, "classes": 3, "seed": 5}),
             "gzip edge list": (str(write_edges(tmp_path / "g.el.gz", pairs)), {"features": 3, "classes": 2})}
    directory = tmp_path / "files"
    directory.mkdir()
    for k, piece in enumerate(np.array_split(pairs, 4)):
        write_edges(directory / (f"part-{k}.txt.gz" if k == 2 else f"part-{k}.txt"), piece)
    specs["directory of edge lists"] = (str(directory), {"features": 5, "classes": 3})
    labelled = load_graph(specs["edge list"][0], features=6, classes=4, seed=1)
    labelled.val_mask = None  # an optional array left out
    save_npz(labelled, tmp_path / "labelled.npz")
    specs[".npz with training data"] = (str(tmp_path / "labelled.npz"), {})
    save_npz(load_graph(specs["edge list"][0]), tmp_path / "bare.npz")
    specs[".npz without"] = (str(tmp_path / "bare.npz"), {"features": 2, "classes": 2, "seed": 9})
    arrays = dict(np.load(tmp_path / "labelled.npz"))
    np.savez_compressed(tmp_path / "compressed.npz", **arrays)
    specs[".npz compressed"] = (str(tmp_path / "compressed.npz"), {})
    specs["ogb binary (compressed, directed)"] = (str(write_ogb_binary(tmp_path / "ogbn_arxiv", seed=1)), {})
    specs["ogb binary (stored, directed, column-major edges)"] = (
        str(write_ogb_binary(tmp_path / "ogbn_papers100M", seed=2, compressed=False, column_major=True)), {})
    specs["ogb binary (undirected, no training data)"] = (str(write_ogb_binary(tmp_path / "ogbn_products", seed=3,
                                                                              training=False)),
                                                          {"features": 3, "classes": 2, "seed": 2})
    specs["rmat, several chunks"] = ("synthetic:rmat,scale=12,edge_factor=20,features=3,classes=2", {})
    specs["rmat undirected, unpermuted"] = ("synthetic:rmat,scale=6,edge_factor=4,undirected=true,permute=false,"
                                            "features=2,classes=2,seed=4", {})
    specs["sbm (dealt)"] = ("synthetic:sbm,n=150,avg_degree=4,features=3,classes=3", {})
    return specs


FORMATS = ["edge list", "gzip edge list", "directory of edge lists", ".npz with training data", ".npz without",
           ".npz compressed", "ogb binary (compressed, directed)", "ogb binary (stored, directed, column-major edges)",
           "ogb binary (undirected, no training data)", "rmat, several chunks", "rmat undirected, unpermuted", "sbm (dealt)"]


@pytest.mark.parametrize("symmetrize", [False, True], ids=["directed", "symmetrized"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_ranks_hold_one_process_graph_in_pieces(tmp_path, monkeypatch, fmt, symmetrize):
    monkeypatch.setattr(rank_graph, "FINGERPRINT_CHUNK_BYTES", 1000)  # several chunks per rank
    monkeypatch.setattr(rank_graph, "RANDOM_FEATURE_VALUES", 37)
    spec, kw = graphs(tmp_path)[fmt]
    options = GraphOptions(spec, symmetrize=symmetrize, **kw)
    whole, a_hat = prepare_graph(options)
    fingerprint = whole.fingerprint()
    for ranks in (1, 2, 3, 4):
        pieces = run_ranks(ranks, lambda group: load_rank_graph(group, options))
        firsts = [piece.first for piece in pieces]
        assert firsts == sorted(firsts) and firsts[0] == 0
        assert [piece.fingerprint for piece in pieces] == [fingerprint] * ranks  # hashes A's arrays, in order
        assert [piece.adjacency for piece in pieces] == [None] * ranks  # A is dropped once Â exists
        assert sum(piece.edges for piece in pieces) == whole.num_edges
        rows = sp.vstack([piece.a_hat for piece in pieces]).tocsr()
        np.testing.assert_array_equal(rows.indptr, a_hat.indptr)
        np.testing.assert_array_equal(rows.indices, a_hat.indices)
        assert rows.data.tobytes() == a_hat.data.tobytes()  # to the bit
        for name in ARRAYS:
            got = [getattr(piece, name) for piece in pieces]
            if getattr(whole, name) is None:
                assert got == [None] * ranks, name
            else:
                np.testing.assert_array_equal(np.concatenate(got), getattr(whole, name), err_msg=name)
        assert {piece.name for piece in pieces} == {whole.name}


def test_formats_read_in_pieces_or_on_rank_0(tmp_path):
    specs = graphs(tmp_path)
    assert split_format(specs["edge list"][0]) == "snap"
    assert split_format(specs["directory of edge lists"][0]) == "snap-directory"
    assert split_format(specs[".npz without"][0]) == "npz"
    assert split_format(specs["rmat, several chunks"][0]) == "synthetic:rmat"
    assert split_format(specs["sbm (dealt)"][0]) is None
    assert split_format(specs[".npz compressed"][0]) == "npz"
    assert split_format(specs["ogb binary (compressed, directed)"][0]) == "ogb-binary"
    graph = load_graph(specs["edge list"][0])
    np.savez(tmp_path / "fortran.npz", adj_indptr=graph.adj.indptr, adj_indices=graph.adj.indices,
             adj_shape=np.array(graph.adj.shape), vertex_ids=graph.vertex_ids,
             features=np.asfortranarray(np.ones((graph.num_vertices, 2), dtype=np.float32)))
    assert split_format(str(tmp_path / "fortran.npz")) is None  # its rows are not runs of bytes: read on rank 0
    csv = tmp_path / "ogbn_csv" / "raw"
    csv.mkdir(parents=True)
    (csv / "edge.csv.gz").write_bytes(gzip.compress(b"0,1\n1,2\n"))
    assert split_format(str(csv.parent)) is None  # OGB's CSV variant: one gzip stream per file


def one_process_error(options: GraphOptions) -> str:
    with pytest.raises(InputError) as caught:
        prepare_graph(options)
    return str(caught.value)


def every_rank_error(options: GraphOptions, ranks: int) -> list[str]:
    def rank_main(group):
        try:
            load_rank_graph(group, options)
        except InputError as exc:
            return str(exc)
        return None
    return run_ranks(ranks, rank_main)


@pytest.mark.parametrize("ranks", [1, 3])
def test_bad_npz_values_anywhere_are_one_process_error_on_every_rank(tmp_path, ranks):
    graph = load_graph(str(write_edges(tmp_path / "g.txt", edges(1))), features=3, classes=2)
    arrays = {"adj_indptr": graph.adj.indptr.astype(np.int64), "adj_indices": graph.adj.indices.astype(np.int64),
              "adj_shape": np.array(graph.adj.shape), "vertex_ids": graph.vertex_ids, "features": graph.features,
              "labels": graph.labels, "train_mask": graph.train_mask}
    n = graph.num_vertices
    cases = {
        "index out of range": {"adj_indices": np.where(np.arange(graph.adj.nnz) == graph.adj.nnz - 3, n + 5,
                                                        arrays["adj_indices"])},
        "pointers falling": {"adj_indptr": np.where(np.arange(n + 1) == n - 2, 0, arrays["adj_indptr"])},
        "label below -1": {"labels": np.where(np.arange(n) == n - 1, -7, graph.labels)},
        "a NaN feature late": {"features": np.where(np.arange(n)[:, None] == n - 2, np.nan, graph.features)},
        "unlabelled training vertex": {"labels": np.where(graph.train_mask & (np.arange(n) > n // 2), -1,
                                                          graph.labels)},
        "mask of ints": {"train_mask": graph.train_mask.astype(np.int8)},
        "missing ids": {"vertex_ids": None},
    }
    for what, change in cases.items():
        path = tmp_path / f"{what.replace(' ', '-')}.npz"
        np.savez(path, **{k: v for k, v in {**arrays, **change}.items() if v is not None})
        options = GraphOptions(str(path))
        expected = one_process_error(options)
        assert every_rank_error(options, ranks) == [expected] * ranks, what


@pytest.mark.parametrize("ranks", [2, 4])
def test_bad_requests_are_one_process_error_on_every_rank(tmp_path, ranks):
    plain = str(write_edges(tmp_path / "g.txt", edges(2)))
    labelled = load_graph(plain, features=3, classes=2)
    save_npz(labelled, tmp_path / "l.npz")
    for options in (GraphOptions(plain), GraphOptions(plain, features=3), GraphOptions(plain, features=2,
                                                                                       classes=10**6),
                    GraphOptions(str(tmp_path / "l.npz"), features=3, classes=2),
                    GraphOptions("synthetic:rmat,scale=5,edge_factor=2"),
                    GraphOptions(plain, features=2, classes=2, feature_norm="l2")):
        expected = one_process_error(options)
        assert every_rank_error(options, ranks) == [expected] * ranks, options


@pytest.mark.parametrize("ranks", [1, 3])
def test_bad_ogb_values_anywhere_are_one_process_error_on_every_rank(tmp_path, ranks):
    base = write_ogb_binary(tmp_path / "base", seed=4)
    data = dict(np.load(base / "raw" / "data.npz"))
    labels = np.load(base / "raw" / "node-label.npz")["node_label"]
    late_edge = np.arange(700) == 650
    cases = {
        "a late edge's id out of range": ({"edge_index": np.where(late_edge, 130, data["edge_index"])}, None),
        "a negative id": ({"edge_index": np.where(late_edge[None, :] & (np.arange(2) == 1)[:, None], -1,
                                                  data["edge_index"])}, None),
        "edges miscounted": ({"num_edges_list": np.array([699])}, None),
        "two graphs": ({"num_nodes_list": np.array([65, 65])}, None),
        "edge_index of one row": ({"edge_index": data["edge_index"][:1]}, None),
        "features of too few rows": ({"node_feat": data["node_feat"][:-1]}, None),
        "complex features": ({"node_feat": data["node_feat"].astype(np.complex64)}, None),
        "no edge_index": ({"edge_index": None}, None),
        "a late label not a class": ({}, np.where(np.arange(130)[:, None] == 120, 2.5, labels)),
        "labels of two tasks": ({}, np.concatenate([labels, labels], axis=1)),
        "too few labels": ({}, labels[:-3]),
    }
    for what, (change, new_labels) in cases.items():
        directory = tmp_path / what.replace(" ", "-").replace("'", "")
        (directory / "raw").mkdir(parents=True)
        np.savez_compressed(directory / "raw" / "data.npz",
                            **{k: v for k, v in {**data, **change}.items() if v is not None})
        np.savez_compressed(directory / "raw" / "node-label.npz",
                            node_label=labels if new_labels is None else new_labels)
        (directory / "split").symlink_to(base / "split")
        options = GraphOptions(str(directory))
        assert split_format(str(directory)) == "ogb-binary", what
        expected = one_process_error(options)
        assert every_rank_error(options, ranks) == [expected] * ranks, (what, expected)
