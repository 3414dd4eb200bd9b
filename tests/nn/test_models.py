"""GraphSAGE and GAT (``train --conv sage|gat``): distributed training equals an independent dense
single-process reference (tests/oracles/reference_models.py), and the halo traffic equals the partition's volume
times the documented number of exchanges per epoch (docs/models.md)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import (
    cora_accuracies,
    dataset,
    devices,
    distgcn_in_process,
    run_distgcn_in_process,
)
from hash_oracle import MASK, PHI_INCREMENT, oracle_mix64
from reference_models import reference_gat, reference_sage
from volume_oracle import brute_volume

from distgcn.data.prepare import GraphOptions, prepare_graph
from distgcn.partitioning.models import compute_parts

EPOCHS = 4
SEED = 5


def exchanges_per_epoch(conv: str, layers: int, first_projects: bool) -> int:
    """Halo exchanges of one full-batch epoch (training forward, backward, evaluation forward).

    GraphSAGE as the GCN: one per layer forward (twice: training and evaluation), one per layer backward but
    for layer 0 when it aggregates X before multiplying (X needs no gradient). GAT: z of every layer crosses
    forward, and so do its source terms a_src·z (computed by the rows' owners); backward, both gradients, layer 0
    included (z = X·W needs one for W): six per layer.
    """
    if conv == "gat":
        return 6 * layers
    return 3 * layers - 1 + first_projects


def run_and_compare(tmp_path, conv: str, spec: str, extra: list[str], symmetrize: bool, partition: str, ranks: int,
                    model_args: list[str], reference_kwargs: dict) -> list[dict]:
    metrics, weights = tmp_path / "m.jsonl", tmp_path / "w.npz"
    args = ["train", "--graph", spec, *extra, *(["--symmetrize"] if symmetrize else []), "--conv", conv,
            "--partition", partition, "--dtype", "float64", "--epochs", str(EPOCHS), "--seed", str(SEED),
            *model_args, "--metrics", str(metrics), "--save-weights", str(weights), "--quiet"]
    assert run_distgcn_in_process(args, ranks) == [0] * ranks
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    options = GraphOptions(spec=spec, features=8 if extra else None, classes=3 if extra else None, seed=SEED,
                           symmetrize=symmetrize)
    graph, a_hat = prepare_graph(options)
    reference = reference_sage if conv == "sage" else reference_gat
    losses, ref_weights = reference(graph.adj, graph.features, graph.labels, graph.train_mask, epochs=EPOCHS,
                                    seed=SEED, **reference_kwargs)
    np.testing.assert_allclose([r["loss"] for r in records], losses, rtol=1e-6)
    with np.load(weights) as npz:
        got = [npz[f"arr_{i}"] for i in range(sum(name.startswith("arr_") for name in npz.files))]
    assert [g.shape for g in got] == [r.shape for r in ref_weights]
    for g, r in zip(got, ref_weights):
        np.testing.assert_allclose(g, r, rtol=1e-6, atol=1e-9 * np.abs(r).max())

    parts, _ = compute_parts(partition, a_hat, ranks, epsilon=0.03, seed=SEED)
    rows, messages = brute_volume(a_hat, parts)
    hidden = reference_kwargs["hidden"]
    first_out = hidden * reference_kwargs.get("heads", 1) if conv == "gat" else hidden
    exchanges = exchanges_per_epoch(conv, 2, first_out < graph.features.shape[1])
    for r in records:
        if ranks == 1:
            assert r["halo_rows"] == 0 and r["spmm_exchanges"] == 0
        else:
            assert r["spmm_exchanges"] == exchanges
            assert r["halo_rows"] == rows * exchanges
            assert r["messages"] == messages * exchanges
    return records


@pytest.mark.unit  # in-process ranks (tests/conftest.py: tiers)
@pytest.mark.parametrize("symmetrize", [False, True], ids=["directed", "undirected"])
@pytest.mark.parametrize("partition", ["random", "contiguous"])
@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_sage_distributed_equals_dense_reference(tmp_path, directed_graph, symmetrize, partition, ranks):
    run_and_compare(tmp_path, "sage", directed_graph, ["--features", "8", "--classes", "3"], symmetrize, partition,
                    ranks, ["--hidden", "6", "--dropout", "0.4"], {"hidden": 6, "dropout": 0.4})


@pytest.mark.unit
@pytest.mark.parametrize("symmetrize", [False, True], ids=["directed", "undirected"])
@pytest.mark.parametrize("partition", ["random", "contiguous"])
@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_gat_distributed_equals_dense_reference(tmp_path, directed_graph, symmetrize, partition, ranks):
    run_and_compare(tmp_path, "gat", directed_graph, ["--features", "8", "--classes", "3"], symmetrize, partition,
                    ranks, ["--hidden", "4", "--heads", "3", "--output-heads", "2", "--dropout", "0.3",
                            "--attention-dropout", "0.5", "--lr", "0.01"],
                    {"hidden": 4, "heads": 3, "output_heads": 2, "dropout": 0.3, "attention_dropout": 0.5,
                     "lr": 0.01})


@pytest.mark.unit
def test_sage_without_root_weight_and_sgd(tmp_path, directed_graph):
    """No W_self, three layers, SGD: a different parameter list and an aggregation-first middle layer."""
    metrics, weights = tmp_path / "m.jsonl", tmp_path / "w.npz"
    args = ["train", "--graph", directed_graph, "--features", "8", "--classes", "3", "--conv", "sage",
            "--no-root-weight", "--layers", "3", "--hidden", "10,4", "--optimizer", "sgd", "--lr", "0.5",
            "--partition", "random", "--dtype", "float64", "--epochs", "3", "--seed", "2",
            "--metrics", str(metrics), "--save-weights", str(weights), "--quiet"]
    assert run_distgcn_in_process(args, 3) == [0] * 3
    graph, _ = prepare_graph(GraphOptions(spec=directed_graph, features=8, classes=3, seed=2))
    losses, ref = reference_sage(graph.adj, graph.features, graph.labels, graph.train_mask, layers=3,
                                 hidden=[10, 4], optimizer="sgd", lr=0.5, epochs=3, seed=2, root_weight=False)
    np.testing.assert_allclose([json.loads(x)["loss"] for x in metrics.read_text().splitlines()], losses, rtol=1e-6)
    with np.load(weights) as npz:
        assert sorted(npz.files) == sorted([*(f"arr_{i}" for i in range(6)), "model"])  # 3 W_neigh, 3 biases
        for i, r in enumerate(ref):
            np.testing.assert_allclose(npz[f"arr_{i}"], r, rtol=1e-6, atol=1e-9 * np.abs(r).max())


@pytest.mark.unit
@pytest.mark.parametrize("conv", ["sage", "gat"])
def test_sparse_bag_of_words_input_equals_dense_reference(tmp_path, conv):
    """Cora's 1,433 sparse columns take the sparse-input path of layer 0 (sparse_input.py) at P=2."""
    cora = str(dataset("cora_planetoid"))
    kwargs = {"hidden": 4, "heads": 2, "output_heads": 1, "dropout": 0.5, "lr": 0.01} if conv == "gat" else \
        {"hidden": 8, "dropout": 0.5, "lr": 0.01}
    model_args = ["--hidden", str(kwargs["hidden"]), "--dropout", "0.5", "--lr", "0.01"]
    if conv == "gat":
        model_args += ["--heads", "2"]
    run_and_compare(tmp_path, conv, cora, [], False, "random", 2, model_args, kwargs)


@pytest.mark.unit
@pytest.mark.parametrize("args, message", [
    (["--conv", "gat", "--comm", "broadcast"], "--comm broadcast: GAT gathers the halo rows themselves"),
    (["--conv", "sage", "--first-layer", "cached"], "--first-layer cached: only --conv gcn"),
    (["--conv", "sage", "--sampler", "node", "--batch-size", "10"], "--conv sage: minibatch training"),
    (["--conv", "gat", "--attention-dropout", "1"], "--attention-dropout"),
    (["--conv", "gcn2"], "--conv: invalid choice"),
])
def test_refused_model_settings_name_the_flag(directed_graph, args, message):
    done = distgcn_in_process(["train", "--graph", directed_graph, "--features", "4", "--classes", "2",
                               "--epochs", "1", *args])
    assert done.returncode == 2, done.stderr
    assert message in done.stderr


def test_softmax_rows_sum_to_one_with_extreme_scores():
    """The row-max shift keeps the softmax finite for scores far beyond exp's range."""
    from distgcn.nn.gat import _softmax_by_row

    scores = torch.tensor([[1000.0], [-1000.0], [5.0], [-3000.0], [-2990.0]], dtype=torch.float64)
    rows = torch.tensor([0, 0, 1, 2, 2])
    alpha = _softmax_by_row(scores, rows, 3)
    assert torch.isfinite(alpha).all()
    sums = torch.zeros(3, dtype=torch.float64).index_add(0, rows, alpha[:, 0])
    np.testing.assert_allclose(sums.numpy(), 1.0)
    np.testing.assert_allclose(alpha[3:, 0].numpy(), np.exp([-10.0, 0.0]) / (1 + np.exp(-10.0)))


@pytest.mark.parametrize("chunk_bytes", [1, 40, 1 << 24], ids=["edge-by-edge", "some-edges", "all-at-once"])
def test_edge_weighted_sum_gradients_match_finite_differences(monkeypatch, chunk_bytes):
    """The chunked attention sum's hand-written backward, against torch's numerical gradient, in any slicing
    (one rank: the halo edges' own path is checked against the dense reference above)."""
    import scipy.sparse as sp

    from distgcn.comm.counters import CommCounters
    from distgcn.comm.transport.inprocess import run_ranks
    from distgcn.nn import gat
    from distgcn.spmm.halo import HaloExchanger, HaloPlan

    monkeypatch.setattr(gat, "CHUNK_BYTES", chunk_bytes)
    dst = np.array([0, 0, 1, 2, 2, 2, 1, 3, 4])
    src = np.array([0, 3, 1, 2, 4, 0, 4, 3, 4])
    block = sp.csr_matrix((np.ones(9), (dst, src)), shape=(5, 5))
    gen = torch.Generator().manual_seed(0)
    alpha = torch.rand((9, 2), generator=gen, dtype=torch.float64, requires_grad=True)
    z = torch.rand((5, 2, 3), generator=gen, dtype=torch.float64, requires_grad=True)

    def rank_main(transport) -> None:
        plan = HaloPlan(n_owned=5, n_halo=0, send_peers=[], send_slices=[], send_index=torch.zeros(0, dtype=torch.int64),
                        recv_peers=[], recv_slices=[])
        exchanger = HaloExchanger(plan, transport, CommCounters(), exchanges=False)
        graph = gat.AttentionGraph.from_blocks(block, sp.csr_matrix((5, 0)), np.arange(5), np.zeros(0, np.int64),
                                               exchanger)
        assert np.all(np.diff(graph.dst.numpy() * 5 + graph.src.numpy()) > 0)  # owned edges in (row, column) order
        edges = torch.from_numpy(np.argsort(dst * 5 + src))  # alpha's edge behind each of the graph's
        assert torch.autograd.gradcheck(lambda a, x: gat._HaloEdgeSum.apply(a[edges], x, graph), (alpha, z))
        expected = torch.zeros((5, 2, 3), dtype=torch.float64)
        for e in range(9):
            expected[dst[e]] += alpha[e].detach().unsqueeze(-1) * z[src[e]].detach()
        torch.testing.assert_close(gat._HaloEdgeSum.apply(alpha[edges], z, graph), expected)

    run_ranks(1, rank_main)


@pytest.mark.slow
def test_gat_cora_accuracy_reaches_81_percent(tmp_path):
    """Veličković et al.'s Cora setting (published 83.0% with early stopping); 200 epochs, mean of 5 seeds >= 81%
    (measured 0.821; 0.818 after 300 epochs, 0.823 after 150: the test accuracy has levelled off by then).

    One rank: more ranks train the same model up to float rounding, epoch by epoch (the exactness tests above)."""
    settings = ["--partition", "random", "--conv", "gat", "--hidden", "8", "--heads", "8", "--dropout", "0.6",
                "--lr", "0.005", "--weight-decay", "5e-4", "--epochs", "200"]
    accuracies = cora_accuracies(tmp_path, settings, lambda args: distgcn_in_process(args, ranks=1))
    assert np.mean(accuracies) >= 0.81, accuracies


@pytest.mark.parametrize("device", devices())
def test_gat_edge_mask_of_a_gpu_rank_is_the_cpu_mask_bit_for_bit(device: str):
    """The int64 torch form (what a GPU rank computes) and the numpy mask, against the definition in Python ints:
    edge e = mix64(dst · GOLDEN + key) + src, head k kept iff lane k mod 4 of mix64(e · ceil(K/4) + key · GOLDEN
    + k div 4) is at least round(p · 65536); ids past 2**63 included."""
    from distgcn.nn.gat import attention_key, edge_keep_mask, scaled_edge_mask_torch

    rng = np.random.default_rng(7)
    dst = [*rng.integers(0, 2**40, 40).tolist(), 0, 2**63 - 1]
    src = [*rng.integers(0, 2**40, 40).tolist(), 2**63 - 1, 5]
    key = attention_key(SEED, 2, 1)

    def kept(d: int, s: int, head: int, heads: int, p: float) -> bool:
        edge = (oracle_mix64((d * PHI_INCREMENT + key) & MASK) + s) & MASK
        counter = (edge * ((heads + 3) // 4) + key * PHI_INCREMENT + head // 4) & MASK
        return (oracle_mix64(counter) >> (16 * (head % 4))) & 0xFFFF >= round(p * 65536)

    for heads, p in ((1, 0.5), (3, 0.2), (8, 0.9)):
        want = np.array([[kept(d, s, k, heads, p) for k in range(heads)] for d, s in zip(dst, src)]) / (1.0 - p)
        np.testing.assert_array_equal(edge_keep_mask(np.array(dst, dtype=np.uint64), np.array(src, dtype=np.uint64),
                                                     heads, p, key) / (1.0 - p), want)
        got = scaled_edge_mask_torch(torch.tensor(dst, dtype=torch.int64, device=device),
                                     torch.tensor(src, dtype=torch.int64, device=device), heads, p, key, torch.float64)
        np.testing.assert_array_equal(got.cpu().numpy(), want)
