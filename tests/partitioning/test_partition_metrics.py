"""distgcn.partitioning.metrics against a brute-force count (the oracle), on random small matrices."""

from __future__ import annotations

import time

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from distgcn.errors import InputError
from distgcn.partitioning import metrics
from distgcn.partitioning.metrics import (
    comm_matrix,
    comm_pairs,
    connectivity_minus_one,
    edge_cut,
    partition_metrics,
)

# ---------------------------------------------------------------------------
# brute force: plain loops over rows, columns and parts
# ---------------------------------------------------------------------------


def brute_force(dense: np.ndarray, parts: list[int], nparts: int, weights=None) -> dict:
    n = dense.shape[0]
    sends = set()  # (u, dest)
    for v in range(n):
        for u in range(n):
            if dense[v, u] != 0 and parts[u] != parts[v]:
                sends.add((u, parts[v]))
    sent = [0] * nparts
    recv = [0] * nparts
    matrix = [[0] * nparts for _ in range(nparts)]
    for u, dest in sends:
        sent[parts[u]] += 1
        recv[dest] += 1
        matrix[parts[u]][dest] += 1
    msg_sent = [0] * nparts
    msg_recv = [0] * nparts
    for i in range(nparts):
        for j in range(nparts):
            if matrix[i][j] > 0:
                msg_sent[i] += 1
                msg_recv[j] += 1
    km1 = 0
    for j in range(n):
        lam = {parts[v] for v in range(n) if dense[v, j] != 0}
        if lam:
            km1 += len(lam) - 1
    cut = 0
    for u in range(n):
        for v in range(u + 1, n):
            if (dense[u, v] != 0 or dense[v, u] != 0) and parts[u] != parts[v]:
                cut += 1
    if weights is None:
        weights = [sum(1 for u in range(n) if dense[v, u] != 0) for v in range(n)]
    pw = [0.0] * nparts
    for v in range(n):
        pw[parts[v]] += weights[v]
    total = sum(pw)
    pairs = sorted(sends, key=lambda t: (parts[t[0]], t[1], t[0]))
    return {
        "pairs": pairs,
        "sent": sent,
        "recv": recv,
        "matrix": matrix,
        "msg_sent": msg_sent,
        "msg_recv": msg_recv,
        "km1": km1,
        "cut": cut,
        "imbalance": max(pw) / (total / nparts) if total > 0 else 1.0,
    }


@st.composite
def cases(draw):
    n = draw(st.integers(1, 12))
    nparts = draw(st.integers(1, 5))
    entries = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    kind = draw(st.sampled_from(["directed", "symmetric"]))
    diagonal = draw(st.booleans())
    parts = draw(st.lists(st.integers(0, nparts - 1), min_size=n, max_size=n))
    dense = np.zeros((n, n))
    for i, j in entries:
        dense[i, j] = 1.0
        if kind == "symmetric":
            dense[j, i] = 1.0
    if diagonal:
        dense[np.arange(n), np.arange(n)] = 1.0
    # values like those of Â: positive, not all equal
    dense *= 0.5 + np.arange(n * n).reshape(n, n) % 3
    return dense, parts, nparts, diagonal


@settings(max_examples=150, deadline=None)
@given(cases())
def test_metrics_match_brute_force(case):
    check_against_brute_force(case)


@settings(max_examples=100, deadline=None)
@given(cases(), st.integers(1, 6))
def test_metrics_match_brute_force_in_blocks_of_rows(case, block):
    """Keys made a few nonzeros at a time (blocks of one row or a few, rows longer than a block) count the same."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(metrics, "BLOCK_NONZEROS", block)
        check_against_brute_force(case)


def check_against_brute_force(case) -> None:
    dense, parts, nparts, diagonal = case
    a = sp.csr_matrix(dense)
    ref = brute_force(dense, parts, nparts)
    p = np.array(parts, dtype=np.int64)

    m = partition_metrics(a, p, nparts)
    assert m["parts"] == nparts
    assert m["volume"]["total"] == sum(ref["sent"])
    assert m["volume"]["max"] == max(ref["sent"])
    assert m["volume"]["avg"] == pytest.approx(sum(ref["sent"]) / nparts)
    assert m["max_recv_volume"] == max(ref["recv"])
    assert m["messages"]["total"] == sum(ref["msg_sent"])
    assert m["messages"]["max"] == max(ref["msg_sent"])
    assert m["max_recv_messages"] == max(ref["msg_recv"])
    assert m["connectivity_minus_one"] == ref["km1"]
    assert m["edge_cut"] == ref["cut"]
    assert m["imbalance"] == pytest.approx(ref["imbalance"])
    assert m["empty_parts"] == [q for q in range(nparts) if q not in parts]
    if diagonal:
        assert m["connectivity_minus_one"] == m["volume"]["total"]

    cm = comm_matrix(a, p, nparts)
    assert cm.dtype == np.int64 and cm.shape == (nparts, nparts)
    assert cm.tolist() == ref["matrix"]
    assert np.all(np.diag(cm) == 0)

    u, dest = comm_pairs(a, p)
    assert list(zip(u.tolist(), dest.tolist())) == ref["pairs"]
    assert connectivity_minus_one(a, p, nparts) == ref["km1"]
    assert edge_cut(a, p, nparts) == ref["cut"]


@settings(max_examples=40, deadline=None)
@given(cases(), st.data())
def test_custom_weights(case, data):
    dense, parts, nparts, _ = case
    n = dense.shape[0]
    w = data.draw(st.lists(st.integers(0, 9), min_size=n, max_size=n))
    m = partition_metrics(sp.csr_matrix(dense), np.array(parts), nparts, weights=np.array(w))
    assert m["imbalance"] == pytest.approx(brute_force(dense, parts, nparts, weights=w)["imbalance"])


def test_json_ready():
    import json

    a = sp.random(30, 30, density=0.2, format="csr", random_state=1) + sp.identity(30)
    m = partition_metrics(a, np.arange(30) % 4, 4)
    assert json.loads(json.dumps(m)) == m


def test_explicit_zeros_move_nothing():
    a = sp.csr_matrix((np.array([1.0, 0.0, 1.0]), np.array([0, 1, 1]), np.array([0, 2, 3])), shape=(2, 2))
    m = partition_metrics(a, np.array([0, 1]), 2)
    assert m["volume"]["total"] == 0
    assert m["edge_cut"] == 0


def test_diagonal_makes_km1_equal_volume_on_a_directed_matrix():
    rng = np.random.default_rng(3)
    a = sp.random(200, 200, density=0.03, format="csr", random_state=4) + sp.identity(200)
    parts = rng.integers(0, 7, 200)
    m = partition_metrics(a, parts, 7)
    assert m["connectivity_minus_one"] == m["volume"]["total"] > 0
    assert comm_matrix(a, parts, 7).sum() == m["volume"]["total"]


def test_empty_parts_are_reported_not_rejected():
    a = sp.identity(4, format="csr")
    m = partition_metrics(a, np.array([0, 0, 2, 2]), 4)
    assert m["empty_parts"] == [1, 3]
    assert m["part_sizes"] == {"min": 0, "max": 2}


@pytest.mark.parametrize(
    "parts, nparts, match",
    [
        ([0, 1, 0], 2, "3 entries"),
        ([0, 1, 2, 0], 2, "out of range"),
        ([0, -1, 1, 0], 2, "negative"),
        ([0.5, 1, 1, 0], 2, "integers"),
        ([0, 1, 1, 0], 0, "at least 1"),
    ],
)
def test_invalid_parts(parts, nparts, match):
    a = sp.identity(4, format="csr")
    with pytest.raises(InputError, match=match):
        partition_metrics(a, np.array(parts), nparts)


def test_invalid_matrix_and_weights():
    with pytest.raises(InputError, match="square"):
        partition_metrics(sp.csr_matrix((3, 4)), np.zeros(3, dtype=int), 1)
    with pytest.raises(InputError, match="sparse"):
        partition_metrics(np.eye(3), np.zeros(3, dtype=int), 1)
    with pytest.raises(InputError, match="weights"):
        partition_metrics(sp.identity(3, format="csr"), np.zeros(3, dtype=int), 1, weights=np.ones(2))
    with pytest.raises(InputError, match="out of range"):
        comm_matrix(sp.identity(3, format="csr"), np.array([0, 1, 2]), 2)


def test_large_p_is_fast():
    """P = 512 on ~10^6 nonzeros: seconds, not minutes (no loops over P^2 or vertices)."""
    rng = np.random.default_rng(0)
    n, nnz = 100_000, 1_000_000
    a = sp.csr_matrix((np.ones(nnz), (rng.integers(0, n, nnz), rng.integers(0, n, nnz))), shape=(n, n))
    a = (a + sp.identity(n)).tocsr()
    parts = rng.integers(0, 512, n)
    t = time.perf_counter()
    m = partition_metrics(a, parts, 512)
    cm = comm_matrix(a, parts, 512)
    elapsed = time.perf_counter() - t
    assert m["connectivity_minus_one"] == m["volume"]["total"] == int(cm.sum())
    assert elapsed < 30


# ---------------------------------------------------------------------------
# the messages of bad input name the entry and what was expected
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "parts, nparts, message",
    [
        ([0, 1, 2, 3], 3, "part id 3 of vertex 3 is out of range: expected 0 <= id < 3"),
        ([0, -1, 1, -2], 2, "part id -1 of vertex 1 is negative"),
        ([0, 1, 1], 2, "the part vector has 3 entries, but the matrix has 4 rows"),
        ([[0, 1], [1, 0]], 2, "the part vector must be one-dimensional, got shape (2, 2)"),
        ([0.0, 1.5, 1.0, 0.0], 2, "part ids must be integers, got dtype float64"),
        ([0.0, np.inf, 1.0, 0.0], 2, "part ids must be integers, got dtype float64"),
        (["0", "1", "1", "0"], 2, "part ids must be integers, got dtype <U1"),
        ([0, 1, 1, 0], 0, "the number of parts must be at least 1, got 0"),
    ],
)
def test_bad_parts_messages_name_the_vertex_and_the_expected_range(parts, nparts, message):
    with pytest.raises(InputError) as err:
        partition_metrics(sp.identity(4, format="csr"), np.array(parts), nparts)
    assert str(err.value) == message


def test_bad_matrix_messages_name_the_type_and_the_shape():
    with pytest.raises(InputError) as err:
        partition_metrics(np.eye(3), np.zeros(3, dtype=int), 1)
    assert str(err.value) == "expected a scipy sparse matrix, got ndarray"
    with pytest.raises(InputError) as err:
        edge_cut(sp.csr_matrix((3, 4)), np.zeros(3, dtype=int), 1)
    assert str(err.value) == "the matrix must be square (n x n), got shape (3, 4)"


@pytest.mark.parametrize("weights", [[1, -1, 1, 1], ["1", "1", "1", "1"]])
def test_bad_weights_message(weights):
    with pytest.raises(InputError) as err:
        partition_metrics(sp.identity(4, format="csr"), np.array([0, 1, 1, 0]), 2, weights=np.array(weights))
    assert str(err.value) == "weights must be non-negative numbers"


@pytest.mark.parametrize("function", [connectivity_minus_one, edge_cut, comm_matrix])
def test_every_objective_checks_the_part_range(function):
    with pytest.raises(InputError, match="part id 2 of vertex 2 is out of range: expected 0 <= id < 2"):
        function(sp.identity(3, format="csr"), np.array([0, 1, 2]), 2)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_integral_float_part_ids_count_like_integers(dtype):
    a = sp.csr_matrix(np.array([[1.0, 1, 0], [0, 1, 1], [1, 0, 1]]))
    as_floats = partition_metrics(a, np.array([0.0, 1.0, 1.0], dtype=dtype), 2)
    assert as_floats == partition_metrics(a, np.array([0, 1, 1]), 2)
    assert as_floats["volume"]["total"] == 2  # row 0 reads u = 1 of part 1, row 2 reads u = 0 of part 0


# ---------------------------------------------------------------------------
# worked by hand, and the edges of the input range
# ---------------------------------------------------------------------------


def test_a_directed_example_worked_by_hand():
    """Five vertices, parts [0, 0, 1, 2, 2], no diagonal (so km1 is not the volume).

    Row v reads column u. Transfers (u, receiver): row 0 reads 2 and 3 -> (2, 0), (3, 0); row 1 reads 2 ->
    (2, 0) again; row 2 reads 0 and 4 -> (0, 1), (4, 1); row 3 reads 4, its own part; row 4 reads 0 and 1 ->
    (0, 2), (1, 2). Six transfers; rank 0 sends 3 (u = 0, 1), rank 1 sends 1, rank 2 sends 2; every rank
    receives 2. Messages (sender -> receiver): 0->1, 0->2, 1->0, 2->0, 2->1: sent 2, 1, 2; received 2, 2, 1.
    Columns 0 {parts 1, 2} and 4 {1, 2} are cut once each: km1 = 2. The seven undirected edges
    {0,2} {0,3} {0,4} {1,2} {1,4} {2,4} {3,4} are all cut but {3,4}: 6. Row weights 2, 1, 2, 1, 2 give part
    weights 3, 2, 3 of 8: imbalance 3 / (8 / 3) = 9 / 8.
    """
    reads = {0: [2, 3], 1: [2], 2: [0, 4], 3: [4], 4: [0, 1]}
    rows = [v for v, us in reads.items() for _ in us]
    cols = [u for us in reads.values() for u in us]
    a = sp.csr_matrix((np.full(len(rows), 0.5), (rows, cols)), shape=(5, 5))
    parts = np.array([0, 0, 1, 2, 2])
    assert partition_metrics(a, parts, 3) == {
        "parts": 3,
        "vertices": 5,
        "nonzeros": 8,
        "volume": {"total": 6, "avg": 2.0, "max": 3},
        "max_recv_volume": 2,
        "messages": {"total": 5, "avg": 5 / 3, "max": 2},
        "max_recv_messages": 2,
        "imbalance": 9 / 8,
        "connectivity_minus_one": 2,
        "edge_cut": 6,
        "empty_parts": [],
        "part_sizes": {"min": 1, "max": 2},
    }
    assert comm_matrix(a, parts, 3).tolist() == [[0, 1, 2], [1, 0, 0], [1, 1, 0]]
    u, dest = comm_pairs(a, parts)
    assert u.dtype == dest.dtype == np.int64
    assert list(zip(u.tolist(), dest.tolist())) == [(0, 1), (0, 2), (1, 2), (2, 0), (3, 0), (4, 1)]


def test_an_empty_matrix_moves_nothing():
    a = sp.csr_matrix((0, 0))
    parts = np.zeros(0, dtype=np.int64)
    m = partition_metrics(a, parts, 2)
    assert (m["vertices"], m["nonzeros"], m["volume"], m["max_recv_volume"]) == (0, 0, {"total": 0, "avg": 0.0,
                                                                                    "max": 0}, 0)
    assert (m["imbalance"], m["empty_parts"], m["part_sizes"]) == (1.0, [0, 1], {"min": 0, "max": 0})
    u, dest = comm_pairs(a, parts)
    assert u.shape == dest.shape == (0,)
    assert comm_matrix(a, parts, 2).tolist() == [[0, 0], [0, 0]]


def test_transfer_keys_refuse_exactly_from_2_to_the_62():
    """Keys (owner * P + dest) * n + u must stay below 2^63: P^2 * n >= 2^62 is refused, naming n and P."""
    four = sp.csr_matrix(np.ones((4, 4)))
    one = sp.csr_matrix(np.ones((1, 1)))
    with pytest.raises(InputError) as err:
        comm_pairs(four, np.array([0, 0, 0, 2**30 - 1]))  # P = 2^30: P^2 * 4 = 2^62
    assert str(err.value) == "n = 4 and P = 1073741824 are too large for 64-bit transfer keys"
    q = 2**30 - 2  # P^2 * 4 < 2^62: row 3 reads rows 0-2 of part 0, rows 0-2 read row 3
    u, dest = comm_pairs(four, np.array([0, 0, 0, q]))
    assert list(zip(u.tolist(), dest.tolist())) == [(0, q), (1, q), (2, q), (3, 0)]
    with pytest.raises(InputError, match="n = 1 and P = 2147483648 are too large"):
        comm_pairs(one, np.array([2**31 - 1]))  # P^2 * 1 = 2^62
    assert comm_pairs(one, np.array([2**31 - 2]))[0].size == 0  # P^2 < 2^62


def test_km1_is_exact_where_float64_is_not():
    """Column 1 has rows in parts 0 and 1 of P = 2^54: the keys 2^54 and 2^54 + 1 are one float64."""
    a = sp.csr_matrix(np.array([[0.0, 1.0], [0.0, 1.0]]))
    assert connectivity_minus_one(a, np.array([0, 1]), 2**54) == 1
