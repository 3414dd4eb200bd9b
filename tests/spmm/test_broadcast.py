"""``train --comm broadcast`` (CAGNET-style 1D): the same training as the halo mode, more rows moved.

Both modes run on in-process ranks; one broadcast run under a real mpiexec is
compared with the in-process halo run.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_distgcn, run_distgcn_in_process

N = 120


@pytest.fixture(scope="module")
def graph(tmp_path_factory) -> str:
    """A seeded random directed edge list on vertices 0..N-1 (every id used, so n is N)."""
    rng = np.random.default_rng(4)
    src, dst = rng.integers(0, N, 700), rng.integers(0, N, 700)
    lines = [f"{s}\t{d}" for s, d in zip(src, dst) if s != d] + [f"{v}\t{(v + 1) % N}" for v in range(N)]
    path = tmp_path_factory.mktemp("graphs") / "g.txt"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def train(tmp_path, graph: str, comm: str, ranks: int, in_process: bool = True) -> list[dict]:
    metrics = tmp_path / f"{comm}-{'inprocess' if in_process else 'mpi'}.jsonl"
    args = ["train", "--graph", graph, "--features", "8", "--classes", "3", "--partition", "random",
            "--dtype", "float64", "--epochs", "4", "--seed", "2", "--hidden", "8", "--dropout", "0.5",
            "--comm", comm, "--metrics", str(metrics), "--quiet"]
    if in_process:
        assert run_distgcn_in_process(args, ranks) == [0] * ranks
    else:
        proc = run_distgcn(args, ranks=ranks)
        assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in metrics.read_text().splitlines()]


def check_broadcast_equals_halo(halo: list[dict], broadcast: list[dict], ranks: int) -> None:
    np.testing.assert_allclose([r["loss"] for r in broadcast], [r["loss"] for r in halo], rtol=1e-10)
    for h, b in zip(halo, broadcast):
        assert b["spmm_exchanges"] == h["spmm_exchanges"]
        assert b["halo_rows"] == (ranks - 1) * N * b["spmm_exchanges"]  # every rank's block to every peer
        assert b["messages"] == ranks * (ranks - 1) * b["spmm_exchanges"]
        assert h["halo_rows"] < b["halo_rows"]
        assert b["test_acc"] == h["test_acc"]


@pytest.mark.unit  # in-process ranks: the helper's mpiexec branch is not taken (tests/conftest.py: tiers)
@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_broadcast_equals_halo_and_sends_every_row(tmp_path, graph, ranks):
    check_broadcast_equals_halo(train(tmp_path, graph, "halo", ranks), train(tmp_path, graph, "broadcast", ranks),
                                ranks)


def test_broadcast_under_mpiexec_equals_halo(tmp_path, graph):
    """The broadcast mode on real MPI ranks against the halo mode on in-process ones."""
    check_broadcast_equals_halo(train(tmp_path, graph, "halo", 3),
                                train(tmp_path, graph, "broadcast", 3, in_process=False), 3)
