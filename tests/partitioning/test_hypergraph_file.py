"""Mt-KaHyPar reads the column-net hypergraph from an hMETIS file (partition/hmetis.py, issue #16): the file's
text, the same partition as the tool's in-memory constructor, auto's choice by size, and a file that cannot be
written."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import distgcn.partitioning.hypergraph as hg
from distgcn.errors import InputError
from distgcn.partitioning.hmetis import render_tokens, write_hmetis


def test_tokens_render_as_decimal_text_with_their_separators():
    values = np.array([0, 9, 10, 99, 100, 12345, 2**40])
    ends_line = np.array([False, False, True, False, False, False, True])
    assert render_tokens(values, ends_line).tobytes() == f"0 9 10\n99 100 12345 {2**40}\n".encode()


def test_the_file_by_hand(tmp_path, monkeypatch):
    monkeypatch.setattr("distgcn.partitioning.hmetis._CHUNK_TOKENS", 2)  # several chunks, and a net longer than one
    path = tmp_path / "h.hgr"
    write_hmetis(path, np.array([0, 2, 5, 6]), np.array([0, 2, 0, 1, 2, 2]), np.array([2, 1, 13]),
                 np.array([1, 7, 1]))
    assert path.read_text() == "3 3 11\n1 1 3\n7 1 2 3\n1 3\n2\n1\n13\n"


def _rmat_like(n: int, seed: int, isolated: int) -> sp.csr_matrix:
    """A skewed random pattern on a path, plus the diagonal; the last ``isolated`` rows and columns hold only
    the diagonal (their column nets have one pin), the others at least two entries."""
    rng = np.random.default_rng(seed)
    linked = n - isolated
    rows = np.concatenate([np.minimum(rng.zipf(1.6, 6 * n) - 1, linked - 1), np.arange(linked - 1)])
    cols = np.concatenate([rng.integers(0, linked, 6 * n), np.arange(1, linked)])
    a = sp.csr_matrix((np.ones(rows.shape[0]), (rows, cols)), shape=(n, n)) + sp.eye(n)
    return sp.csr_matrix(a + a.T)


def _constructed_in_memory(a: sp.csr_matrix, nparts: int, seed: int) -> tuple[int, np.ndarray]:
    """km1 and parts of the deterministic preset, the nets handed over as one sequence each (the way before
    issue #16), less the single-pin nets that the file reader drops."""
    import mtkahypar

    indptr, pins, weights = hg.column_net(a)
    nets = [net for net in np.split(pins, indptr[1:-1]) if net.shape[0] > 1]
    mtk, _ = hg._mtkahypar(None)
    ctx = mtk.context_from_preset(mtkahypar.PresetType.DETERMINISTIC)
    ctx.set_partitioning_parameters(nparts, 0.03, mtkahypar.Objective.KM1)
    ctx.logging = False
    mtkahypar.set_seed(seed)
    made = mtk.create_hypergraph(ctx, weights.shape[0], len(nets), nets, weights, np.ones(len(nets), dtype=np.int64))
    partitioned = made.partition(ctx)
    return int(partitioned.km1()), np.asarray(partitioned.get_partition(), dtype=np.int64)


@pytest.mark.parametrize("isolated", [0, 40])
def test_the_file_gives_the_partition_of_the_in_memory_hypergraph(isolated):
    a = _rmat_like(600, seed=3, isolated=isolated)
    assert int((np.diff(a.tocsc().indptr) == 1).sum()) == isolated  # none: the in-memory nets are all of them
    km1, parts = _constructed_in_memory(a, 4, seed=5)
    got, info = hg.hypergraph_parts(a, 4, seed=5, preset="deterministic", return_info=True)
    assert info["km1_reported"] == km1
    assert np.array_equal(got, parts)


def test_auto_keeps_v_cycles_for_few_parts_of_a_small_hypergraph_only():
    limit = hg.AUTO_VCYCLES_MAX_PINS
    assert hg.resolve_auto(hg.AUTO_VCYCLES_MAX_PARTS, limit) == "quality_v5"
    assert hg.resolve_auto(hg.AUTO_VCYCLES_MAX_PARTS, limit + 1) == "default"
    assert hg.resolve_auto(hg.AUTO_VCYCLES_MAX_PARTS + 1, 1) == "default"


def test_auto_records_the_preset_it_resolved_by_size(monkeypatch):
    a = _rmat_like(300, seed=1, isolated=0)
    monkeypatch.setattr(hg, "AUTO_VCYCLES_MAX_PINS", a.nnz - 1)
    _, info = hg.hypergraph_parts(a, 2, return_info=True)
    assert (info["preset"], info["resolved_preset"], info["vcycles"]) == ("auto", "default", 0)


def test_a_file_that_cannot_be_written_names_the_directory_and_tmpdir(tmp_path, monkeypatch):
    not_a_directory = tmp_path / "a-file"
    not_a_directory.write_text("")
    monkeypatch.setattr("tempfile.tempdir", str(not_a_directory))
    with pytest.raises(InputError) as err:
        hg.hypergraph_parts(_rmat_like(100, seed=0, isolated=0), 2)
    assert "cannot write the hypergraph file for Mt-KaHyPar" in str(err.value)
    assert str(not_a_directory) in str(err.value) and "point TMPDIR at a directory with room" in str(err.value)
