"""``mpiexec -n P distgcn partition --central``: rank 0 reads and partitions, every rank cuts and writes its own
shard (distgcn/shard/rank_shards.py).

The directory the ranks write must be the one a single process writes: the
same part vector, the same shards array by array, the same meta.json but for
the partitioner's timings. A failing rank must end every rank, non-zero, and
leave nothing behind.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import distgcn_in_process, random_edge_file, run_distgcn

from distgcn.comm.transport.inprocess import run_ranks
from distgcn.config import PartitionerConfig
from distgcn.data.prepare import GraphOptions
from distgcn.runtime.faults import FAIL_SHARD_ENV, InjectedFailure, inject_shard_fault
from distgcn.shard import rank_shards
from distgcn.shard.directory import read_meta
from distgcn.shard.rank_shard import Shard
from distgcn.shard.write import write_partition


def timeless_meta(directory: Path) -> dict:
    """meta.json without the partitioner's running time (the one field two runs may not share)."""
    meta = json.loads((directory / "meta.json").read_text())
    meta.pop("partition_s")
    meta["partition_info"].pop("partition_s")
    return meta


def assert_same_directory(expected: Path, found: Path) -> None:
    assert sorted(p.name for p in found.iterdir()) == sorted(p.name for p in expected.iterdir())
    assert timeless_meta(found) == timeless_meta(expected)
    assert (found / "parts.npy").read_bytes() == (expected / "parts.npy").read_bytes()
    meta = read_meta(found)
    for entry in meta["shards"]:
        want = Shard.load(expected / entry["file"]).to_arrays()
        got = Shard.load(found / entry["file"]).to_arrays()
        assert sorted(got) == sorted(want)
        for name in want:
            assert got[name].dtype == want[name].dtype, name
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def graph_args(spec: str, directed: bool) -> list[str]:
    """The graph's arguments, and --central: rank 0 reads and partitions (the ranks together is
    tests/shard/test_write_on_ranks.py's)."""
    return [spec, "--features", "5", "--classes", "3", "--seed", "2", "--central",
            *([] if directed else ["--symmetrize"])]


@pytest.mark.parametrize("directed", [True, False], ids=["directed", "undirected"])
@pytest.mark.parametrize(("ranks", "model"), [(2, "random"), (3, "contiguous")])
def test_ranks_write_the_directory_one_process_writes(tmp_path, directed, ranks, model):
    spec = random_edge_file(tmp_path / "g.txt", 150, 700, seed=ranks)
    single = write_partition(GraphOptions(spec, symmetrize=not directed, features=5, classes=3, seed=2),
                             tmp_path / "single", ranks, PartitionerConfig(model, seed=2), quiet=True)
    proc = run_distgcn(["partition", *graph_args(spec, directed), "--parts", str(ranks), "--model", model,
                        "--out", str(tmp_path / "ranks")], ranks=ranks, timeout=120)
    assert proc.returncode == 0, proc.stderr
    # both ways of reading Âᵀ's rows were taken: from Â's own files when symmetric
    assert ("Â symmetric" in proc.stderr) == (not directed), proc.stderr
    assert single["volume"]["total"] > 0
    assert_same_directory(tmp_path / "single", tmp_path / "ranks")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.txt", "ranks", "single"]  # no staging left


def test_a_failing_rank_ends_every_rank_and_leaves_nothing(tmp_path):
    spec = random_edge_file(tmp_path / "g.txt", 120, 500, seed=1)
    proc = run_distgcn(["partition", *graph_args(spec, True), "--parts", "3", "--model", "random", "--quiet",
                        "--out", str(tmp_path / "out")], ranks=3, timeout=120, env={FAIL_SHARD_ENV: "1"})
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("unexpected error") == 1, proc.stderr
    assert "rank 1: unexpected error: InjectedFailure" in proc.stderr, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.txt"]


def test_ranks_other_than_parts_are_refused_on_every_rank(tmp_path):
    spec = random_edge_file(tmp_path / "g.txt", 60, 200, seed=3)
    proc = run_distgcn(["partition", *graph_args(spec, True), "--parts", "3", "--model", "random",
                        "--out", str(tmp_path / "out")], ranks=2, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("distgcn: error:") == 1, proc.stderr
    assert "--parts 3 but the job has 2 MPI ranks" in proc.stderr and "mpiexec -n 3" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.txt"]


@pytest.mark.parametrize("vertex_order", ["rcm", "natural"])
def test_in_process_ranks_write_the_directory_one_process_writes(tmp_path, vertex_order):
    """The same check on in-process ranks: fast, so the vertex orders and P = 4 are covered too."""
    spec = random_edge_file(tmp_path / "g.txt", 200, 900, seed=7)
    options = GraphOptions(spec, features=4, classes=2, seed=3)
    write_partition(options, tmp_path / "single", 4, PartitionerConfig("random", seed=3), vertex_order=vertex_order,
                    quiet=True)

    def rank_main(group) -> dict | None:
        return rank_shards.write_partition_on_ranks(group, options, tmp_path / "ranks", 4,
                                                    PartitionerConfig("random", seed=3),
                                                    vertex_order=vertex_order, quiet=True)

    metas = run_ranks(4, rank_main)
    assert metas[1:] == [None] * 3 and metas[0]["parts"] == 4
    assert_same_directory(tmp_path / "single", tmp_path / "ranks")


@pytest.mark.parametrize("chunk_bytes", [8, 24, 1 << 20])
def test_read_rows_takes_the_rows_asked_for_chunk_by_chunk(tmp_path, monkeypatch, chunk_bytes):
    monkeypatch.setattr(rank_shards, "CHUNK_BYTES", chunk_bytes)
    values = np.arange(60, dtype=np.float32).reshape(20, 3)
    np.save(tmp_path / "v.npy", values)
    np.save(tmp_path / "w.npy", np.arange(20, dtype=np.int64))
    np.save(tmp_path / "empty.npy", np.zeros((20, 0), dtype=np.float32))
    rows = np.array([0, 1, 2, 7, 8, 15, 19])
    np.testing.assert_array_equal(rank_shards.read_rows(tmp_path / "v.npy", rows), values[rows])
    np.testing.assert_array_equal(rank_shards.read_rows(tmp_path / "w.npy", rows), rows)
    assert rank_shards.read_rows(tmp_path / "empty.npy", rows).shape == (7, 0)
    assert rank_shards.read_rows(tmp_path / "v.npy", rows[:0]).shape == (0, 3)


def test_shard_fault_acts_only_where_asked(monkeypatch):
    monkeypatch.setenv(FAIL_SHARD_ENV, "2")
    inject_shard_fault(1)
    with pytest.raises(InjectedFailure, match="rank 2"):
        inject_shard_fault(2)
    monkeypatch.setenv(FAIL_SHARD_ENV, "two")
    with pytest.raises(InjectedFailure, match="expected a rank"):
        inject_shard_fault(0)


def test_in_process_ranks_with_an_empty_part(tmp_path):
    """A part that owns no vertex (an external part vector that never names it) gets an empty shard, as in one
    process, and meta.json lists it among the empty parts."""
    spec = random_edge_file(tmp_path / "g.txt", 80, 300, seed=4)
    n = len(np.unique(np.loadtxt(spec, dtype=np.int64)))
    parts_file = tmp_path / "parts.txt"
    parts_file.write_text("\n".join(str(p) for p in np.random.default_rng(1).integers(0, 2, n)) + "\n")
    options = GraphOptions(spec, features=3, classes=2, seed=1)
    meta = write_partition(options, tmp_path / "single", 3, PartitionerConfig("external", parts_file=str(parts_file)),
                           quiet=True)
    assert meta["empty_parts"] == [2]

    def rank_main(group) -> dict | None:
        return rank_shards.write_partition_on_ranks(group, options, tmp_path / "ranks", 3,
                                                    PartitionerConfig("external", parts_file=str(parts_file)),
                                                    quiet=True)

    run_ranks(3, rank_main)
    assert_same_directory(tmp_path / "single", tmp_path / "ranks")


def test_tasks_of_another_launcher_are_refused(tmp_path):
    """torchrun (or srun without MPI) starting several tasks would have each write the whole directory."""
    spec = random_edge_file(tmp_path / "g.txt", 60, 200, seed=3)
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "localhost", "MASTER_PORT": "29500"}
    proc = distgcn_in_process(["partition", *graph_args(spec, True), "--parts", "2", "--model", "random",
                               "--out", str(tmp_path / "out")], env=env)
    assert proc.returncode == 2
    assert "started as 2 torchrun tasks" in proc.stderr and "mpiexec -n P" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.txt"]
