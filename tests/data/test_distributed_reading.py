"""An edge list read on P ranks at once (distgcn.data.distributed) against one process reading it whole
(distgcn.data.snap.read_edge_ids, adjacency.remap_ids and graph.normalized_adjacency, which every other test
checks): the same edges in the same order, the same vertex numbers, the same rows of Â to the bit, and the same
error for bad input on every rank."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
from conftest import run_mpi_script

from distgcn.comm.transport.inprocess import run_ranks
from distgcn.data.adjacency import edges_to_adjacency, remap_ids
from distgcn.data.distributed.adjacency import owned_normalized_rows
from distgcn.data.distributed.edge_list import (
    byte_range,
    read_edge_files,
    read_edge_range,
)
from distgcn.data.distributed.ids import number_ids
from distgcn.data.graph import normalized_adjacency
from distgcn.data.snap import read_edge_ids
from distgcn.errors import InputError


def edge_file(path: Path, seed: int, edges: int = 300, end_with_newline: bool = True) -> Path:
    """Arbitrary ids (large, sparse, repeated), comments, blank lines, tabs and spaces."""
    rng = np.random.default_rng(seed)
    ids = rng.choice(10**12, size=max(2, edges // 3), replace=False)
    lines = ["# a comment line", "% another"]
    for k in range(edges):
        u, v = rng.choice(ids, 2)
        lines.append(f"{u}\t{v}" if k % 3 else f"  {u} {v}  ")
        if k % 17 == 0:
            lines.append("")
        if k % 29 == 0:
            lines.append("# comment 12 34")
    path.write_text("\n".join(lines) + ("\n" if end_with_newline else ""))
    return path


def read_on(ranks: int, path: Path, block_bytes: int = 1 << 20) -> list:
    """Each rank's (source, target, numbered source, numbered target, its ids, first number), or its error."""
    def rank_main(t):
        try:
            src, dst = read_edge_range(t, path, block_bytes=block_bytes)
        except InputError as e:
            return str(e)
        numbered = number_ids(t, src, dst)
        return src, dst, *numbered.arrays, numbered.ids, numbered.first, numbered.num_vertices
    return run_ranks(ranks, rank_main)


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
@pytest.mark.parametrize("block_bytes", [40, 1 << 20])
@pytest.mark.parametrize("newline", [True, False])
def test_ranks_read_every_line_once_and_number_ids_as_one_process(tmp_path, ranks, block_bytes, newline):
    path = edge_file(tmp_path / "g.txt", seed=ranks, end_with_newline=newline)
    src, dst = read_edge_ids(path)
    vertex_ids, (want_src, want_dst) = remap_ids(src, dst)
    got = read_on(ranks, path, block_bytes)
    np.testing.assert_array_equal(np.concatenate([g[0] for g in got]), src)
    np.testing.assert_array_equal(np.concatenate([g[1] for g in got]), dst)
    np.testing.assert_array_equal(np.concatenate([g[2] for g in got]), want_src)
    np.testing.assert_array_equal(np.concatenate([g[3] for g in got]), want_dst)
    np.testing.assert_array_equal(np.concatenate([g[4] for g in got]), vertex_ids)  # the buckets, in rank order
    assert [g[5] for g in got] == list(np.cumsum([0] + [len(g[4]) for g in got])[:-1])
    assert {g[6] for g in got} == {len(vertex_ids)}
    if ranks > 1:
        assert all(len(g[0]) for g in got), "every rank should hold some edges of a 300-edge file"
        # each rank holds about its share of the ids, not the whole id list (the splitters' work)
        assert max(len(g[4]) for g in got) <= 1.5 * len(vertex_ids) / ranks + 2, [len(g[4]) for g in got]


@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_byte_ranges_cut_at_line_starts_and_cover_the_file(tmp_path, ranks):
    path = edge_file(tmp_path / "g.txt", seed=7)
    data = path.read_bytes()
    ranges = [byte_range(path, r, ranks) for r in range(ranks)]
    assert ranges[0][0] == 0 and ranges[-1][1] == len(data)
    for (_, stop), (start, _) in zip(ranges, ranges[1:]):
        assert stop == start and (start == 0 or start == len(data) or data[start - 1] == ord("\n"))
    for r, (start, stop) in enumerate(ranges):  # a range holds exactly the lines that begin in its nominal bytes
        nominal = (len(data) * r // ranks, len(data) * (r + 1) // ranks)
        begins = [p for p in range(len(data)) if p == 0 or data[p - 1] == ord("\n")]
        assert [p for p in begins if start <= p < stop] == [p for p in begins if nominal[0] <= p < nominal[1]]


BAD = {
    "bad token": "1 2\n3 4\n5 6\n7 x8\n9 10\n11 12\n",
    "wrong count": "1 2\n3 4\n5 6\n7 8 9\n9 10\n11 12\n",
    "negative": "1 2\n3 4\n5 6\n7 8\n9 -10\n11 12\n",
    "token beats count": "1 2\n3 4 5\n5 6\n7 8\n9 10\n1 y\n",
    "comments only": "# nothing\n% here\n\n",
}


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_anywhere_is_the_single_process_error_on_every_rank(tmp_path, ranks, case):
    path = tmp_path / "g.txt"
    path.write_text(BAD[case])
    with pytest.raises(InputError) as single:
        read_edge_ids(path)
    assert read_on(ranks, path, block_bytes=8) == [str(single.value)] * ranks


def test_a_gzip_stream_is_read_on_rank_zero(tmp_path):
    plain = edge_file(tmp_path / "g.txt", seed=3)
    packed = tmp_path / "g.txt.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    got = read_on(3, packed)
    assert [len(g[0]) > 0 for g in got] == [True, False, False]
    vertex_ids, (want_src, _) = remap_ids(*read_edge_ids(plain))
    np.testing.assert_array_equal(got[0][2], want_src)
    np.testing.assert_array_equal(np.concatenate([g[4] for g in got]), vertex_ids)


def test_ranks_without_ids_still_number_with_the_others():
    arrays = [np.array([50, 7, 50, 9]), np.zeros(0, dtype=np.int64), np.array([9, 1000])]
    numbered = run_ranks(3, lambda t: number_ids(t, arrays[t.rank]))
    _, want = remap_ids(np.concatenate(arrays))
    np.testing.assert_array_equal(np.concatenate([n.arrays[0] for n in numbered]), want[0])
    assert [n.num_vertices for n in numbered] == [4, 4, 4]


@pytest.mark.parametrize("group", ["group", "mpi", "gloo"])
def test_under_mpiexec_ranks_read_and_number_as_one_process(tmp_path, group):
    """3 real ranks: MPI's alltoall (the torch-free MPIGroup that `distgcn partition` runs on, and the MPI
    transport), and gloo's pairs of blocking sends."""
    path = edge_file(tmp_path / "g.txt", seed=11, edges=2000)
    result = run_mpi_script("distributed_read.py", 3, tmp_path / "out.json", str(path), group)
    src, dst = read_edge_ids(path)
    vertex_ids, (want_src, want_dst) = remap_ids(src, dst)
    assert sum(result["edges"]) == len(src) and min(result["edges"]) > 0
    assert result["src"] == want_src.tolist() and result["dst"] == want_dst.tolist()
    assert result["n"] == [len(vertex_ids)] * 3


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
@pytest.mark.parametrize("symmetrize", [False, True])
def test_each_rank_builds_its_rows_of_the_normalized_adjacency_to_the_bit(tmp_path, ranks, symmetrize):
    """Degrees from edges held anywhere, self loops in the file dropped, repeats merged: the rows one process's
    Â has, value for value."""
    path = edge_file(tmp_path / "g.txt", seed=20 + ranks, edges=400)
    with path.open("a") as f:
        f.write("5 5\n77 5\n77 5\n")  # a self loop and a repeated edge
    src, dst = read_edge_ids(path)
    _, (s, d) = remap_ids(src, dst)
    want = normalized_adjacency(edges_to_adjacency(s, d, int(max(s.max(), d.max())) + 1, symmetrize=symmetrize),
                                np.float32)

    def rank_main(t):
        mine = number_ids(t, *read_edge_range(t, path, block_bytes=64))
        return owned_normalized_rows(t, *mine.arrays, mine.first, len(mine.ids), mine.num_vertices,
                                     symmetrize=symmetrize, dtype=np.float32)

    for got in run_ranks(ranks, rank_main):
        rows = want[got.first:got.first + got.matrix.shape[0]]
        assert got.matrix.shape == rows.shape
        np.testing.assert_array_equal(got.matrix.indptr, rows.indptr)
        np.testing.assert_array_equal(got.matrix.indices, rows.indices)
        assert got.matrix.data.dtype == rows.data.dtype and got.matrix.data.tobytes() == rows.data.tobytes()


def edge_directory(directory: Path) -> list[Path]:
    """Six files of unequal sizes in name order: plain and gzipped, one of comments only."""
    directory.mkdir()
    files = []
    for k, edges in enumerate([120, 10, 400, 0, 60, 250]):
        plain = edge_file(directory / f"part-{k:02d}.txt", seed=40 + k, edges=edges)
        if k == 4:
            packed = directory / f"part-{k:02d}.txt.gz"
            packed.write_bytes(gzip.compress(plain.read_bytes()))
            plain.unlink()
            plain = packed
        files.append(plain)
    return files


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_a_directory_of_files_reads_as_their_concatenation(tmp_path, ranks):
    files = edge_directory(tmp_path / "edges")
    read = [read_edge_ids(f) for f in files if f.name != "part-03.txt"]  # comments only: no edges of its own
    src, dst = np.concatenate([r[0] for r in read]), np.concatenate([r[1] for r in read])
    vertex_ids, (want_src, want_dst) = remap_ids(src, dst)

    def rank_main(t):
        mine = read_edge_files(t, tmp_path / "edges", block_bytes=64)
        return mine, number_ids(t, *mine)

    got = run_ranks(ranks, rank_main)
    np.testing.assert_array_equal(np.concatenate([g[0][0] for g in got]), src)
    np.testing.assert_array_equal(np.concatenate([g[0][1] for g in got]), dst)
    np.testing.assert_array_equal(np.concatenate([g[1].arrays[0] for g in got]), want_src)
    np.testing.assert_array_equal(np.concatenate([g[1].arrays[1] for g in got]), want_dst)
    np.testing.assert_array_equal(np.concatenate([g[1].ids for g in got]), vertex_ids)
    if ranks > 1:
        assert sum(len(g[0][0]) > 0 for g in got) >= 2, "the files should be spread over the ranks"


@pytest.mark.parametrize("ranks", [1, 3])
def test_a_bad_file_of_a_directory_is_named_with_its_line_on_every_rank(tmp_path, ranks):
    files = edge_directory(tmp_path / "edges")
    files[1].write_text("1 2\n3 4 5\n")  # a wrong count, met first in order ...
    files[5].write_text("1 2\n3 4\n5 z\n")  # ... but a bad token anywhere is the error one process reports
    with pytest.raises(InputError) as single:
        read_edge_ids(files[5])
    assert str(single.value).startswith(f"{files[5]}:3:")
    errors = run_ranks(ranks, lambda t: _error_of(lambda: read_edge_files(t, tmp_path / "edges", block_bytes=16)))
    assert errors == [str(single.value)] * ranks
    files[5].write_text("1 2\n")
    with pytest.raises(InputError) as single:
        read_edge_ids(files[1])
    errors = run_ranks(ranks, lambda t: _error_of(lambda: read_edge_files(t, tmp_path / "edges")))
    assert errors == [str(single.value)] * ranks
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_ranks(ranks, lambda t: _error_of(lambda: read_edge_files(t, empty))) == \
        [f"{empty}: no edge-list files in this directory"] * ranks


def _error_of(read) -> str | None:
    try:
        read()
    except InputError as e:
        return str(e)
    return None
