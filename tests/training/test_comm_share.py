"""The epoch line's communication share cannot pass 100% (issue #16: it read 105.8% with ranks sharing cores).

The old share divided the sum of two maxima over ranks (halo wait, allreduce), often of different ranks,
by the slowest epoch. Here one rank spends its epoch waiting on halo rows and the other on allreduces:
each waited 90% of its own epoch, so the share is 90%, where the old formula read 180%.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

from conftest import run_distgcn_in_process

from distgcn.comm.counters import CommCounters
from distgcn.comm.transport.inprocess import InProcessTransport, run_ranks
from distgcn.io.metrics_log import format_epoch
from distgcn.training.trainer import Trainer

WAITS = {0: {"comm_wait_s": 0.9, "allreduce_s": 0.0}, 1: {"comm_wait_s": 0.0, "allreduce_s": 0.9}}
"""Rank 0 waits on halo rows for 0.9 s of its 1 s epoch, rank 1 on allreduces."""


def reduced_record(transport: InProcessTransport) -> dict:
    """The epoch record ``Trainer._reduce_metrics`` makes from this rank's counters (collective)."""
    rank = SimpleNamespace(counters=CommCounters(**WAITS[transport.rank]), transport=transport,
                           global_counts={"train": 1, "val": 1, "test": 1})
    correct = {"train_hits": 0, "val_hits": 0, "test_hits": 0, "val_loss": 0.0}
    return Trainer._reduce_metrics(rank, 1, 0.5, correct, 1.0)


def test_comm_heavy_rank_beside_a_compute_heavy_rank_shows_the_mean_of_their_own_shares():
    records = run_ranks(2, reduced_record)
    assert records[0] == records[1]
    record = records[0]
    assert record["comm_wait_s"] + record["allreduce_s"] > record["epoch_s"]  # the maxima of different ranks
    assert abs(record["comm_share"] - 0.9) < 1e-12
    assert "comm 90.0%" in format_epoch(record)


def test_a_training_run_records_a_share_between_zero_and_one_every_epoch(tmp_path, capsys):
    metrics = tmp_path / "m.jsonl"
    assert run_distgcn_in_process(["train", "--graph", "synthetic:sbm,n=300,classes=2,features=4", "--epochs", "3",
                                   "--metrics", str(metrics)], 3) == [0, 0, 0]
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert len(records) == 3 and all(0.0 <= r["comm_share"] <= 1.0 for r in records)
    shown = [line.split("comm", 1)[1].split("%")[0] for line in capsys.readouterr().out.splitlines()
             if line.startswith("epoch")]
    assert [float(s) for s in shown] == [round(100 * r["comm_share"], 1) for r in records]
