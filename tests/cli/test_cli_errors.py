"""Bad input to ``distgcn train``: one clear line naming the file (and line), exit 2, no traceback.

The commands run on in-process ranks (conftest.distgcn_in_process); refusals under a real mpiexec are
checked by tests/cli/test_partition_command.py and tests/cli/test_verify.py.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, distgcn_in_process


def write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def bad_npz(tmp_path) -> str:
    path = tmp_path / "short_labels.npz"
    np.savez(path, adj_indptr=np.array([0, 1, 2]), adj_indices=np.array([1, 0]), adj_shape=np.array([2, 2]),
             vertex_ids=np.array([0, 1]), features=np.zeros((2, 3), dtype=np.float32),
             labels=np.array([0, 1, 1]), train_mask=np.array([True, True]), val_mask=np.array([False, False]),
             test_mask=np.array([False, False]))
    return str(path)


CASES = {
    "malformed line": (lambda t: write(t, "bad.txt", "0 1\n1 2 3 4\n2 0\n"), "bad.txt:2"),
    "non-numeric token": (lambda t: write(t, "word.txt", "# c\n0 1\n1 x\n"), "word.txt:3"),
    "id out of range": (lambda t: write(t, "g.graph", "3 2\n2\n1 5\n2\n"), "g.graph:3"),
    "empty graph": (lambda t: write(t, "empty.txt", "# nothing here\n"), "empty.txt"),
    "labels of the wrong length": (bad_npz, "short_labels.npz"),
    "missing file": (lambda t: str(t / "missing.txt"), "missing.txt"),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("ranks", [1, 2])
def test_bad_graph_input(tmp_path, case, ranks):
    make, expected = CASES[case]
    proc = distgcn_in_process(["train", "--graph", make(tmp_path), "--features", "4", "--classes", "2",
                               "--epochs", "1"], ranks=ranks)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("distgcn: error:")]
    assert len(errors) == 1, proc.stderr  # printed once, not once per rank
    assert expected in errors[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args,expected", [
    (["--layers", "1"], "--layers"),
    (["--dropout", "1.5"], "--dropout"),
    (["--hidden", "0"], "--hidden"),
    ([], "exactly one of DIR"),
])
def test_bad_arguments(tmp_path, args, expected):
    graph = write(tmp_path, "ok.txt", "0 1\n1 2\n2 0\n")
    graph_args = ["--graph", graph, "--features", "4", "--classes", "2"] if args else []
    proc = distgcn_in_process(["train", *graph_args, "--epochs", "1", *args])
    assert proc.returncode == 2
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unlabelled_graph_without_features_is_explained(tmp_path):
    graph = write(tmp_path, "plain.txt", "0 1\n1 2\n2 0\n")
    proc = distgcn_in_process(["train", "--graph", graph, "--epochs", "1"])
    assert proc.returncode == 2
    assert "--features" in proc.stderr and "Traceback" not in proc.stderr


def test_report_of_a_metrics_file_whose_name_is_not_utf8(tmp_path):
    """A file name of arbitrary bytes (here b'm\\xff.jsonl', passed as the OS passes it) is reported and written
    with the byte escaped in the summary, even where stdout is strict UTF-8; no traceback."""
    pytest.importorskip("matplotlib")
    graph = write(tmp_path, "g.txt", "0 1\n1 2\n2 0\n")
    name = os.fsdecode(b"m\xff.jsonl")  # what Python makes of such an argument: a surrogate escape
    trained = distgcn_in_process(["train", "--graph", graph, "--features", "4", "--classes", "2", "--epochs", "2",
                                  "--quiet", "--metrics", str(tmp_path / name)])
    assert trained.returncode == 0, trained.stderr
    out = tmp_path / os.fsdecode(b"r\xfe")
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONIOENCODING="utf-8")  # a strict stdout
    proc = subprocess.run([sys.executable, "-m", "distgcn", "report", str(tmp_path / name), "--out", str(out)],
                          capture_output=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert b"Traceback" not in proc.stderr
    assert os.fsencode(out / "summary.md") in proc.stdout.splitlines()  # printed as the bytes it has on disk
    summary = (out / "summary.md").read_bytes().decode("utf-8")  # valid UTF-8
    assert "m\\xff" in summary


HUGE = "1" + "0" * 23
"""10^23: beyond 64 bits, where numpy, torch and the partitioners' C ints overflow."""
TRAIN_GRAPH = ["--features", "4", "--classes", "2", "--epochs", "1"]
SAMPLED = ["--sampler", "node", "--batch-size", "2"]


@pytest.mark.parametrize("command, flag, value, extra", [
    *[("train", flag, HUGE, []) for flag in ("--seed", "--epochs", "--layers", "--hidden", "--heads", "--output-heads",
                                             "--threads", "--checkpoint-every", "--checkpoint-keep")],
    ("train", "--features", HUGE, []), ("train", "--classes", HUGE, []), ("train", "--seed", "-" + HUGE, []),
    ("train", "--batches-per-epoch", HUGE, SAMPLED), ("train", "--norm-samples", HUGE, SAMPLED),
    *[("partition", flag, HUGE, []) for flag in ("--parts", "--seed", "--threads", "--features", "--classes",
                                                 "--shp-samples")],
    ("partition", "--seed", "-" + HUGE, []),
    *[("stats", flag, HUGE, []) for flag in ("--layers", "--hidden", "--heads", "--output-heads")],
])
def test_integers_too_large_for_their_type_are_refused_naming_the_flag(tmp_path, command, flag, value, extra):
    """An integer flag beyond what consumes it (a 32-bit seed, 64-bit sizes) is refused in one line naming the
    flag and the accepted range, before anything overflows far from it."""
    graph = write(tmp_path, "ok.txt", "0 1\n1 2\n2 0\n")
    args = {"train": ["train", "--graph", graph, *TRAIN_GRAPH],
            "partition": ["partition", graph, "--parts", "2", "--features", "4", "--classes", "2",
                          "--out", str(tmp_path / "out")],
            "stats": ["stats", "--predict", "n=10,nnz=30,features=4,parts=2"]}[command]
    proc = distgcn_in_process([*args, *extra, flag, value])
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    [error] = [line for line in proc.stderr.splitlines() if ": error: " in line]
    assert f"{flag}: expected " in error, error
    assert ".." in error or "(at most 2**62)" in error, error  # the accepted range
    assert not (tmp_path / "out").exists()


def test_a_graph_that_is_not_there_is_refused_before_torch_is_imported(tmp_path):
    """One process: the error, alone and first, before the seconds of importing torch and starting MPI (it came
    after them, below a 'partitioning ... started' line)."""
    missing = tmp_path / "missing.txt"
    code = ("import sys; from distgcn.cli.main import main; "
            f"code = main(['train', '--graph', {str(missing)!r}, '--epochs', '1']); "
            "print(code, 'torch' in sys.modules, 'mpi4py' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.stdout == "2 False False\n", (done.stdout, done.stderr)
    assert done.stderr.startswith(f"distgcn: error: {missing}: no such file or directory") \
        and done.stderr.count("\n") == 1, done.stderr


@pytest.mark.parametrize("graph", ["missing.txt", "graph.csv"])
def test_on_ranks_the_unreadable_graph_is_the_first_line_and_every_rank_stops(tmp_path, graph):
    """Rank 0 says it before the transport starts; every rank then ends with status 2, none waits."""
    (tmp_path / "graph.csv").write_text("0,1\n")
    done = distgcn_in_process(["train", "--graph", str(tmp_path / graph), "--epochs", "1"], ranks=2)
    assert done.returncode == 2
    assert done.stderr.startswith(f"distgcn: error: rank 0: {tmp_path / graph}: ")
    assert done.stderr.count("\n") == 1, done.stderr


def test_under_mpiexec_the_unreadable_graph_is_one_line_and_status_2(tmp_path):
    from conftest import run_distgcn

    done = run_distgcn(["train", "--graph", str(tmp_path / "missing.txt"), "--epochs", "1"], ranks=2, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"distgcn: error: rank 0: {tmp_path / 'missing.txt'}: no such file or directory " \
                          f"(expected {done.stderr.split('(expected ', 1)[1]}"
    assert done.stderr.count("\n") == 1 and done.stdout == ""
