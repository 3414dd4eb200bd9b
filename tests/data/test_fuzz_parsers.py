"""Fuzzing the text parsers: any bytes give a valid Graph or an InputError, never a crash or a hang.

CI runs a few hundred examples per parser; a long run is
``DISTGCN_FUZZ_EXAMPLES=20000 python -m pytest tests/data/test_fuzz_parsers.py``
(docs/reliability.md records the last one and what it found).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distgcn.data.graph import Graph
from distgcn.data.matrix_market import load_matrix_market
from distgcn.data.metis import load_metis
from distgcn.data.snap import load_snap
from distgcn.errors import InputError

EXAMPLES = int(os.environ.get("DISTGCN_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 300,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

integers = st.one_of(st.integers(-3, 40), st.integers(-(2**70), 2**70)).map(str)
tokens = st.one_of(integers, st.sampled_from(["x", "1.5", "1e3", "+", "-", "", "nan", "0x1f", "٣", "\x00"]))
separators = st.sampled_from([" ", "\t", "  ", " \t", ","])


def lines(min_tokens: int, max_tokens: int) -> st.SearchStrategy[str]:
    return st.lists(tokens, min_size=min_tokens, max_size=max_tokens).flatmap(
        lambda toks: separators.map(lambda sep: sep.join(toks)))


edge_list_text = st.lists(st.one_of(lines(0, 4), st.sampled_from(["# comment", "% c", ""])), max_size=12).map(
    "\n".join)
mtx_text = st.tuples(
    st.sampled_from(["%%MatrixMarket matrix coordinate pattern general", "%%MatrixMarket matrix coordinate real "
                     "symmetric", "%%MatrixMarket matrix array real general", "%%MatrixMarket matrix coordinate "
                     "integer general", "%%MatrixMarket matrix coordinate complex hermitian", "%%MatrixMarket x"]),
    lines(0, 4), st.lists(lines(0, 4), max_size=8),
).map(lambda t: "\n".join([t[0], t[1], *t[2]]) + "\n")
metis_text = st.tuples(lines(0, 4), st.lists(lines(0, 5), max_size=8)).map(
    lambda t: "\n".join([t[0], *t[1]]) + "\n")
raw_bytes = st.binary(max_size=200)


def check(loader, path: Path, data: bytes) -> None:
    path.write_bytes(data)
    try:
        graph = loader(path)
    except InputError:
        return
    assert isinstance(graph, Graph)
    adj = graph.adj
    n = adj.shape[0]
    assert adj.shape == (n, n) and n == len(graph.vertex_ids) and adj.nnz > 0
    assert adj.indices.min() >= 0 and adj.indices.max() < n
    assert not adj.diagonal().any(), "self loops must be removed"
    assert np.all(adj.data == 1.0)


@FUZZ
@given(text=edge_list_text)
def test_edge_list_parser(tmp_path, text):
    check(load_snap, tmp_path / "g.txt", text.encode("utf-8", "surrogatepass"))


@FUZZ
@given(data=raw_bytes)
def test_edge_list_parser_raw_bytes(tmp_path, data):
    check(load_snap, tmp_path / "g.txt", data)


@FUZZ
@given(text=mtx_text)
def test_matrix_market_parser(tmp_path, text):
    check(load_matrix_market, tmp_path / "g.mtx", text.encode())


@FUZZ
@given(data=raw_bytes)
def test_matrix_market_parser_raw_bytes(tmp_path, data):
    check(load_matrix_market, tmp_path / "g.mtx", b"%%MatrixMarket matrix coordinate pattern general\n" + data)


@FUZZ
@given(text=metis_text)
def test_metis_parser(tmp_path, text):
    check(load_metis, tmp_path / "g.graph", text.encode())


FOUND_BY_FUZZING = [
    # scipy 1.17's Matrix Market reader died of SIGFPE (the whole process) on a zero dimension in
    # the dense layout; found by the long fuzz run of 2026-11-22.
    ("zero-rows-array.mtx", "%%MatrixMarket matrix array real general\n0 3\n1\n", "0 x 3"),
    ("empty-array.mtx", "%%MatrixMarket matrix array real general\n0 0\n", "0 x 0"),
]


@pytest.mark.parametrize("name,text,expected", FOUND_BY_FUZZING, ids=[f[0] for f in FOUND_BY_FUZZING])
def test_regressions_found_by_fuzzing(tmp_path, name, text, expected):
    """Run in a child process: a regression here kills the process instead of raising."""
    path = tmp_path / name
    path.write_text(text)
    probe = ("import sys; from pathlib import Path; from distgcn.data import load_graph\n"
             "from distgcn.errors import InputError\n"
             "try:\n    load_graph(sys.argv[1])\nexcept InputError as e:\n    print(e)\n")
    proc = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-500:]
    assert expected in proc.stdout
