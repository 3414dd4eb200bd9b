"""``mpiexec -n P distgcn partition``'s distributed path (distgcn/shard/write_on_ranks.py): the ranks read,
partition, cut and write with their shares only, and the directory is byte for byte the one one process
writes for the same part vector (meta.json's timings aside). A failing rank ends every rank and leaves nothing;
bad input is one error line."""

from __future__ import annotations

import filecmp
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import random_edge_file, run_distgcn
from ogb_files import write_ogb_binary

from distgcn.comm.transport.inprocess import run_ranks
from distgcn.config import PartitionerConfig
from distgcn.data import load_graph, save_npz
from distgcn.data.prepare import GraphOptions
from distgcn.runtime.faults import FAIL_SHARD_ENV
from distgcn.shard import rank_rows
from distgcn.shard.write import write_partition
from distgcn.shard.write_on_ranks import write_partition_from_rows


def timeless_meta_text(directory: Path) -> str:
    """meta.json as written, its key order kept, without the partitioner's running time."""
    meta = json.loads((directory / "meta.json").read_text())
    meta.pop("partition_s")
    meta["partition_info"].pop("partition_s")
    return json.dumps(meta, indent=2)


def assert_same_bytes(expected: Path, found: Path) -> None:
    names = sorted(p.name for p in expected.iterdir())
    assert sorted(p.name for p in found.iterdir()) == names
    for name in names:
        if name == "meta.json":
            assert timeless_meta_text(found) == timeless_meta_text(expected)
        else:
            assert filecmp.cmp(expected / name, found / name, shallow=False), name


def edge_directory(tmp_path: Path) -> str:
    whole = Path(random_edge_file(tmp_path / "whole.txt", 260, 1200, seed=4)).read_text().splitlines()
    directory = tmp_path / "edges"
    directory.mkdir()
    for k, piece in enumerate(np.array_split(np.array(whole), 5)):
        (directory / f"part-{k:02d}.edges").write_text("\n".join(piece) + "\n")
    return str(directory)


def npz_graph(tmp_path: Path) -> str:
    save_npz(load_graph(random_edge_file(tmp_path / "n.txt", 200, 900, seed=6), features=3, classes=4, seed=2),
             tmp_path / "g.npz")
    return str(tmp_path / "g.npz")


CASES = {
    "edge list, random, P=3": ("edges", {"features": 4, "classes": 3, "seed": 2}, "random", 3, "rcm"),
    "edge list symmetrized, contiguous, P=4": ("edges", {"features": 3, "classes": 2, "symmetrize": True},
                                               "contiguous", 4, "natural"),
    "directory of files, random, P=4": ("directory", {"features": 4, "classes": 3}, "random", 4, "rcm"),
    "npz, external, P=2": ("npz", {}, "external", 2, "rcm"),
    "ogb binary (compressed), contiguous, P=3": ("ogb", {}, "contiguous", 3, "rcm"),
    "rmat, random, P=4": ("synthetic:rmat,scale=9,edge_factor=8,features=4,classes=3", {}, "random", 4, "rcm"),
    "one rank": ("edges", {"features": 4, "classes": 3}, "random", 1, "rcm"),
}


@pytest.mark.parametrize("transit_bytes", [rank_rows.TRANSIT_BYTES, 300], ids=["whole pieces", "a few rows a message"])
@pytest.mark.parametrize("case", list(CASES))
def test_ranks_write_one_process_directory_byte_for_byte(tmp_path, monkeypatch, case, transit_bytes):
    monkeypatch.setattr(rank_rows, "TRANSIT_BYTES", transit_bytes)
    source, kw, model, ranks, vertex_order = CASES[case]
    spec = {"edges": lambda: random_edge_file(tmp_path / "g.txt", 240, 1100, seed=ranks),
            "directory": lambda: edge_directory(tmp_path), "npz": lambda: npz_graph(tmp_path),
            "ogb": lambda: str(write_ogb_binary(tmp_path / "ogbn_arxiv", seed=5))}.get(
        source, lambda: source)()
    parts_file = None
    if model == "external":
        parts_file = tmp_path / "parts.txt"
        n = load_graph(spec).num_vertices
        parts_file.write_text("\n".join(str(p) for p in np.random.default_rng(1).integers(0, ranks, n)) + "\n")
    options = GraphOptions(spec, **kw)
    config = PartitionerConfig(model, seed=kw.get("seed", 0), parts_file=str(parts_file) if parts_file else None)
    single = write_partition(options, tmp_path / "single", ranks, config, quiet=True, vertex_order=vertex_order)
    metas = run_ranks(ranks, lambda group: write_partition_from_rows(group, options, tmp_path / "ranks", ranks,
                                                                     config, quiet=True, vertex_order=vertex_order))
    assert metas[1:] == [None] * (ranks - 1) and metas[0]["partition_id"] == single["partition_id"]
    assert single["volume"]["total"] > 0 or ranks == 1
    assert_same_bytes(tmp_path / "single", tmp_path / "ranks")
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left


def test_mpiexec_takes_the_distributed_path_by_default(tmp_path):
    spec = random_edge_file(tmp_path / "g.txt", 150, 700, seed=8)
    args = [spec, "--features", "5", "--classes", "3", "--seed", "2", "--parts", "3", "--model", "random"]
    proc = run_distgcn(["partition", *args, "--out", str(tmp_path / "ranks")], ranks=3, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "on 3 ranks" in proc.stderr and "read, partitioned and written by the ranks" in proc.stderr
    central = run_distgcn(["partition", *args, "--central", "--out", str(tmp_path / "central")], ranks=3,
                          timeout=120)
    assert central.returncode == 0, central.stderr
    assert "each written by its rank" in central.stderr and "reading and partitioning on rank 0" not in central.stderr
    single = run_distgcn(["partition", *args, "--central", "--quiet", "--out", str(tmp_path / "single")])
    assert single.returncode == 0, single.stderr
    assert_same_bytes(tmp_path / "single", tmp_path / "ranks")
    assert_same_bytes(tmp_path / "single", tmp_path / "central")


def test_a_model_without_a_distributed_path_here_says_why_and_partitions_on_rank_0(tmp_path):
    spec = random_edge_file(tmp_path / "g.txt", 100, 400, seed=2)
    proc = run_distgcn(["partition", spec, "--features", "3", "--classes", "2", "--parts", "2", "--model",
                        "hypergraph", "--partitioner", "kahypar", "--out", str(tmp_path / "out")], ranks=2,
                       timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "distgcn: reading and partitioning on rank 0: --partitioner kahypar runs in one process" in proc.stderr


def test_a_failing_rank_ends_every_rank_and_leaves_nothing(tmp_path):
    spec = random_edge_file(tmp_path / "g.txt", 120, 500, seed=1)
    proc = run_distgcn(["partition", spec, "--features", "3", "--classes", "2", "--parts", "3", "--model", "random",
                        "--quiet", "--out", str(tmp_path / "out")], ranks=3, timeout=120, env={FAIL_SHARD_ENV: "2"})
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("unexpected error") == 1, proc.stderr
    assert "rank 2: unexpected error: InjectedFailure" in proc.stderr, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.txt"]


def test_bad_input_late_in_the_file_is_one_error_line(tmp_path):
    spec = random_edge_file(tmp_path / "g.txt", 120, 500, seed=1)
    lines = Path(spec).read_text().splitlines()
    lines[-3] = "17 x9"
    Path(spec).write_text("\n".join(lines) + "\n")
    proc = run_distgcn(["partition", spec, "--features", "3", "--classes", "2", "--parts", "3", "--model", "random",
                        "--out", str(tmp_path / "out")], ranks=3, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("distgcn: error:") == 1, proc.stderr
    assert f"g.txt:{len(lines) - 2}:" in proc.stderr, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.txt"]


@pytest.mark.parametrize("when", ["reading", "writing"])
def test_a_rank_killed_during_the_distributed_step_ends_the_job_and_the_next_run_finishes(tmp_path, when):
    """SIGKILL to rank 1 while the ranks read the graph together, or once rank 0 has made the staging directory:
    no rank outlives it, no partition directory appears, and what SIGKILL leaves (a staging directory, an
    unlocked claim) is taken over by the next partition into the same place, which leaves only its result."""
    import os
    import signal
    import time

    from processes import alive, descendants, rank_pid

    from jobs import kill_group, start_job

    out = tmp_path / "out"
    args = ["partition", "synthetic:rmat,scale=17,edge_factor=8,features=32,classes=4,seed=1", "--parts", "3",
            "--model", "random", "--out", str(out), "--quiet"]
    job = start_job(args, ranks=3)
    try:
        deadline = time.monotonic() + 120
        victim = None
        while victim is None or (when == "writing" and not list(tmp_path.glob(".out.*/.distgcn-staging"))):
            assert job.poll() is None, job.communicate()
            assert time.monotonic() < deadline, f"no rank 1 {when} within 120 s"
            victim = victim or rank_pid(job.pid, 1)
            time.sleep(0.01)
        if when == "reading":
            time.sleep(0.5)  # the ranks are past MPI_Init and into the graph
            assert not list(tmp_path.glob(".out.*")), "already writing: make the graph larger"
        ranks = descendants(job.pid)
        os.kill(victim, signal.SIGKILL)
        _, stderr = job.communicate(timeout=60)
    finally:
        kill_group(job)
    assert job.returncode != 0, stderr
    assert "Traceback" not in stderr, stderr
    assert not any(alive(pid) for pid in ranks)
    assert not out.exists()
    left = sorted(path.name for path in tmp_path.iterdir())
    staging = [name for name in left if name != ".out.distgcn-lock"]
    if when == "reading":
        assert set(left) <= {".out.distgcn-lock"}, left  # nothing staged yet
    else:
        assert len(staging) == 1 and set(left) == {".out.distgcn-lock", *staging}, left

    again = run_distgcn(args[:-1], ranks=3, timeout=120)
    assert again.returncode == 0, again.stderr
    for name in staging:
        assert f"removed {tmp_path / name}: a staging directory left by an interrupted run" in again.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]
