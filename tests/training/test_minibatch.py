"""Distributed minibatch training through ``distgcn train --sampler``, on in-process and real mpiexec ranks.

Every P must train on the same batches as one process and get the same
losses as the single-process oracle (tests/oracles/minibatch_reference.py), and each
batch must move exactly the halo rows its subgraph needs, counted by brute force.
The grid of samplers and P runs the command line's pipeline on in-process
ranks; one case of it, and resuming, run under a real mpiexec.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import random_edge_file, run_distgcn, run_distgcn_in_process
from minibatch_reference import batch_vertices, reference_minibatch

from distgcn.cli.main import main
from distgcn.data.prepare import GraphOptions, prepare_graph
from distgcn.partitioning.models import compute_parts
from distgcn.sampling.distributed import batch_key

SEED, EPOCHS, BATCH, HIDDEN, NORM = 5, 2, 50, 4, 20


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory) -> str:
    """A seeded random directed edge list with 150 vertices (random features and labels added by distgcn)."""
    return random_edge_file(tmp_path_factory.mktemp("graphs") / "directed.txt", n=150, m=600, seed=4)


def train(tmp_path, graph_file: str, sampler: str, ranks: int, *extra: str, in_process: bool = True) -> list[dict]:
    metrics = tmp_path / f"m{ranks}.jsonl"
    args = ["train", "--graph", graph_file, "--partition", "random", "--features", "8", "--classes", "3",
            "--dtype", "float64", "--epochs", str(EPOCHS), "--seed", str(SEED), "--hidden", str(HIDDEN),
            "--sampler", sampler, "--batch-size", str(BATCH), "--norm-samples", str(NORM),
            "--metrics", str(metrics), "--quiet", *extra]
    if in_process:
        assert run_distgcn_in_process(args, ranks) == [0] * ranks
    else:
        proc = run_distgcn(args, ranks=ranks)
        assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in metrics.read_text().splitlines()]


def brute_traffic(a_hat, parts: np.ndarray, s: np.ndarray) -> tuple[int, int]:
    """Rows and messages of one SpMM of the batch Â[S, S], pair by pair."""
    member = np.zeros(a_hat.shape[0], dtype=bool)
    member[s] = True
    coo = a_hat.tocoo()
    pairs = {(int(parts[v]), int(u)) for v, u in zip(coo.row, coo.col)
             if member[v] and member[u] and parts[v] != parts[u]}
    return len(pairs), len({(p, int(parts[u])) for p, u in pairs})


# rw and frontier with non-default options: they must reach the runtime and the checkpoint identity
OPTIONS = {"node": {}, "edge": {}, "rw": {"walk_length": 3}, "frontier": {"frontier_size": 10}}
FLAGS = {"rw": ["--walk-length", "3"], "frontier": ["--frontier-size", "10"]}


@functools.cache
def oracle(graph_file: str, sampler: str) -> tuple[sp.csr_matrix, list[float], list[np.ndarray]]:
    """Â, the single-process losses and every batch's vertex set (computed once per sampler)."""
    graph, a_hat = prepare_graph(GraphOptions(spec=graph_file, features=8, classes=3, seed=SEED))
    expected = reference_minibatch(a_hat, graph.features, graph.labels, graph.train_mask, sampler=sampler,
                                   batch_size=BATCH, epochs=EPOCHS, norm_samples=NORM, hidden=HIDDEN, seed=SEED,
                                   options=OPTIONS[sampler])
    batches = -(-a_hat.shape[0] // BATCH)
    sets = [batch_vertices(a_hat, sampler, BATCH, batch_key(SEED, e, b), **OPTIONS[sampler])
            for e in range(1, EPOCHS + 1) for b in range(batches)]
    return a_hat, expected, sets


@pytest.mark.unit  # in-process ranks: the helper's mpiexec branch is not taken (tests/conftest.py: tiers)
@pytest.mark.parametrize("sample_on", ["host", "device"])
@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
@pytest.mark.parametrize("sampler", ["node", "edge", "rw", "frontier"])
def test_batches_and_losses_equal_single_process(tmp_path, graph_file, sampler, ranks, sample_on):
    """Both the host samplers and the device samplers (torch, here on the CPU) equal the oracle."""
    check_batches_and_losses(tmp_path, graph_file, sampler, ranks, in_process=True, sample_on=sample_on)


def test_batches_and_losses_equal_single_process_under_mpiexec(tmp_path, graph_file):
    check_batches_and_losses(tmp_path, graph_file, "node", 3, in_process=False)


def check_batches_and_losses(tmp_path, graph_file: str, sampler: str, ranks: int, in_process: bool,
                             sample_on: str = "auto") -> None:
    a_hat, expected, sets = oracle(graph_file, sampler)
    records = train(tmp_path, graph_file, sampler, ranks, *FLAGS.get(sampler, []), "--sample-on", sample_on,
                    in_process=in_process)
    iterations = [it for r in records for it in r["iterations"]]
    assert [it["batch_vertices"] for it in iterations] == [len(s) for s in sets]
    np.testing.assert_allclose([it["loss"] for it in iterations], expected, rtol=1e-9)
    for r in records:
        assert r["batch_vertices"] == np.mean([it["batch_vertices"] for it in r["iterations"]])
    if sampler == "rw":  # hand-offs happen only between ranks
        assert all((it["walkers_handed_off"] > 0) == (ranks > 1) for it in iterations)
    if ranks == 1:
        assert all(it["halo_rows"] == 0 for it in iterations)
        return
    parts, _ = compute_parts("random", a_hat, ranks, epsilon=0.03, seed=SEED)
    for it, s in zip(iterations, sets):
        rows, messages = brute_traffic(a_hat, parts, s)
        # hidden 4 < 8 features and 3 classes < 4: both layers multiply by W first, so each batch
        # runs 2 forward and 2 backward SpMMs, each moving exactly the batch's needed rows
        assert (it["halo_rows"], it["messages"]) == (4 * rows, 4 * messages)


def test_resume_continues_the_same_batches(tmp_path, graph_file):
    """Batches derive from (seed, epoch, batch): a run resumed after epoch 1 equals the oracle throughout."""
    graph, a_hat = prepare_graph(GraphOptions(spec=graph_file, features=8, classes=3, seed=SEED))
    expected = reference_minibatch(a_hat, graph.features, graph.labels, graph.train_mask, sampler="node",
                                   batch_size=BATCH, epochs=EPOCHS, norm_samples=NORM, hidden=HIDDEN, seed=SEED)
    metrics = tmp_path / "m.jsonl"
    base = ["train", "--graph", graph_file, "--features", "8", "--classes", "3", "--dtype", "float64",
            "--seed", str(SEED), "--hidden", str(HIDDEN), "--sampler", "node", "--batch-size", str(BATCH),
            "--norm-samples", str(NORM), "--metrics", str(metrics), "--quiet",
            "--checkpoint-dir", str(tmp_path / "ckpt"), "--checkpoint-every", "1"]
    assert run_distgcn([*base, "--epochs", "1"], ranks=2).returncode == 0
    proc = run_distgcn([*base, "--epochs", str(EPOCHS), "--resume"], ranks=2)
    assert proc.returncode == 0, proc.stderr
    resumed = [json.loads(line) for line in metrics.read_text().splitlines()]
    np.testing.assert_allclose([it["loss"] for r in resumed for it in r["iterations"]], expected, rtol=1e-9)


@pytest.mark.parametrize("args, message", [
    (["--sampler", "frontier", "--batch-size", "10", "--frontier-pop", "dashboard"], "Fenwick tree only"),
    (["--sampler", "frontier", "--batch-size", "10", "--frontier-size", "10"], "smaller than the budget"),
    (["--sampler", "node"], "needs --batch-size"),
    (["--batches-per-epoch", "3"], "--batches-per-epoch needs --sampler"),
    (["--batch-size", "10"], "--batch-size needs --sampler"),
    (["--sampler", "node", "--batch-size", "10", "--walk-length", "3"], "applies to the rw sampler"),
])
def test_cli_errors(graph_file, capsys, args, message):
    """Refused before any rank starts (in-process: no transport is made)."""
    assert main(["train", "--graph", graph_file, "--features", "8", "--classes", "3", *args]) == 2
    assert message in capsys.readouterr().err
