"""Bad input to ``distgcn train``: one clear line naming the file (and line), exit 2, no traceback.

The commands run on in-process ranks (conftest.distgcn_in_process); refusals under a real mpiexec are
checked by tests/test_partition_command.py and tests/test_verify.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import distgcn_in_process


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
