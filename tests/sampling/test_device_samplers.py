"""The device samplers (torch, :mod:`distgcn.sampling.device`) draw exactly the host samplers' batches.

For every sampler, P = 1..4, a directed and an undirected graph and several
batch keys, each rank's owned and halo memberships from the device sampler
must equal the host sampler's (numpy and numba, separately written), the
gathered vertex sets must equal the whole-graph oracle's
(tests/oracles/minibatch_reference.py), the batch cut on the device must
equal the one scipy cuts on the host (rows, blocks, entry positions, the
restricted plan), and the GraphSAINT counts of a pre-sampling pass must
agree. On the CPU always; on a GPU too wherever one is visible.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from conftest import random_edge_file
from minibatch_reference import batch_vertices

from distgcn.comm.transport.inprocess import run_ranks
from distgcn.config import PartitionerConfig
from distgcn.data.prepare import GraphOptions, prepare_graph
from distgcn.sampling.device import on_device
from distgcn.sampling.distributed import batch_key, presample
from distgcn.shard.scatter import build_and_scatter
from distgcn.spmm.restricted import ShardBlocksOn, build_batch, build_batch_on_device
from distgcn.training.sampler_choice import make_distributed_sampler

SEED, BATCH = 5, 60
SAMPLERS = {"node": {}, "edge": {}, "rw": {"walk_length": 3}, "frontier": {"frontier_size": 12}}
KEYS = [(0, 0), (1, 0), (1, 1), (2, 3)]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device visible (torch.cuda.is_available() is False)"))]


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory) -> str:
    """A seeded random directed edge list, 150 vertices, with dead ends (rows with only the self loop)."""
    return random_edge_file(tmp_path_factory.mktemp("graphs") / "device.txt", n=150, m=450, seed=9)


def _same_csr(device_block, host_block) -> bool:
    host = host_block.tocsr()
    host.sort_indices()
    return (device_block.shape == host.shape
            and np.array_equal(device_block.indptr.cpu().numpy(), host.indptr)
            and np.array_equal(device_block.indices.cpu().numpy(), host.indices)
            and np.array_equal(device_block.values.cpu().numpy(), host.data))


def _same_plan(a, b) -> bool:
    return (a.n_owned, a.n_halo, a.send_peers, a.send_slices, a.recv_peers, a.recv_slices) == \
        (b.n_owned, b.n_halo, b.send_peers, b.send_slices, b.recv_peers, b.recv_slices) and \
        np.array_equal(a.send_index.cpu().numpy(), b.send_index.cpu().numpy())


def compare_on_rank(transport, graph: str, symmetrize: bool, device: str) -> dict:
    """Every sampler and key on this rank, host against device; returns what differed and the gathered sets."""
    shard = build_and_scatter(transport, GraphOptions(spec=graph, symmetrize=symmetrize, features=8, classes=3,
                                                      seed=SEED), PartitionerConfig("random", seed=SEED))
    blocks = ShardBlocksOn(shard, torch.device(device))
    report: dict = {"differs": [], "sets": {}}
    for name, options in SAMPLERS.items():
        host = make_distributed_sampler(name, shard, transport, BATCH, options)
        groupings = [True, False] if name == "rw" else [True]
        for grouped in groupings:
            dev = on_device(make_distributed_sampler(name, shard, transport, BATCH, options), torch.device(device),
                            group_by_transit=grouped)
            sets = []
            for epoch, batch in KEYS:
                key = batch_key(SEED, epoch, batch)
                owned_in, halo_in = host.sample(key)
                d_owned, d_halo = dev.sample(key)
                assert d_owned.device.type == device and d_halo.device.type == device
                if not (np.array_equal(owned_in, d_owned.cpu().numpy())
                        and np.array_equal(halo_in, d_halo.cpu().numpy())):
                    report["differs"].append((name, grouped, epoch, batch, "membership"))
                    continue
                cut = build_batch(shard, host.bytes, owned_in, halo_in, torch.device("cpu"))
                d_cut = build_batch_on_device(blocks, dev.bytes, d_owned, d_halo)
                same = (np.array_equal(cut.rows, d_cut.rows.cpu().numpy())
                        and _same_csr(d_cut.owned_block, cut.owned_block)
                        and _same_csr(d_cut.halo_block, cut.halo_block)
                        and np.array_equal(cut.owned_entries, d_cut.owned_entries.cpu().numpy())
                        and np.array_equal(cut.halo_entries, d_cut.halo_entries.cpu().numpy())
                        and _same_plan(cut.plan, d_cut.plan))
                if not same:
                    report["differs"].append((name, grouped, epoch, batch, "batch"))
                sets.append(np.sort(np.concatenate(transport.allgather_object(shard.global_ids[owned_in]))).tolist())
            report["sets"][name] = sets
            if host.traffic != dev.traffic:  # rw: walkers handed off and messages, counted alike
                report["differs"].append((name, grouped, "traffic", host.traffic, dev.traffic))
            host.traffic.update(dict.fromkeys(host.traffic, 0))
        counts = presample(host, SEED, 3)
        d_counts = presample(on_device(host, torch.device(device)), SEED, 3)
        for field in ("vertex_counts", "owned_edge_counts", "halo_edge_counts"):
            if not np.array_equal(getattr(counts, field), getattr(d_counts, field).cpu().numpy()):
                report["differs"].append((name, "presample", field))
        # the GraphSAINT weights of the last batch, as training applies them: float64, bit for bit
        entry_rows = np.repeat(np.arange(cut.owned_block.shape[0]), np.diff(cut.owned_block.indptr))
        weights = (counts.aggregator_scale(cut.rows[entry_rows], cut.owned_entries, "owned"),
                   counts.loss_weights(cut.rows, 9973))
        d_weights = (d_counts.aggregator_scale(d_cut.rows[d_cut.owned_block.entry_rows()], d_cut.owned_entries,
                                               "owned"), d_counts.loss_weights(d_cut.rows, 9973))
        if not all(np.array_equal(w, d.cpu().numpy()) for w, d in zip(weights, d_weights)):
            report["differs"].append((name, "weights"))
    return report


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("symmetrize", [False, True], ids=["directed", "undirected"])
@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_device_samplers_draw_the_host_samplers_batches(graph_file, ranks, symmetrize, device):
    reports = run_ranks(ranks, lambda transport: compare_on_rank(transport, graph_file, symmetrize, device))
    assert [r["differs"] for r in reports] == [[]] * ranks
    _, a_hat = prepare_graph(GraphOptions(spec=graph_file, symmetrize=symmetrize, features=8, classes=3, seed=SEED))
    for name, options in SAMPLERS.items():
        expected = [batch_vertices(a_hat, name, BATCH, batch_key(SEED, e, b), **options).tolist() for e, b in KEYS]
        assert reports[0]["sets"][name] == expected, name


def test_a_block_stored_unsorted_is_sorted_on_the_device_and_keeps_its_entries_positions():
    """Shards keep scipy's sorted order, but a block whose columns are not sorted within rows must still be cut
    right: the device copy is sorted, and each entry's position points back into the block as stored."""
    from distgcn.kernels.csr_tensors import sorted_csr_on

    block = sp.csr_matrix((np.array([1.0, 2.0, 3.0, 4.0, 5.0]), np.array([2, 0, 1, 1, 0]), np.array([0, 3, 3, 5])),
                          shape=(3, 3))
    assert not block.has_sorted_indices
    csr, position = sorted_csr_on(block, torch.device("cpu"))
    canonical = block.copy()
    canonical.sort_indices()
    assert _same_csr(csr, canonical)
    np.testing.assert_array_equal(block.data[position.numpy()], csr.values.numpy())
    block.sort_indices()
    assert sorted_csr_on(block, torch.device("cpu"))[1] is None  # sorted: no position array kept
