"""``distgcn partition`` / ``stats`` / ``train DIR``: the offline hand-off, checked end to end.

The runtime's measured traffic must equal the partition's predicted metrics,
exactly, for every model. Runs are on in-process ranks, except where the real
launcher is part of the claim (rank 0 scattering to MPI processes, a job of the
wrong size).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import distgcn_in_process, run_distgcn

from distgcn.config import PartitionerConfig
from distgcn.data.prepare import GraphOptions
from distgcn.shard.write import write_partition


@pytest.fixture(scope="module")
def graphs(tmp_path_factory) -> dict[str, str]:
    """A directed and an undirected seeded random graph as SNAP edge lists."""
    rng = np.random.default_rng(5)
    out = {}
    base = tmp_path_factory.mktemp("graphs")
    for name, directed in (("directed", True), ("undirected", False)):
        n, m = 160, 600
        src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
        path = base / f"{name}.txt"
        path.write_text("".join(f"{s} {d}\n" for s, d in zip(src, dst) if s != d))
        out[name] = str(path)
    return out


def options(spec: str, directed: bool) -> GraphOptions:
    return GraphOptions(spec=spec, symmetrize=not directed, features=6, classes=3, seed=1)


MODELS = ["random", "contiguous", "graph", "hypergraph", "external"]


@pytest.mark.parametrize("graph_name", ["directed", "undirected"])
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_training_traffic_equals_prediction(tmp_path, graphs, graph_name, model, ranks):
    spec = graphs[graph_name]
    parts_file = None
    if model == "external":
        n = len(np.unique(np.loadtxt(spec, dtype=np.int64)))
        parts_file = tmp_path / "parts.txt"
        parts_file.write_text("\n".join(str(p) for p in np.random.default_rng(2).integers(0, ranks, n)) + "\n")
    meta = write_partition(options(spec, graph_name == "directed"), tmp_path / "part", ranks,
                           PartitionerConfig(model, parts_file=str(parts_file) if parts_file else None), quiet=True)
    metrics = tmp_path / "m.jsonl"
    proc = distgcn_in_process(["train", str(tmp_path / "part"), "--epochs", "2", "--metrics", str(metrics),
                               "--quiet"], ranks=ranks)
    assert proc.returncode == 0, proc.stderr
    for record in map(json.loads, metrics.read_text().splitlines()):
        assert record["spmm_exchanges"] > 0
        assert record["halo_rows"] == meta["volume"]["total"] * record["spmm_exchanges"]
        assert record["messages"] == meta["messages"]["total"] * record["spmm_exchanges"]


def test_directory_training_equals_graph_training(tmp_path, graphs):
    """Shards written to disk and shards sent by rank 0 give the same run.

    The directory run is on in-process ranks; rank 0 sends the shards to real MPI processes."""
    spec = graphs["directed"]
    opts = GraphOptions(spec=spec, features=6, classes=3, seed=4)
    write_partition(opts, tmp_path / "part", 3, PartitionerConfig("random", seed=4), quiet=True)
    common = ["--epochs", "3", "--dtype", "float64", "--seed", "4", "--quiet"]
    a = distgcn_in_process(["train", str(tmp_path / "part"), *common, "--metrics", str(tmp_path / "a.jsonl")],
                           ranks=3)
    b = run_distgcn(["train", "--graph", spec, "--features", "6", "--classes", "3", "--partition", "random",
                     *common, "--metrics", str(tmp_path / "b.jsonl")], ranks=3)
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    la = [json.loads(x)["loss"] for x in (tmp_path / "a.jsonl").read_text().splitlines()]
    lb = [json.loads(x)["loss"] for x in (tmp_path / "b.jsonl").read_text().splitlines()]
    assert len(la) == 3
    np.testing.assert_allclose(la, lb, rtol=1e-12)


def test_partition_directory_contents_and_stats(tmp_path, graphs):
    out = tmp_path / "part"
    proc = distgcn_in_process(["partition", graphs["undirected"], "--symmetrize", "--features", "6", "--classes",
                               "3", "--parts", "4", "--model", "graph", "--seed", "2", "--out", str(out)])
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((out / "meta.json").read_text())
    for key in ("partition_id", "parts", "model", "partitioner", "epsilon", "seed", "partition_s",
                "tool_versions", "volume", "messages", "imbalance", "connectivity_minus_one", "shards"):
        assert key in meta, key
    assert meta["graph"]["fingerprint"] and meta["graph"]["n"] == len(np.load(out / "parts.npy"))
    assert sorted(p.name for p in out.glob("shard-*.npz")) == [f"shard-0000{r}.npz" for r in range(4)]
    stats = distgcn_in_process(["stats", str(out), "--json"])
    assert stats.returncode == 0, stats.stderr
    s = json.loads(stats.stdout)
    assert s["parts"] == 4 and s["model"] == "graph" and s["partitioner"] == "metis"
    assert set(s["volume"]) >= {"total", "avg", "max"} and set(s["messages"]) >= {"total", "avg", "max"}
    assert s["volume"]["total"] == meta["connectivity_minus_one"]
    table = distgcn_in_process(["stats", str(out)])
    assert "connectivity-1" in table.stdout and "imbalance" in table.stdout


def test_existing_output_is_not_overwritten(tmp_path, graphs):
    out = tmp_path / "precious"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    proc = run_distgcn(["partition", graphs["directed"], "--features", "6", "--classes", "3", "--parts", "2",
                        "--model", "random", "--out", str(out)])
    assert proc.returncode == 2 and "--force" in proc.stderr
    assert (out / "keep.txt").read_text() == "mine"


@pytest.fixture()
def partition_dir(tmp_path, graphs):
    write_partition(options(graphs["directed"], True), tmp_path / "part", 2, "random", quiet=True)
    return tmp_path / "part"


def test_wrong_rank_count_is_refused(partition_dir):
    proc = run_distgcn(["train", str(partition_dir), "--epochs", "1"], ranks=3, timeout=60)
    assert proc.returncode == 2
    assert "2 parts but the job has 3 ranks" in proc.stderr and "Traceback" not in proc.stderr


def test_corrupt_shard_is_refused(partition_dir):
    shard = partition_dir / "shard-00001.npz"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    proc = distgcn_in_process(["train", str(partition_dir), "--epochs", "1"], ranks=2)
    assert proc.returncode == 2, proc.stderr
    assert "shard-00001.npz" in proc.stderr and "Traceback" not in proc.stderr


def test_shard_from_another_partition_is_refused(tmp_path, graphs, partition_dir):
    write_partition(options(graphs["directed"], True), tmp_path / "other", 2, "contiguous", quiet=True)
    (partition_dir / "shard-00000.npz").write_bytes((tmp_path / "other" / "shard-00000.npz").read_bytes())
    proc = distgcn_in_process(["train", str(partition_dir), "--epochs", "1"], ranks=2)
    assert proc.returncode == 2
    assert "another partition" in proc.stderr and "shard-00000.npz" in proc.stderr


def test_the_usage_shows_what_the_stochastic_model_requires():
    """argparse cannot mark --sampler and --batch-size required for one model: a second synopsis does, unbracketed."""
    from distgcn.cli.main import build_parser
    from distgcn.cli.reference import _subcommands

    usage = " ".join(_subcommands(build_parser())["partition"].format_usage().split())
    first, stochastic = usage.removeprefix("usage: ").split(" distgcn partition ", 1)
    assert first.startswith("distgcn partition [-h] --parts P") and first.endswith("GRAPH")
    assert stochastic == "--model stochastic --sampler {node,edge,rw,frontier} --batch-size N [options] --parts P " \
                         "--out DIR GRAPH"
