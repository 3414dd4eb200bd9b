"""Distributed rw and frontier samplers: every P draws exactly the whole-graph oracle's vertex sets.

Each rank builds its shard of a random partition and samples a few batch keys
with each walk sampler (:func:`sample_walks`); every batch's vertex set, as the
owners recorded it and as the halo copies saw it, and the walker hand-off
counters are compared with the oracle. The grid of P runs on in-process ranks
(threads); one P runs this file as an MPI program (``mpiexec -n P python
tests/training/test_minibatch_walks.py OUT GRAPH``, rank 0 writes the result to OUT).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

if TYPE_CHECKING:
    from distgcn.comm.transport import Transport

ROOT = Path(__file__).resolve().parents[2]
SEED, BATCH = 5, 60
SAMPLERS = {"rw": {"walk_length": 3}, "frontier": {"frontier_size": 12}}
KEYS = [(0, 0), (1, 0), (1, 1), (2, 3)]


def sample_walks(transport: Transport, graph: str) -> dict[str, dict]:
    """Sample every key with every walk sampler on this rank; every rank returns the gathered sets."""
    from distgcn.config import PartitionerConfig
    from distgcn.data.prepare import GraphOptions
    from distgcn.sampling.distributed import batch_key
    from distgcn.shard.scatter import build_and_scatter
    from distgcn.training.sampler_choice import make_distributed_sampler

    shard = build_and_scatter(transport, GraphOptions(spec=graph, features=8, classes=3, seed=SEED),
                              PartitionerConfig("random", seed=SEED))
    result: dict[str, dict] = {}
    for name, options in SAMPLERS.items():
        sampler = make_distributed_sampler(name, shard, transport, BATCH, options)
        sets, halo_ok = [], True
        for epoch, batch in KEYS:
            owned_in, halo_in = sampler.sample(batch_key(SEED, epoch, batch))
            s = np.sort(np.concatenate(transport.allgather_object(shard.global_ids[owned_in])))
            halo_ok &= bool(np.array_equal(halo_in, np.isin(shard.halo_global_ids, s)))
            sets.append(s.tolist())
        traffic = {k: int(v) for k, v in zip(sampler.traffic, transport.allreduce(list(sampler.traffic.values())))}
        result[name] = {"sets": sets, "halo_ok": transport.allreduce([halo_ok], op="min")[0] == 1, **traffic}
    return result


def main(out: Path, graph: str) -> None:
    """MPI side: :func:`sample_walks` on this rank; rank 0 writes the result to ``out``."""
    from distgcn.comm.transport.setup import make_transport

    transport = make_transport("mpi")
    result = sample_walks(transport, graph)
    if transport.rank == 0:
        out.write_text(json.dumps(result))


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory) -> str:
    """A seeded random directed edge list, 150 vertices: some rows have no off-diagonal entry (dead ends)."""
    from conftest import random_edge_file

    return random_edge_file(tmp_path_factory.mktemp("graphs") / "walks.txt", n=150, m=450, seed=9)


def oracle_sets(graph_file: str) -> dict[str, list[list[int]]]:
    """Every key's vertex set of every walk sampler, drawn by the whole-graph oracle."""
    from minibatch_reference import batch_vertices

    from distgcn.data.prepare import GraphOptions, prepare_graph
    from distgcn.sampling.distributed import batch_key

    _, a_hat = prepare_graph(GraphOptions(spec=graph_file, features=8, classes=3, seed=SEED))
    assert (np.diff(a_hat.indptr) == 1).any(), "the graph should have dead ends (rows with only the self loop)"
    return {name: [batch_vertices(a_hat, name, BATCH, batch_key(SEED, e, b), **options).tolist()
                   for e, b in KEYS] for name, options in SAMPLERS.items()}


def check_against_oracle(result: dict[str, dict], expected: dict[str, list[list[int]]], ranks: int) -> None:
    """The sets are the oracle's, the halo copies agree, and walkers are handed off only between ranks."""
    for name in SAMPLERS:
        assert result[name]["sets"] == expected[name], (name, ranks)
        assert result[name]["halo_ok"], (name, ranks)
    hand_offs = result["rw"]["walkers_handed_off"]
    assert (hand_offs == 0) if ranks == 1 else (hand_offs > 0 and result["rw"]["walker_messages"] > 0)


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_walk_batches_are_the_oracles_for_every_p(graph_file, ranks):
    from distgcn.comm.transport.inprocess import run_ranks

    results = run_ranks(ranks, lambda transport: sample_walks(transport, graph_file))
    assert all(result == results[0] for result in results)  # every rank gathered the same
    check_against_oracle(results[0], oracle_sets(graph_file), ranks)


def test_walk_batches_are_the_oracles_under_mpiexec(tmp_path, graph_file):
    from conftest import mpiexec

    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    ranks, out = 3, tmp_path / "sets.json"
    proc = subprocess.run([mpiexec(), "-n", str(ranks), sys.executable, __file__, str(out), graph_file],
                          check=False, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    check_against_oracle(json.loads(out.read_text()), oracle_sets(graph_file), ranks)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
