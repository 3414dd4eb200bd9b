"""The stochastic hypergraph model (partition/stochastic.py) and the minibatch communication metric.

The command line runs in this process: ``partition`` as one process does, and
``train`` on in-process ranks (threads).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import run_distgcn_in_process
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import directed_a_hat

from distgcn.cli.main import main
from distgcn.config import SamplerSpec
from distgcn.data import load_graph
from distgcn.data.graph import normalized_adjacency
from distgcn.errors import InputError
from distgcn.partitioning.metrics import connectivity_minus_one, partition_metrics
from distgcn.partitioning.minibatch_metrics import minibatch_comm
from distgcn.partitioning.models import compute_parts
from distgcn.partitioning.stochastic import (
    DEFAULT_SHP_COVERAGE,
    hoeffding_nets,
    merge_identical_nets,
    sample_nets,
    stochastic_parts,
)
from distgcn.sampling.reference import make_sampler
from distgcn.sampling.reference.samplers import sampler_for

SBM = "synthetic:sbm,n=240,avg_degree=6,seed=2"


@st.composite
def graph_and_parts(draw) -> tuple[sp.csr_matrix, np.ndarray, int]:
    """Â of a random directed graph (n <= 20, isolated vertices allowed) and a random part vector."""
    a_hat = draw(directed_a_hat(max_n=20, edges_per_vertex=5))
    n = a_hat.shape[0]
    nparts = draw(st.integers(1, 5))
    parts = np.array(draw(st.lists(st.integers(0, nparts - 1), min_size=n, max_size=n)), dtype=np.int64)
    return a_hat, parts, nparts


def brute_force(a: sp.csr_matrix, vertices: np.ndarray, parts: np.ndarray) -> tuple[int, int]:
    """Volume and messages of one minibatch, by the definition, one entry at a time."""
    s = set(vertices.tolist())
    dense = a.toarray()
    pairs, messages = set(), set()
    for v in s:
        for u in s:
            if dense[v, u] != 0 and parts[u] != parts[v]:
                pairs.add((parts[v], u))
                messages.add((parts[u], parts[v]))
    return len(pairs), len(messages)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph_and_parts(), st.integers(1, 30), st.integers(0, 2**32 - 1))
def test_minibatch_comm_equals_brute_force(case, batch_size, seed):
    a, parts, nparts = case
    sampler = make_sampler("node", a, batch_size)
    rng = np.random.default_rng(seed)
    subs = [sampler.sample(rng) for _ in range(4)]
    volume, messages = minibatch_comm(subs, parts, nparts)
    for sub, vol, msg in zip(subs, volume, messages):
        assert (vol, msg) == brute_force(a, sub.vertices, parts)
        # the volume is the connectivity-1 of the subgraph's column nets, computed another way
        assert vol == connectivity_minus_one(sub.submatrix(a), parts[sub.vertices], nparts)


def test_whole_graph_batch_matches_full_batch_metrics():
    """A batch holding every vertex communicates exactly what a full-batch SpMM does."""
    a = normalized_adjacency(load_graph(SBM).adj)
    n = a.shape[0]
    parts = np.random.default_rng(0).integers(0, 4, n)
    full = make_sampler("node", a, 1).graph.induced(np.arange(n))
    volume, messages = minibatch_comm([full], parts, 4)
    metrics = partition_metrics(a, parts, 4)
    assert volume.tolist() == [metrics["volume"]["total"]] and messages.tolist() == [metrics["messages"]["total"]]


def test_hoeffding_bound_arithmetic():
    # (P-1)^2 ln(2/delta) / (2 eps^2), rounded up
    assert hoeffding_nets(3, 0.02, 0.05) == math.ceil(4 * math.log(40) / (2 * 0.02**2)) == 18445
    assert hoeffding_nets(27, 0.1, 0.01) == math.ceil(676 * math.log(200) / 0.02) == 179084
    # an exact integer bound is not pushed up by rounding: 1 * ln(e^2) / (2 * 0.5^2) = 4
    assert hoeffding_nets(2, 0.5, 2 / math.e**2) == 4
    assert hoeffding_nets(1, 0.02, 0.05) == 0
    for eps, delta in ((0, 0.05), (-1, 0.05), (math.inf, 0.05), (0.1, 0), (0.1, 1), (0.1, 1.5)):
        with pytest.raises(InputError):
            hoeffding_nets(3, eps, delta)


def test_sampling_stops_at_the_bound_and_b_can_be_fixed():
    a = normalized_adjacency(load_graph(SBM).adj)
    sampler = make_sampler("node", a, 40)
    bound = hoeffding_nets(3, 0.1, 0.05)
    got = sample_nets(sampler, np.random.default_rng(7), min_nets=bound)
    rng = np.random.default_rng(7)
    counts = np.cumsum([sampler.sample(rng).num_vertices for _ in range(got.samples)])
    assert counts[-1] == got.nets >= bound and (got.samples == 1 or counts[-2] < bound)
    assert sample_nets(sampler, np.random.default_rng(7), samples=5).samples == 5


def km1(indptr, pins, weights, parts) -> int:
    return sum(int(w) * (len(set(parts[pins[indptr[i]:indptr[i + 1]]].tolist())) - 1)
               for i, w in enumerate(weights))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sets(st.integers(0, 7), min_size=1, max_size=4), min_size=0, max_size=30),
       st.lists(st.integers(0, 2), min_size=8, max_size=8))
def test_merge_identical_nets_keeps_the_multiset_and_the_cut(nets, parts):
    sizes = [len(net) for net in nets]
    indptr = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    pins = np.array([p for net in nets for p in sorted(net)], dtype=np.int64)
    m_indptr, m_pins, weights = merge_identical_nets(indptr, pins)
    merged = [tuple(m_pins[m_indptr[i]:m_indptr[i + 1]].tolist()) for i in range(len(weights))]
    assert len(set(merged)) == len(merged)  # nothing left to merge
    expanded = sorted(net for net, w in zip(merged, weights) for _ in range(w))
    assert expanded == sorted(tuple(sorted(net)) for net in nets)
    parts = np.array(parts)
    assert km1(m_indptr, m_pins, weights, parts) == km1(indptr, pins, np.ones(len(nets), dtype=int), parts)


def test_shp_cut_is_the_sampled_minibatches_volume():
    """The model's objective, for any partition, is the summed volume of the b minibatches it sampled."""
    a = normalized_adjacency(load_graph(SBM).adj)
    sampler = make_sampler("rw", a, 30, walk_length=3)
    nets = sample_nets(sampler, np.random.default_rng(3), samples=12)
    rng = np.random.default_rng(3)
    subs = [sampler.sample(rng) for _ in range(12)]
    assert nets.nets == sum(s.num_vertices for s in subs)
    seen = {(int(v), int(u)) for s in subs for v, u in zip(s.vertices[s.rows()], s.vertices[s.indices]) if v != u}
    off_diagonal = a.nnz - int(np.count_nonzero(a.diagonal()))
    assert nets.edge_coverage == pytest.approx(len(seen) / off_diagonal)
    for nparts in (2, 5):
        parts = np.random.default_rng(nparts).integers(0, nparts, a.shape[0])
        volume, _ = minibatch_comm(subs, parts, nparts)
        assert km1(nets.indptr, nets.pins, nets.net_weights, parts) == volume.sum() > 0


def test_shp_lowers_expected_minibatch_volume_against_random():
    a = normalized_adjacency(load_graph(SBM).adj)
    spec = SamplerSpec("node", 60)
    shp, info = stochastic_parts(a, 3, spec, shp_samples=200, seed=1, preset="deterministic")
    rp, _ = compute_parts("random", a, 3, seed=1)
    sampler = sampler_for(spec, a)
    rng = np.random.default_rng(99)  # not the seed that built the hypergraph
    subs = [sampler.sample(rng) for _ in range(500)]
    shp_volume = minibatch_comm(subs, shp, 3)[0].mean()
    rp_volume = minibatch_comm(subs, rp, 3)[0].mean()
    assert shp_volume < 0.6 * rp_volume
    weights = np.diff(a.indptr)
    assert np.bincount(shp, weights=weights).max() <= 1.03 * math.ceil(weights.sum() / 3)
    assert info["shp"]["samples"] == 200 and info["shp"]["merged_nets"] <= info["shp"]["cuttable_nets"]


def test_default_sample_count_reaches_the_coverage_target():
    """Without a count or bound, sampling goes on past the Hoeffding bound until half the edges are covered,
    and stops at the first sample that gets there (issue #22: 6 samples, coverage 0.011, on Slashdot)."""
    a = normalized_adjacency(load_graph("synthetic:sbm,n=3000,avg_degree=6,seed=2").adj)
    spec = SamplerSpec("node", 300)
    _, info = stochastic_parts(a, 2, spec, seed=1, preset="deterministic")
    shp = info["shp"]
    assert shp["coverage_target"] == DEFAULT_SHP_COVERAGE and shp["edge_coverage"] >= DEFAULT_SHP_COVERAGE
    by_bound = math.ceil(hoeffding_nets(2, 0.02, 0.05) / 300)
    assert shp["samples"] > by_bound
    fewer = sample_nets(sampler_for(spec, a), np.random.default_rng(1), samples=shp["samples"] - 1)
    assert fewer.edge_coverage < DEFAULT_SHP_COVERAGE
    _, given_bound = stochastic_parts(a, 2, spec, shp_epsilon=0.02, seed=1, preset="deterministic")
    assert given_bound["shp"]["coverage_target"] is None and given_bound["shp"]["samples"] < shp["samples"]


def test_coverage_sampling_stops_at_the_cap():
    a = normalized_adjacency(load_graph(SBM).adj)
    nets = sample_nets(make_sampler("node", a, 10), np.random.default_rng(0), coverage=1.0, max_samples=7)
    assert nets.samples == 7 and nets.edge_coverage < 1.0


def test_partition_prints_samples_and_coverage_and_warns_below_target(tmp_path, capsys):
    common = [SBM, "--model", "stochastic", "--sampler", "node", "--batch-size", "50", "--parts", "3"]
    assert main(["partition", *common, "--out", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    assert "stochastic model: " in err and "edge coverage target 0.5); edge coverage " in err
    assert "warning" not in err
    assert main(["partition", *common, "--shp-samples", "2", "--out", str(tmp_path / "b")]) == 0
    err = capsys.readouterr().err
    assert "stochastic model: 2 sampled subgraphs (--shp-samples); edge coverage" in err
    warnings = [line for line in err.splitlines() if "warning:" in line]
    assert len(warnings) == 1 and "raise --shp-samples" in warnings[0]


def test_edgeless_samples_are_an_input_error():
    with pytest.raises(InputError, match="no partition communicates less"):
        stochastic_parts(sp.identity(40, format="csr"), 3, SamplerSpec("node", 10), shp_samples=3)


def test_partition_command_writes_shards_that_train(tmp_path, capsys):
    out = tmp_path / "shp"
    code = main(["partition", SBM, "--model", "stochastic", "--sampler", "node", "--batch-size", "50",
                 "--parts", "3", "--shp-epsilon", "0.05", "--out", str(out), "--quiet"])
    assert code == 0, capsys.readouterr().err
    meta = json.loads((out / "meta.json").read_text())
    assert meta["model"] == "stochastic" and meta["parts"] == 3
    assert meta["sampler"] == {"name": "node", "batch_size": 50, "options": {}}
    shp = meta["partition_info"]["shp"]
    assert shp["nets_bound"] == hoeffding_nets(3, 0.05, 0.05) and shp["delta"] == 0.05
    assert meta["shp_samples"] == shp["samples"] >= 1 and shp["nets"] >= shp["nets_bound"]
    assert run_distgcn_in_process(["train", str(out), "--epochs", "2", "--quiet"], 3) == [0, 0, 0]


@pytest.mark.parametrize("flags, message", [
    (["--model", "stochastic"], "needs a sampler"),
    (["--model", "stochastic", "--batch-size", "10"], "--batch-size needs --sampler"),
    (["--model", "stochastic", "--sampler", "node"], "needs --batch-size"),
    (["--model", "hypergraph", "--sampler", "node", "--batch-size", "10"], "only --model stochastic"),
    (["--model", "random", "--shp-samples", "4"], "only --model stochastic"),
    (["--model", "stochastic", "--sampler", "node", "--batch-size", "10", "--walk-length", "3"],
     "--walk-length applies to the rw sampler"),
    (["--model", "stochastic", "--sampler", "rw", "--batch-size", "10", "--shp-samples", "2", "--shp-delta", "0.1"],
     "not both"),
    (["--model", "stochastic", "--sampler", "frontier", "--batch-size", "10", "--frontier-size", "10"],
     "smaller than the budget"),
])
def test_bad_combinations_are_input_errors(tmp_path, capsys, flags, message):
    out = tmp_path / "out"
    assert main(["partition", SBM, "--parts", "3", "--out", str(out), "--quiet", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("distgcn: error:") and message in err and err.count("\n") == 1
    assert not out.exists()


def test_bad_option_values_are_usage_errors(tmp_path, capsys):
    for flags in (["--shp-delta", "1"], ["--shp-epsilon", "0"], ["--shp-samples", "0"], ["--batch-size", "-3"]):
        with pytest.raises(SystemExit) as exc:
            main(["partition", SBM, "--parts", "3", "--out", str(tmp_path / "o"), "--model", "stochastic",
                  "--sampler", "node", *flags])
        assert exc.value.code == 2
        assert flags[0] in capsys.readouterr().err
