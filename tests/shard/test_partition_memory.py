"""``distgcn partition`` frees the graph's adjacency once Â exists (issue #16: the peak memory of the 10^8 SBM).

Peak memory itself is not measured here (docs/scale.md, "The 10^8 pipeline", is): what is checked is that no
reference to the adjacency survives into the partitioner, the metrics or the shards, the step that undoing the
release would break.
"""

from __future__ import annotations

import weakref

import pytest

import distgcn.shard.write as precompute
from distgcn.data.prepare import GraphOptions
from distgcn.shard.directory import read_meta


@pytest.mark.parametrize("model", ["random", "graph"])
def test_adjacency_is_freed_before_partitioning_and_measuring(tmp_path, monkeypatch, model):
    adjacency: list[weakref.ref] = []
    alive_at: dict[str, bool] = {}

    def prepare(options):
        graph, a_hat = real_prepare(options)
        adjacency.append(weakref.ref(graph.adj))
        return graph, a_hat

    def watching(name, step):
        def run(*args, **kwargs):
            alive_at[name] = adjacency[0]() is not None
            return step(*args, **kwargs)
        return run

    real_prepare = precompute.prepare_graph
    monkeypatch.setattr(precompute, "prepare_graph", prepare)
    monkeypatch.setattr(precompute, "run_model", watching("partitioning", precompute.run_model))
    monkeypatch.setattr(precompute, "partition_metrics", watching("metrics", precompute.partition_metrics))
    meta = precompute.write_partition(GraphOptions("synthetic:sbm,n=300,avg_degree=6"), tmp_path / "p", 3, model,
                                      quiet=True)
    assert alive_at == {"partitioning": False, "metrics": False}
    assert adjacency[0]() is None
    # What meta.json records of the graph is still the graph's own (taken before the adjacency went).
    assert read_meta(tmp_path / "p")["graph"] == meta["graph"]
    assert meta["graph"]["n"] == 300 and meta["graph"]["nnz"] == meta["graph"]["edges"] + 300
