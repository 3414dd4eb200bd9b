"""The epoch-time model (distgcn/performance/epoch_time.py) against figures worked out by hand, and each rank's
load read from a shard against the same load counted from the matrix and the part vector."""

from __future__ import annotations

import numpy as np
import pytest

from distgcn.performance.epoch_time import (
    ComputeRates,
    Network,
    RankLoad,
    predict_epoch,
    rank_load,
)

RATES = ComputeRates(per_nnz_s=1e-6, per_row_s=1e-5, fixed_s=1e-3)
NETWORK = Network(latency_s=1e-4, bandwidth_bytes_s=1e6)
LOADS = [RankLoad(rows=100, nnz=1000, sent_to={1: 10, 2: 20}),
         RankLoad(rows=50, nnz=2000, sent_to={0: 5}),
         RankLoad(rows=80, nnz=500, sent_to={0: 7, 1: 3})]


def test_one_rank_per_node_worked_by_hand():
    p = predict_epoch(LOADS, [16, 4], 4, [100, 10], RATES, NETWORK)
    # compute: 1e-6 nnz + 1e-5 rows + 1e-3 -> 3.0, 3.5, 2.3 ms; rank 1 is the slowest
    assert [r["compute_s"] for r in p["ranks"]] == pytest.approx([3.0e-3, 3.5e-3, 2.3e-3])
    assert p["slowest_rank"] == 1 and p["compute_s"] == pytest.approx(3.5e-3)
    # links: node 0 sends 30 rows (the most), receives 12; at most 2 messages on one link
    assert p["link_rows_per_exchange"] == 30 and p["link_messages_per_exchange"] == 2
    # halo: (2 * 0.1 ms + 30 * 16 * 4 B / 1 MB/s) + (2 * 0.1 ms + 30 * 4 * 4 B / 1 MB/s) = 2.12 + 0.68 ms
    assert p["halo_s"] == pytest.approx(2.8e-3)
    # allreduce: 4 reductions (2 gradients, 2 metrics), 2 rounds of 0.1 ms each; 4/3 of 472 B at 1 MB/s
    assert p["allreduce_s"] == pytest.approx(8e-4 + 4 / 3 * 472e-6)
    assert p["serial_s"] == pytest.approx(3.5e-3 + 2.8e-3 + 8e-4 + 4 / 3 * 472e-6)
    # overlapped: each exchange hides behind 3.5 / 2 ms of compute: 2.12 - 1.75 = 0.37 ms stays exposed
    assert p["halo_exposed_s"] == pytest.approx(3.7e-4)
    assert p["overlapped_s"] == pytest.approx(3.5e-3 + 3.7e-4 + 8e-4 + 4 / 3 * 472e-6)


def test_ranks_sharing_a_node_exchange_through_memory():
    p = predict_epoch(LOADS, [16], 4, [100], RATES, NETWORK, ranks_per_node=2)
    # node 0 = ranks 0, 1; node 1 = rank 2. Crossing: 0 -> 2 (20 rows), 2 -> 0 (7), 2 -> 1 (3)
    assert p["link_rows_per_exchange"] == 20 and p["link_messages_per_exchange"] == 2
    assert p["halo_s"] == pytest.approx(2e-4 + 20 * 16 * 4 / 1e6)
    # two nodes: one round, each sends its whole share
    assert p["allreduce_s"] == pytest.approx(3 * 1e-4 + (100 + 4 + 4) * 4 / 1e6)


def test_one_rank_has_no_communication():
    p = predict_epoch([RankLoad(10, 100, {})], [16, 4], 4, [100], RATES, NETWORK)
    assert p["halo_s"] == 0 and p["allreduce_s"] == 0
    assert p["serial_s"] == p["overlapped_s"] == pytest.approx(RATES.epoch_s(100, 10))


def test_a_shard_s_load_is_what_the_matrix_and_the_parts_say(tmp_path):
    from distgcn import api
    from distgcn.shard.directory import load_listed_shard, read_meta

    part = api.partition("synthetic:sbm,n=600,classes=3,features=4,seed=2", parts=3, model="random", seed=5)
    part.write(tmp_path / "p", quiet=True)
    meta = read_meta(tmp_path / "p")
    a = part.a_hat.tocsr()
    parts = np.asarray(part.parts)
    for rank in range(3):
        load = rank_load(load_listed_shard(tmp_path / "p", meta, rank))
        owned = np.flatnonzero(parts == rank)
        assert load.rows == len(owned)
        assert load.nnz == a[owned].nnz
        for peer in range(3):
            if peer != rank:  # rows of this rank that some row of the peer has a nonzero in: the peer's halo
                needed = np.unique(a[np.flatnonzero(parts == peer)].indices)
                assert load.sent_to.get(peer, 0) == int(np.sum(parts[needed] == rank))


def test_a_receiving_link_counts_as_much_as_a_sending_one():
    loads = [RankLoad(10, 10, {}), RankLoad(10, 10, {0: 40}), RankLoad(10, 10, {0: 30})]
    p = predict_epoch(loads, [8], 4, [], RATES, NETWORK)
    assert p["link_rows_per_exchange"] == 70 and p["link_messages_per_exchange"] == 2
    assert p["halo_s"] == pytest.approx(2e-4 + 70 * 8 * 4 / 1e6)


def test_an_exchange_takes_the_longer_of_the_link_and_the_cpu_work_of_moving_the_halo():
    # rank 0 sends 30 rows and receives 12, rank 1 sends 5 and receives 13, rank 2 sends 10 and receives 20: rank 0
    # moves the most, 42 rows; 16 + 4 values per row per epoch
    light = predict_epoch(LOADS, [16, 4], 4, [100, 10], ComputeRates(1e-6, 1e-5, 1e-3, 1e-7), NETWORK)
    assert [r["rows_received"] for r in light["ranks"]] == [12, 13, 20]
    assert [r["distribution_s"] for r in light["ranks"]] == pytest.approx([840e-7, 360e-7, 600e-7])
    assert light["distribution_s"] == pytest.approx(42 * 20 * 1e-7)
    assert light["halo_s"] == pytest.approx(2.8e-3)  # the link is longer: 2.12 and 0.68 ms
    assert light["compute_s"] == pytest.approx(3.5e-3)  # local work only
    heavy = predict_epoch(LOADS, [16, 4], 4, [100, 10], ComputeRates(1e-6, 1e-5, 1e-3, 1e-5), NETWORK)
    assert heavy["halo_s"] == pytest.approx(42 * 16 * 1e-5 + 42 * 4 * 1e-5)  # the CPU is longer: 6.72, 1.68 ms
    assert heavy["link_s"] == pytest.approx(2.8e-3)
