"""partition/hypergraph.py on hypergraphs small enough to count by hand: the column nets, the arguments the
tools receive, what the model records, and the messages of bad arguments."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import distgcn.partitioning.hypergraph as hg
from distgcn.errors import InputError

# stored entries: (0, 0) (0, 1) (1, 1) (2, 0) (2, 1) (2, 2), and (1, 2) = 0.0, which is no nonzero
A = sp.csr_matrix((np.array([1.0, 2.0, 1.0, 0.0, 4.0, 3.0, 1.0]), np.array([0, 1, 1, 2, 0, 1, 2]),
                   np.array([0, 2, 4, 7])), shape=(3, 3))


def test_column_nets_by_hand_and_the_callers_matrix_kept():
    indptr, pins, weights = hg.column_net(A)
    # column 0: rows 0, 2; column 1: rows 0, 1, 2; column 2: row 2; row weights 2, 1, 3
    assert indptr.tolist() == [0, 2, 5, 6] and pins.tolist() == [0, 2, 0, 1, 2, 2]
    assert weights.tolist() == [2, 1, 3]
    assert hg.column_net(A, "work")[2].tolist() == [4, 3, 5]  # + ceil(mean 2)
    assert A.nnz == 7


@pytest.mark.parametrize("matrix, nparts, epsilon, message", [
    (np.eye(3), 2, 0.03, "the normalized adjacency must be a square scipy sparse matrix"),
    (sp.csr_matrix((2, 3)), 2, 0.03, "the normalized adjacency must be a square scipy sparse matrix"),
    (A, 0, 0.03, "the number of parts must be an integer >= 1, got 0"),
    (A, 1.5, 0.03, "the number of parts must be an integer >= 1, got 1.5"),
    (A, 4, 0.03, "cannot split 3 vertices into 4 non-empty parts (need nparts <= n)"),
    (A, 2, 0.0, "epsilon (allowed imbalance) must be > 0, got 0.0"),
    (A, 2, float("inf"), "epsilon (allowed imbalance) must be > 0, got inf"),
])
def test_argument_messages(matrix, nparts, epsilon, message):
    with pytest.raises(InputError) as err:
        hg.hypergraph_parts(matrix, nparts, epsilon=epsilon)
    assert str(err.value) == message


@pytest.mark.parametrize("partitioner, preset, vcycles, message", [
    ("patoh", None, None, "unknown hypergraph partitioner 'patoh': expected mtkahypar or kahypar"),
    ("kahypar", "default", None, "unknown kahypar preset 'default': expected one of fast, quality"),
    ("mtkahypar", "fast", None, "unknown mtkahypar preset 'fast': expected one of auto, default, quality, quality_v3, "
                                "quality_v5, highest_quality, deterministic, deterministic_quality, large_k"),
    ("mtkahypar", None, -1, "vcycles must be a non-negative integer, got -1"),
    ("mtkahypar", None, 1.5, "vcycles must be a non-negative integer, got 1.5"),
])
def test_tool_messages(partitioner, preset, vcycles, message):
    with pytest.raises(InputError) as err:
        hg.hypergraph_parts(A, 2, partitioner=partitioner, preset=preset, vcycles=vcycles)
    assert str(err.value) == message


def test_names_are_case_blind_and_defaults_fill_in():
    assert hg._resolve_tool("KaHyPar", "QUALITY", None) == ("kahypar", "quality")
    assert hg._resolve_tool(None, None, 0) == ("mtkahypar", "auto")
    assert hg._resolve_tool("kahypar", None, None) == ("kahypar", "fast")


def test_one_part_is_recorded_without_a_tool():
    parts, info = hg.hypergraph_parts(A, 1, partitioner="kahypar", return_info=True)
    assert parts.tolist() == [0, 0, 0] and parts.dtype == np.int64
    assert info == {"partitioner": "kahypar", "preset": "fast", "objective": "km1", "threads": 0, "km1_reported": 0}
    assert hg.hypergraph_parts(A, 1).tolist() == [0, 0, 0]


def test_kahypar_receives_the_nets_and_unit_weights_and_reports_its_km1(monkeypatch):
    seen = {}
    real = hg._partition_kahypar

    def spy(indptr, pins, weights, net_weights, *args):
        seen.update(indptr=indptr.tolist(), pins=pins.tolist(), weights=weights.tolist(),
                    net_weights=net_weights.tolist())
        return real(indptr, pins, weights, net_weights, *args)

    monkeypatch.setattr(hg, "_partition_kahypar", spy)
    parts, info = hg.hypergraph_parts(A, 2, epsilon=1.0, seed=0, partitioner="kahypar", return_info=True)
    assert seen == {"indptr": [0, 2, 5, 6], "pins": [0, 2, 0, 1, 2, 2], "weights": [2, 1, 3],
                    "net_weights": [1, 1, 1]}
    # km1 from the definition: nets {0, 2}, {0, 1, 2}, {2}
    km1 = sum(len(set(parts[net].tolist())) - 1 for net in ([0, 2], [0, 1, 2], [2]))
    assert info["km1_reported"] == km1
    assert (info["partitioner"], info["preset"], info["objective"], info["threads"], info["preset_file"]) == (
        "kahypar", "fast", "km1", 1, "kahypar_km1_fast.ini")
    assert isinstance(info["version"], str) and info["version"]


@pytest.mark.parametrize("bad", [[0, 1], [0, 1, 2], [0, -1, 1]])
def test_an_invalid_answer_of_the_tool_is_an_error(monkeypatch, bad):
    monkeypatch.setattr(hg, "_partition_kahypar", lambda *args: (np.array(bad, dtype=np.int64), {}))
    with pytest.raises(RuntimeError) as err:
        hg.partition_nets(np.array([0, 2]), np.array([0, 1]), np.ones(3, dtype=np.int64), 2, partitioner="kahypar")
    assert str(err.value) == "kahypar returned an invalid partition"


def test_mtkahypar_takes_the_preset_and_the_vcycles_asked_for():
    _, info = hg.hypergraph_parts(A, 2, epsilon=1.0, preset="deterministic", vcycles=2, threads=1, return_info=True)
    assert (info["mtkahypar_preset"], info["resolved_preset"], info["vcycles"]) == ("DETERMINISTIC", "deterministic",
                                                                                   2)
    assert info["threads"] >= 1 and info["version"]


def test_as_many_parts_as_vertices_is_allowed():
    parts = hg.hypergraph_parts(A, 3, epsilon=1.0, partitioner="kahypar")
    assert sorted(parts.tolist()) == [0, 1, 2]


def test_an_empty_last_column_is_still_a_net():
    indptr, pins, _ = hg.column_net(sp.csr_matrix(np.array([[1.0, 0.0], [1.0, 0.0]])))
    assert indptr.tolist() == [0, 2, 2] and pins.tolist() == [0, 1]


def test_vcycles_are_checked_also_for_one_part():
    for call in (lambda: hg.hypergraph_parts(A, 1, vcycles=-1),
                 lambda: hg.partition_nets(np.array([0, 2]), np.array([0, 1]), np.ones(2, dtype=np.int64), 2,
                                           vcycles=-1)):
        with pytest.raises(InputError, match="vcycles must be a non-negative integer, got -1"):
            call()


def test_hypergraph_parts_hands_every_option_to_partition_nets(monkeypatch):
    calls = []

    def spy(nets, num_pins, nparts, **kwargs):
        calls.append(([a.tolist() for a in nets()], num_pins, nparts, kwargs))
        return np.zeros(3, dtype=np.int64), {}

    monkeypatch.setattr(hg, "_partition_nets", spy)

    def hook():
        return contextlib.nullcontext()

    hg.hypergraph_parts(A, 2, epsilon=0.5, seed=4, partitioner="kahypar", preset="quality", threads=2, vcycles=1,
                        vertex_weight="work", max_net_pins=7, while_tool_runs=hook)
    hg.hypergraph_parts(A, 2)
    (nets, num_pins, nparts, kwargs), (_, _, _, defaults) = calls
    assert nets == [[0, 2, 5, 6], [0, 2, 0, 1, 2, 2], [4, 3, 5]] and num_pins == 6 and nparts == 2
    assert kwargs == {"net_weights": None, "epsilon": 0.5, "seed": 4, "partitioner": "kahypar", "preset": "quality",
                      "threads": 2, "vcycles": 1, "max_net_pins": 7, "while_tool_runs": hook}
    assert defaults == {"net_weights": None, "epsilon": 0.03, "seed": 0, "partitioner": "mtkahypar",
                        "preset": "auto", "threads": None, "vcycles": None, "max_net_pins": None,
                        "while_tool_runs": contextlib.nullcontext}


def test_partition_nets_hands_every_option_to_the_tool(monkeypatch):
    calls = []

    def mtkahypar_spy(staged, *args):
        calls.append((Path(staged.path).read_text(), staged.num_vertices, *args))
        return np.zeros(2, dtype=np.int64), {}

    def kahypar_spy(*args):
        calls.append(args)
        return np.zeros(2, dtype=np.int64), {}

    monkeypatch.setattr(hg, "_partition_mtkahypar", mtkahypar_spy)
    monkeypatch.setattr(hg, "_partition_kahypar", kahypar_spy)
    indptr, pins, weights = np.array([0, 2]), np.array([0, 1]), np.ones(2, dtype=np.int64)
    hg.partition_nets(indptr, pins, weights, 2, net_weights=np.array([5]), epsilon=0.5, seed=4, preset="quality",
                      threads=2, vcycles=1)
    hg.partition_nets(indptr, pins, weights, 2, partitioner="kahypar")
    mtk, kh = calls
    # hMETIS: 1 net, 2 vertices, both weighted; the net of weight 5 holds vertices 1 and 2 (1-based)
    assert mtk[:2] == ("1 2 11\n5 1 2\n1\n1\n", 2)
    assert list(mtk[2:]) == [2, 0.5, 4, "quality", 2, 1, contextlib.nullcontext]
    assert kh[3].tolist() == [1] and list(kh[4:]) == [2, 0.03, 0, "fast"]


def test_kahypar_counts_the_last_net_and_prints_nothing(capfd):
    """Two vertices of weight 1, nets {0}, {1}, {0, 1}: every bisection cuts the last net once."""
    parts, info = hg.partition_nets(np.array([0, 1, 2, 4]), np.array([0, 1, 0, 1]), np.ones(2, dtype=np.int64), 2,
                                    partitioner="kahypar")
    assert sorted(parts.tolist()) == [0, 1] and info["km1_reported"] == 1
    assert info["version"] == __import__("kahypar").__version__
    assert capfd.readouterr().out == ""


def test_kahypar_refuses_an_unknown_preset_file():
    with pytest.raises(InputError) as err:
        hg._partition_kahypar(np.array([0, 2]), np.array([0, 1]), np.ones(2, dtype=np.int64), None, 2, 0.03, 0, "x")
    assert str(err.value) == "unknown KaHyPar preset 'x': expected one of fast, quality"


def test_mtkahypar_answers_int64_prints_nothing_and_names_its_distribution(capfd):
    from importlib import metadata

    parts, info = hg.partition_nets(np.array([0, 1, 2, 4]), np.array([0, 1, 0, 1]), np.ones(2, dtype=np.int64), 2,
                                    preset="deterministic")
    assert parts.dtype == np.int64 and info["km1_reported"] == 1
    assert info["version"] == metadata.version("mtkahypar")
    assert capfd.readouterr().out == ""


def test_a_missing_kahypar_preset_file_is_an_error_not_a_hang(monkeypatch):
    """KaHyPar keeps an empty context when its ini file is missing and its partitioner never returns."""
    monkeypatch.setitem(hg.KAHYPAR_PRESETS, "fast", "no_such_preset.ini")
    with pytest.raises(InputError, match="preset file missing") as err:
        hg.hypergraph_parts(A, 2, epsilon=1.0, seed=0, partitioner="kahypar")
    assert "no_such_preset.ini" in str(err.value)
