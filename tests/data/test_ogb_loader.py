"""OGB node-property directories, written here in the layout and compression the ``ogb`` package leaves.

Each test writes a small dataset (300 vertices) the way OGB ships it: csv.gz files without a header,
one direction per pair for an undirected dataset, or for the binary variant ``raw/data.npz``
(``edge_index``, ``num_nodes_list``, ``num_edges_list``, ``node_feat``, ``node_year``) and
``raw/node-label.npz`` (``node_label``, float with NaN), saved with ``np.savez_compressed``.
The expectations are built here from the same arrays, independently of the loader.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from distgcn.data import detect_format, load_graph
from distgcn.errors import InputError

N = 300
SPLIT_SIZES = (150, 60, 90)


@dataclass
class Dataset:
    """The arrays a small OGB dataset is written from: what the loaded graph must equal."""

    edges: np.ndarray
    """int64 [E, 2], (source, target) rows, no self loops, no pair in both directions."""
    features: np.ndarray
    """float32 [N, 5]."""
    labels: np.ndarray
    """float64 [N], NaN where unknown."""
    split: tuple[np.ndarray, np.ndarray, np.ndarray]


def make_dataset(seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    pairs = {(int(u), int(v)) for u, v in rng.integers(0, N, size=(1200, 2)) if u != v}
    edges = np.array(sorted({(u, v) for u, v in pairs if (v, u) not in pairs or u < v}), dtype=np.int64)
    features = rng.standard_normal((N, 5)).astype(np.float32)
    labels = rng.integers(0, 7, size=N).astype(np.float64)
    order = rng.permutation(N)
    cuts = np.cumsum(SPLIT_SIZES)
    split = (np.sort(order[: cuts[0]]), np.sort(order[cuts[0]: cuts[1]]), np.sort(order[cuts[1]: cuts[2]]))
    labels[split[0][:4]] = np.nan  # unknown labels, listed in the training split: they must end up in no split
    labels[split[2][:3]] = np.nan
    return Dataset(edges, features, labels, split)


def write_gz(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write(text)


def rows(table: np.ndarray) -> str:
    return "".join(",".join(str(v) for v in row) + "\n" for row in table)


def write_csv_dataset(directory: Path, data: Dataset, scheme: str = "time") -> Path:
    raw = directory / "raw"
    write_gz(raw / "edge.csv.gz", rows(data.edges))
    write_gz(raw / "num-node-list.csv.gz", f"{N}\n")
    write_gz(raw / "num-edge-list.csv.gz", f"{len(data.edges)}\n")
    write_gz(raw / "node-feat.csv.gz", rows([[repr(float(x)) for x in row] for row in data.features]))
    write_gz(raw / "node-label.csv.gz", "".join(("nan" if np.isnan(y) else str(int(y))) + "\n" for y in data.labels))
    for part, ids in zip(("train", "valid", "test"), data.split):
        write_gz(directory / "split" / scheme / f"{part}.csv.gz", rows(ids[:, None]))
    return directory


def write_binary_dataset(directory: Path, data: Dataset) -> Path:
    raw = directory / "raw"
    raw.mkdir(parents=True)
    np.savez_compressed(raw / "data.npz", edge_index=data.edges.T.copy(), num_nodes_list=np.array([N]),
                        num_edges_list=np.array([len(data.edges)]), node_feat=data.features,
                        node_year=np.full((N, 1), 2020, dtype=np.int64))
    np.savez_compressed(raw / "node-label.npz", node_label=data.labels.astype(np.float32)[:, None])
    for part, ids in zip(("train", "valid", "test"), data.split):
        write_gz(directory / "split" / "time" / f"{part}.csv.gz", rows(ids[:, None]))
    return directory


def expected_adjacency(edges: np.ndarray, undirected: bool) -> np.ndarray:
    adj = np.zeros((N, N))
    adj[edges[:, 1], edges[:, 0]] = 1  # an edge u -> v: v aggregates from u
    if undirected:
        adj[edges[:, 0], edges[:, 1]] = 1
    return adj


def check_graph(graph, data: Dataset, *, undirected: bool) -> None:
    assert graph.num_vertices == N
    np.testing.assert_array_equal(graph.adj.toarray(), expected_adjacency(data.edges, undirected))
    np.testing.assert_array_equal(graph.features, data.features)
    known = ~np.isnan(data.labels)
    assert graph.labels[~known].tolist() == [-1] * int((~known).sum())
    np.testing.assert_array_equal(graph.labels[known], data.labels[known].astype(np.int64))
    for mask, ids in zip((graph.train_mask, graph.val_mask, graph.test_mask), data.split):
        expected = np.zeros(N, dtype=bool)
        expected[ids] = True
        np.testing.assert_array_equal(mask, expected & known)
    assert (graph.train_mask.sum(), graph.val_mask.sum(), graph.test_mask.sum()) == (146, 60, 87)


def test_arxiv_is_read_directed(tmp_path):
    data = make_dataset()
    directory = write_csv_dataset(tmp_path / "ogbn_arxiv", data)
    assert detect_format(str(directory)) == ("ogb", directory)
    graph = load_graph(str(directory))
    assert graph.name == "ogbn-arxiv"
    check_graph(graph, data, undirected=False)
    assert (graph.adj != graph.adj.T).nnz > 0


def test_products_gets_its_reverse_edges(tmp_path):
    data = make_dataset(1)
    graph = load_graph(str(write_csv_dataset(tmp_path / "ogbn_products", data, scheme="sales_ranking")))
    assert graph.name == "ogbn-products"
    check_graph(graph, data, undirected=True)


def test_symmetrize_adds_reverse_edges_to_any_dataset(tmp_path):
    data = make_dataset(2)
    check_graph(load_graph(str(write_csv_dataset(tmp_path / "ogbn_arxiv", data)), symmetrize=True), data,
                undirected=True)
    unknown = write_csv_dataset(tmp_path / "my_citations", data)
    check_graph(load_graph(str(unknown)), data, undirected=False)  # not in the table: as stored
    check_graph(load_graph(str(unknown), symmetrize=True), data, undirected=True)


def test_the_zip_directory_name_is_known_too(tmp_path):
    data = make_dataset(3)
    graph = load_graph(str(write_csv_dataset(tmp_path / "products", data)))
    assert graph.name == "ogbn-products"
    check_graph(graph, data, undirected=True)


def test_binary_papers100m_variant(tmp_path):
    data = make_dataset(4)
    directory = write_binary_dataset(tmp_path / "ogbn_papers100M", data)
    graph = load_graph(str(directory))
    assert graph.name == "ogbn-papers100M"
    check_graph(graph, data, undirected=False)


def test_partition_api_takes_the_directory(tmp_path):
    from distgcn import api

    data = make_dataset(5)
    split = api.partition(str(write_csv_dataset(tmp_path / "ogbn_arxiv", data)), 2, "random")
    assert split.graph.num_vertices == N and split.nparts == 2
    assert int(split.graph.train_mask.sum()) == 146


def test_train_command_takes_the_directory(tmp_path):
    from conftest import distgcn_in_process

    directory = write_csv_dataset(tmp_path / "ogbn_products", make_dataset(9), scheme="sales_ranking")
    out = tmp_path / "part"
    done = distgcn_in_process(["partition", str(directory), "--parts", "2", "--model", "random", "--out", str(out),
                               "--quiet"])
    assert done.returncode == 0, done.stderr
    done = distgcn_in_process(["train", str(out), "--epochs", "1", "--quiet"], ranks=2)
    assert done.returncode == 0, done.stderr
    done = distgcn_in_process(["train", "--graph", str(directory), "--epochs", "1", "--quiet"])
    assert done.returncode == 0, done.stderr


def test_official_scheme_is_picked_among_several(tmp_path):
    data = make_dataset(6)
    directory = write_csv_dataset(tmp_path / "ogbn_arxiv", data)
    write_gz(directory / "split" / "other" / "train.csv.gz", "0\n")
    check_graph(load_graph(str(directory)), data, undirected=False)
    unknown = write_csv_dataset(tmp_path / "mine", data)
    write_gz(unknown / "split" / "other" / "train.csv.gz", "0\n")
    with pytest.raises(InputError, match="several split schemes"):
        load_graph(str(unknown))


def corrupt(directory: Path, relative: str, text: str | None = None, *, truncate: bool = False) -> Path:
    path = directory / relative
    if truncate:
        whole = path.read_bytes()
        path.write_bytes(whole[: len(whole) // 2])
    else:
        write_gz(path, text or "")
    return path


BAD_FILES = [
    ("truncated-edges", "raw/edge.csv.gz", None, True, "edge.csv.gz: not a valid gzip file"),
    ("edge-three-columns", "raw/edge.csv.gz", "0,1\n1,2\n2,3,4\n", False,
     "edge.csv.gz:3: expected 2 comma-separated values ('source,target' vertex ids), found 3"),
    ("edge-id-out-of-range", "raw/edge.csv.gz", "0,1\n1,300\n", False,
     "edge.csv.gz:2: vertex id 300 is outside 0..299"),
    ("edge-not-a-number", "raw/edge.csv.gz", "0,1\n1,x\n", False, "edge.csv.gz:2: expected 'source,target'"),
    ("edge-count-disagrees", "raw/num-edge-list.csv.gz", "7\n", False, "num-edge-list.csv.gz says 7 edges"),
    ("split-id-out-of-range", "split/time/valid.csv.gz", "3\n5\n-1\n", False,
     "valid.csv.gz:3: vertex id -1 is outside 0..299"),
    ("feature-not-a-number", "raw/node-feat.csv.gz", "1,2,3,4,5\n1,2,abc,4,5\n", False,
     "node-feat.csv.gz:2: expected a number, found 'abc'"),
    ("feature-two-in-a-field", "raw/node-feat.csv.gz", "1,2,3,4,5\n1,2 3,4,5,6\n", False,
     "node-feat.csv.gz:2: expected a number, found '2 3'"),
    ("feature-short-row", "raw/node-feat.csv.gz", "1,2,3,4,5\n1,2,3,4\n", False,
     "node-feat.csv.gz:2: expected 5 comma-separated values"),
    ("feature-rows-missing", "raw/node-feat.csv.gz", "1,2,3,4,5\n", False, "1 feature rows for 300 vertices"),
    ("label-negative", "raw/node-label.csv.gz", "1\n-2\n", False,
     "node-label.csv.gz:2: expected a class number >= 0 or nan"),
    ("multi-task-labels", "raw/node-label.csv.gz", "1,0\n0,1\n", False, "multi-task datasets"),
]


@pytest.mark.parametrize("relative, text, truncate, message", [c[1:] for c in BAD_FILES],
                         ids=[c[0] for c in BAD_FILES])
def test_bad_file_is_named_with_its_line(tmp_path, relative, text, truncate, message):
    directory = write_csv_dataset(tmp_path / "ogbn_arxiv", make_dataset(7))
    corrupt(directory, relative, text, truncate=truncate)
    with pytest.raises(InputError) as caught:
        load_graph(str(directory))
    assert message in str(caught.value)
    assert str(directory) in str(caught.value)


@pytest.mark.parametrize("count_file", [True, False])
def test_a_forged_vertex_count_is_refused_before_allocating(tmp_path, count_file):
    directory = tmp_path / "ogbn_arxiv"
    write_gz(directory / "raw" / "edge.csv.gz", "0,1\n1,100000000000\n")
    if count_file:
        write_gz(directory / "raw" / "num-node-list.csv.gz", "100000000001\n")
    with pytest.raises(InputError, match=r"(100000000001 vertices|vertex id 100000000000): loading needs at least"):
        load_graph(str(directory))


def test_bad_binary_files(tmp_path):
    data = make_dataset(8)
    directory = write_binary_dataset(tmp_path / "ogbn_papers100M", data)
    raw = directory / "raw"
    np.savez_compressed(raw / "data.npz", edge_index=np.array([[0, 1], [1, 400]]), num_nodes_list=np.array([N]))
    with pytest.raises(InputError, match=r"data.npz: edge_index\[:, 1\] holds vertex id 400, outside 0..299"):
        load_graph(str(directory))
    np.savez_compressed(raw / "data.npz", edges=data.edges)
    with pytest.raises(InputError, match="data.npz: missing arrays edge_index, num_nodes_list"):
        load_graph(str(directory))
    np.savez_compressed(raw / "data.npz", edge_index=data.edges.T.copy(), num_nodes_list=np.array([10**11]))
    with pytest.raises(InputError, match="num_nodes_list 100000000000: loading needs at least"):
        load_graph(str(directory))
    (raw / "data.npz").write_bytes(b"PK not a zip")
    with pytest.raises(InputError, match="data.npz: not a readable .npz archive"):
        load_graph(str(directory))


def test_the_papers100m_job_sequence_reads_the_directory_ogb_leaves(tmp_path):
    """docs/scale.md partitions ogbn-papers100M as the `ogb` package leaves it (it once said that distgcn had no OGB
    reader and had the user convert the dataset first): the graph its partition job names is that directory."""
    import re

    from conftest import ROOT

    text = (ROOT / "docs" / "scale.md").read_text()
    assert "no OGB reader" not in text
    (named,) = set(re.findall(r"DISTGCN_GRAPH=([^,\s`]+)", text))
    data = make_dataset(6)
    graph = load_graph(str(write_binary_dataset(tmp_path / named, data)))
    assert graph.name == "ogbn-papers100M"
    check_graph(graph, data, undirected=False)
