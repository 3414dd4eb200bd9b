"""``train --halo-dtype``: halo messages in bfloat16 or float16, converted back on arrival.

The distributed SpMM with a narrow halo must equal a serial product over the
whole Â in which exactly the values that cross ranks (rows of H forward,
partial products backward) are rounded to that dtype; the bytes counted must
be those sent, and the setting must reach the metrics header and the
checkpoint identity. The SpMM check runs tests/mpi_scripts/halo_precision_check.py
on in-process ranks over its grid, and under a real mpiexec once.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from conftest import ROOT, distgcn_in_process, run_distgcn, run_mpi_script

from distgcn.cli.main import build_parser
from distgcn.comm.transport.inprocess import run_ranks
from distgcn.data.graph import normalized_adjacency

sys.path.insert(0, str(ROOT / "tests" / "mpi_scripts"))
from halo_precision_check import (  # the code the ranks run, the inputs they generated
    WIDTH,
    check_rank,
    inputs,
)
from spmm_check import make_graph  # the graph the ranks built

WIRE = {"bfloat16": torch.bfloat16, "float16": torch.float16}
GRAPH = "synthetic:sbm,n=300,classes=3,features=8"


def rounded(values: np.ndarray, wire: str) -> np.ndarray:
    return torch.from_numpy(values).to(WIRE[wire]).to(torch.float64).numpy()


N, EDGES, SEED = 120, 500, 7


@pytest.mark.parametrize("wire", ["bfloat16", "float16"])
@pytest.mark.parametrize("directed", [True, False])
@pytest.mark.parametrize("mode", ["random", "contiguous", "skewed"])
@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_spmm_equals_serial_product_with_rounded_halo(ranks, mode, directed, wire):
    result = run_ranks(ranks, lambda t: check_rank(t, N, EDGES, SEED, mode, directed, wire))[0]
    check_rounded_product(result, ranks, directed, wire)


def test_spmm_equals_serial_product_with_rounded_halo_under_mpiexec(tmp_path):
    """The same check on real MPI ranks, where bfloat16 travels as int16 (numpy has no bfloat16)."""
    ranks, mode, directed, wire = 3, "contiguous", True, "bfloat16"
    result = run_mpi_script("halo_precision_check.py", ranks, tmp_path / "result.json", str(N), str(EDGES),
                            str(SEED), mode, "1" if directed else "0", wire)
    check_rounded_product(result, ranks, directed, wire)


def check_rounded_product(result: dict, ranks: int, directed: bool, wire: str) -> None:
    """The ranks' products and halo buffers against a serial product that rounds exactly what crossed ranks."""
    a_hat = sp.csr_matrix(normalized_adjacency(make_graph(N, EDGES, SEED, directed)))
    parts = np.asarray(result["parts"])
    h, g = inputs(N, SEED)

    # Forward: Â's entries within a part multiply H, entries across parts multiply H rounded.
    coo = a_hat.tocoo()
    inside = parts[coo.row] == parts[coo.col]
    a_inside = sp.csr_matrix((coo.data[inside], (coo.row[inside], coo.col[inside])), shape=a_hat.shape)
    y_ref = a_inside @ h + (a_hat - a_inside) @ rounded(h, wire)
    # Backward: part q's partial sums Â[rows of q]ᵀ G[rows of q] are rounded when they go to another part.
    partials = [a_hat[parts == q].T @ g[parts == q] for q in range(ranks)]
    gt_ref = np.zeros_like(g)
    for q, partial in enumerate(partials):
        crossing = rounded(partial, wire)
        gt_ref += np.where((parts == q)[:, None], partial, crossing)

    y, gt = np.zeros_like(h), np.zeros_like(g)
    for rank in result["ranks"]:
        y[rank["ids"]] = rank["y"]
        gt[rank["ids"]] = rank["gt"]
        # What lands in the halo buffer is the rounded row, bit for bit.
        assert np.array_equal(np.asarray(rank["halo"]).reshape(-1, WIDTH), rounded(h[rank["halo_ids"]], wire))
        for rows, nbytes, _ in (rank["forward"], rank["backward"]):
            assert nbytes == rows * WIDTH * 2
    np.testing.assert_allclose(y, y_ref, rtol=0, atol=1e-13)
    np.testing.assert_allclose(gt, gt_ref, rtol=0, atol=1e-13)
    # The rounding is visible: the exact products differ by far more than the tolerance.
    assert np.abs(y - a_hat @ h).max() > 1e-5 and np.abs(gt - a_hat.T @ g).max() > 1e-5


def train(tmp_path, name: str, *extra: str, ranks: int = 2, in_process: bool = False) -> subprocess.CompletedProcess:
    """``distgcn train`` under mpiexec, or on in-process ranks where the launcher is not what a test is about."""
    args = ["train", "--graph", GRAPH, "--epochs", "2", "--hidden", "8", "--threads", "1", "--quiet",
            "--metrics", str(tmp_path / f"{name}.jsonl"), *extra]
    return distgcn_in_process(args, ranks=ranks) if in_process else run_distgcn(args, ranks=ranks)


def records(tmp_path, name: str) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]


def test_bfloat16_halves_the_bytes_on_mpi_and_gloo(tmp_path):
    """The float32 run that the counts are compared with is on in-process ranks (its counts are the code's);
    the bfloat16 runs are real MPI and gloo jobs, where the narrow halo travels as each transport sends it."""
    for name, extra, in_process in (("full", (), True), ("mpi", ("--halo-dtype", "bfloat16"), False),
                                    ("gloo", ("--halo-dtype", "bfloat16", "--backend", "gloo"), False)):
        proc = train(tmp_path, name, *extra, in_process=in_process)
        assert proc.returncode == 0, proc.stderr
    full, mpi, gloo = records(tmp_path, "full"), records(tmp_path, "mpi"), records(tmp_path, "gloo")
    assert full[0]["run"]["halo_dtype"] == "float32" and mpi[0]["run"]["halo_dtype"] == "bfloat16"
    for f, m in zip(full, mpi):
        assert m["halo_rows"] == f["halo_rows"] > 0
        assert m["messages"] == f["messages"]
        assert 2 * m["halo_bytes"] == f["halo_bytes"]
    assert [r["loss"] for r in mpi] != [r["loss"] for r in full]  # the rounding took effect
    # Both transports move the same bits, and the senders' sums are added in a fixed order.
    assert [r["loss"] for r in gloo] == [r["loss"] for r in mpi]
    assert [r["halo_bytes"] for r in gloo] == [r["halo_bytes"] for r in mpi]


def test_flag_parses_and_a_bad_value_is_an_argparse_error(capsys):
    parser = build_parser()
    assert parser.parse_args(["train", "--graph", GRAPH]).halo_dtype is None
    assert parser.parse_args(["train", "--graph", GRAPH, "--halo-dtype", "float16"]).halo_dtype == "float16"
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["train", "--graph", GRAPH, "--halo-dtype", "int8"])
    assert exc.value.code == 2
    assert "argument --halo-dtype: invalid choice: 'int8'" in capsys.readouterr().err


def test_refused_with_minibatch_training(tmp_path):
    proc = train(tmp_path, "minibatch", "--sampler", "node", "--batch-size", "100", "--halo-dtype", "bfloat16",
                 ranks=1, in_process=True)
    assert proc.returncode == 2
    assert "distgcn: error: --halo-dtype applies to full-batch training only" in proc.stderr


def test_resume_with_another_halo_dtype_is_refused(tmp_path):
    """The rounding changes every update, so a resumed run must keep it; naming the training dtype is no change."""
    checkpoints = ["--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-every", "1"]
    assert train(tmp_path, "full", *checkpoints, ranks=1, in_process=True).returncode == 0
    proc = train(tmp_path, "same", "--halo-dtype", "float32", "--resume", *checkpoints, ranks=1, in_process=True)
    assert proc.returncode == 0, proc.stderr
    assert "resuming after epoch 2" in proc.stdout
    proc = train(tmp_path, "bf16", "--halo-dtype", "bfloat16", "--resume", *checkpoints, ranks=1, in_process=True)
    assert proc.returncode == 2
    assert "refusing to resume" in proc.stderr and "halo_dtype" in proc.stderr
