"""Input that expands: every reader bounds what it decompresses and holds by what this node has, before
allocating it (docs/reliability.md, "Bad input, answered").

A compressed file can hold a thousand times its size: one line of 512 MiB of spaces is half a megabyte of
gzip. The line-by-line readers refuse a line longer than :data:`distgcn.data._text.MAX_LINE_BYTES`; the whole-file readers
stop decompressing once the text cannot fit the memory; the streaming readers stop once what they keep
cannot. The tests that run the command measure its peak memory against the same command on a missing file.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
from conftest import ROOT

from distgcn.data import load_graph
from distgcn.data._text import line_blocks, read_bytes
from distgcn.data.ogb import read_int_table
from distgcn.data.snap import PAIR_BYTES, read_edge_ids
from distgcn.errors import InputError
from distgcn.io import limits

MIB = 1 << 20
BOMB_BYTES = 512 * MIB
"""What the bombs decompress to: the readers before these bounds held it all (and more: 1.6 GB and up)."""


def gzip_of_spaces(nbytes: int, head: bytes = b"", tail: bytes = b"") -> bytes:
    """gzip members, concatenated, decompressing to ``head``, ``nbytes`` spaces and ``tail``: one member of
    1 MiB of spaces compressed once and repeated, so that making 512 MiB takes no time."""
    assert nbytes % MIB == 0
    member = gzip.compress(b" " * MIB, 9)
    return gzip.compress(head) + member * (nbytes // MIB) + gzip.compress(tail)


def node_has(monkeypatch: pytest.MonkeyPatch, nbytes: int) -> None:
    """This node's available memory, as the readers ask for it."""
    monkeypatch.setattr(limits, "available_bytes", lambda device, ranks_on_node: nbytes)


# --- the command, measured -----------------------------------------------------------------------------

PEAK = ("import resource, sys\n"
        "from distgcn.cli.main import main\n"
        "code = main(sys.argv[1:])\n"
        "print('peak', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)\n"
        "sys.exit(code)\n")


def run_measured(args: list[str]) -> tuple[subprocess.CompletedProcess, int, float]:
    """(the finished ``distgcn ARGS``, its peak resident memory in bytes, seconds)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", PEAK, *args], capture_output=True, text=True, timeout=120, env=env)
    peak = int(next(line for line in done.stdout.splitlines() if line.startswith("peak ")).split()[1])
    return done, peak, time.monotonic() - start


def edge_list(directory: Path, data: bytes) -> Path:
    (directory / "g.txt.gz").write_bytes(data)
    return directory / "g.txt.gz"


def matrix_market(directory: Path, data: bytes) -> Path:
    (directory / "g.mtx.gz").write_bytes(gzip.compress(b"%%MatrixMarket matrix coordinate pattern general\n") + data)
    return directory / "g.mtx.gz"


def ogb(directory: Path, data: bytes) -> Path:
    raw = directory / "ogbn_arxiv" / "raw"
    raw.mkdir(parents=True)
    (raw / "edge.csv.gz").write_bytes(data)
    return directory / "ogbn_arxiv"


BOMBS = {"edge list": (edge_list, "g.txt.gz:1: "), "Matrix Market": (matrix_market, "g.mtx.gz:2: "),
         "OGB edge table": (ogb, "edge.csv.gz:1: ")}


@pytest.mark.parametrize("kind", BOMBS)
def test_a_compressed_line_without_end_is_refused_in_bounded_memory_and_time(tmp_path, kind):
    """Before: 512 MiB of spaces in one line, gzipped to half a megabyte, took 1.6 GB and more before 'no
    edges found' (1 GiB: 3.2 GB and 13 s; ten times that, the out-of-memory killer). The control is the
    same reader refusing a one-line file: the same modules loaded, nothing read."""
    make, where = BOMBS[kind]
    flags = ["--features", "4", "--classes", "2", "--epochs", "1", "--quiet"]
    (tmp_path / "control").mkdir()
    control, control_peak, _ = run_measured(["train", "--graph", str(make(tmp_path / "control",
                                                                          gzip.compress(b"x\n"))), *flags])
    assert control.returncode == 2 and where.split(":")[0] in control.stderr, control.stderr
    done, peak, seconds = run_measured(["train", "--graph", str(make(tmp_path, gzip_of_spaces(BOMB_BYTES))), *flags])
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"{where}line longer than 16 MiB (expected lines of text)" in done.stderr
    assert peak - control_peak < 128 * MIB, f"{(peak - control_peak) / MIB:.0f} MiB above the control"
    assert seconds < 60


# --- each bound, at its edge ---------------------------------------------------------------------------

def test_line_blocks_refuse_a_line_once_more_than_the_bound_is_read_without_its_end(tmp_path):
    path = tmp_path / "g.txt.gz"
    path.write_bytes(gzip.compress(b"1 2\n" * 3 + b" " * 1000))
    blocks = list(line_blocks(path, block_bytes=64, max_line_bytes=1000))  # the last line, at the bound, passes
    assert bytes(blocks[-1]) == b" " * 1000
    with pytest.raises(InputError, match=r"g\.txt\.gz:4: line longer than 999 bytes \(expected lines of text\)$"):
        list(line_blocks(path, block_bytes=64, max_line_bytes=999))


def test_a_compressed_file_is_read_whole_only_while_it_fits_the_memory(tmp_path, monkeypatch):
    """A METIS file is tokenized whole: its text, decompressed, must fit a quarter of what the node has."""
    path = tmp_path / "spaces.graph.gz"
    path.write_bytes(gzip_of_spaces(64 * MIB))
    node_has(monkeypatch, 4 * 8 * MIB)
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match=r"spaces\.graph\.gz: decompresses to more than 16777216 bytes "
                                             r"\(read so far\): reading it needs at least 0\.1 GiB"):
            load_graph(str(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 40 * MIB, f"{peak / MIB:.0f} MiB held"  # one 16 MiB chunk and the decompressor's buffers
    node_has(monkeypatch, 4 * 64 * MIB)
    assert len(read_bytes(path, bytes_per_byte=4)) == 64 * MIB  # at the bound: read


def test_a_plain_file_is_refused_by_its_size_before_it_is_read(tmp_path, monkeypatch):
    path = tmp_path / "g.graph"
    path.write_text("3 2\n2\n1 3\n2\n")
    node_has(monkeypatch, 4 * path.stat().st_size)
    assert read_bytes(path, bytes_per_byte=4) == path.read_bytes()
    node_has(monkeypatch, 4 * path.stat().st_size - 1)
    with pytest.raises(InputError, match=r"g\.graph: file of 12 bytes: reading it needs at least"):
        load_graph(str(path))


def test_an_edge_list_is_refused_at_the_line_where_its_edges_outgrow_the_memory(tmp_path, monkeypatch):
    path = tmp_path / "g.txt.gz"
    path.write_bytes(gzip.compress(b"".join(b"%d %d\n" % (i, i + 1) for i in range(100))))
    per_edge = PAIR_BYTES + limits.EDGE_BYTES
    node_has(monkeypatch, 100 * per_edge)
    assert len(read_edge_ids(path, block_bytes=64)[0]) == 100
    node_has(monkeypatch, 100 * per_edge - 1)
    with pytest.raises(InputError, match=r"g\.txt\.gz:100: 100 edges read up to this line"):
        read_edge_ids(path, block_bytes=64)
    node_has(monkeypatch, 10 * per_edge)  # the first blocks hold more: refused there, not at the end
    with pytest.raises(InputError, match=r"g\.txt\.gz:1[0-9]: 1[0-9] edges read up to this line"):
        read_edge_ids(path, block_bytes=64)


def test_an_ogb_table_is_refused_at_the_line_where_it_outgrows_the_memory(tmp_path, monkeypatch):
    path = tmp_path / "edge.csv.gz"
    path.write_bytes(gzip.compress(b"".join(b"%d,%d\n" % (i, i + 1) for i in range(100))))
    node_has(monkeypatch, 2 * 200 * 8)
    assert read_int_table(path, columns=2, what="edges").shape == (100, 2)
    node_has(monkeypatch, 2 * 200 * 8 - 1)
    with pytest.raises(InputError, match=r"edge\.csv\.gz:100: 200 values read up to this line"):
        read_int_table(path, columns=2, what="edges")


def test_integers_of_thousands_of_digits_are_too_large_not_a_traceback(tmp_path):
    """Python converts at most 4300 digits: the parsers' slow path once raised its ValueError."""
    digits = "9" * 5000
    for name, text, line in (("g.txt", f"0 1\n1 {digits}\n", 2), ("g.graph", f"2 1\n2\n{digits}\n", 3)):
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(InputError, match=rf"{name}:{line}: integer '9{{40}}\.\.\.' is too large"):
            load_graph(str(path))
    path = tmp_path / "zeros.txt"
    path.write_text(f"0 1\n1 {'0' * 4990}12\n")  # leading zeros: the value is what counts
    assert load_graph(str(path)).vertex_ids.tolist() == [0, 1, 12]


def test_random_features_for_a_file_graph_are_checked_against_the_memory_before_drawing(tmp_path, monkeypatch):
    """Before: --features 10^11 on a file graph was numpy's ArrayMemoryError for 1.09 TiB."""
    path = tmp_path / "g.txt"
    path.write_text("0 1\n1 2\n")
    need = 3 * 1000 * 4 + 3 * (8 + 3)
    node_has(monkeypatch, need)
    assert load_graph(str(path), features=1000, classes=2).features.shape == (3, 1000)
    node_has(monkeypatch, need - 1)
    with pytest.raises(InputError, match=rf"^--features 1000 on the 3 vertices of {path} \(3 x 1000 float32 "
                                         r"random features\): loading needs at least"):
        load_graph(str(path), features=1000, classes=2)
    monkeypatch.undo()
    with pytest.raises(InputError, match=r"--features 100000000000 on the 3 vertices"):
        load_graph(str(path), features=10**11, classes=2)
