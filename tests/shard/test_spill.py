"""While Mt-KaHyPar (or KaHyPar) runs, ``distgcn partition`` holds neither Â, the vertex arrays nor the column
nets in its own memory (issue #16: the hypergraph model's memory at 10^8; distgcn/shard/spill.py).

Peak memory itself is measured in docs/scale.md; here what is checked is what undoing the release would break:
the arrays that were in memory are freed (no reference survives) when the tool starts, and the values every later
step reads are unchanged.
"""

from __future__ import annotations

import contextlib
import io
import mmap
import tempfile
import weakref

import numpy as np
import pytest

import distgcn.partitioning.hypergraph as hg
import distgcn.shard.write as precompute
from distgcn.config import PartitionerConfig
from distgcn.data.prepare import GraphOptions
from distgcn.io.page_cache import file_mapped
from distgcn.runtime.progress import VERBOSE, Progress
from distgcn.shard.cut import GraphData
from distgcn.shard.spill import Spill

GRAPH = "synthetic:sbm,n=300,avg_degree=6"


def _loaded() -> tuple[GraphData, object]:
    return precompute.load(GraphOptions(GRAPH), Progress(0))


def test_entering_moves_every_array_to_a_file_mapping_with_its_values(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    data, a_hat = _loaded()
    expected = {name: values.copy() for name, values in data.arrays.items()}
    expected_a_hat = a_hat.copy()
    before = [weakref.ref(a) for a in (a_hat.data, a_hat.indices, a_hat.indptr, *data.arrays.values())]
    spill = Spill(data, a_hat)
    spill.move_vertex_arrays()
    assert [ref() is None for ref in before] == [False] * 3 + [True] * len(data.arrays)
    with spill():
        assert [ref() for ref in before] == [None] * len(before)  # nothing held the old arrays
        assert all(file_mapped(a) for a in (a_hat.data, a_hat.indices, a_hat.indptr, *data.arrays.values()))
        assert list(tmp_path.iterdir()) == []  # the files are unlinked at once; the mappings still read them
    assert spill.error is None and spill.moved_bytes == sum(a.nbytes for a in expected.values()) + sum(
        a.nbytes for a in (expected_a_hat.data, expected_a_hat.indices, expected_a_hat.indptr))
    for name, values in expected.items():
        assert type(data.arrays[name]) is np.ndarray and np.array_equal(data.arrays[name], values)
    assert (a_hat != expected_a_hat).nnz == 0 and a_hat.dtype == expected_a_hat.dtype
    a_hat.data[0] = -1.0  # copy-on-write: the mapping is private, writes do not fail


def test_the_hook_runs_when_the_column_nets_are_freed_and_before_the_tool_reads_them(monkeypatch):
    nets: list[weakref.ref] = []
    seen: list[bool] = []
    real_column_net, real_tool = hg.column_net, hg._partition_mtkahypar

    def column_net(*args, **kwargs):
        arrays = real_column_net(*args, **kwargs)
        nets.extend(weakref.ref(a) for a in arrays)
        return arrays

    def tool(staged, *args):
        *options, hook = args

        def watched_hook():
            seen.append(all(ref() is None for ref in nets))
            return hook()

        return real_tool(staged, *options, watched_hook)

    monkeypatch.setattr(hg, "column_net", column_net)
    monkeypatch.setattr(hg, "_partition_mtkahypar", tool)
    data, a_hat = _loaded()
    parts = hg.hypergraph_parts(a_hat, 3, preset="deterministic", seed=0)
    assert nets and seen == [True] and parts.shape == (300,)


def test_the_partition_command_spills_and_its_output_is_unchanged(tmp_path, monkeypatch):
    """The deterministic preset gives the same part vector, so the directory is the same with or without it."""
    entered = []
    real_spill_call = Spill.__call__

    def counting(self):
        entered.append(True)
        return real_spill_call(self)

    options = GraphOptions(GRAPH)
    monkeypatch.setattr(Spill, "__call__", lambda self: contextlib.nullcontext())
    monkeypatch.setattr(Spill, "move_vertex_arrays", lambda self: None)
    precompute.write_partition(options, tmp_path / "without", 3,
                               PartitionerConfig("hypergraph", preset="deterministic"), quiet=True)
    monkeypatch.undo()
    monkeypatch.setattr(Spill, "__call__", counting)
    precompute.write_partition(options, tmp_path / "with", 3,
                               PartitionerConfig("hypergraph", preset="deterministic"), quiet=True)
    assert entered == [True]
    shards = sorted(path.name for path in (tmp_path / "with").iterdir() if path.suffix == ".npz")
    assert len(shards) >= 3 and shards == sorted(p.name for p in (tmp_path / "without").iterdir() if p.suffix == ".npz")
    for name in shards:
        assert (tmp_path / "with" / name).read_bytes() == (tmp_path / "without" / name).read_bytes()


def test_a_tmpdir_without_room_leaves_the_arrays_in_memory_and_says_so(tmp_path, monkeypatch):
    not_a_directory = tmp_path / "a-file"
    not_a_directory.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(not_a_directory))
    data, a_hat = _loaded()
    features = data.arrays["features"]
    spill = Spill(data, a_hat)
    with spill():
        pass
    assert data.arrays["features"] is features and spill.moved_bytes == 0 and "Not a directory" in spill.error
    stream = io.StringIO()
    spill.report(Progress(VERBOSE, stream, interactive=False))
    assert f"could not move Â and the vertex arrays to {not_a_directory}" in stream.getvalue()
    assert "point TMPDIR at a directory with room" in stream.getvalue()


@pytest.mark.parametrize("partitioner", ["kahypar", "mtkahypar"])
def test_partitioning_with_the_arrays_spilled_gives_a_valid_partition(partitioner):
    data, a_hat = _loaded()
    expected = a_hat.copy()
    spill = Spill(data, a_hat)
    parts = hg.hypergraph_parts(a_hat, 2, partitioner=partitioner, while_tool_runs=spill)
    assert spill.moved_bytes > 0 and file_mapped(a_hat.indices)
    assert parts.shape == (300,) and set(parts.tolist()) == {0, 1} and (a_hat != expected).nnz == 0


def _resident_kib(array: np.ndarray) -> int:
    """The kibibytes this process holds of the mapping ``array`` lies in (/proc/self/smaps' Rss)."""
    address = array.ctypes.data
    lines = open("/proc/self/smaps").read().splitlines()
    for k, line in enumerate(lines):
        span = line.split()[0]
        if "-" in span and all(c in "0123456789abcdef-" for c in span):
            lo, hi = (int(x, 16) for x in span.split("-"))
            if lo <= address < hi:
                rss = next(entry for entry in lines[k + 1:] if entry.startswith("Rss:"))
                return int(rss.split()[1])
    raise AssertionError("no mapping holds the array")


def test_dropped_rows_of_a_spilled_array_leave_the_process_and_read_back_the_same(tmp_path, monkeypatch):
    """What the shards' feature exchange relies on (distgcn/shard/rank_rows.py: features_to_owners)."""
    from distgcn.io.page_cache import drop_pages, spilled

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    values = np.random.default_rng(0).standard_normal((4096, 1024)).astype(np.float32)  # 16 MiB
    mapped = spilled(values)
    assert file_mapped(mapped) and spilled(mapped) is mapped
    assert _resident_kib(mapped) < 1024  # nothing read yet
    assert np.array_equal(mapped, values)
    assert _resident_kib(mapped) >= 16 * 1024
    drop_pages(mapped, 0, 2048)
    assert 8 * 1024 <= _resident_kib(mapped) <= 8 * 1024 + 8  # the first half's pages went back
    drop_pages(values, 0, 4096)  # an array in memory: nothing to give back, nothing changes
    assert np.array_equal(mapped, values)  # read back from the file


def test_a_tmpdir_that_cannot_take_the_array_leaves_it_in_memory(tmp_path, monkeypatch):
    from distgcn.io.page_cache import spilled

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    values = np.arange(12.0).reshape(3, 4)
    assert spilled(values) is values
