"""Large graphs leave their largest nets out of the hypergraph partitioner's input (distgcn.partitioning.hypergraph
``max_net_pins``): what the partitioner gets, what it reports, and the bound on what the nets left out can cost,
checked against the km1 of the whole hypergraph counted net by net."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from distgcn.data.graph import normalized_adjacency
from distgcn.partitioning import hypergraph as hg_mod
from distgcn.partitioning.hypergraph import column_net, hypergraph_parts

EPS = 0.03


def km1(parts: np.ndarray, indptr: np.ndarray, pins: np.ndarray) -> int:
    """Sum over nets of (parts the net touches - 1), one net at a time."""
    return sum(len(set(parts[pins[indptr[j]:indptr[j + 1]]].tolist())) - 1 for j in range(len(indptr) - 1))


def ring_with_hubs(n: int, hubs: int, hub_degree: int, seed: int = 0) -> sp.csr_matrix:
    """A ring of ``n`` vertices, plus ``hubs`` of them joined to ``hub_degree`` random others."""
    rng = np.random.default_rng(seed)
    u, v = [np.arange(n)], [np.r_[1:n, 0]]
    for hub in rng.choice(n, hubs, replace=False):
        others = rng.choice(np.delete(np.arange(n), hub), hub_degree, replace=False)
        u.append(np.full(hub_degree, hub))
        v.append(others)
    u, v = np.concatenate(u), np.concatenate(v)
    a = sp.csr_matrix((np.ones(u.size), (u, v)), shape=(n, n))
    a = a + a.T
    a.data[:] = 1.0
    return a.tocsr()


@pytest.fixture(scope="module")
def hubbed_hat():
    return normalized_adjacency(ring_with_hubs(400, 3, 120))


@pytest.mark.parametrize("partitioner,preset", [("mtkahypar", "deterministic"), ("kahypar", "fast")])
def test_nets_above_the_cap_are_left_out_and_cost_at_most_k_minus_1_each(monkeypatch, hubbed_hat, partitioner,
                                                                          preset):
    handed = []  # the largest net each call of the tool got: from its arrays (KaHyPar) or its file (Mt-KaHyPar)
    tool = getattr(hg_mod, f"_partition_{partitioner}")

    def largest_net(nets) -> int:
        if partitioner == "kahypar":
            return int(np.diff(nets).max())
        header, *lines = Path(nets.path).read_text().splitlines()
        return max(len(line.split()) - 1 for line in lines[:int(header.split()[0])])  # a weight, then the pins

    monkeypatch.setattr(hg_mod, f"_partition_{partitioner}",
                        lambda nets, *args: handed.append(largest_net(nets)) or tool(nets, *args))
    nparts = 4
    parts, info = hypergraph_parts(hubbed_hat, nparts, epsilon=EPS, seed=1, partitioner=partitioner, preset=preset,
                                   return_info=True, max_net_pins=50)
    indptr, pins, weights = column_net(hubbed_hat)
    sizes = np.diff(indptr)
    assert handed and handed[0] <= 50  # the tool saw no net above the cap
    assert info["nets_left_out"] == int((sizes > 50).sum()) > 0 and info["max_net_pins"] == 50
    kept = sizes <= 50
    kept_indptr = np.r_[0, np.cumsum(sizes[kept])]
    assert info["km1_reported"] == km1(parts, kept_indptr, pins[np.repeat(kept, sizes)])
    assert km1(parts, indptr, pins) <= info["km1_reported"] + (nparts - 1) * info["nets_left_out"]
    loads = np.bincount(parts, weights=weights, minlength=nparts)
    assert loads.max() <= (1 + EPS) * math.ceil(weights.sum() / nparts)


def test_small_hypergraphs_keep_every_net_unless_asked(hubbed_hat):
    """The default caps only above 2*10^6 pins; 0 keeps every net."""
    for cap in (None, 0):
        _, info = hypergraph_parts(hubbed_hat, 2, seed=0, partitioner="kahypar", return_info=True, max_net_pins=cap)
        assert info["nets_left_out"] == 0


def test_the_default_cap_applies_above_the_pin_limit(monkeypatch, hubbed_hat):
    """Above the pin limit, nets over 4 times the mean size (and at least the minimum) are left out."""
    monkeypatch.setattr(hg_mod, "AUTO_VCYCLES_MAX_PINS", 100)
    monkeypatch.setattr(hg_mod, "LARGE_NET_MIN_PINS", 10)
    _, info = hypergraph_parts(hubbed_hat, 2, seed=0, partitioner="kahypar", return_info=True)
    sizes = np.diff(column_net(hubbed_hat)[0])
    cap = math.ceil(4 * sizes.mean())
    assert info["max_net_pins"] == cap and info["nets_left_out"] == int((sizes > cap).sum()) == 3
