"""The output contract (distgcn/io/safe_io.py, docs/reliability.md): nothing distgcn did not write is replaced.

One test per example of issue 20: partition --force never deletes an input, the working directory, its
parents or a user's directory; outputs never replace a file of another kind; a failed write leaves the
old file whole; checkpoint directories are not shared unknowingly; metrics hold JSON null, never NaN.
Commands that need no MPI (partition, report) run in this process through ``distgcn.cli.main.main``; ``train``
runs on a tiny graph on one in-process rank (conftest.distgcn_in_process); the rest call the writers directly.
"""

from __future__ import annotations

import json
import math
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, distgcn_in_process
from metrics_files import metrics_file
from processes import unused_pid

from distgcn.cli.main import main
from distgcn.errors import InputError
from distgcn.io.checkpoint import RunIdentity, save_checkpoint
from distgcn.io.safe_io import (
    EXPORT,
    PARTITION,
    WEIGHTS,
    replace_directory,
    write_file,
    write_npz,
)

GRAPH = "synthetic:sbm,n=200,classes=2,features=8"
TRAIN = ["train", "--graph", GRAPH, "--epochs", "1", "--quiet"]
CORA = Path("/work/shared/datasets/cora_planetoid")
IDENTITY = RunIdentity("graph", "partition", "model")


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` (hidden ones included) and its bytes."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


EDGES = ("--features", "4", "--classes", "2")  # an edge file has neither


def edge_file(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "g.txt"
    path.write_text("".join(f"{i} {(i + 1) % 12}\n{i} {(i + 5) % 12}\n" for i in range(12)))
    return path


def distgcn(args: list[str], capsys, cwd: Path) -> tuple[int, str]:
    """``distgcn ARGS`` in this process, in ``cwd``: the exit code and stderr."""
    here = Path.cwd()
    os.chdir(cwd)
    try:
        code = main(args)
    finally:
        os.chdir(here)
    return code, capsys.readouterr().err


def partition(graph: Path | str, out: str, *extra: str, capsys, cwd: Path, parts: int = 2) -> tuple[int, str]:
    return distgcn(["partition", str(graph), "--parts", str(parts), "--model", "random", "--out", out, "--quiet",
                    *extra], capsys, cwd)


def test_partition_force_onto_the_input_dataset_keeps_it(tmp_path, capsys):
    if CORA.is_dir():
        shutil.copytree(CORA, tmp_path / "cora")
    else:  # any dataset directory will do: a one-edge-file one is not a known format, so use a file's directory
        edge_file(tmp_path / "cora")
    before = snapshot(tmp_path / "cora")
    extra = ("--force",) if CORA.is_dir() else ("--force", *EDGES)
    code, err = partition("cora" if CORA.is_dir() else "cora/g.txt", "cora", *extra, capsys=capsys, cwd=tmp_path)
    assert code == 2 and "never replaces an input" in err, err
    assert snapshot(tmp_path / "cora") == before


@pytest.mark.parametrize("out", [".", "..", "notes"])
def test_partition_force_refuses_the_working_directory_its_parents_and_a_users_directory(tmp_path, out, capsys):
    graph = edge_file(tmp_path / "data")
    cwd = tmp_path / "work" / "here"
    (cwd / "notes").mkdir(parents=True)
    (cwd / "notes" / "todo.txt").write_text("mine")
    (cwd / "keep.txt").write_text("mine too")
    before = snapshot(tmp_path)
    code, err = partition(graph, out, *EDGES, "--force", capsys=capsys, cwd=cwd)
    assert code == 2 and "even with --force" in err, err
    assert len(err.strip().splitlines()) == 1
    assert snapshot(tmp_path) == before


def test_partition_removes_only_staging_directories_whose_writer_is_gone(tmp_path, capsys):
    """A killed partition leaves its staging directory (SIGKILL runs no cleanup; tests/runtime/test_signals.py kills one
    for real); the next partition into the same place removes it, and only it: not a live run's, not another
    host's, not one without distgcn's owner file, not a link, not one whose owner file is unreadable."""
    import socket

    graph = edge_file(tmp_path / "data")
    host, dead = socket.gethostname(), unused_pid()

    def staging(name: str, owner: str | None) -> Path:
        directory = tmp_path / f".part.{name}"
        directory.mkdir()
        (directory / "shard_0.npz").write_bytes(b"half written")
        if owner is not None:
            (directory / ".distgcn-staging").write_text(owner)
        return directory

    abandoned = staging("abandoned", json.dumps({"host": host, "pid": dead}))
    kept = [staging("live", json.dumps({"host": host, "pid": os.getpid()})),
            staging("elsewhere", json.dumps({"host": host + "-other", "pid": dead})),
            staging("users", None),
            staging("unreadable", "{not json"),
            staging("group", json.dumps({"host": host, "pid": -1}))]
    target = staging("target", json.dumps({"host": host, "pid": dead})).rename(tmp_path / "linked")
    (tmp_path / ".part.link").symlink_to(target, target_is_directory=True)
    before = {path.name: snapshot(path) for path in [*kept, target]}

    code, err = partition(graph, "part", *EDGES, capsys=capsys, cwd=tmp_path)
    assert code == 0, err
    assert not abandoned.exists()
    assert f"removed {abandoned.name}: a staging directory left by an interrupted run (process {dead} " in err
    assert {path.name: snapshot(path) for path in [*kept, target]} == before
    assert (tmp_path / ".part.link").is_symlink() and err.count("removed ") == 1
    assert not (tmp_path / "part" / ".distgcn-staging").exists()  # the owner file goes before the rename


def test_partition_force_replaces_only_its_own_partition(tmp_path, capsys):
    graph = edge_file(tmp_path / "data")
    assert partition(graph, "part", *EDGES, capsys=capsys, cwd=tmp_path)[0] == 0
    code, err = partition(graph, "part", *EDGES, capsys=capsys, cwd=tmp_path, parts=3)
    assert code == 2 and "pass --force" in err
    assert partition(graph, "part", *EDGES, "--force", capsys=capsys, cwd=tmp_path, parts=3)[0] == 0
    assert json.loads((tmp_path / "part" / "meta.json").read_text())["parts"] == 3
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging or old copy left
    (tmp_path / "part" / "notes.txt").write_text("mine")  # now the directory holds something of the user's
    before = snapshot(tmp_path / "part")
    code, err = partition(graph, "part", *EDGES, "--force", capsys=capsys, cwd=tmp_path)
    assert code == 2 and "is not a distgcn partition directory" in err
    assert snapshot(tmp_path / "part") == before


def test_a_failed_swap_keeps_the_old_partition(tmp_path):
    old = tmp_path / "part"
    old.mkdir()
    (old / "meta.json").write_text(json.dumps({"format_version": 1, "partition_id": "x", "parts": 1, "shards": []}))
    np.save(old / "parts.npy", np.zeros(4, dtype=np.int64))
    before = snapshot(old)
    with pytest.raises(FileNotFoundError):  # the new directory cannot be renamed in
        replace_directory(tmp_path / "missing-staging", old, PARTITION, force=True)
    assert snapshot(old) == before and sorted(tmp_path.iterdir()) == [old]


def test_metrics_onto_a_users_file_is_refused(tmp_path):
    (tmp_path / "results.csv").write_text("a,b\n1,2\n")
    proc = distgcn_in_process([*TRAIN, "--metrics", "results.csv"], cwd=tmp_path)
    assert proc.returncode == 2 and "results.csv: exists and is not a distgcn metrics file" in proc.stderr
    assert (tmp_path / "results.csv").read_text() == "a,b\n1,2\n"


def test_metrics_onto_the_partitions_meta_json_is_refused(tmp_path, capsys):
    graph = edge_file(tmp_path / "data")
    assert partition(graph, "part", *EDGES, capsys=capsys, cwd=tmp_path, parts=1)[0] == 0
    before = snapshot(tmp_path / "part")
    proc = distgcn_in_process(["train", "part", "--epochs", "1", "--quiet", "--metrics", "part/meta.json"],
                              cwd=tmp_path)
    assert proc.returncode == 2 and "meta.json: exists and is not a distgcn metrics file" in proc.stderr
    assert snapshot(tmp_path / "part") == before


def test_save_weights_onto_a_users_npz_is_refused(tmp_path):
    np.savez(tmp_path / "important.npz", np.arange(3.0))
    before = (tmp_path / "important.npz").read_bytes()
    proc = distgcn_in_process([*TRAIN, "--save-weights", "important.npz"], cwd=tmp_path)
    assert proc.returncode == 2 and "is not a distgcn weights file" in proc.stderr
    assert (tmp_path / "important.npz").read_bytes() == before


def _limit_file_size(size: int):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


def test_rerun_replaces_its_own_outputs_and_a_full_disk_keeps_the_old_weights(tmp_path):
    outputs = ["--metrics", "m.jsonl", "--save-weights", "w.npz"]
    assert distgcn_in_process([*TRAIN, *outputs], cwd=tmp_path).returncode == 0
    rerun = distgcn_in_process([*TRAIN[:-3], "--epochs", "2", "--quiet", *outputs], cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stderr
    assert [json.loads(line)["epoch"] for line in (tmp_path / "m.jsonl").read_text().splitlines()] == [1, 2]
    weights = (tmp_path / "w.npz").read_bytes()
    with np.load(tmp_path / "w.npz") as npz:
        # the documented layout: the parameters, then the model's record; the kind's marker is not an array
        assert sorted(npz.files) == [*(f"arr_{i}" for i in range(4)), "model"]
    # a disk that fills up: the weights writer (what --save-weights calls) past a 1000-byte file size limit
    # gets a real EFBIG (MPI itself cannot start under that limit, so the writer runs without it)
    script = ("import sys, numpy as np; from distgcn.io.safe_io import WEIGHTS, write_npz\n"
              "try:\n    write_npz(sys.argv[1], WEIGHTS, np.zeros(1000))\n"
              "except Exception as exc:\n    print(exc)\n")
    full = subprocess.run([sys.executable, "-c", script, "w.npz"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1"),
                          preexec_fn=_limit_file_size(1000))
    assert "w.npz: cannot write the weights file (file too large: " in full.stdout, full.stdout + full.stderr
    assert (tmp_path / "w.npz").read_bytes() == weights
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.jsonl", "w.npz"]  # no temporary left


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path):
    path = write_npz(tmp_path / "w.npz", WEIGHTS, np.ones(3))
    before = path.read_bytes()

    def fail(fh):
        fh.write(b"half")
        raise KeyboardInterrupt  # what a signal handler raises: not an Exception

    with pytest.raises(KeyboardInterrupt):
        write_file(path, WEIGHTS, fail)
    assert path.read_bytes() == before and sorted(tmp_path.iterdir()) == [path]


def test_an_output_of_another_kind_is_refused(tmp_path):
    path = write_npz(tmp_path / "w.npz", WEIGHTS, np.ones(3))
    with pytest.raises(InputError, match="is not a distgcn predictions export"):
        write_npz(path, EXPORT, ids=np.arange(3))
    assert write_npz(path, WEIGHTS, np.zeros(2)) == path  # its own kind is replaced


def test_symlink_at_an_output_name_is_refused(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "w.npz").symlink_to(victim)
    with pytest.raises(InputError, match="symbolic link"):
        write_npz(tmp_path / "w.npz", WEIGHTS, np.ones(3))
    assert victim.read_text() == "precious"




def test_metrics_write_null_for_a_number_that_is_not_finite(tmp_path):
    path = metrics_file(tmp_path / "m.jsonl", loss=math.nan)

    def refuse(constant):
        raise AssertionError(f"{constant} is not JSON")

    records = [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]
    assert [r["loss"] for r in records] == [None, None]


def test_report_never_writes_through_a_symlink_or_over_a_users_summary(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    report = ["report", str(metrics_file(tmp_path / "m.jsonl")), "--out", "report"]
    out = tmp_path / "report"
    out.mkdir()
    victim = tmp_path / "victim.md"
    victim.write_text("precious")
    (out / "summary.md").symlink_to(victim)
    code, err = distgcn(report, capsys, tmp_path)
    assert code == 2 and "symbolic link" in err
    assert victim.read_text() == "precious"
    (out / "summary.md").unlink()
    (out / "summary.md").write_text("my notes")
    code, err = distgcn(report, capsys, tmp_path)
    assert code == 2 and "is not a distgcn report summary" in err
    assert (out / "summary.md").read_text() == "my notes"
    (out / "summary.md").unlink()
    assert distgcn(report, capsys, tmp_path)[0] == 0
    assert distgcn(report, capsys, tmp_path)[0] == 0  # a re-run replaces its own report


def test_pruning_deletes_only_distgcn_checkpoints(tmp_path):
    (tmp_path / "checkpoint-00000001.pt").write_text("a user's file with a checkpoint's name")
    for epoch in (2, 3, 4):
        save_checkpoint(tmp_path, epoch, {}, IDENTITY, keep=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-00000001.pt", "checkpoint-00000004.pt"]
    with pytest.raises(InputError, match="is not a distgcn checkpoint"):
        save_checkpoint(tmp_path, 1, {}, IDENTITY, keep=1)
    assert (tmp_path / "checkpoint-00000001.pt").read_text() == "a user's file with a checkpoint's name"


def test_a_fresh_run_refuses_a_checkpoint_directory_that_holds_checkpoints(tmp_path):
    (tmp_path / "ckpt").mkdir()
    save_checkpoint(tmp_path / "ckpt", 1, {}, IDENTITY, keep=1)  # an earlier run's
    fresh = distgcn_in_process([*TRAIN, "--checkpoint-dir", "ckpt", "--checkpoint-every", "1"], cwd=tmp_path)
    assert fresh.returncode == 2 and "pass --resume to continue" in fresh.stderr, fresh.stderr
    assert [p.name for p in (tmp_path / "ckpt").glob("checkpoint-*")] == ["checkpoint-00000001.pt"]


def test_a_second_concurrent_run_is_refused_even_with_resume(tmp_path):
    (tmp_path / "ckpt").mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from distgcn.io.safe_io import lock_directory; "
         "lock_directory(sys.argv[1], 'checkpoint directory'); print('locked', flush=True); sys.stdin.read()",
         str(tmp_path / "ckpt")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert holder.stdout.readline().strip() == "locked"  # or "" if it died: no wait without an end
        second = distgcn_in_process([*TRAIN, "--checkpoint-dir", "ckpt", "--checkpoint-every", "1", "--resume"],
                                    cwd=tmp_path)
        assert second.returncode == 2, second.stderr
        assert f"the checkpoint directory is in use by another run (process {holder.pid} on " in second.stderr
        assert not list((tmp_path / "ckpt").glob("checkpoint-*"))
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
