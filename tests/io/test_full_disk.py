"""A disk that fills up while distgcn writes: one line naming the output, exit status 2, no traceback, no
partial output, every rank ended.

The disks are real: small tmpfs mounts (root only; the tests skip, saying why, where mounting is not
possible). A size in bytes fills with file contents, a count of inodes with file names.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import distgcn_in_process, run_distgcn

EDGES = "0 1\n1 2\n2 3\n3 0\n0 2\n"
RANDOM_DATA = ["--features", "4", "--classes", "2"]
NO_SPACE = "(no space left on the device: free space there or write elsewhere)"


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Callable[[str], Path]]:
    """``small_disk("size=8k")``: a new tmpfs mounted with those options, unmounted after the test."""
    mounted: list[Path] = []

    def mount(options: str) -> Path:
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
        where = tmp_path / f"disk{len(mounted)}"
        where.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True,
                              text=True, timeout=30)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        # still busy (a lock this process holds, a rank of an aborted job exiting): detach it now; the kernel
        # frees it when the last file on it closes
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


def graph(tmp_path: Path) -> str:
    path = tmp_path / "g.txt"
    path.write_text(EDGES)
    return str(path)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ": error: " in line]


def assert_one_line(stderr: str, *parts: str) -> str:
    """The one error line of ``stderr``, checked to hold each of ``parts``; no traceback, no MPI_Abort line."""
    assert "Traceback" not in stderr and "MPI_Abort" not in stderr, stderr
    errors = error_lines(stderr)
    assert len(errors) == 1, stderr
    for part in parts:
        assert part in errors[0], errors[0]
    return errors[0]


def test_partition_onto_a_full_disk_leaves_nothing(tmp_path, small_disk):
    disk = small_disk("size=12k")  # the staging directory, its owner file and parts.npy fit; the shards do not
    out = disk / "p"
    proc = distgcn_in_process(["partition", graph(tmp_path), "--parts", "2", "--model", "contiguous", *RANDOM_DATA,
                               "--out", str(out)])
    assert proc.returncode == 2, proc.stderr
    assert "writing shards: started" in proc.stderr  # it failed while writing, not before the staging directory
    assert_one_line(proc.stderr, f"distgcn: error: {out}: cannot write the partition directory {NO_SPACE}")
    assert list(disk.iterdir()) == []  # the staging directory is gone


def scratch_files(spec: str) -> int:
    """How many files rank 0 writes for the ranks (distgcn/shard/rank_shards.py) for ``spec`` with RANDOM_DATA."""
    from distgcn.data.prepare import GraphOptions
    from distgcn.runtime.progress import QUIET, Progress
    from distgcn.shard.rank_shards import write_scratch
    from distgcn.shard.write import load

    data, a_hat = load(GraphOptions(spec=spec, features=4, classes=2), Progress(QUIET))
    scratch = Path(spec).parent / "scratch"
    write_scratch(scratch, data, a_hat)
    return len(list(scratch.iterdir()))


def test_rank_written_shards_onto_a_full_disk(tmp_path, small_disk):
    """``mpiexec -n 2 distgcn partition``: one rank finds no room for its own shard; every rank exits 2."""
    spec = graph(tmp_path)
    # every file but the last shard: the mount's root, the staging directory, its owner file, parts.npy, the
    # scratch folder and its files, one shard
    disk = small_disk(f"size=1m,nr_inodes={5 + scratch_files(spec) + 1}")
    out = disk / "p"
    proc = run_distgcn(["partition", spec, "--parts", "2", "--model", "contiguous", *RANDOM_DATA, "--central",
                        "--out", str(out)], ranks=2, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "writing the graph for the ranks: done" in proc.stderr  # the shards failed, not rank 0's scratch files
    assert_one_line(proc.stderr, f"{out}: cannot write the partition directory {NO_SPACE}")
    assert list(disk.iterdir()) == []


def test_shards_of_ranks_that_read_the_graph_onto_a_full_disk(tmp_path, small_disk):
    """The distributed path (the ranks read and partition together): room for one shard only (the mount's root,
    the staging directory, its owner file, parts.npy, one shard); every rank exits 2 and nothing is left."""
    spec = graph(tmp_path)
    disk = small_disk("size=1m,nr_inodes=5")
    out = disk / "p"
    proc = run_distgcn(["partition", spec, "--parts", "2", "--model", "contiguous", *RANDOM_DATA, "--out", str(out)],
                       ranks=2, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "on 2 ranks: done" in proc.stderr  # read and partitioned: the shards failed
    assert_one_line(proc.stderr, f"{out}: cannot write the partition directory {NO_SPACE}")
    assert list(disk.iterdir()) == []


def whole_records(path: Path) -> list[int]:
    """The epochs of a metrics file, checked to be whole JSON lines, one per epoch from 1."""
    text = path.read_text()
    assert text.endswith("\n"), text[-200:]
    epochs = [json.loads(line)["epoch"] for line in text.splitlines()]
    assert epochs == list(range(1, len(epochs) + 1))
    return epochs


@pytest.mark.parametrize("ranks", [1, 2])
def test_metrics_on_a_disk_that_fills_up_end_on_a_whole_record(tmp_path, small_disk, ranks):
    """Rank 0 alone writes the metrics; a record cut short by a full disk is removed again and the job ends with
    exit status 2 on every rank (the other rank was already on its way into the next epoch's collectives)."""
    disk = small_disk("size=8k")  # two pages: about ten records
    metrics = disk / "m.jsonl"
    proc = distgcn_in_process(["train", "--graph", graph(tmp_path), *RANDOM_DATA, "--epochs", "40", "--quiet",
                               "--metrics", str(metrics)], ranks=ranks)
    assert proc.returncode == 2, proc.stderr
    where = "rank 0: " if ranks > 1 else ""
    assert_one_line(proc.stderr, f"distgcn: error: {where}{metrics}: cannot write the metrics file {NO_SPACE}")
    assert 2 <= len(whole_records(metrics)) < 40
    assert [path.name for path in disk.iterdir()] == ["m.jsonl"]  # no temporary left


def test_metrics_on_a_full_disk_under_mpiexec(tmp_path, small_disk):
    """A real job: rank 0's one line, exit status 2 from mpiexec, no rank left running, no MPI_Abort line."""
    disk = small_disk("size=8k")
    metrics = disk / "m.jsonl"
    proc = run_distgcn(["train", "--graph", graph(tmp_path), *RANDOM_DATA, "--epochs", "40", "--quiet",
                        "--metrics", str(metrics)], ranks=2, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert_one_line(proc.stderr, f"distgcn: error: rank 0: {metrics}: cannot write the metrics file {NO_SPACE}")
    assert 2 <= len(whole_records(metrics)) < 40


def test_checkpoints_on_a_disk_that_fills_up(tmp_path, small_disk):
    disk = small_disk("size=8k")
    proc = distgcn_in_process(["train", "--graph", graph(tmp_path), *RANDOM_DATA, "--epochs", "40", "--quiet",
                               "--checkpoint-dir", str(disk), "--checkpoint-every", "1", "--checkpoint-keep", "40"],
                              ranks=2)
    assert proc.returncode == 2, proc.stderr
    assert_one_line(proc.stderr, f"{disk}/checkpoint-", f": cannot write the checkpoint {NO_SPACE}")
    names = sorted(path.name for path in disk.iterdir())
    assert names[0] == ".distgcn.lock" and all(name.startswith("checkpoint-") for name in names[1:]), names


@pytest.mark.timeout(120)
def test_api_ranks_stop_together_when_the_metrics_disk_fills_up(tmp_path, small_disk):
    """Through the API (no command line to abort the job) rank 0's failed write used to leave the other rank
    waiting in the next epoch's collectives: every rank now raises at the same epoch."""
    from distgcn import api
    from distgcn.comm.transport.inprocess import run_ranks
    from distgcn.errors import InputError

    disk = small_disk("size=8k")
    metrics = disk / "m.jsonl"

    def rank_main(transport) -> str:
        with pytest.raises(InputError) as raised:
            source = api.GraphOptions(spec=graph(tmp_path), features=4, classes=2) if transport.rank == 0 else None
            api.train(source, epochs=40, metrics=str(metrics),
                      partition_model="contiguous", transport=transport, quiet=True)
        return str(raised.value)

    first, second = run_ranks(2, rank_main)
    assert first == (f"rank 0: {metrics}: cannot write the metrics file {NO_SPACE}; it ends with the last record "
                     "written whole")
    assert second == "rank 0 could not write the metrics file"
    assert 2 <= len(whole_records(metrics)) < 40
