"""The Python API (docs/api.md): conversions, partition and training equal to the command line, exports.

The in-process tests run as one rank (mpi4py's singleton), the command line
they are compared with runs in this process too (``train`` on one in-process
rank). The export test runs tests/mpi_scripts/api_export.py on in-process
ranks (threads, each passing its transport) and once under ``mpiexec -n 2``.
The example in docs/api.md is run as written.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from conftest import ROOT, mpiexec, run_distgcn_in_process

import distgcn
from distgcn.cli.main import main
from distgcn.cli.stats_tables import stats_json
from distgcn.config import ConfigError
from distgcn.data.graph import Graph, normalized_adjacency
from distgcn.errors import InputError

SPEC = "synthetic:sbm,n=240,classes=3,features=8,avg_degree=6"
MASKS = ("train_mask", "val_mask", "test_mask")


def python_env() -> dict[str, str]:
    """The environment run_distgcn gives the CLI, for Python scripts run in a subprocess."""
    path = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}


def random_graph(n: int = 30, seed: int = 0) -> tuple[sp.csr_matrix, Graph]:
    """A directed graph with self loops and duplicates in its input, and full vertex data."""
    rng = np.random.default_rng(seed)
    rows, cols = rng.integers(0, n, 4 * n), rng.integers(0, n, 4 * n)
    raw = sp.coo_matrix((rng.random(4 * n) + 0.5, (rows, cols)), shape=(n, n))
    split = rng.integers(0, 3, n)
    graph = distgcn.from_scipy(raw, rng.normal(size=(n, 5)), rng.integers(0, 4, n),
                               train_mask=split == 0, val_mask=split == 1, test_mask=split == 2,
                               vertex_ids=np.arange(n) * 10 + 7)
    return raw.tocsr(), graph


def assert_same_graph(a: Graph, b: Graph) -> None:
    assert (a.adj != b.adj).nnz == 0 and a.adj.shape == b.adj.shape
    np.testing.assert_array_equal(a.vertex_ids, b.vertex_ids)
    for key in ("features", "labels", *MASKS):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key), err_msg=key)


def test_scipy_round_trip_keeps_pattern_direction_and_data():
    raw, graph = random_graph()
    expected = (raw != 0).astype(np.float64).tolil()
    expected.setdiag(0)
    expected = expected.tocsr()
    expected.eliminate_zeros()
    adj = distgcn.to_scipy(graph)
    assert (adj != expected).nnz == 0 and set(adj.data) == {1.0}
    assert (distgcn.to_scipy(graph, normalized=True) != normalized_adjacency(graph.adj)).nnz == 0
    assert_same_graph(graph, distgcn.from_scipy(adj, graph.features, graph.labels, train_mask=graph.train_mask,
                                                val_mask=graph.val_mask, test_mask=graph.test_mask,
                                                vertex_ids=graph.vertex_ids))
    assert graph.features.dtype == np.float32 and graph.labels.dtype == np.int64


def test_from_scipy_refuses_mismatched_data():
    adj = sp.csr_matrix(np.array([[0, 1], [1, 0]]))
    with pytest.raises(InputError, match="features must be a numeric"):
        distgcn.from_scipy(adj, np.zeros((3, 2)))
    with pytest.raises(InputError, match="train_mask must be 2 booleans"):
        distgcn.from_scipy(adj, train_mask=np.array([1, 0]))
    with pytest.raises(InputError, match="no edges"):
        distgcn.from_scipy(sp.csr_matrix((2, 2)))


def test_networkx_round_trip_and_edge_direction():
    _, graph = random_graph(seed=1)
    g = distgcn.to_networkx(graph)
    assert g.is_directed() and g.number_of_nodes() == graph.num_vertices
    assert g.number_of_edges() == graph.num_edges
    v, u = graph.adj.nonzero()  # v aggregates from u: a networkx edge u -> v
    assert g.has_edge(int(graph.vertex_ids[u[0]]), int(graph.vertex_ids[v[0]]))
    assert_same_graph(graph, distgcn.from_networkx(g))


def test_from_networkx_undirected_and_non_integer_nodes():
    import networkx as nx

    g = nx.Graph([("b", "a"), ("a", "c")])
    graph = distgcn.from_networkx(g)
    np.testing.assert_array_equal(graph.vertex_ids, [0, 1, 2])  # g.nodes order: b, a, c
    np.testing.assert_array_equal(graph.adj.toarray(), [[0, 1, 0], [1, 0, 1], [0, 1, 0]])
    assert graph.features is None and graph.labels is None
    g.nodes["a"]["y"] = 1
    with pytest.raises(InputError, match="'y' is on 1 of 3 nodes"):
        distgcn.from_networkx(g)


class FakeData:
    """The fields of torch_geometric.data.Data that from_pyg reads (stands in when PyG is absent)."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


def pyg_fields(n: int = 5) -> dict:
    return {"edge_index": torch.tensor([[0, 1, 1, 3, 2], [1, 0, 2, 4, 2]]), "num_nodes": n,
            "x": torch.arange(n * 2, dtype=torch.float32).reshape(n, 2), "y": torch.tensor([[0], [1], [1], [0], [2]]),
            "train_mask": torch.tensor([True, True, False, False, False]),
            "val_mask": torch.tensor([False, False, True, False, False]),
            "test_mask": torch.tensor([False, False, False, True, True])}


def check_pyg_graph(graph: Graph) -> None:
    # source -> target: target aggregates from source; the self loop 2 -> 2 is dropped.
    expected = np.zeros((5, 5))
    expected[[1, 0, 2, 4], [0, 1, 1, 3]] = 1
    np.testing.assert_array_equal(graph.adj.toarray(), expected)
    np.testing.assert_array_equal(graph.labels, [0, 1, 1, 0, 2])
    np.testing.assert_array_equal(graph.features, np.arange(10).reshape(5, 2))
    np.testing.assert_array_equal(graph.test_mask, [False, False, False, True, True])


def test_from_pyg_reads_the_documented_fields(monkeypatch):
    """Against a stand-in torch_geometric.data module: the conversion logic, without PyG installed."""
    fake = types.ModuleType("torch_geometric.data")
    fake.Data = FakeData
    monkeypatch.setitem(sys.modules, "torch_geometric", types.ModuleType("torch_geometric"))
    monkeypatch.setitem(sys.modules, "torch_geometric.data", fake)
    check_pyg_graph(distgcn.from_pyg(FakeData(**pyg_fields())))
    with pytest.raises(InputError, match="expects a torch_geometric.data.Data"):
        distgcn.from_pyg(object())


def test_from_pyg_with_pytorch_geometric():
    data_module = pytest.importorskip("torch_geometric.data", reason="torch_geometric is not installed "
                                      "(optional: pip install torch_geometric)")
    check_pyg_graph(distgcn.from_pyg(data_module.Data(**pyg_fields())))


def test_pyg_data_goes_to_partition_and_train_directly():
    """A Data object as OGB's PyG datasets give it (float y, NaN unknown): no file round trip."""
    data_module = pytest.importorskip("torch_geometric.data", reason="torch_geometric is not installed "
                                      "(optional: pip install torch_geometric)")
    n = 8
    sources, targets = [0, 1, 2, 3, 4, 5, 6, 7, 2], [1, 2, 3, 4, 5, 6, 7, 0, 6]
    y = torch.tensor([[0.0], [1.0], [float("nan")], [2.0], [1.0], [0.0], [float("nan")], [2.0]])
    train = torch.tensor([True, True, True, False, False, False, True, False])
    data = data_module.Data(edge_index=torch.tensor([sources, targets]), num_nodes=n,
                            x=torch.eye(n, 3, dtype=torch.float32), y=y, train_mask=train,
                            val_mask=torch.tensor([False] * 3 + [True, True] + [False] * 3),
                            test_mask=torch.tensor([False] * 5 + [True, False, True]))
    split = distgcn.partition(data, 2, "random", feature_norm="none")
    expected = np.zeros((n, n))
    expected[targets, sources] = 1  # the target aggregates from the source
    np.testing.assert_array_equal(split.graph.adj.toarray(), expected)
    np.testing.assert_array_equal(split.graph.labels, [0, 1, -1, 2, 1, 0, -1, 2])
    np.testing.assert_array_equal(split.graph.features, np.eye(n, 3))
    np.testing.assert_array_equal(split.graph.train_mask, [True, True, False, False, False, False, False, False])
    assert split.graph.val_mask.sum() == 2 and split.graph.test_mask.tolist()[5:] == [True, False, True]
    runs = [distgcn.train(source, epochs=2, threads=1, seed=0) for source in (data, distgcn.from_pyg(data))]
    losses = [[r["loss"] for r in run.history] for run in runs]
    assert len(losses[0]) == 2 and losses[0] == losses[1]


def test_from_pyg_without_pytorch_geometric_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_geometric", None)
    monkeypatch.setitem(sys.modules, "torch_geometric.data", None)
    with pytest.raises(ImportError, match="pip install torch_geometric"):
        distgcn.from_pyg(FakeData(**pyg_fields()))


def without_time(stats: dict) -> dict:
    return {k: v for k, v in stats.items() if k != "partition_s"}


def test_partition_equals_the_command_line(tmp_path, capsys):
    assert main(["partition", SPEC, "--parts", "3", "--model", "graph", "--seed", "2", "--quiet",
                 "--out", str(tmp_path / "cli")]) == 0, capsys.readouterr().err
    split = distgcn.partition(distgcn.load_graph(SPEC, seed=2), 3, model="graph", seed=2)
    meta = split.write(tmp_path / "api")
    assert meta["partition_id"] == split.partition_id
    capsys.readouterr()
    assert main(["stats", str(tmp_path / "api"), "--json"]) == 0
    shown = capsys.readouterr()
    assert without_time(json.loads(shown.out)) == without_time(json.loads(json.dumps(stats_json(tmp_path / "cli"))))
    cli_meta = json.loads((tmp_path / "cli" / "meta.json").read_text())
    assert meta["partition_id"] == cli_meta["partition_id"]
    assert {k: split.metrics[k] for k in ("volume", "messages", "edge_cut")} == \
        {k: cli_meta[k] for k in ("volume", "messages", "edge_cut")}
    np.testing.assert_array_equal(np.load(tmp_path / "api" / "parts.npy"), np.load(tmp_path / "cli" / "parts.npy"))
    with pytest.raises(InputError, match="holds an earlier partition directory"):
        split.write(tmp_path / "api")


def test_training_equals_the_command_line_and_predictions_match_its_accuracy(tmp_path):
    metrics = tmp_path / "m.jsonl"
    assert run_distgcn_in_process(["train", "--graph", SPEC, "--epochs", "6", "--threads", "1", "--seed", "3",
                                   "--quiet", "--metrics", str(metrics)], 1) == [0]
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    result = distgcn.train(SPEC, epochs=6, threads=1, seed=3)
    assert [r["loss"] for r in result.history] == [r["loss"] for r in records]
    assert [r["test_acc"] for r in result.history] == [r["test_acc"] for r in records]

    graph = distgcn.load_graph(SPEC, seed=3)
    predicted = result.predict()
    np.testing.assert_array_equal(predicted.ids, np.arange(graph.num_vertices))
    hits = predicted.values == graph.labels
    assert hits[graph.test_mask].mean() == pytest.approx(records[-1]["test_acc"], abs=1e-12)
    assert result.embeddings().values.shape == (graph.num_vertices, 16)
    assert result.embeddings(layer=2).values.shape == (graph.num_vertices, 3)
    assert (result.embeddings(layer=1).values >= 0).all()  # after ReLU
    assert [w.shape for w in result.weights] == [(8, 16), (16, 3), (16,), (3,)]
    with pytest.raises(InputError, match="layer must be 1..2"):
        result.embeddings(layer=3)


def test_every_kind_of_source_trains_the_same_model():
    """A Graph (left unmodified), a spec, GraphOptions and a Partition give the same run on one rank."""
    graph = distgcn.load_graph(SPEC, seed=1)
    features = graph.features.copy()
    runs = [distgcn.train(source, epochs=3, seed=1, threads=1)
            for source in (graph, SPEC, distgcn.GraphOptions(SPEC, seed=1), distgcn.partition(graph, 1, seed=1))]
    np.testing.assert_array_equal(graph.features, features)
    losses = [[r["loss"] for r in run.history] for run in runs]
    assert all(run_losses == losses[0] for run_losses in losses)


def test_training_refuses_bad_settings_and_a_partition_of_another_size():
    with pytest.raises(ConfigError, match=r"^train\.hidden: expected 1 or 2 widths for 3 layers, got 3$") as refused:
        distgcn.train(SPEC, layers=3, hidden=(8, 8, 8), epochs=1)
    assert refused.value.field == "train.hidden"
    with pytest.raises(ConfigError, match="minibatch training needs train.first_layer exact"):
        distgcn.train(SPEC, sampler="node", batch_size=10, first_layer="cached", epochs=1)
    with pytest.raises(ConfigError, match="minibatch.batch_size needs minibatch.sampler"):
        distgcn.train(SPEC, batch_size=10, epochs=1)
    with pytest.raises(ConfigError, match="outputs.resume and outputs.checkpoint_every need outputs.checkpoint_dir"):
        distgcn.train(SPEC, resume=True, epochs=1)
    with pytest.raises(ConfigError, match=r"compute\.threads: expected a positive integer, got 0"):
        distgcn.train(SPEC, threads=0, epochs=1)
    with pytest.raises(InputError, match="the Partition has 2 parts but the job has 1 ranks"):
        distgcn.train(distgcn.partition(SPEC, 2), epochs=1)


@pytest.mark.parametrize("seed", [10**23, -1])
def test_seeds_out_of_range_name_their_keyword(seed):
    """A seed that a partitioner's 32-bit C int (or torch's generator) cannot take is refused before use."""
    with pytest.raises(ConfigError, match=rf"^partition\.seed: expected an integer in 0\.\.2147483647 .*got {seed}$"):
        distgcn.partition(SPEC, 2, seed=seed)
    with pytest.raises(ConfigError, match=rf"^train\.seed: expected an integer in 0\.\.2147483647 .*got {seed}$"):
        distgcn.train(SPEC, seed=seed, epochs=1)


def test_minibatch_training_equals_the_command_line(tmp_path):
    """Sampler, halo exchange options, threads, kernel, metrics file and weights: the same run both ways."""
    options = ["--sampler", "rw", "--batch-size", "60", "--walk-length", "3", "--batches-per-epoch", "2",
               "--norm-samples", "4", "--spmm-kernel", "scipy"]
    weights = tmp_path / "cli.npz"
    assert run_distgcn_in_process(["train", "--graph", SPEC, "--epochs", "3", "--threads", "1", "--seed", "2",
                                   "--quiet", *options, "--metrics", str(tmp_path / "cli.jsonl"),
                                   "--save-weights", str(weights)], 1) == [0]
    result = distgcn.train(SPEC, epochs=3, threads=1, seed=2, sampler="rw", batch_size=60, walk_length=3,
                           batches_per_epoch=2, norm_samples=4, spmm_kernel="scipy",
                           metrics=tmp_path / "api.jsonl", save_weights=tmp_path / "api.npz")
    records = [json.loads(line) for line in (tmp_path / "cli.jsonl").read_text().splitlines()]
    api_records = [json.loads(line) for line in (tmp_path / "api.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in result.history] == [r["loss"] for r in records] == [r["loss"] for r in api_records]
    assert [[i["loss"] for i in r["iterations"]] for r in result.history] == \
        [[i["loss"] for i in r["iterations"]] for r in records]
    run = {key: value for key, value in records[0]["run"].items() if key != "backend"}  # in-process vs MPI
    assert {key: value for key, value in api_records[0]["run"].items() if key != "backend"} == run
    assert run["minibatch"]["options"] == {"walk_length": 3} and run["spmm_kernel"] == "scipy"
    with np.load(weights) as cli, np.load(tmp_path / "api.npz") as api:
        assert cli.files == api.files
        for key in cli.files:
            np.testing.assert_array_equal(cli[key], api[key])


def test_checkpoint_resume_equals_the_command_line(tmp_path, capsys):
    """Checkpoints written by the API resume from the command line, and the other way round, as one run."""
    base = ["train", "--graph", SPEC, "--threads", "1", "--quiet", "--checkpoint-every", "1"]
    cli_dir, api_dir = tmp_path / "cli", tmp_path / "api"
    assert run_distgcn_in_process([*base, "--epochs", "2", "--checkpoint-dir", str(cli_dir)], 1) == [0]
    resumed = distgcn.train(SPEC, epochs=5, threads=1, checkpoint_dir=cli_dir, checkpoint_every=1, resume=True)
    assert "resuming after epoch 2" in capsys.readouterr().out
    assert [r["epoch"] for r in resumed.history] == [3, 4, 5]

    distgcn.train(SPEC, epochs=2, threads=1, checkpoint_dir=api_dir, checkpoint_every=1)
    assert run_distgcn_in_process([*base, "--epochs", "5", "--checkpoint-dir", str(api_dir), "--resume",
                                   "--metrics", str(tmp_path / "m.jsonl")], 1) == [0]
    from_cli = [json.loads(line)["loss"] for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    whole = distgcn.train(SPEC, epochs=5, threads=1)
    assert [r["loss"] for r in resumed.history] == from_cli == [r["loss"] for r in whole.history[2:]]


def test_api_reaches_the_exchange_options():
    """first_layer, comm and halo_dtype are the command line's: cached and broadcast change only the traffic."""
    exact = distgcn.train(SPEC, epochs=2, threads=1, dtype="float64")
    broadcast = distgcn.train(SPEC, epochs=2, threads=1, dtype="float64", comm="broadcast")
    np.testing.assert_allclose([r["loss"] for r in broadcast.history], [r["loss"] for r in exact.history],
                               rtol=1e-12)
    cached = distgcn.train(SPEC, epochs=2, threads=1, first_layer="cached", halo_dtype="float16")
    assert len(cached.history) == 2


def api_export_script() -> types.ModuleType:
    """tests/mpi_scripts/api_export.py as a module (the directory is not a package)."""
    spec = importlib.util.spec_from_file_location("api_export", ROOT / "tests" / "mpi_scripts" / "api_export.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("ranks", [2, 3])
def test_export_gathered_equals_per_rank(tmp_path, ranks):
    """P in-process ranks: the gathered file is the per-rank files merged, and matches one process's outputs."""
    from distgcn.comm.transport.inprocess import run_ranks

    export_runs = api_export_script().export_runs
    partdir = tmp_path / "part"
    distgcn.partition(SPEC, ranks, model="hypergraph", preset="deterministic").write(partdir)
    threads = torch.get_num_threads()
    try:  # the API sets torch's threads per call, but they are the process's: the rank threads share them
        run_ranks(ranks, lambda transport: export_runs(transport, tmp_path, SPEC, str(partdir), 4))
    finally:
        torch.set_num_threads(threads)
    check_export(tmp_path, partdir, ranks)


def test_export_gathered_equals_per_rank_under_mpiexec(tmp_path):
    """Two ranks under mpiexec, each with the API's default transport."""
    partdir = tmp_path / "part"
    distgcn.partition(SPEC, 2, model="hypergraph", preset="deterministic").write(partdir)
    proc = subprocess.run([mpiexec(), "-n", "2", sys.executable, "-m", "mpi4py",
                           str(ROOT / "tests" / "mpi_scripts" / "api_export.py"), str(tmp_path), SPEC, str(partdir),
                           "4"], capture_output=True, text=True, timeout=300, env=python_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check_export(tmp_path, partdir, 2)


def check_export(out: Path, partdir: Path, ranks: int) -> None:
    """What api_export.py wrote to ``out``: per-rank pieces of the partition, their gathered merge, equal runs."""
    with np.load(out / "gathered.npz") as f:
        gathered = {k: f[k] for k in f.files}
    pieces = []
    for rank in range(ranks):
        with np.load(out / "ranks" / f"rank-{rank:05d}.npz") as f:
            pieces.append({k: f[k] for k in f.files})
    parts = np.load(partdir / "parts.npy")
    for rank, piece in enumerate(pieces):
        np.testing.assert_array_equal(piece["ids"], np.flatnonzero(parts == rank))
    order = np.argsort(np.concatenate([p["ids"] for p in pieces]))
    for key in ("ids", "predictions", "logits", "embeddings"):
        np.testing.assert_array_equal(gathered[key], np.concatenate([p[key] for p in pieces])[order], err_msg=key)
    np.testing.assert_array_equal(gathered["ids"], np.arange(240))
    assert int(gathered["embedding_layer"]) == 1 and gathered["embeddings"].shape == (240, 16)

    losses = json.loads((out / "losses.json").read_text())
    assert losses["ranks"] == ranks and losses["graph"] == losses["directory"]
    single = distgcn.train(SPEC, epochs=4, dtype="float64", threads=1)
    np.testing.assert_allclose(losses["graph"], [r["loss"] for r in single.history], rtol=1e-10)
    np.testing.assert_allclose(gathered["logits"], single.layer_outputs[-1], rtol=1e-8, atol=1e-10)


def test_the_example_in_docs_api_md_runs(tmp_path):
    text = (ROOT / "docs" / "api.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "docs/api.md has no python example"
    script = tmp_path / "example.py"
    script.write_text("\n".join(blocks))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env=python_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with np.load(tmp_path / "sbm-predictions.npz") as exported:
        assert exported["ids"].tolist() == list(range(1000))
