"""``distgcn stats DIR...``: several partitions compared in one table, against oracles of their own.

The table's volume, messages and imbalance are checked against a brute-force count over Â and parts.npy,
the stochastic model's minibatch volume against the minibatches redrawn with its seed, and every value
against each directory's own ``stats DIR --json``. One directory's report is pinned by the golden strings below:
its figures as before several directories were accepted, its memory in units chosen by size and with the runtime
baseline added (distgcn/memory/baseline.py).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import random_edge_file

from distgcn.cli.main import main
from distgcn.cli.stats_tables import compare, format_bytes
from distgcn.config import SamplerSpec
from distgcn.data.prepare import GraphOptions, prepare_graph
from distgcn.partitioning.minibatch_metrics import minibatch_comm
from distgcn.sampling.reference.samplers import sampler_for

GRAPH = ["--symmetrize", "--features", "8", "--classes", "3"]
NAMES = ["random", "contiguous", "graph", "hypergraph", "stochastic"]
SAMPLES = 30
BIG_MODEL = ["--layers", "3", "--hidden", "2048,1024", "--dtype", "float64", "--optimizer", "sgd"]
"""Wide enough that the predicted memory is megabytes, so a column that ignored the options would show."""

GOLDEN_TEXT = """\
graph                g  (39 vertices, 263 nonzeros in Â)
partition            contiguous into 2 parts
partition time       0.25 s
volume (rows/SpMM)   total 38  avg 19.0  max sent 19  max received 19
messages (per SpMM)  total 2  avg 1.0  max sent 1  max received 1
connectivity-1       38
edge cut             53
load imbalance       1.019 (max/avg nonzeros per rank)

predicted peak memory per rank (2 layers, hidden 16, float32, adam):
  rank       rows  halo rows     nonzeros  GPU: distgcn  CPU: distgcn    CPU: total
     0         20         19          129      15.2 KiB      13.0 KiB     388.2 MiB
     1         19         19          134      15.0 KiB      12.9 KiB     388.2 MiB
'distgcn': the arrays distgcn allocates (on a GPU, in device memory); 'total': with the runtime baseline,
  388.2 MiB that a CPU rank holds before any data (the interpreter, torch, numpy, scipy, MPI and numba's compiled kernels),
  measured with torch 2.13.0+cpu, Python 3.11, MPICH 5.0, Linux x86_64, one thread per rank: python benchmarks/runtime_baseline.py
a GPU rank's runtime (the CUDA context, cuBLAS and cuSPARSE workspaces, NCCL's buffers) is not measured: leave room for it
"""
GOLDEN_JSON = (
    '{"parts": 2, "model": "contiguous", "partitioner": null, "preset": null, "epsilon": null, "seed": null, '
    '"volume": {"total": 38, "avg": 19.0, "max": 19}, "max_recv_volume": 19, "messages": {"total": 2, "avg": 1.0, '
    '"max": 1}, "max_recv_messages": 1, "imbalance": 1.0190114068441065, "connectivity_minus_one": 38, '
    '"edge_cut": 53, "partition_s": 0.25, "graph": {"name": "g", "n": 39, "nnz": 263, "fingerprint": '
    '"87cf0c0179cfb804b4e7e40a5e355e43"}, "memory": {"model": {"layers": 2, "hidden": [16], "dtype": "float32", '
    '"optimizer": "adam", "dropout": 0.5}, "ranks": [{"rank": 0, "rows": 20, "halo_rows": 19, "nnz": 129, '
    '"gpu_bytes": 15564, "cpu_bytes": 13324, "cpu_total_bytes": 407070527}, {"rank": 1, "rows": 19, "halo_rows": 19, '
    '"nnz": 134, "gpu_bytes": 15317, "cpu_bytes": 13213, "cpu_total_bytes": 407070416}], "runtime_baseline": '
    '{"cpu_bytes": 407057203, "gpu_bytes": null, "holds": "the interpreter, torch, numpy, scipy, MPI and numba\'s '
    'compiled kernels", "torch": "2.13.0+cpu", "measured_with": "Python 3.11, MPICH 5.0, Linux x86_64, one thread '
    'per rank", "command": "python benchmarks/runtime_baseline.py"}}}\n'
)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """Five partitions of one 39-vertex graph, one per model: P=3 (so that the largest sender and receiver
    differ), contiguous P=2 with its time fixed, for the golden output."""
    work = tmp_path_factory.mktemp("compare")
    graph = random_edge_file(work / "g.txt", 40, 120, seed=0)
    for name in NAMES[:4]:
        parts = "2" if name == "contiguous" else "3"
        assert main(["partition", graph, *GRAPH, "--parts", parts, "--model", name, "--out", str(work / name),
                     "--quiet"]) == 0
    assert main(["partition", graph, *GRAPH, "--parts", "3", "--model", "stochastic", "--sampler", "node",
                 "--batch-size", "8", "--shp-samples", str(SAMPLES), "--out", str(work / "stochastic"),
                 "--quiet"]) == 0
    meta_path = work / "contiguous" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["partition_s"] = 0.25  # meta.json is not checksummed; the shards and parts.npy are
    meta_path.write_text(json.dumps(meta))
    return work


@pytest.fixture
def cwd(workdir, monkeypatch) -> Path:
    """Run in the partitions' directory, so that they are named as a user names them: relative."""
    monkeypatch.chdir(workdir)
    return workdir


def stats(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["stats", *args])
    out, err = capsys.readouterr()
    return code, out, err


def table(text: str) -> list[dict[str, str]]:
    """The comparison's rows as {column: cell}; columns are at least two spaces apart, cells have single ones."""
    lines = text.split("\n\n", 1)[0].splitlines()
    header = re.split(r"\s{2,}", lines[0].strip())
    rows = [re.split(r"\s{2,}", line.strip()) for line in lines[1:]]
    assert all(len(row) == len(header) for row in rows), text
    return [dict(zip(header, row)) for row in rows]


def brute_force(a_hat, parts: np.ndarray, nparts: int) -> dict:
    """Rows and messages sent per SpMM, and the nonzero imbalance, by loops over Â's nonzeros."""
    dense = a_hat.toarray()
    sends = {(u, int(parts[v])) for v in range(dense.shape[0]) for u in range(dense.shape[1])
             if dense[v, u] != 0 and parts[u] != parts[v]}
    sent = [sum(1 for u, _ in sends if parts[u] == p) for p in range(nparts)]
    pairs = {(int(parts[u]), dest) for u, dest in sends}
    messages = [sum(1 for src, _ in pairs if src == p) for p in range(nparts)]
    nonzeros = [int(np.count_nonzero(dense[parts == p])) for p in range(nparts)]
    return {"volume": sum(sent), "vol max": max(sent), "messages": len(pairs), "msg max": max(messages),
            "imbalance": max(nonzeros) / (sum(nonzeros) / nparts)}


def test_one_directory_prints_what_it_printed_before(cwd, capsys):
    assert stats(capsys, "contiguous") == (0, GOLDEN_TEXT, "")
    assert stats(capsys, "contiguous", "--json") == (0, GOLDEN_JSON, "")


def test_table_has_each_directory_stats_json_values(cwd, capsys):
    code, out, err = stats(capsys, *NAMES, *BIG_MODEL)
    assert code == 0 and err == ""
    rows = table(out)
    assert [row["partition"] for row in rows] == NAMES
    for row in rows:
        code, single, _ = stats(capsys, row["partition"], "--json", *BIG_MODEL)
        assert code == 0
        s = json.loads(single)
        assert row["model"] == (f"{s['model']} ({s['partitioner']})" if s["partitioner"] else s["model"])
        assert row["P"] == str(s["parts"])
        assert (row["volume"], row["vol max"]) == (str(s["volume"]["total"]), str(s["volume"]["max"]))
        assert (row["messages"], row["msg max"]) == (str(s["messages"]["total"]), str(s["messages"]["max"]))
        assert row["imbalance"] == f"{s['imbalance']:.3f}"
        for column, key in (("GPU: distgcn", "gpu_bytes"), ("CPU: distgcn", "cpu_bytes"),
                            ("CPU: total", "cpu_total_bytes")):
            assert row[column] == format_bytes(max(r[key] for r in s["memory"]["ranks"]))
        assert all(r["cpu_total_bytes"] == r["cpu_bytes"] + s["memory"]["runtime_baseline"]["cpu_bytes"]
                   for r in s["memory"]["ranks"])
    assert rows[0]["GPU: distgcn"].endswith(" MiB")  # the options reached the prediction
    assert "3 layers, hidden 2048,1024, float64, sgd" in out


def test_table_counts_equal_a_brute_force_count_over_the_edges(cwd, capsys):
    _, a_hat = prepare_graph(GraphOptions(spec="g.txt", symmetrize=True, features=8, classes=3, seed=0))
    rows = table(stats(capsys, *NAMES)[1])
    for row in rows:
        expected = brute_force(a_hat, np.load(cwd / row["partition"] / "parts.npy"), int(row["P"]))
        assert {key: row[key] for key in ("volume", "vol max", "messages", "msg max")} == \
            {key: str(expected[key]) for key in ("volume", "vol max", "messages", "msg max")}, row["partition"]
        assert row["imbalance"] == f"{expected['imbalance']:.3f}"
    assert len({row["volume"] for row in rows}) > 1  # the partitions differ, so a row mix-up would show


def test_stochastic_columns_equal_its_redrawn_minibatches(cwd, capsys):
    """The minibatch volume is the mean volume of the SAMPLES minibatches the model drew (seed 0)."""
    _, a_hat = prepare_graph(GraphOptions(spec="g.txt", symmetrize=True, features=8, classes=3, seed=0))
    sampler = sampler_for(SamplerSpec("node", 8), a_hat)
    rng = np.random.default_rng(0)
    subgraphs = [sampler.sample(rng) for _ in range(SAMPLES)]
    volume, _ = minibatch_comm(subgraphs, np.load(cwd / "stochastic" / "parts.npy"), 3)
    assert volume.mean() > 0
    assert compare(["stochastic"])[0].minibatch_volume == pytest.approx(volume.mean())
    rows = {row["partition"]: row for row in table(stats(capsys, *NAMES)[1])}
    shp = rows.pop("stochastic")
    assert (shp["sampler"], shp["samples"], shp["minibatch vol"]) == ("node (batch 8)", str(SAMPLES),
                                                                       f"{volume.mean():.1f}")
    for row in rows.values():
        assert (row["sampler"], row["samples"], row["minibatch vol"]) == ("-", "-", "-")


def test_json_is_the_list_of_each_directory_json(cwd, capsys):
    code, out, err = stats(capsys, *NAMES, "--json", "--hidden", "64")
    singles = [stats(capsys, name, "--json", "--hidden", "64")[1] for name in NAMES]
    assert (code, err) == (0, "")
    assert out == "[" + ", ".join(single.rstrip("\n") for single in singles) + "]\n"
    assert [s["model"] for s in json.loads(out)] == NAMES


def _shard_of_another_partition(directory: Path, other: Path) -> None:
    shutil.copyfile(other / "shard-00001.npz", directory / "shard-00001.npz")


def _parts_changed(directory: Path, other: Path) -> None:
    parts = np.load(directory / "parts.npy")
    np.save(directory / "parts.npy", 1 - parts)


def _sampler_of_wrong_type(directory: Path, other: Path) -> None:
    meta = json.loads((directory / "meta.json").read_text())
    meta["sampler"] = "node"
    (directory / "meta.json").write_text(json.dumps(meta))


def _schema_broken(directory: Path, other: Path) -> None:
    meta = json.loads((directory / "meta.json").read_text())
    meta["parts"] = "two"
    (directory / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("damage", [_shard_of_another_partition, _parts_changed, _sampler_of_wrong_type,
                                    _schema_broken])
@pytest.mark.parametrize("position", [0, -1])
def test_a_damaged_directory_is_refused_in_one_line_before_any_output(cwd, capsys, damage, position):
    shutil.copytree(cwd / "stochastic", cwd / "bad")
    try:
        damage(cwd / "bad", cwd / "graph")
        names = ["graph", "hypergraph"]
        names.insert(len(names) if position == -1 else 0, "bad")
        for extra in ([], ["--json"]):
            code, out, err = stats(capsys, *names, *extra)
            assert (code, out) == (2, "")
            assert err.startswith("distgcn: error: bad") and err.count("\n") == 1, err
    finally:
        shutil.rmtree(cwd / "bad")


def test_a_directory_that_is_not_a_partition_is_refused(cwd, capsys):
    (cwd / "empty").mkdir(exist_ok=True)
    for names in (["graph", "empty"], ["missing", "graph"]):
        code, out, err = stats(capsys, *names)
        assert (code, out) == (2, "")
        assert err == f"distgcn: error: {[n for n in names if n != 'graph'][0]}: not a partition directory " \
                      "(no meta.json)\n"
