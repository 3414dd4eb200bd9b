"""Graph file loaders: exact adjacency on small files, errors, and the real datasets."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from tiny_datasets import make_musae, make_planetoid, write

from distgcn.data import UNLABELLED_SPLIT, detect_format, load_graph, save_npz
from distgcn.data.graph import Graph, normalized_adjacency
from distgcn.errors import InputError

DATASETS = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"


def dense(graph: Graph) -> np.ndarray:
    return graph.adj.toarray()


def assert_canonical(graph: Graph) -> None:
    """The conventions every loader promises."""
    adj = graph.adj
    assert isinstance(adj, sp.csr_matrix)
    assert adj.dtype == np.float64
    assert adj.shape == (graph.num_vertices, graph.num_vertices)
    assert np.all(adj.data == 1.0)
    assert adj.diagonal().sum() == 0
    for row in range(adj.shape[0]):
        cols = adj.indices[adj.indptr[row] : adj.indptr[row + 1]]
        assert np.all(np.diff(cols) > 0), "indices sorted and without duplicates"
    assert graph.vertex_ids.dtype == np.int64 and graph.vertex_ids.shape == (graph.num_vertices,)


def expect_error(spec: str | Path, *fragments: str, **kwargs) -> str:
    with pytest.raises(InputError) as info:
        load_graph(str(spec), **kwargs)
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


# --- SNAP edge lists ------------------------------------------------------------------------


def test_snap_maps_ids_and_follows_direction_convention(tmp_path):
    path = write(tmp_path / "g.txt", "# comment\n10 20\n20\t30\n30 10\n10 10\n10 20\n\n")
    graph = load_graph(str(path))
    assert_canonical(graph)
    assert graph.name == "g"
    assert graph.vertex_ids.tolist() == [10, 20, 30]
    expected = np.zeros((3, 3))
    expected[1, 0] = 1  # 10 -> 20: vertex 20 aggregates from 10
    expected[2, 1] = 1  # 20 -> 30
    expected[0, 2] = 1  # 30 -> 10
    np.testing.assert_array_equal(dense(graph), expected)
    assert graph.features is None and graph.labels is None and graph.train_mask is None


def test_snap_symmetrize_gives_union(tmp_path):
    path = write(tmp_path / "g.edges", "0 1\n1 2\n2 1\n")
    directed = dense(load_graph(str(path)))
    undirected = dense(load_graph(str(path), symmetrize=True))
    np.testing.assert_array_equal(undirected, np.maximum(directed, directed.T))
    np.testing.assert_array_equal(directed, [[0, 0, 0], [1, 0, 1], [0, 1, 0]])


def test_snap_identity_ids_gzip_and_crlf(tmp_path):
    path = write(tmp_path / "g.txt.gz", "% other comment style\r\n0 1\r\n1 2\r\n2 0\r\n")
    graph = load_graph(str(path))
    assert graph.name == "g"
    assert graph.vertex_ids.tolist() == [0, 1, 2]
    assert graph.num_edges == 3
    assert graph.adj[1, 0] == 1 and graph.adj[2, 1] == 1 and graph.adj[0, 2] == 1


def test_snap_el_suffix_and_large_sparse_ids(tmp_path):
    path = write(tmp_path / "g.el", "1000000000000 5\n5 7\n")
    graph = load_graph(str(path))
    assert graph.vertex_ids.tolist() == [5, 7, 1000000000000]
    assert graph.adj[0, 2] == 1 and graph.adj[1, 0] == 1


@pytest.mark.parametrize(
    "text, line, fragment",
    [
        ("0 1\n1 2\n2 3 4\n", 3, "found 3 values"),
        ("0 1\n5\n", 2, "found 1 values"),
        ("0 1\na b\n", 2, "'a'"),
        ("0 1\n1 2.5\n", 2, "'2.5'"),
        ("# c\n0 1\n1 -2\n", 3, "negative vertex id -2"),
        ("0 1\n1-2 3\n", 2, "'1-2'"),
        ("0 1\n99999999999999999999 1\n", 2, "too large"),
    ],
)
def test_snap_malformed_lines_name_file_and_line(tmp_path, text, line, fragment):
    path = write(tmp_path / "bad.txt", text)
    expect_error(path, f"bad.txt:{line}:", fragment)


def test_snap_empty_and_self_loop_only_files(tmp_path):
    expect_error(write(tmp_path / "empty.txt", "# nothing here\n"), "empty.txt", "no edges")
    expect_error(write(tmp_path / "loops.txt", "1 1\n2 2\n"), "loops.txt", "no edges")


def test_slow_error_path_on_large_file(tmp_path):
    lines = [f"{i} {i + 1}" for i in range(200_000)]
    lines[150_000] = "150000 x"
    path = write(tmp_path / "big.txt", "\n".join(lines) + "\n")
    expect_error(path, "big.txt:150001:", "'x'")


# --- format detection -----------------------------------------------------------------------


def test_missing_and_unknown_files(tmp_path):
    expect_error(tmp_path / "nope.txt", "nope.txt", "no such file")
    expect_error(write(tmp_path / "g.csv", "0,1\n"), "g.csv", "unknown graph format", ".mtx")
    expect_error(tmp_path, str(tmp_path), "no known dataset")
    (tmp_path / "g.txt.gz").write_bytes(b"not gzip at all")
    expect_error(tmp_path / "g.txt.gz", "g.txt.gz", "gzip")


def test_detect_format(tmp_path):
    kinds = [("a.txt", "snap"), ("a.TXT.gz", "snap"), ("a.mtx.gz", "mtx"), ("a.graph", "metis"), ("a.npz", "npz")]
    for name, kind in kinds:
        write(tmp_path / name, "")
        assert detect_format(str(tmp_path / name))[0] == kind


# --- Matrix Market --------------------------------------------------------------------------


def test_matrix_market_general_pattern(tmp_path):
    path = write(
        tmp_path / "m.mtx",
        "%%MatrixMarket matrix coordinate pattern general\n% comment\n3 3 4\n1 2\n2 3\n3 3\n1 2\n",
    )
    graph = load_graph(str(path))
    assert_canonical(graph)
    assert graph.name == "m"
    assert graph.vertex_ids.tolist() == [1, 2, 3]
    np.testing.assert_array_equal(dense(graph), [[0, 0, 0], [1, 0, 0], [0, 1, 0]])
    sym = load_graph(str(path), symmetrize=True)
    np.testing.assert_array_equal(dense(sym), [[0, 1, 0], [1, 0, 1], [0, 1, 0]])


def test_matrix_market_symmetric_valued_gz(tmp_path):
    path = write(
        tmp_path / "s.mtx.gz",
        "%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n2 1 2.5\n3 1 -1\n3 3 7\n",
    )
    graph = load_graph(str(path))
    assert graph.name == "s"
    np.testing.assert_array_equal(dense(graph), [[0, 1, 1], [1, 0, 0], [1, 0, 0]])


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("hello\n1 2\n", "bad.mtx:1:"),
        ("%%MatrixMarket matrix coordinate pattern general\n3 3 2\n1 2\n2 x\n", "bad.mtx:4:"),
        ("%%MatrixMarket matrix coordinate pattern general\n3 3 2\n1 2\n2 7\n", "bad.mtx:4:"),
        ("%%MatrixMarket matrix coordinate pattern general\n3 3 3\n1 2\n2 3\n", "Truncated"),
        ("%%MatrixMarket matrix coordinate pattern general\n2 3 1\n1 2\n", "square"),
        ("%%MatrixMarket matrix coordinate pattern general\n3 3 1\n2 2\n", "no edges"),
    ],
)
def test_matrix_market_errors(tmp_path, text, fragment):
    expect_error(write(tmp_path / "bad.mtx", text), "bad.mtx", fragment)


# --- METIS ----------------------------------------------------------------------------------


def test_metis_plain(tmp_path):
    path = write(tmp_path / "g.graph", "% comment\n4 3\n2 3\n1\n1 4\n% between\n3\n")
    graph = load_graph(str(path))
    assert_canonical(graph)
    assert graph.name == "g"
    assert graph.vertex_ids.tolist() == [1, 2, 3, 4]
    expected = np.zeros((4, 4))
    for u, v in [(0, 1), (0, 2), (2, 3)]:
        expected[u, v] = expected[v, u] = 1
    np.testing.assert_array_equal(dense(graph), expected)


def test_metis_isolated_vertex_and_trailing_blank_lines(tmp_path):
    path = write(tmp_path / "g.graph", "4 1\n2\n1\n\n\n\n\n")
    graph = load_graph(str(path))
    assert graph.num_vertices == 4
    assert graph.num_edges == 2
    assert graph.adj[2].nnz == 0 and graph.adj[3].nnz == 0


@pytest.mark.parametrize(
    "text",
    [
        "3 2 1\n2 5 3 7\n1 5\n1 7\n",  # edge weights
        "3 2 001\n2 5 3 7\n1 5\n1 7\n",
        "3 2 10\n4 2 3\n9 1\n9 1\n",  # vertex weights
        "3 2 10 2\n4 4 2 3\n9 9 1\n9 9 1\n",  # two constraints
        "3 2 111\n1 4 2 5 3 7\n1 9 1 5\n1 9 1 7\n",  # sizes, weights, edge weights
    ],
)
def test_metis_weighted_formats_ignore_weights(tmp_path, text):
    graph = load_graph(str(write(tmp_path / "w.graph", text)))
    np.testing.assert_array_equal(dense(graph), [[0, 1, 1], [1, 0, 0], [1, 0, 0]])


@pytest.mark.parametrize(
    "text, line, fragment",
    [
        ("3 2\n2 3\n1 4\n1\n", 3, "neighbour id 4 of vertex 2 is outside 1..3"),
        ("3 2\n2 3\n0\n1\n", 3, "outside 1..3"),
        ("% c\n3 3\n2 3\n1\n1\n", 2, "header says 3 edges"),
        ("3 2\n2 3\n1\n", 3, "only 2 adjacency lines"),
        ("2 1\n2\n1\n1\n", 4, "more adjacency lines"),
        ("3 2\n2 x\n1\n1\n", 2, "'x'"),
        ("3\n2 3\n1\n1\n", 1, "expected a METIS header"),
        ("3 2 5\n2 3\n1\n1\n", 1, "unknown METIS fmt 5"),
        ("3 2 1\n2 5 3\n1 5\n1 7\n", 2, "(neighbour, weight) pairs"),
        ("0 0\n", 1, "no vertices"),
    ],
)
def test_metis_errors(tmp_path, text, line, fragment):
    expect_error(write(tmp_path / "bad.graph", text), f"bad.graph:{line}:", fragment)


def test_metis_empty_file(tmp_path):
    expect_error(write(tmp_path / "e.graph", "% only a comment\n"), "e.graph", "empty file")


# --- Planetoid ------------------------------------------------------------------------------


def test_planetoid_assembly_matches_kipf_ordering(tmp_path):
    data = make_planetoid(tmp_path / "tiny")
    graph = load_graph(str(tmp_path / "tiny"))
    assert_canonical(graph)
    assert graph.name == "tiny"
    assert graph.vertex_ids.tolist() == list(range(8))
    np.testing.assert_array_equal(graph.features[:5], data["allx"])
    np.testing.assert_array_equal(graph.features[7], data["tx"][0])
    np.testing.assert_array_equal(graph.features[5], data["tx"][1])
    np.testing.assert_array_equal(graph.features[6], 0)
    assert graph.labels.tolist() == [0, 1, 1, 0, 1, 0, -1, 1]
    assert np.flatnonzero(graph.train_mask).tolist() == [0, 1]
    assert np.flatnonzero(graph.val_mask).tolist() == [2, 3, 4]
    assert np.flatnonzero(graph.test_mask).tolist() == [5, 7]
    expected = np.zeros((8, 8))
    for u, v in [(0, 1), (0, 2), (3, 4), (5, 7)]:
        expected[u, v] = expected[v, u] = 1
    np.testing.assert_array_equal(dense(graph), expected)
    assert graph.features.dtype == np.float32 and graph.labels.dtype == np.int64


def test_planetoid_prefix_and_single_file_specs(tmp_path):
    make_planetoid(tmp_path)
    whole = load_graph(str(tmp_path)).fingerprint()
    assert load_graph(str(tmp_path / "ind.tiny")).fingerprint() == whole
    assert load_graph(str(tmp_path / "ind.tiny.graph")).fingerprint() == whole


def test_planetoid_refuses_other_features_flags(tmp_path):
    make_planetoid(tmp_path)
    expect_error(tmp_path, "for a graph that has neither", "this one has features, labels", features=4, classes=2)


def test_planetoid_errors(tmp_path):
    make_planetoid(tmp_path / "a")
    make_planetoid(tmp_path / "a", name="other")
    expect_error(tmp_path / "a", "several Planetoid datasets", "ind.other", "ind.tiny")
    make_planetoid(tmp_path / "b")
    (tmp_path / "b" / "ind.tiny.ty").unlink()
    expect_error(tmp_path / "b", "missing Planetoid files ind.tiny.ty")
    make_planetoid(tmp_path / "c")
    (tmp_path / "c" / "ind.tiny.test.index").write_text("7\nseven\n")
    expect_error(tmp_path / "c", "ind.tiny.test.index:2:", "'seven'")
    make_planetoid(tmp_path / "d")
    (tmp_path / "d" / "ind.tiny.x").write_bytes(b"garbage")
    expect_error(tmp_path / "d", "ind.tiny.x", "not a valid Planetoid pickle")
    make_planetoid(tmp_path / "e")
    (tmp_path / "e" / "ind.tiny.test.index").write_text("7\n")
    expect_error(tmp_path / "e", "ind.tiny.test.index", "1 test ids")


def test_planetoid_ids_are_bounded_by_what_the_other_files_hold(tmp_path):
    """Before: one test id of 10^9 sized every array by itself (gigabytes, minutes) before anything was refused.
    The tiny dataset holds 5 rows of allx, 2 of tx and 8 lists in graph: ids 0..7."""
    make_planetoid(tmp_path / "a")
    (tmp_path / "a" / "ind.tiny.test.index").write_text(f"7\n{10**9}\n")
    expect_error(tmp_path / "a", "ind.tiny.test.index:2: test vertex id 1000000000 is beyond the dataset's 8 "
                 "vertices (5 rows of allx, 2 of tx, 8 lists in graph)")
    make_planetoid(tmp_path / "b")
    (tmp_path / "b" / "ind.tiny.test.index").write_text("8\n5\n")  # one beyond: refused
    expect_error(tmp_path / "b", "ind.tiny.test.index:1: test vertex id 8 is beyond")
    make_planetoid(tmp_path / "c")
    graph = {0: [1, 2], 1: [0], 2: [0, 2], 3: [4], 4: [3], 5: [7], 6: [], 7: [5, 10**12]}
    with open(tmp_path / "c" / "ind.tiny.graph", "wb") as f:
        pickle.dump(graph, f, protocol=2)
    expect_error(tmp_path / "c", "ind.tiny.graph: vertex id 1000000000000 in the adjacency lists is beyond")


def test_planetoid_matrices_must_be_real_with_columns(tmp_path):
    make_planetoid(tmp_path / "a")
    with open(tmp_path / "a" / "ind.tiny.tx", "wb") as f:
        pickle.dump(np.ones((2, 3), np.complex64), f, protocol=2)
    expect_error(tmp_path / "a", "ind.tiny.tx: the matrix holds complex numbers (complex64)")
    make_planetoid(tmp_path / "b")
    with open(tmp_path / "b" / "ind.tiny.y", "wb") as f:
        pickle.dump(np.zeros((2, 0)), f, protocol=4)  # protocol 2 writes empty data as a call of bytes()
    expect_error(tmp_path / "b", "ind.tiny.y: the matrix has 0 columns: expected at least one class per vertex")


class _Exploit:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_planetoid_unpickler_refuses_arbitrary_callables(tmp_path):
    make_planetoid(tmp_path)
    marker = tmp_path / "exploited"
    with open(tmp_path / "ind.tiny.graph", "wb") as f:
        pickle.dump({0: [_Exploit(marker)]}, f, protocol=2)
    expect_error(tmp_path, "ind.tiny.graph", "refusing to unpickle", "system")
    assert not marker.exists()


# --- MUSAE ----------------------------------------------------------------------------------


def test_musae_tiny(tmp_path):
    make_musae(tmp_path)
    graph = load_graph(str(tmp_path), seed=3)
    assert_canonical(graph)
    assert graph.name == "fb"
    assert graph.vertex_ids.tolist() == [0, 1, 2, 3, 4]
    assert graph.labels.tolist() == [2, 0, 2, 1, 0]  # company 0, government 1, tvshow 2
    np.testing.assert_array_equal(
        graph.features, [[1, 0, 1], [0, 1, 0], [0, 0, 0], [1, 0, 1], [0, 0, 0]]
    )
    expected = np.zeros((5, 5))
    for u, v in [(0, 1), (1, 2), (0, 3)]:
        expected[u, v] = expected[v, u] = 1
    np.testing.assert_array_equal(dense(graph), expected)
    masks = np.stack([graph.train_mask, graph.val_mask, graph.test_mask])
    assert masks.sum(axis=1).tolist() == [3, 1, 1]
    assert masks.sum(axis=0).max() == 1
    again = load_graph(str(tmp_path), seed=3)
    np.testing.assert_array_equal(again.train_mask, graph.train_mask)


def test_musae_errors(tmp_path):
    make_musae(tmp_path / "a", edges="id_1,id_2\n0,1\n1,9\n")
    expect_error(tmp_path / "a", "fb_edges.csv:3:", "node id 9 is not in the target file")
    make_musae(tmp_path / "b", edges="id_1,id_2\n0,1\n1,2,3\n")
    expect_error(tmp_path / "b", "fb_edges.csv:3:", "expected 'id_1,id_2'")
    make_musae(tmp_path / "c", edges="id_1,id_2\n0,1\n1,x\n")
    expect_error(tmp_path / "c", "fb_edges.csv:3:", "'x'")
    make_musae(tmp_path / "d", features={"0": [1], "77": [0]})
    expect_error(tmp_path / "d", "fb.json", "'77' is not in the target file")
    make_musae(tmp_path / "e", features={"0": [1.5]})
    expect_error(tmp_path / "e", "fb.json", "non-negative integers")
    make_musae(tmp_path / "f")
    (tmp_path / "f" / "fb.json").unlink()
    expect_error(tmp_path / "f", "fb.json", "missing feature file")
    make_musae(tmp_path / "g")
    (tmp_path / "g" / "fb.json").write_text('{\n"0": [1],\n"x1": [0]\n}')
    expect_error(tmp_path / "g", "fb.json:3:", "'x1'")


def test_musae_numbers_beyond_64_bits_name_file_and_line(tmp_path):
    """Before: an id or feature id beyond int64 was an OverflowError traceback, one of over 4300 digits
    Python's ValueError."""
    huge = "1" + "0" * 24
    make_musae(tmp_path / "a")
    write(tmp_path / "a" / "fb_target.csv", f"id,page_type\n0,a\n1,b\n{huge},c\n")
    expect_error(tmp_path / "a", f"fb_target.csv:4: integer '{huge}' is too large (limit 2**62)")
    make_musae(tmp_path / "b")
    write(tmp_path / "b" / "fb.json", f'{{"0": [0, 1],\n "1": [{huge}]}}')
    expect_error(tmp_path / "b", f"fb.json:2: integer '{huge}' is too large (limit 2**62)")
    make_musae(tmp_path / "c", features={"0": [0], huge: [1]})
    expect_error(tmp_path / "c", f"fb.json:1: integer '{huge}' is too large (limit 2**62)")
    make_musae(tmp_path / "d")
    write(tmp_path / "d" / "fb.json", '{"0": [' + "7" * 5000 + "]}")
    expect_error(tmp_path / "d", "fb.json:1: integer '7777", "is too large (limit 2**62)")
    make_musae(tmp_path / "e", edges=f"id_1,id_2\n0,1\n1,{huge}\n")
    expect_error(tmp_path / "e", f"fb_edges.csv:3: integer '{huge}' is too large (limit 2**62)")
    make_musae(tmp_path / "f")
    write(tmp_path / "f" / "fb_target.csv", "id,page_type\n0,a\n 1 ,b\n2,a\n3,b\n4,a\n")  # spaces around an id: no error
    assert load_graph(str(tmp_path / "f")).vertex_ids.tolist() == [0, 1, 2, 3, 4]


# --- npz ------------------------------------------------------------------------------------


def test_npz_round_trip(tmp_path):
    source = load_graph(str(write(tmp_path / "g.txt", "5 7\n7 9\n9 5\n")), features=4, classes=3, seed=2)
    target = tmp_path / "saved.npz"
    save_npz(source, target)
    loaded = load_graph(str(target))
    assert loaded.fingerprint() == source.fingerprint()
    assert loaded.name == "g"
    assert_canonical(loaded)
    unlabelled = load_graph(str(write(tmp_path / "h.txt", "0 1\n")))
    save_npz(unlabelled, tmp_path / "h.npz")
    again = load_graph(str(tmp_path / "h.npz"))
    assert again.features is None and again.fingerprint() == unlabelled.fingerprint()


def test_npz_is_canonicalized(tmp_path):
    path = tmp_path / "raw.npz"
    np.savez(
        path,
        adj_indptr=np.array([0, 3, 3]),
        adj_indices=np.array([1, 0, 1]),  # unsorted, a self loop, a duplicate
        adj_shape=np.array([2, 2]),
        vertex_ids=np.array([4, 8]),
    )
    graph = load_graph(str(path))
    np.testing.assert_array_equal(dense(graph), [[0, 1], [0, 0]])


def npz_arrays(**overrides):
    arrays = {
        "adj_indptr": np.array([0, 1, 2]),
        "adj_indices": np.array([1, 0]),
        "adj_shape": np.array([2, 2]),
        "vertex_ids": np.array([0, 1]),
    }
    arrays.update(overrides)
    return {k: v for k, v in arrays.items() if v is not None}


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        ({"vertex_ids": None}, "missing arrays vertex_ids"),
        ({"labels": np.array([0, 1, 1])}, "labels has length 3, expected 2"),
        ({"features": np.zeros((3, 2))}, "features must be a numeric [2, F] array"),
        ({"train_mask": np.array([1, 0])}, "train_mask must be a boolean array"),
        ({"adj_indices": np.array([1, 5])}, "adj_indices must lie in 0..1"),
        ({"adj_indptr": np.array([0, 2, 1])}, "adj_indptr must rise"),
        ({"adj_shape": np.array([2, 3])}, "adj_shape must be [n, n]"),
        ({"labels": np.array([object(), 1], dtype=object)}, "not a readable .npz"),
    ],
)
def test_npz_errors(tmp_path, overrides, fragment):
    path = tmp_path / "bad.npz"
    np.savez(path, **npz_arrays(**overrides))
    expect_error(path, "bad.npz", fragment)


def test_npz_not_a_zip(tmp_path):
    expect_error(write(tmp_path / "x.npz", "hello"), "x.npz", "not a readable .npz")


def _small_graph(**changes) -> Graph:
    """Path 0 - 1 - 2 with features, labels and masks; ``changes`` replace fields."""
    fields = dict(adj=sp.csr_matrix(np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]], dtype=np.float64)),
                  vertex_ids=np.array([10, 20, 30]), features=np.eye(3, dtype=np.float32), labels=np.array([0, 1, 0]),
                  train_mask=np.array([True, False, False]), val_mask=np.array([False, True, False]),
                  test_mask=np.array([False, False, True]))
    return Graph(**{**fields, **changes})


def test_fingerprint_changes_with_every_field_and_is_pinned():
    """Shards and checkpoints are tied to a graph by it: any change of structure or data must change it, and
    it must not change between versions (partition directories and checkpoints written earlier stay valid)."""
    base = _small_graph()
    variants = [
        _small_graph(adj=sp.csr_matrix(np.array([[0, 1, 1], [1, 0, 1], [1, 1, 0]], dtype=np.float64))),
        _small_graph(vertex_ids=np.array([10, 20, 31])),
        _small_graph(features=np.eye(3, dtype=np.float32)[::-1].copy()),
        _small_graph(labels=np.array([0, 1, 1])),
        _small_graph(train_mask=np.array([True, True, False])),
        _small_graph(val_mask=None),
        _small_graph(test_mask=np.array([True, False, True])),
    ]
    prints = [g.fingerprint() for g in (base, *variants)]
    assert len(set(prints)) == len(prints)
    assert prints[0] == "98e75197ce378cfa26c1319de48ca753"


# --- random training data for structure-only graphs -----------------------------------------


def test_random_training_data_is_seeded(tmp_path):
    path = write(tmp_path / "g.txt", "".join(f"{i} {(i * 7 + 1) % 100}\n" for i in range(100)))
    a = load_graph(str(path), features=5, classes=3, seed=1)
    b = load_graph(str(path), features=5, classes=3, seed=1)
    c = load_graph(str(path), features=5, classes=3, seed=2)
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()
    assert a.features.shape == (100, 5) and a.features.dtype == np.float32
    assert a.labels.min() >= 0 and a.labels.max() < 3
    sizes = [int(m.sum()) for m in (a.train_mask, a.val_mask, a.test_mask)]
    assert sizes == [int(f * 100) for f in UNLABELLED_SPLIT]
    assert not (a.train_mask & a.val_mask).any() and not (a.val_mask & a.test_mask).any()


def test_features_flag_errors(tmp_path):
    path = write(tmp_path / "g.txt", "0 1\n")
    expect_error(path, "both features and classes", features=4)
    expect_error(path, "features must be a positive integer", features=0, classes=2)
    assert load_graph(str(path)).features is None


def test_random_labels_need_no_more_classes_than_vertices_and_the_message_names_the_flag(tmp_path):
    """Before: --classes 10 on 3 vertices drew labels up to 9 and then blamed the file for label 5."""
    path = write(tmp_path / "g.txt", "0 1\n1 2\n")
    assert load_graph(str(path), features=2, classes=3).labels.max() < 3
    expect_error(path, f"--classes 4 is more than the 3 vertices of {path}", "give --classes 3 or fewer",
                 features=2, classes=4)
    expect_error("synthetic:rmat,scale=1,edge_factor=4", "rmat: classes=3 exceeds the 2 vertices", features=2,
                 classes=3)


def npz_without(tmp_path: Path, *keys: str, **arrays: np.ndarray) -> Path:
    """A 2-vertex .npz graph with features, labels and masks, less ``keys``, with ``arrays`` replaced."""
    given = npz_arrays(**{**dict(features=np.ones((2, 3), np.float32), labels=np.array([0, 1]),
                                 train_mask=np.array([True, False]), val_mask=np.array([False, True]),
                                 test_mask=np.array([False, True])), **arrays})
    path = tmp_path / "g.npz"
    np.savez(path, **{key: value for key, value in given.items() if key not in keys})
    return path


def test_a_graph_without_masks_is_told_that_it_lacks_the_masks(tmp_path):
    """Before: an .npz with features and labels but no masks was told it had no features or labels, and,
    given --features/--classes, that it had them."""
    from distgcn.data.prepare import GraphOptions, prepare_graph

    path = npz_without(tmp_path, "train_mask", "val_mask", "test_mask")
    with pytest.raises(InputError) as info:
        prepare_graph(GraphOptions(str(path)))
    assert str(info.value) == (f"graph '{path}' has features and labels but no train_mask, which training needs: add "
                               "train_mask (2 booleans marking the vertices to train on; val_mask and test_mask the "
                               "same way, to evaluate) to it")
    expect_error(path, f"{path}: --features/--classes draw random features and labels for a graph that has neither, "
                 "but this one has features and labels; what it lacks is train_mask: add train_mask (2 booleans",
                 features=4, classes=2)
    with pytest.raises(InputError, match="has labels, train_mask, val_mask and test_mask but no features, which"):
        prepare_graph(GraphOptions(str(npz_without(tmp_path, "features"))))
    with pytest.raises(InputError, match="has no features or labels: pass --features F --classes C"):
        prepare_graph(GraphOptions(str(npz_without(tmp_path, "features", "labels", "train_mask", "val_mask",
                                                   "test_mask"))))


def test_features_must_be_real_numbers_in_at_least_one_column(tmp_path):
    """Before: complex features lost their imaginary part, and 0 columns trained at chance."""
    from distgcn import from_scipy
    from distgcn.data.prepare import prepare_loaded_graph

    expect_error(npz_without(tmp_path, features=np.ones((2, 3), np.complex128) * 1j), "g.npz: features holds "
                 "complex numbers (complex128): expected real numbers (the imaginary part would be dropped)")
    expect_error(npz_without(tmp_path, features=np.ones((2, 0), np.float32)),
                 "g.npz: features has 0 columns: expected at least one feature per vertex")
    expect_error(npz_without(tmp_path, features=np.ones((2, 3), bool)),
                 "g.npz: features must be a numeric [2, F] array of real numbers, found bool")
    adjacency = sp.csr_matrix(np.array([[0.0, 1.0], [1.0, 0.0]]))
    with pytest.raises(InputError, match="features holds complex numbers"):
        from_scipy(adjacency, np.ones((2, 2), np.complex64), np.array([0, 1]))
    built = from_scipy(adjacency, np.ones((2, 1), np.float32), np.array([0, 1]), train_mask=np.array([True, False]))
    built.features = np.ones((2, 0), np.float32)  # a Graph changed in Python after it was checked
    with pytest.raises(InputError, match="built: features has 0 columns"):
        prepare_loaded_graph(built, "built")


# --- what messages quote from files ----------------------------------------------------------

CONTROL = "\x1b[2J\rGOTCHA\x00\x85\u202e"
"""Clears the screen, returns the cursor, ends a C string, a C1 newline, turns the text right to left."""


def test_printable_escapes_what_a_terminal_would_act_on():
    from distgcn.errors import printable, quoted

    assert printable("plain text, é and 漢字") == "plain text, é and 漢字"
    assert printable(f"a{CONTROL}\nb\tc") == "a\\x1b[2J\\rGOTCHA\\x00\\x85\\u202e\\nb\\tc"
    assert quoted(b"\x1b[2J" + b"x" * 50) == "'\\x1b[2J" + "x" * 36 + "...'"
    assert str(InputError(f"found {CONTROL}", path=f"dir{CONTROL}", line=3)).isprintable()


def musae_json_key(directory: Path) -> Path:
    make_musae(directory, features={"0": [0], CONTROL: [1]})
    return directory


def mtx_banner(directory: Path) -> Path:
    return write(directory / "g.mtx.gz", f"%%MatrixMarket matrix coordinate {CONTROL} general\n2 2 1\n1 2\n")


def pickled_class(directory: Path) -> Path:
    make_planetoid(directory)
    with open(directory / "ind.tiny.graph", "wb") as f:
        f.write(b"\x80\x02c" + f"os{CONTROL}\nsystem\n".encode() + b"q\x00.")
    return directory


def musae_header(directory: Path) -> Path:
    make_musae(directory)
    write(directory / "fb_target.csv", f"id,{CONTROL}\n0,a\n")
    return directory


@pytest.mark.parametrize("make", [
    lambda d: write(d / "g.txt", f"0 1\n{CONTROL} 2\n"),
    lambda d: write(d / "g.txt.gz", f"0 1\n1\t{CONTROL}\n"),
    lambda d: write(d / "g.graph", f"2 1\n2\n1{CONTROL}\n"),
    mtx_banner, musae_json_key, musae_header, pickled_class,
], ids=["edge list", "gzipped edge list", "METIS", "Matrix Market banner (scipy's message)", "MUSAE json key",
        "MUSAE header", "Planetoid pickle's class name"])
def test_control_characters_from_a_file_are_escaped_in_its_message(tmp_path, make):
    """Before: scipy's message for a Matrix Market banner printed an escape sequence raw, which cleared the
    terminal of whoever read the error. Every message is now printable, one line, whatever made it."""
    message = expect_error(make(tmp_path))
    assert message.isprintable(), repr(message)
    assert "\\x1b[2J" in message or "\\x00" in message, message


# --- real datasets (../shared/datasets) -----------------------------------------------------


def dataset(relative: str) -> Path:
    path = DATASETS / relative
    if not path.exists():
        pytest.skip(f"{relative}: ../shared/datasets not present (fresh clone)")
    return path


def propagated_accuracy(graph: Graph) -> float:
    """Nearest-class-mean on Â²X: only high when features, labels and edges line up."""
    x = graph.features / np.maximum(graph.features.sum(axis=1, keepdims=True), 1)
    a = normalized_adjacency(graph.adj)
    h = a @ (a @ x)
    y = graph.labels
    means = np.stack([h[graph.train_mask & (y == c)].mean(axis=0) for c in range(graph.num_classes)])
    means /= np.linalg.norm(means, axis=1, keepdims=True)
    predicted = (h @ means.T).argmax(axis=1)
    return float((predicted[graph.test_mask] == y[graph.test_mask]).mean())


def test_cora():
    graph = load_graph(str(dataset("cora_planetoid")))
    assert_canonical(graph)
    assert graph.name == "cora"
    assert graph.num_vertices == 2708
    assert graph.num_edges == 10556
    assert (graph.adj != graph.adj.T).nnz == 0
    assert graph.features.shape == (2708, 1433)
    assert graph.num_classes == 7
    assert np.bincount(graph.labels).tolist() == [351, 217, 418, 818, 426, 298, 180]
    assert [int(m.sum()) for m in (graph.train_mask, graph.val_mask, graph.test_mask)] == [140, 500, 1000]
    assert propagated_accuracy(graph) > 0.7


def test_cora_prefix_spec():
    path = dataset("cora_planetoid")
    assert load_graph(str(path / "ind.cora")).num_vertices == 2708


def test_citeseer():
    graph = load_graph(str(dataset("citeseer_planetoid")))
    assert graph.num_vertices == 3327
    assert graph.num_edges == 2 * 4552
    assert graph.features.shape == (3327, 3703)
    assert graph.num_classes == 6
    assert [int(m.sum()) for m in (graph.train_mask, graph.val_mask, graph.test_mask)] == [120, 500, 1000]
    missing = graph.labels == -1
    assert missing.sum() == 15
    assert not graph.features[missing].any()
    assert not (graph.test_mask & missing).any()
    assert propagated_accuracy(graph) > 0.65


def test_soc_slashdot():
    graph = load_graph(str(dataset("soc-Slashdot0902/soc-Slashdot0902.txt.gz")))
    assert graph.name == "soc-Slashdot0902"
    assert graph.num_vertices == 82168
    np.testing.assert_array_equal(graph.vertex_ids, np.arange(82168))
    # 948464 edge lines, of which 78303 are self loops (dropped); no duplicates.
    assert graph.num_edges == 948464 - 78303
    assert (graph.adj != graph.adj.T).nnz > 0
    assert graph.features is None


def test_musae_facebook():
    graph = load_graph(str(dataset("musae_facebook")))
    assert graph.name == "facebook"
    assert graph.num_vertices == 22470
    assert graph.num_edges == 2 * 170823
    assert graph.num_classes == 4
    assert graph.features.shape == (22470, 4714)
    assert graph.features.sum(axis=1).min() >= 1
    assert [int(m.sum()) for m in (graph.train_mask, graph.val_mask, graph.test_mask)] == [13482, 4494, 4494]


def test_ego_facebook():
    path = str(dataset("ego-Facebook/facebook_combined.txt.gz"))
    graph = load_graph(path)
    assert graph.num_vertices == 4039
    assert graph.num_edges == 88234
    assert load_graph(path, symmetrize=True).num_edges == 2 * 88234


@pytest.mark.parametrize("name, n, m", [("wing", 62032, 121544), ("4elt", 15606, 45878)])
def test_meshes(name, n, m):
    graph = load_graph(str(dataset(f"meshes/{name}.graph")))
    assert graph.name == name
    assert graph.num_vertices == n
    assert graph.num_edges == 2 * m
    assert (graph.adj != graph.adj.T).nnz == 0
    np.testing.assert_array_equal(graph.vertex_ids, np.arange(1, n + 1))
