"""Verify before trusting: what a partition directory names is checked against meta.json before use.

A shard re-saved after partitioning (so that its own checksum still verifies), a
plan that no longer matches its peers', a meta.json whose part count disagrees
with the shards, files outside the directory: each ends in one line and exit 2
on every command that reads a partition (train, stats, report), never in a
wrong result, a hang or an MPI traceback. train runs on in-process ranks, and
under a real mpiexec for a changed shard and a changed plan. Header counts that
would drive a huge allocation are refused before it.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import distgcn_in_process, run_distgcn

from distgcn.cli.stats_tables import stats_json
from distgcn.data import load_graph
from distgcn.errors import InputError
from distgcn.report.inputs import load_inputs
from distgcn.shard.rank_shard import Shard

EDGES = "0 1\n1 2\n2 3\n3 0\n0 2\n4 5\n5 6\n6 7\n7 4\n1 5\n2 6\n"
GRAPH_ARGS = ["--features", "4", "--classes", "2"]


def partition(tmp_path: Path, parts: int, name: str = "part") -> Path:
    graph = tmp_path / "g.txt"
    graph.write_text(EDGES)
    out = tmp_path / name
    proc = distgcn_in_process(["partition", str(graph), "--parts", str(parts), "--model", "contiguous",
                               *GRAPH_ARGS, "--out", str(out), "--quiet"])
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> dict[int, Path]:
    base = tmp_path_factory.mktemp("pristine")
    return {parts: partition(base, parts, f"p{parts}") for parts in (2, 3, 4)}


@pytest.fixture()
def part3(tmp_path, pristine) -> Path:
    return Path(shutil.copytree(pristine[3], tmp_path / "part"))


def edit_meta(directory: Path, change) -> None:
    meta = json.loads((directory / "meta.json").read_text())
    change(meta)
    (directory / "meta.json").write_text(json.dumps(meta))


def resave(directory: Path, rank: int, change, record_in_meta: bool = False) -> None:
    """Change one shard through Shard.save (its own checksum is then valid); optionally also in meta.json."""
    path = directory / f"shard-{rank:05d}.npz"
    shard = Shard.load(path)
    change(shard)
    checksum = shard.save(path)
    if record_in_meta:
        edit_meta(directory, lambda m: m["shards"][rank].__setitem__("sha256", checksum))


def one_error_line(proc) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "mpi4py" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def refused_everywhere(directory: Path, ranks: int, expected: str, mpiexec: bool = False) -> None:
    """train, stats and report all refuse with ``expected``; train on in-process ranks, or a real mpiexec."""
    train = ["train", str(directory), "--epochs", "1", "--quiet"]
    line = one_error_line(run_distgcn(train, ranks=ranks, timeout=90) if mpiexec
                          else distgcn_in_process(train, ranks=ranks))
    assert expected in line, line
    for read in (lambda: stats_json(directory), lambda: load_inputs([str(directory)])):
        with pytest.raises(InputError, match=re.escape(expected)):
            read()


def relabel(shard: Shard) -> None:
    shard.labels = shard.labels.copy()
    shard.labels[0] = 1 - shard.labels[0]


def test_resaved_shard_with_one_changed_label_is_refused(part3):
    """Before: trained to exit 0 (its own checksum verifies; nothing compared it with meta.json).

    Under a real mpiexec: the other refusals' path (one line, exit 2, no MPI traceback) on real ranks."""
    resave(part3, 1, relabel)
    refused_everywhere(part3, 3, "shard-00001.npz: shard does not match meta.json", mpiexec=True)


def drop_one_sent_row(shard: Shard) -> None:
    assert shard.send_index.size, "the test graph must make rank 0 send rows"
    shard.send_index = shard.send_index[:-1]
    shard.send_offsets = shard.send_offsets.copy()
    shard.send_offsets[-1] -= 1


def test_changed_plan_recorded_in_meta_is_refused_not_hung(part3):
    """Before: the job hung in the halo exchange (checksums matching, so only the collective check catches it)."""
    resave(part3, 0, drop_one_sent_row, record_in_meta=True)
    line = one_error_line(run_distgcn(["train", str(part3), "--epochs", "1", "--quiet"], ranks=3, timeout=90))
    assert "the shards' plans disagree: rank 0 sends" in line, line


def test_peer_out_of_range_is_refused(part3):
    def far_peer(shard: Shard) -> None:
        shard.send_peers = shard.send_peers.copy()
        shard.send_peers[-1] = 7

    resave(part3, 0, far_peer, record_in_meta=True)
    refused_everywhere(part3, 3, "send_peers must be increasing ranks in [0, 3)")


def test_meta_part_count_disagreeing_with_shards_is_one_line(tmp_path, pristine):
    """Before: meta.json saying 3 parts over shards written for 4 ended in a raw mpi4py.MPI.Exception."""
    part = Path(shutil.copytree(pristine[4], tmp_path / "part"))
    edit_meta(part, lambda m: m.__setitem__("parts", 3))
    refused_everywhere(part, 3, "field shards: 4 entries for 3 parts")
    edit_meta(part, lambda m: m.__setitem__("shards", m["shards"][:3]))  # consistent list, shards still for 4
    with pytest.raises(InputError, match="nparts 4; meta.json records 3"):
        stats_json(part)


@pytest.mark.parametrize("name, expected", [("../outside.npz", "field shards[1].file: expected a file name"),
                                            ("/etc/passwd", "field shards[1].file: expected a file name"),
                                            ("..", "'..' is not a plain file name"),
                                            ("missing.npz", "missing.npz: shard of rank 1 (shards[1].file in meta.json) not found")])
def test_shard_named_outside_the_directory_is_refused(part3, name, expected):
    (part3.parent / "outside.npz").write_bytes((part3 / "shard-00001.npz").read_bytes())
    edit_meta(part3, lambda m: m["shards"][1].__setitem__("file", name))
    with pytest.raises(InputError, match=re.escape(expected)):
        stats_json(part3)


def test_shard_symlink_is_refused(part3):
    moved = part3.parent / "elsewhere.npz"
    (part3 / "shard-00002.npz").rename(moved)
    (part3 / "shard-00002.npz").symlink_to(moved)
    refused_everywhere(part3, 3, "shard-00002.npz: shard of rank 2 (shards[2].file in meta.json) is a symbolic link")


def test_changed_part_vector_is_refused(part3):
    parts = np.load(part3 / "parts.npy")
    np.save(part3 / "parts.npy", parts[::-1].copy())
    for read in (lambda: stats_json(part3), lambda: load_inputs([str(part3)])):
        with pytest.raises(InputError, match="parts.npy: part vector does not match meta.json"):
            read()


def test_directory_without_a_part_vector_checksum_still_loads(part3):
    """Directories written before meta.json recorded parts_sha256 keep working."""
    edit_meta(part3, lambda m: m.pop("parts_sha256"))
    assert stats_json(part3)["parts"] == 3


def test_malformed_meta_field_is_named(part3):
    edit_meta(part3, lambda m: m["shards"][2].__setitem__("n_owned", "x"))
    line = one_error_line(distgcn_in_process(["stats", str(part3)]))
    assert line.endswith('meta.json: field shards[2].n_owned: expected an integer >= 0, got "x"'), line


# ---- header counts against the file's size and the memory, before allocating ----

HUGE_HEADERS = [
    ("huge.mtx", "%%MatrixMarket matrix coordinate pattern general\n1000000000 1000000000 2\n1 2\n2 1\n",
     "huge.mtx:2: header declares 1000000000 vertices and 2 entries: loading needs at least"),
    ("many.mtx", "%%MatrixMarket matrix coordinate pattern general\n4 4 100000000000\n1 2\n2 1\n",
     "many.mtx:2: header declares 4 vertices and 100000000000 entries: the file would hold at least"),
    ("huge.graph", "1000000000000 1\n2\n1\n",
     "huge.graph:3: header says 1000000000000 vertices but only 2 adjacency lines follow"),
    ("many.graph", "2 100000000000\n2\n1\n",
     "many.graph:1: header declares 2 vertices and 100000000000 edges: the file would hold at least"),
]


@pytest.mark.parametrize("name, text, expected", HUGE_HEADERS, ids=[h[0] for h in HUGE_HEADERS])
def test_header_counts_are_checked_before_allocating(tmp_path, name, text, expected):
    """Before: the 10^9-vertex Matrix Market header allocated ~7.5 GiB, then died of a MemoryError traceback."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_graph(str(path))
    assert expected in str(info.value)


@pytest.mark.parametrize("spec, expected", [("synthetic:rmat,scale=30,edge_factor=1024",
                                             "the spec declares rmat scale=30, edge_factor=1024"),
                                            ("synthetic:sbm,n=1000,features=1000000000",
                                             "the spec declares sbm n=1000, avg_degree=10, features=1000000000")])
def test_synthetic_specs_beyond_memory_are_refused(spec, expected):
    with pytest.raises(InputError) as info:
        load_graph(spec)
    assert expected in str(info.value) and "available" in str(info.value)


def test_npz_array_larger_than_its_file_is_refused(tmp_path):
    """An .npz header declaring 10^12 features in a file of a few hundred bytes: refused from the header."""
    path = tmp_path / "g.npz"
    n = 4
    np.savez(path, adj_indptr=np.array([0, 1, 2, 3, 4]), adj_indices=np.array([1, 2, 3, 0]),
             adj_shape=np.array([n, n]), features=np.ones((n, 3), np.float32))
    forge_npy_shape(path, "features.npy", (n, 250_000_000_000))
    with pytest.raises(InputError, match=r"g.npz: array features declares shape \(4, 250000000000\)"):
        load_graph(str(path))


def forge_npy_shape(path: Path, member: str, new_shape: tuple) -> None:
    """Give one .npy of an .npz a new header shape, keeping its data (and the zip valid)."""
    import io
    import zipfile

    with zipfile.ZipFile(path) as archive:
        contents = {name: archive.read(name) for name in archive.namelist()}
    stream = io.BytesIO(contents[member])
    np.lib.format.read_magic(stream)
    _shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": np.lib.format.dtype_to_descr(dtype),
                                                  "fortran_order": fortran, "shape": new_shape})
    contents[member] = header.getvalue() + stream.read()
    with zipfile.ZipFile(path, "w") as archive:
        for name, value in contents.items():
            archive.writestr(name, value)


def test_checkpoint_whose_state_does_not_fit_is_refused(tmp_path):
    """A checkpoint with a valid digest and identity but a state lacking the optimizer: exit 2, not a traceback."""
    from distgcn.io.checkpoint import (
        RunIdentity,
        list_checkpoints,
        read_checkpoint,
        save_checkpoint,
    )

    graph = tmp_path / "g.txt"
    graph.write_text(EDGES)
    ckpt = tmp_path / "ckpt"
    train = ["train", "--graph", str(graph), *GRAPH_ARGS, "--epochs", "2", "--quiet", "--checkpoint-dir", str(ckpt)]
    first = distgcn_in_process([*train, "--checkpoint-every", "1"])
    assert first.returncode == 0, first.stderr
    newest = list_checkpoints(ckpt)[-1]
    contents = read_checkpoint(newest)
    state = {key: value for key, value in contents["state"].items() if key != "optimizer"}
    newest.unlink()
    save_checkpoint(ckpt, contents["epoch"], state, RunIdentity(**contents["identity"]), keep=3)
    resumed = distgcn_in_process([*train, "--epochs", "3", "--resume"])
    assert resumed.returncode == 2, resumed.stderr
    assert "checkpoint state does not fit this run" in one_error_line(resumed)


def test_one_forged_id_in_a_musae_or_planetoid_dataset_is_refused_before_allocating(tmp_path):
    """Before: a feature id of 10^12 (MUSAE) or a test id of 10^12 (Planetoid) sized a dense array from it."""
    from tiny_datasets import make_musae, make_planetoid

    musae = tmp_path / "musae"
    make_musae(musae, features={"0": [0, 10**12], "1": [1], "2": [], "3": [2]})
    with pytest.raises(InputError, match=r"fb\.json:1: feature id 1000000000000 makes 5 x 1000000000001 dense"):
        load_graph(str(musae))
    planetoid = tmp_path / "planetoid"
    make_planetoid(planetoid)
    (planetoid / "ind.tiny.test.index").write_text(f"{10**12}\n5\n")
    with pytest.raises(InputError, match=r"test\.index:1: test vertex id 1000000000000 is beyond the dataset's 8 "):
        load_graph(str(planetoid))
