"""``train --halo-window K``: at most K rounds of halo messages in memory, for the whole halo's results bit for bit.

Every rank adds what it receives in round order whether the rounds fly all at
once or K at a time, so a windowed run must give the same bits as the whole
halo, and move the same rows. A recording transport checks what the window
promises: never more than K receives posted and unfinished, every one landing
in one of K slots, and no received row kept by autograd past its product.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import distgcn
from distgcn.comm.transport.inprocess import run_ranks
from distgcn.config import ConfigError
from distgcn.data.graph import Graph

UNDIRECTED = "synthetic:sbm,n=240,classes=3,features=8,avg_degree=6"


def _graph(directed: bool, directed_graph: str) -> Graph:
    if directed:
        return distgcn.load_graph(directed_graph, features=8, classes=3, seed=1)
    return distgcn.load_graph(UNDIRECTED)


def _train(graph: Graph, ranks: int, window: int | None, **keywords) -> list[distgcn.TrainResult]:
    settings = dict(epochs=3, layers=3, hidden=(12, 10), dropout=0.5, seed=4, halo_window=window)
    settings.update(keywords)
    parts = distgcn.partition(graph, ranks, model="random", seed=2)
    return run_ranks(ranks, lambda transport: distgcn.train(parts if transport.rank == 0 else None,
                                                            transport=transport, **settings))


def _assert_same_bits(got: list[distgcn.TrainResult], expected: list[distgcn.TrainResult],
                      refetches: int = 0) -> None:
    """The same numbers; the window's traffic is the whole halo's plus ``refetches`` exchanges per epoch (GAT's
    halo rows fetched again in the backward pass), each moving what every other exchange moves."""
    for mine, theirs in zip(got, expected):
        for key in ("loss", "train_acc", "val_acc", "test_acc"):
            assert [r[key] for r in mine.history] == [r[key] for r in theirs.history], key
        for r, whole in zip(mine.history, theirs.history):
            extra = refetches if whole["spmm_exchanges"] else 0
            assert r["spmm_exchanges"] == whole["spmm_exchanges"] + extra
            for key in ("halo_rows", "messages"):
                assert r[key] * whole["spmm_exchanges"] == whole[key] * r["spmm_exchanges"], key
        for a, b in zip(mine.weights, theirs.weights):
            assert np.array_equal(a, b)
        for a, b in zip(mine.layer_outputs, theirs.layer_outputs):
            assert np.array_equal(a, b)


@pytest.mark.parametrize("conv", ["gcn", "sage", "gat"])
@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
@pytest.mark.parametrize("ranks, window", [(1, 2), (2, 2), (3, 2), (4, 2), (5, 2), (5, 3)])
def test_a_window_gives_the_bits_of_the_whole_halo(directed_graph, conv, directed, ranks, window):
    graph = _graph(directed, directed_graph)
    keywords = {"conv": conv, **({"heads": 2} if conv == "gat" else {})}
    windowed, whole = _train(graph, ranks, window, **keywords), _train(graph, ranks, None, **keywords)
    streams = window < ranks - 1  # fewer rounds in flight than a rank may have: GAT fetches its halo rows again
    _assert_same_bits(windowed, whole, refetches=3 if conv == "gat" and streams else 0)  # 3 layers


@pytest.mark.parametrize("keywords", [{"sampler": "node", "batch_size": 120}, {"comm": "broadcast"},
                                      {"halo_dtype": "bfloat16"}, {"first_layer": "cached"}],
                         ids=["minibatch", "broadcast", "bfloat16-wire", "cached"])
def test_a_window_gives_the_bits_of_the_whole_halo_in_every_mode(directed_graph, keywords):
    graph = _graph(True, directed_graph)
    _assert_same_bits(_train(graph, 5, 2, **keywords), _train(graph, 5, None, **keywords))


class RecordingTransport:
    """The in-process transport, recording each receive posted: how many are unfinished at once, and where."""

    def __init__(self, inner):
        self._inner = inner
        self.in_flight = 0
        self.most_in_flight = 0
        self.landings: set[int] = set()
        """Where every receive landed (its buffer's address)."""

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def exchange(self, sends, recvs):
        posted = self._inner.exchange(sends, recvs)
        self.in_flight += len(recvs)
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self.landings |= {buf.data_ptr() for _, buf in recvs}
        recorder = self

        class Counted:
            def completed_receives(self):
                for index in posted.completed_receives():
                    recorder.in_flight -= 1
                    yield index

            def wait_sends(self):
                posted.wait_sends()

        return Counted()


def _windowed_product(transport, conv: str, window: int | None) -> dict:
    """One forward and backward pass of a 2-layer model's first aggregation, with the window's evidence."""
    from distgcn.comm.counters import CommCounters
    from distgcn.data.graph import normalized_adjacency
    from distgcn.kernels import kernels_for
    from distgcn.nn.model import LocalGraph
    from distgcn.nn.registry import model_class
    from distgcn.shard.cut import iter_shards
    from distgcn.spmm.halo import HaloExchanger, HaloPlan

    graph = distgcn.load_graph(UNDIRECTED)
    rng = np.random.default_rng(0)
    parts = rng.integers(0, transport.size, graph.adj.shape[0])
    shard = list(iter_shards(graph, normalized_adjacency(graph.adj), parts, transport.size, "test"))[transport.rank]
    recording = RecordingTransport(transport)
    plan = HaloPlan.from_shard(shard)
    exchanger = HaloExchanger(plan, recording, CommCounters(), exchanges=True, window=window)
    aggregate = model_class(conv).aggregation(LocalGraph(shard.owned_block, shard.halo_block, shard.global_ids,
                                                         shard.halo_global_ids, exchanger, torch.float64,
                                                         kernels_for(torch.device("cpu"), "numba")))
    h = torch.from_numpy(rng.standard_normal((shard.n_owned, 16))).requires_grad_()
    saved: list[torch.Tensor] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        y = aggregate(h)
    y.backward(torch.ones_like(y))
    slot_rows = [s.stop - s.start for s in plan.recv_slices]
    halo_addresses = recording.landings
    kept_halo = [t for t in saved if any(t.untyped_storage().data_ptr() <= a
                                         < t.untyped_storage().data_ptr() + t.untyped_storage().nbytes()
                                         for a in halo_addresses)]
    return {"most_in_flight": recording.most_in_flight, "landings": len(recording.landings),
            "rounds": len(exchanger._rounds), "largest": max(slot_rows, default=0),
            "buffer_rows": exchanger.buffer_rows, "n_halo": plan.n_halo, "rows_sent": plan.rows_sent,
            "largest_sent": max((s.stop - s.start for s in plan.send_slices), default=0),
            "kept_halo": len(kept_halo)}


@pytest.mark.parametrize("conv", ["gcn", "sage"])
def test_no_halo_row_outlives_its_window(conv):
    window = 2
    for rank in run_ranks(6, lambda t: _windowed_product(t, conv, window)):
        assert rank["rounds"] == 5
        assert rank["most_in_flight"] <= window  # never more than K receives unfinished
        assert rank["landings"] <= 2 * window  # every receive lands in one of K slots, forward and reverse
        # message buffers: K slots of the largest message each way (one width; the reverse reuses the forward's),
        # not the whole halo
        assert rank["buffer_rows"] == window * (rank["largest"] + rank["largest_sent"])
        assert rank["buffer_rows"] < rank["n_halo"] + rank["rows_sent"]
        assert rank["kept_halo"] == 0  # autograd saved nothing that lives in a slot


def test_the_whole_halo_keeps_every_round_in_flight_and_the_check_sees_it():
    """The same evidence for the whole halo: all rounds at once, one landing per sender (the check can fail)."""
    for rank in run_ranks(6, lambda t: _windowed_product(t, "gcn", None)):
        assert rank["most_in_flight"] == rank["rounds"] == 5
        assert rank["landings"] == 2 * rank["rounds"]  # forward slices of the halo buffer, reverse of the send one


def test_the_window_is_refused_below_two_with_the_flag_named(tmp_path):
    from conftest import distgcn_in_process

    done = distgcn_in_process(["train", "--graph", UNDIRECTED, "--halo-window", "1", "--epochs", "1"])
    assert done.returncode == 2 and "--halo-window" in done.stderr and ">= 2" in done.stderr
    with pytest.raises(ConfigError, match="halo_window"):
        distgcn.train(UNDIRECTED, halo_window=1, epochs=1)


@pytest.mark.parametrize("backend", ["mpi", "gloo"])
def test_a_window_under_mpiexec_gives_the_bits_of_the_whole_halo(tmp_path, backend):
    """Real MPI (and gloo's sockets) with messages past MPICH's eager limit (a rendezvous: a send completes only
    once its receive is posted), so a schedule that could wait in a cycle would hang here: 4 ranks, 3 rounds,
    2 in flight."""
    from conftest import run_distgcn

    records = {}
    for window in ("2", "all"):
        metrics = tmp_path / f"{window}.jsonl"
        # about 200 rows a message, 256 columns of float32: 200 KB, past any eager limit
        proc = run_distgcn(["train", "--graph", "synthetic:sbm,n=3000,classes=4,features=256,avg_degree=8",
                            "--partition", "random", "--hidden", "256", "--epochs", "2", "--threads", "1",
                            "--backend", backend, "--halo-window", window, "--metrics", str(metrics), "--quiet"],
                           ranks=4, timeout=240)
        assert proc.returncode == 0, proc.stderr
        records[window] = [json.loads(line) for line in metrics.read_text().splitlines()]
    for key in ("loss", "train_acc", "test_acc", "halo_rows", "messages", "spmm_exchanges"):
        assert [r[key] for r in records["2"]] == [r[key] for r in records["all"]], key
    assert records["2"][0]["halo_rows"] > 0
    assert records["2"][0]["run"]["halo_window"] == 2 and records["all"][0]["run"]["halo_window"] is None


def test_a_run_resumes_with_another_window_and_ends_with_the_same_bits(tmp_path, directed_graph):
    """The window changes no result, so it is not part of a checkpoint's identity: two epochs with a window of 2,
    resumed to four with the whole halo, end where four epochs of either end."""
    graph = _graph(True, directed_graph)
    checkpoints = tmp_path / "ckpt"
    _train(graph, 5, 2, epochs=2, checkpoint_dir=str(checkpoints), checkpoint_every=1)
    resumed = _train(graph, 5, None, epochs=4, checkpoint_dir=str(checkpoints), checkpoint_every=1, resume=True)
    straight = _train(graph, 5, 2, epochs=4)
    assert [r["epoch"] for r in resumed[0].history] == [3, 4]
    for mine, theirs in zip(resumed, straight):
        assert [r["loss"] for r in mine.history] == [r["loss"] for r in theirs.history[2:]]
        for a, b in zip(mine.weights, theirs.weights):
            assert np.array_equal(a, b)


@pytest.mark.parametrize("conv, window, ranks", [("gat", 2, 5), ("gat", 4, 5), ("gat", None, 5), ("gcn", 2, 5),
                                                 ("sage", 2, 5)])
def test_the_exchanges_an_epoch_makes_are_the_ones_stats_predicts(directed_graph, conv, window, ranks):
    """``stats --predict`` counts the exchanges of an epoch from the layer type (GAT's extra fetch of its halo rows
    included where the window streams); training makes exactly those, each moving the plan's volume."""
    from distgcn.config import ModelConfig
    from distgcn.memory.from_sizes import epoch_exchange_widths

    keywords = {"conv": conv, **({"heads": 2} if conv == "gat" else {})}
    results = _train(_graph(True, directed_graph), ranks, window, **keywords)
    model = ModelConfig(layers=3, hidden=(12, 10), conv=conv, halo_window=window, **({"heads": 2} if conv == "gat"
                                                                                     else {}))
    predicted = epoch_exchange_widths(model, 8, 3, ranks)
    assert len(predicted) == (21 if conv == "gat" and window == 2 else 18 if conv == "gat" else 8)
    volume = distgcn.partition(_graph(True, directed_graph), ranks, model="random", seed=2).metrics["volume"]["total"]
    for record in results[0].history:
        assert record["spmm_exchanges"] == len(predicted)
        assert record["halo_rows"] == len(predicted) * volume
