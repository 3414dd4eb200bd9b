"""Every bad input we answer, as data: how to make it, the command, and what the user must see.

tests/system/test_bad_inputs.py runs each case; ``python tests/helpers/bad_inputs.py`` runs
them all and prints the markdown table of docs/reliability.md (the test checks
that the table still says what the program says). The commands run on
in-process ranks (conftest.distgcn_in_process): the cases are about what the
command says and leaves, which a launcher does not change.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS), str(TESTS / "helpers"), str(TESTS / "oracles")]  # as pyproject's pytest pythonpath
from conftest import distgcn_in_process  # noqa: E402

TRAIN = ["--features", "4", "--classes", "2", "--epochs", "1", "--quiet"]
GOOD_EDGES = "0 1\n1 2\n2 3\n3 0\n0 2\n"


@dataclass
class Case:
    name: str
    """Stable id, the first column of the docs table."""
    what: str
    """The bad input, in words."""
    make: Callable[[Path], list[str] | Callable[[int], list[str]]]
    """Create the files in the given directory; return the distgcn arguments (a function of the rank: each
    rank's own, as an MPMD launch gives them)."""
    expect: str
    """A part of the one error line that names the culprit and what was expected."""
    ranks: int = 1
    exit_code: int = 2
    warning: str | None = field(default=None)


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    return path


def user_directory(directory: Path) -> Path:
    """A directory holding a file of the user's (what partition --force must not replace)."""
    (directory / "notes").mkdir()
    write(directory / "notes", "keep.txt", "mine")
    return directory / "notes"


def write_bytes(directory: Path, name: str, data: bytes) -> Path:
    path = directory / name
    path.write_bytes(data)
    return path


def npz_graph(directory: Path, name: str = "g.npz", **overrides) -> Path:
    """A valid 4-vertex graph in the project's .npz format, with chosen arrays replaced (None: left out)."""
    n = 4
    arrays = dict(adj_indptr=np.array([0, 1, 2, 3, 4]), adj_indices=np.array([1, 2, 3, 0]),
                  adj_shape=np.array([n, n]), vertex_ids=np.arange(n), features=np.ones((n, 3), np.float32),
                  labels=np.array([0, 1, 0, 1]), train_mask=np.array([True, True, False, False]),
                  val_mask=np.array([False, False, True, False]), test_mask=np.array([False, False, False, True]))
    arrays.update(overrides)
    arrays = {key: value for key, value in arrays.items() if value is not None}  # None: the array left out
    path = directory / name
    np.savez(path, **arrays)
    return path


def partition(directory: Path, name: str, parts: int, edges: str = GOOD_EDGES) -> Path:
    graph = write(directory, f"{name}.txt", edges)
    out = directory / name
    proc = distgcn_in_process(["partition", str(graph), "--parts", str(parts), "--model", "contiguous", *TRAIN[:4],
                        "--out", str(out), "--quiet"])
    assert proc.returncode == 0, proc.stderr
    return out


def mixed_shards(d: Path) -> list[str]:
    a = partition(d, "a", 2)
    b = partition(d, "b", 2, edges=GOOD_EDGES + "1 3\n")
    shutil.copy(b / "shard-00001.npz", a / "shard-00001.npz")
    return ["train", str(a), "--epochs", "1"]


def damaged_shard(d: Path, truncate: bool) -> list[str]:
    part = partition(d, "p", 2)
    shard = part / "shard-00000.npz"
    data = bytearray(shard.read_bytes())
    if truncate:
        data = data[: len(data) // 2]
    else:
        data[len(data) // 3] ^= 0xFF
    shard.write_bytes(bytes(data))
    return ["train", str(part), "--epochs", "1"]


def damaged_checkpoints(d: Path) -> list[str]:
    graph = write(d, "g.txt", GOOD_EDGES)
    args = ["train", "--graph", str(graph), *TRAIN, "--checkpoint-dir", str(d / "ckpt")]
    proc = distgcn_in_process([*args, "--checkpoint-every", "1"])
    assert proc.returncode == 0, proc.stderr
    (d / "ckpt" / "checkpoint-00000001.pt").write_bytes(b"DISTGCN-CHECKPOINT-1\n" + b"0" * 80)
    return [*args, "--resume"]


def foreign_checkpoint(d: Path) -> list[str]:
    graph = write(d, "g.txt", GOOD_EDGES)
    other = write(d, "other.txt", GOOD_EDGES + "1 3\n")
    proc = distgcn_in_process(["train", "--graph", str(other), *TRAIN, "--checkpoint-dir", str(d / "ckpt"),
                        "--checkpoint-every", "1"])
    assert proc.returncode == 0, proc.stderr
    return ["train", "--graph", str(graph), *TRAIN, "--checkpoint-dir", str(d / "ckpt"), "--resume"]


def resaved_shard(d: Path) -> list[str]:
    """A shard re-saved after partitioning with one label changed: its own checksum is valid again."""
    from distgcn.shard.rank_shard import Shard

    part = partition(d, "p", 1)
    shard = Shard.load(part / "shard-00000.npz")
    shard.labels = shard.labels.copy()
    shard.labels[0] = 1 - shard.labels[0]
    shard.save(part / "shard-00000.npz")
    return ["train", str(part), "--epochs", "1"]


def meta_with_fewer_parts(d: Path) -> list[str]:
    """meta.json edited to say 1 part over the shards of a 2-part partition."""
    import json

    part = partition(d, "p", 2)
    meta = json.loads((part / "meta.json").read_text())
    meta["parts"] = 1
    (part / "meta.json").write_text(json.dumps(meta))
    return ["train", str(part), "--epochs", "1"]


def rerun_into_checkpoints(d: Path) -> list[str]:
    """A fresh run (no --resume) into a checkpoint directory another run filled."""
    graph = write(d, "g.txt", GOOD_EDGES)
    args = ["train", "--graph", str(graph), *TRAIN, "--checkpoint-dir", str(d / "ckpt"), "--checkpoint-every", "1"]
    proc = distgcn_in_process(args)
    assert proc.returncode == 0, proc.stderr
    return args


def input_inside_out(d: Path) -> list[str]:
    (d / "data").mkdir()
    graph = write(d / "data", "g.txt", GOOD_EDGES)
    return ["partition", str(graph), "--parts", "2", "--model", "random", *TRAIN[:4], "--out", str(d / "data"),
            "--force"]


def graph_train(make_graph: Callable[[Path], Path], extra: list[str] = TRAIN) -> Callable[[Path], list[str]]:
    return lambda d: ["train", "--graph", str(make_graph(d)), *extra]


def in_the_way(d: Path) -> Path:
    """A regular file where a directory is needed: mkdir under it fails for every user, root included."""
    return write(d, "file", "not a directory")


LABELLED = ["--epochs", "1", "--quiet"]


def ogb_directory(d: Path, edges: str = "0,1\n1,2\n2,3\n", valid: str = "2\n") -> Path:
    """A 4-vertex OGB dataset as the ogb package leaves it (csv.gz, no headers)."""
    files = {"raw/edge.csv.gz": edges, "raw/num-node-list.csv.gz": "4\n",
             "raw/node-feat.csv.gz": "1,0\n0,1\n1,1\n0,0\n",
             "raw/node-label.csv.gz": "0\n1\n0\n1\n", "split/time/train.csv.gz": "0\n1\n",
             "split/time/valid.csv.gz": valid, "split/time/test.csv.gz": "3\n"}
    for name, text in files.items():
        (d / "ogbn_arxiv" / name).parent.mkdir(parents=True, exist_ok=True)
        (d / "ogbn_arxiv" / name).write_bytes(gzip.compress(text.encode()))
    return d / "ogbn_arxiv"


def metrics_of_another_run(d: Path) -> list[str]:
    """--resume --metrics naming the metrics file of a run with another dtype (same graph and partition)."""
    graph = write(d, "g.txt", GOOD_EDGES)
    base = ["train", "--graph", str(graph), *TRAIN]
    proc = distgcn_in_process([*base, "--checkpoint-dir", str(d / "ckpt"), "--checkpoint-every", "1",
                               "--metrics", str(d / "mine.jsonl")])
    assert proc.returncode == 0, proc.stderr
    proc = distgcn_in_process([*base, "--dtype", "float64", "--metrics", str(d / "other.jsonl")])
    assert proc.returncode == 0, proc.stderr
    return [*base, "--epochs", "2", "--checkpoint-dir", str(d / "ckpt"), "--resume", "--metrics",
            str(d / "other.jsonl")]


def ranks_with_other_settings(d: Path) -> Callable[[int], list[str]]:
    """An MPMD launch: rank 0 asked for 1 epoch, rank 1 for 2."""
    part = partition(d, "p", 2)
    return lambda rank: ["train", str(part), "--quiet", "--epochs", str(1 + rank)]


def ranks_on_other_partitions(d: Path) -> Callable[[int], list[str]]:
    """Two partition directories of one graph that differ in --feature-norm only, one per rank."""
    graph = write(d, "g.txt", GOOD_EDGES)
    for name, norm in (("row", "row"), ("none", "none")):
        proc = distgcn_in_process(["partition", str(graph), "--parts", "2", "--model", "contiguous", *TRAIN[:4],
                                   "--feature-norm", norm, "--out", str(d / name), "--quiet"])
        assert proc.returncode == 0, proc.stderr
    return lambda rank: ["train", str(d / ("row", "none")[rank]), "--quiet", "--epochs", "1"]


LONG_NAME = "n" * 250
"""A legal file name (255 bytes is the common limit) whose hidden temporary name (``.NAME.distgcn-...tmp``) is not."""
DEEP_JSON = "[" * 100_000
"""JSON nested deeper than the parser's recursion allows: RecursionError, not a ValueError."""


def symlink_loop(directory: Path, name: str) -> Path:
    """``name`` -> ``name.back`` -> ``name``: looking it up fails with ELOOP."""
    link, back = directory / name, directory / f"{name}.back"
    link.symlink_to(back)
    back.symlink_to(link)
    return link


def nested_meta(directory: Path) -> Path:
    """A directory whose meta.json is :data:`DEEP_JSON`."""
    (directory / "p").mkdir()
    write(directory / "p", "meta.json", DEEP_JSON)
    return directory / "p"


def deep_musae(directory: Path) -> list[str]:
    """A MUSAE dataset whose feature file is :data:`DEEP_JSON`."""
    from tiny_datasets import make_musae

    make_musae(directory / "musae")
    write(directory / "musae", "fb.json", DEEP_JSON)
    return ["train", "--graph", str(directory / "musae"), "--epochs", "1", "--quiet"]


def huge_number_metrics(d: Path) -> Path:
    """A metrics file of one epoch whose ``epoch_s`` is an integer no float holds (10^400)."""
    import json

    record = {key: 0 for key in ("loss", "train_acc", "val_acc", "test_acc", "compute_s", "comm_wait_s",
                                 "allreduce_s", "halo_rows", "halo_bytes", "messages", "max_rank_halo_rows",
                                 "spmm_exchanges")}
    text = json.dumps({"epoch": 1, **record, "epoch_s": 0}).replace('"epoch_s": 0', '"epoch_s": 1' + "0" * 400)
    return write(d, "m.jsonl", text + "\n")


def header_metrics(d: Path, run: dict) -> Path:
    """A metrics file of one epoch whose first record carries the run header ``run``."""
    import json

    record = {key: 0 for key in ("loss", "train_acc", "val_acc", "test_acc", "epoch_s", "compute_s", "comm_wait_s",
                                 "allreduce_s", "halo_rows", "halo_bytes", "messages", "max_rank_halo_rows",
                                 "spmm_exchanges")}
    return write(d, "m.jsonl", json.dumps({"epoch": 1, **record, "run": run}) + "\n")


def meta_with(d: Path, **raw: str) -> Path:
    """A 1-part partition whose meta.json has the given keys set to the given JSON texts (numbers of any size)."""
    import json

    part = partition(d, "p", 1)
    meta = json.loads((part / "meta.json").read_text())
    marks = {key: f"@{key}@" for key in raw}
    meta.update(marks)
    text = json.dumps(meta)
    for key, value in raw.items():
        text = text.replace(f'"{marks[key]}"', value)
    (part / "meta.json").write_text(text)
    return part


def optimizer_state_of_another_shape(d: Path) -> list[str]:
    """A checkpoint rewritten by hand, checksum right, whose Adam moments of the first weight are 3x3."""
    import io

    import torch

    from distgcn.io.checkpoint import MAGIC

    graph = write(d, "g.txt", GOOD_EDGES)
    args = ["train", "--graph", str(graph), *TRAIN, "--checkpoint-dir", str(d / "ckpt")]
    proc = distgcn_in_process([*args, "--checkpoint-every", "1"])
    assert proc.returncode == 0, proc.stderr
    path = d / "ckpt" / "checkpoint-00000001.pt"
    contents = torch.load(io.BytesIO(path.read_bytes()[len(MAGIC) + 64:]), weights_only=True)
    moments = contents["state"]["optimizer"]["state"][0]
    moments["exp_avg"], moments["exp_avg_sq"] = torch.zeros(3, 3), torch.zeros(3, 3)
    buffer = io.BytesIO()
    torch.save(contents, buffer)
    payload = buffer.getvalue()
    path.write_bytes(MAGIC + hashlib.sha256(payload).hexdigest().encode() + payload)
    return [*args, "--epochs", "2", "--resume"]


CASES = [
    Case("edge-list-malformed-line", "edge list line with 4 ids",
         graph_train(lambda d: write(d, "bad.txt", "0 1\n1 2 3 4\n2 0\n")), "bad.txt:2: expected 2 vertex ids"),
    Case("edge-list-non-numeric", "edge list with a word for an id",
         graph_train(lambda d: write(d, "word.txt", "# c\n0 1\n1 x\n")), "word.txt:3"),
    Case("edge-list-empty", "edge list with only comments",
         graph_train(lambda d: write(d, "empty.txt", "# nothing here\n")), "empty.txt: no edges found"),
    Case("edge-list-enormous-id", "an id of 10^20 (beyond 64 bits)",
         graph_train(lambda d: write(d, "huge.txt", "0 1\n1 100000000000000000000\n")), "huge.txt:2"),
    Case("edge-list-negative-id", "a negative vertex id",
         graph_train(lambda d: write(d, "neg.txt", "0 1\n-4 2\n")), "neg.txt:2: negative vertex id"),
    Case("edge-list-binary", "a binary file named .txt",
         graph_train(lambda d: write_bytes(d, "bin.txt", bytes(range(256)))), "bin.txt:1"),
    Case("metis-id-out-of-range", "METIS neighbour beyond the vertex count",
         graph_train(lambda d: write(d, "g.graph", "3 2\n2\n1 5\n2\n")), "g.graph:3"),
    Case("mtx-entry-out-of-range", "Matrix Market entry outside the declared size",
         graph_train(lambda d: write(d, "m.mtx", "%%MatrixMarket matrix coordinate pattern general\n3 3 2\n"
                                                 "1 2\n4 1\n")), "m.mtx:4"),
    Case("mtx-bad-header", "Matrix Market file without its banner",
         graph_train(lambda d: write(d, "nobanner.mtx", "3 3 1\n1 2\n")), "nobanner.mtx:1"),
    Case("ogb-edge-out-of-range", "OGB edge.csv.gz naming vertex 9 of 4",
         graph_train(lambda d: ogb_directory(d, edges="0,1\n1,9\n"), LABELLED), "edge.csv.gz:2: vertex id 9"),
    Case("ogb-split-out-of-range", "OGB split file naming vertex 4 of 4",
         graph_train(lambda d: ogb_directory(d, valid="2\n4\n"), LABELLED), "valid.csv.gz:2: vertex id 4"),
    Case("unknown-format", "a file of unknown type",
         graph_train(lambda d: write(d, "g.csv", GOOD_EDGES)), "unknown graph format"),
    Case("missing-file", "a graph file that does not exist",
         graph_train(lambda d: d / "missing.txt"), "missing.txt: no such file"),
    Case("features-nan", "NaN in the features",
         graph_train(lambda d: npz_graph(d, features=np.array([[1, 0, 0], [0, np.nan, 0], [0, 0, 1], [1, 1, 1]],
                                                              np.float32)), LABELLED),
         "g.npz: features of vertex 1 are NaN or infinite"),
    Case("features-inf", "an infinite feature",
         graph_train(lambda d: npz_graph(d, features=np.array([[1, 0, 0], [0, 1, 0], [0, 0, np.inf], [1, 1, 1]],
                                                              np.float32)), LABELLED),
         "g.npz: features of vertex 2 are NaN or infinite"),
    Case("labels-negative", "label -5",
         graph_train(lambda d: npz_graph(d, labels=np.array([0, -5, 0, 1])), LABELLED),
         "labels must be class numbers >= 0, or -1"),
    Case("labels-too-large", "label 10^9 on a 4-vertex graph",
         graph_train(lambda d: npz_graph(d, labels=np.array([0, 1, 10**9, 1])), LABELLED),
         "label 1000000000 of vertex 2 is out of range"),
    Case("train-vertex-unlabelled", "a training vertex with label -1",
         graph_train(lambda d: npz_graph(d, labels=np.array([0, -1, 0, 1])), LABELLED),
         "training vertex 1 has no label"),
    Case("mask-wrong-length", "a train mask of 5 entries for 4 vertices",
         graph_train(lambda d: npz_graph(d, train_mask=np.ones(5, bool)), LABELLED),
         "train_mask must be a boolean array of length 4"),
    Case("labels-wrong-length", "3 labels for 4 vertices",
         graph_train(lambda d: npz_graph(d, labels=np.array([0, 1, 1])), LABELLED), "labels has length 3, expected 4"),
    Case("unlabelled-graph", "a structure-only graph without --features/--classes",
         graph_train(lambda d: write(d, "plain.txt", GOOD_EDGES), ["--epochs", "1"]), "--features F --classes C"),
    Case("shards-of-another-graph", "a shard file from another graph's partition",
         mixed_shards, "shard belongs to another partition", ranks=2),
    Case("partition-for-another-p", "3-part partition run on 2 ranks",
         lambda d: ["train", str(partition(d, "p3", 3)), "--epochs", "1"], "partition has 3 parts but the job has 2",
         ranks=2),
    Case("shard-truncated", "a shard file cut in half",
         lambda d: damaged_shard(d, truncate=True), "shard-00000.npz: cannot read shard", ranks=2),
    Case("shard-corrupt", "one flipped byte in a shard",
         lambda d: damaged_shard(d, truncate=False), "shard-00000.npz", ranks=2),
    Case("partition-meta-missing", "a directory that is not a partition",
         lambda d: ["train", str(d), "--epochs", "1"], "not a partition directory (no meta.json)"),
    Case("checkpoints-all-damaged", "--resume when every checkpoint is damaged",
         damaged_checkpoints, "none of the 1 checkpoints is sound",
         warning="checkpoint is truncated or corrupt (checksum mismatch)"),
    Case("checkpoint-of-another-graph", "--resume with a checkpoint of another graph",
         foreign_checkpoint, "refusing to resume: it was written for another graph"),
    Case("resume-without-dir", "--resume without --checkpoint-dir",
         lambda d: ["train", "--graph", str(write(d, "g.txt", GOOD_EDGES)), *TRAIN, "--resume"],
         "--resume and --checkpoint-every need --checkpoint-dir"),
    Case("metrics-dir-unwritable", "--metrics under a regular file",
         lambda d: ["train", "--graph", str(write(d, "g.txt", GOOD_EDGES)), *TRAIN, "--metrics",
                    str(in_the_way(d) / "m.jsonl")], "m.jsonl: cannot write: "),
    Case("metrics-symlink", "--metrics naming a symlink to another file",
         lambda d: ["train", "--graph", str(write(d, "g.txt", GOOD_EDGES)), *TRAIN, "--metrics",
                    str(symlink(d, "m.jsonl", write(d, "precious.txt", "keep me")))],
         "output file is a symbolic link"),
    Case("save-weights-unwritable", "--save-weights in a directory that cannot be created",
         lambda d: ["train", "--graph", str(write(d, "g.txt", GOOD_EDGES)), *TRAIN, "--save-weights",
                    str(in_the_way(d) / "sub" / "w.npz")], "cannot create directory of the output file"),
    Case("checkpoint-dir-unwritable", "--checkpoint-dir under a regular file",
         lambda d: ["train", "--graph", str(write(d, "g.txt", GOOD_EDGES)), *TRAIN, "--checkpoint-dir",
                    str(in_the_way(d) / "ckpt"), "--checkpoint-every", "1"], "cannot create checkpoint directory"),
    Case("partition-out-unwritable", "partition --out under a regular file",
         lambda d: ["partition", str(write(d, "g.txt", GOOD_EDGES)), "--parts", "2", "--model", "random",
                    *TRAIN[:4], "--out", str(in_the_way(d) / "out")], "parent directory of --out is not a directory"),
    Case("partition-out-exists", "partition --out naming a directory of the user's, with --force",
         lambda d: ["partition", str(write(d, "g.txt", GOOD_EDGES)), "--parts", "2", "--model", "random",
                    *TRAIN[:4], "--out", str(user_directory(d)), "--force"], "even with --force"),
    Case("partition-out-is-a-file", "partition --out naming a regular file, with --force",
         lambda d: ["partition", str(write(d, "g.txt", GOOD_EDGES)), "--parts", "2", "--model", "random",
                    *TRAIN[:4], "--out", str(write(d, "results.csv", "precious")), "--force"],
         "output exists and is not a directory"),
    Case("partition-force-onto-input", "partition --out naming the directory of the input graph, with --force",
         input_inside_out, "output is or contains the input"),
    Case("metrics-onto-users-file", "--metrics naming a file of the user's",
         lambda d: ["train", "--graph", str(write(d, "g.txt", GOOD_EDGES)), *TRAIN, "--metrics",
                    str(write(d, "results.csv", "a,b\n1,2\n"))], "is not a distgcn metrics file"),
    Case("metrics-onto-partition-meta", "--metrics naming the meta.json of the partition being trained",
         lambda d: ["train", str(partition(d, "p", 1)), "--epochs", "1", "--metrics", str(d / "p" / "meta.json")],
         "is not a distgcn metrics file"),
    Case("save-weights-onto-users-file", "--save-weights naming an .npz of the user's",
         lambda d: ["train", "--graph", str(write(d, "g.txt", GOOD_EDGES)), *TRAIN, "--save-weights",
                    str(npz_graph(d, "important.npz"))], "is not a distgcn weights file"),
    Case("checkpoint-dir-of-another-run", "a fresh run (no --resume) into a directory holding checkpoints",
         rerun_into_checkpoints, "--resume"),
    Case("shard-resaved", "a shard re-saved after partitioning, one label changed",
         resaved_shard, "shard does not match meta.json"),
    Case("meta-parts-disagree", "meta.json saying 1 part over the shards of 2",
         meta_with_fewer_parts, "entries for 1 parts"),
    Case("mtx-header-too-large", "Matrix Market header declaring 10^11 vertices and 2 entries",
         graph_train(lambda d: write(d, "m.mtx", "%%MatrixMarket matrix coordinate pattern general\n"
                                                 "100000000000 100000000000 2\n1 2\n2 1\n")), "m.mtx:2"),
    Case("model-too-big", "a hidden width of 3·10⁹ on a 4-vertex graph",
         lambda d: ["train", "--graph", str(write(d, "g.txt", GOOD_EDGES)), *TRAIN, "--hidden", "3000000000"],
         "the model would need"),
    Case("argument-out-of-range", "--dropout 1.5",
         lambda d: ["train", "--graph", str(write(d, "g.txt", GOOD_EDGES)), *TRAIN, "--dropout", "1.5"],
         "--dropout: expected a probability in [0, 1)"),
    Case("vertex-order-for-written-shards", "train DIR --vertex-order (the shards are already numbered)",
         lambda d: ["train", str(partition(d, "p", 1)), "--epochs", "1", "--vertex-order", "natural"],
         "--vertex-order applies to --graph"),
    Case("vertex-weight-without-weights", "partition --model random --vertex-weight work",
         lambda d: ["partition", str(write(d, "g.txt", GOOD_EDGES)), "--parts", "2", "--model", "random",
                    *TRAIN[:4], "--vertex-weight", "work", "--out", str(d / "out")],
         "--vertex-weight: the random model balances vertex counts"),
    Case("partitioner-for-another-model", "partition --model hypergraph --partitioner kaminpar",
         lambda d: ["partition", str(write(d, "g.txt", GOOD_EDGES)), "--parts", "2", "--model", "hypergraph",
                    *TRAIN[:4], "--partitioner", "kaminpar", "--out", str(d / "out")],
         "--partitioner kaminpar: the hypergraph model uses mtkahypar or kahypar"),
    Case("halo-dtype-with-minibatches", "train --sampler node --halo-dtype bfloat16",
         lambda d: ["train", "--graph", str(write(d, "g.txt", GOOD_EDGES)), *TRAIN, "--sampler", "node",
                    "--batch-size", "2", "--halo-dtype", "bfloat16"], "--halo-dtype"),
    Case("gzip-line-without-end", "a .txt.gz of 64 KB holding one line of 64 MiB of spaces",
         graph_train(lambda d: write_bytes(d, "spaces.txt.gz", gzip.compress(b" " * (1 << 20), 9) * 64)),
         "spaces.txt.gz:1: line longer than 16 MiB"),
    Case("integer-of-thousands-of-digits", "an edge-list id of 5000 digits",
         graph_train(lambda d: write(d, "long.txt", "0 1\n1 " + "9" * 5000 + "\n")), "long.txt:2: integer '999"),
    Case("random-features-too-large", "--features 10^11 on a 4-vertex edge list",
         lambda d: ["train", "--graph", str(write(d, "g.txt", GOOD_EDGES)), "--features", "100000000000",
                    "--classes", "2", "--epochs", "1"], "--features 100000000000 on the 4 vertices"),
    Case("partition-random-features-too-large", "partition --features 10^11 on a 4-vertex edge list",
         lambda d: ["partition", str(write(d, "g.txt", GOOD_EDGES)), "--parts", "2", "--features", "100000000000",
                    "--classes", "2", "--out", str(d / "out")], "--features 100000000000 on the 4 vertices"),
    Case("classes-more-than-vertices", "--classes 10 on a 3-vertex edge list",
         lambda d: ["train", "--graph", str(write(d, "g.txt", "0 1\n1 2\n")), "--features", "4", "--classes", "10",
                    "--epochs", "1"], "--classes 10 is more than the 3 vertices"),
    Case("planetoid-test-id-far-out", "a Planetoid test.index naming vertex 10^9 of 8",
         graph_train(lambda d: planetoid_with_test_ids(d, f"7\n{10**9}\n"), LABELLED),
         "ind.tiny.test.index:2: test vertex id 1000000000 is beyond"),
    Case("musae-id-beyond-64-bits", "a MUSAE target file with the id 10^25",
         graph_train(lambda d: musae_with(d, "fb_target.csv", f"id,page_type\n0,a\n{10**25},b\n"), LABELLED),
         "fb_target.csv:3: integer '10000000000000000000000000' is too large"),
    Case("musae-feature-id-beyond-64-bits", "a MUSAE feature file with the feature id 10^25",
         graph_train(lambda d: musae_with(d, "fb.json", f'{{"0": [0],\n"1": [{10**25}]}}'), LABELLED),
         "fb.json:2: integer '10000000000000000000000000' is too large"),
    Case("npz-without-masks", "an .npz with features and labels but no masks",
         graph_train(lambda d: npz_graph(d, train_mask=None, val_mask=None, test_mask=None), LABELLED),
         "has features and labels but no train_mask"),
    Case("npz-without-masks-given-features", "the same .npz with --features/--classes",
         graph_train(lambda d: npz_graph(d, train_mask=None, val_mask=None, test_mask=None)),
         "this one has features and labels; what it lacks is train_mask"),
    Case("features-complex", "complex features in an .npz",
         graph_train(lambda d: npz_graph(d, features=np.full((4, 3), 1 + 2j)), LABELLED),
         "g.npz: features holds complex numbers"),
    Case("features-zero-width", "an .npz whose features have 0 columns",
         graph_train(lambda d: npz_graph(d, features=np.ones((4, 0), np.float32)), LABELLED),
         "g.npz: features has 0 columns"),
    Case("control-characters-in-a-token", "a Matrix Market banner holding the escape sequence that clears a screen",
         graph_train(lambda d: write(d, "m.mtx", "%%MatrixMarket matrix coordinate \x1b[2J general\n"
                                                 "2 2 1\n1 2\n")), "m.mtx: invalid Matrix Market header"),
    Case("outputs-one-path", "--metrics and --save-weights naming one file",
         graph_train(lambda d: write(d, "g.txt", GOOD_EDGES), [*TRAIN, "--metrics", "out", "--save-weights", "out"]),
         "--metrics and --save-weights name one path (out): give each output its own"),
    Case("output-inside-partition", "--checkpoint-dir inside the partition directory being trained",
         lambda d: ["train", str(partition(d, "p", 1)), "--epochs", "1", "--checkpoint-dir", str(d / "p" / "ckpt")],
         "the checkpoint directory would lie inside the partition directory"),
    Case("resume-metrics-of-another-run", "--resume appending to the metrics file of another run",
         metrics_of_another_run, "the metrics file is another run's (dtype 'float64', this run has 'float32')"),
    Case("ranks-given-other-settings", "an MPMD launch: --epochs 1 on rank 0, --epochs 2 on rank 1",
         ranks_with_other_settings, "ranks were given different settings: --epochs is 1 on rank 0 and 2 on rank 1",
         ranks=2),
    Case("ranks-on-other-partitions", "ranks given two partitions that differ in --feature-norm only",
         ranks_on_other_partitions, "ranks read different partitions: meta.json's graph.feature_norm", ranks=2),
    Case("partition-out-name-too-long", "partition --out with a 250-byte name (legal; its staging name is not)",
         lambda d: ["partition", str(write(d, "g.txt", GOOD_EDGES)), "--parts", "2", "--model", "random",
                    *TRAIN[:4], "--out", str(d / LONG_NAME)], "give --out a shorter name"),
    Case("metrics-name-too-long", "--metrics with a 250-byte name (legal; its temporary name is not)",
         lambda d: ["train", "--graph", str(write(d, "g.txt", GOOD_EDGES)), *TRAIN, "--metrics", str(d / LONG_NAME)],
         "file name too long: 250 bytes"),
    Case("metrics-onto-deeply-nested-json", "--metrics naming a file of 100000 '['",
         lambda d: ["train", "--graph", str(write(d, "g.txt", GOOD_EDGES)), *TRAIN, "--metrics",
                    str(write(d, "m.jsonl", DEEP_JSON))], "is not a distgcn metrics file"),
    Case("partition-meta-deeply-nested", "train DIR whose meta.json is 100000 '['",
         lambda d: ["train", str(nested_meta(d)), "--epochs", "1"], "meta.json: cannot read partition metadata"),
    Case("partition-force-onto-deeply-nested-meta", "partition --out --force onto a directory whose meta.json is "
         "100000 '['",
         lambda d: ["partition", str(write(d, "g.txt", GOOD_EDGES)), "--parts", "2", "--model", "random",
                    *TRAIN[:4], "--out", str(nested_meta(d)), "--force"], "is not a distgcn partition directory"),
    Case("musae-features-deeply-nested", "a MUSAE feature file of 100000 '['", deep_musae, "fb.json"),
    Case("graph-symlink-loop", "--graph naming a symbolic link loop",
         lambda d: ["train", "--graph", str(symlink_loop(d, "g.txt")), *TRAIN], "too many levels of symbolic links"),
    Case("partition-dir-symlink-loop", "train DIR where DIR is a symbolic link loop",
         lambda d: ["train", str(symlink_loop(d, "p")), "--epochs", "1"], "too many levels of symbolic links"),
    Case("output-in-symlink-loop", "--metrics inside a symbolic link loop",
         lambda d: ["train", "--graph", str(write(d, "g.txt", GOOD_EDGES)), *TRAIN, "--metrics",
                    str(symlink_loop(d, "out") / "m.jsonl")], "too many levels of symbolic links"),
    Case("partition-out-symlink-loop", "partition --out naming a symbolic link loop",
         lambda d: ["partition", str(write(d, "g.txt", GOOD_EDGES)), "--parts", "2", "--model", "random",
                    *TRAIN[:4], "--out", str(symlink_loop(d, "p"))], "output is a symbolic link"),
    Case("checkpoint-optimizer-state-of-another-shape", "--resume from a checkpoint whose Adam moments have "
         "another shape (checksum right)", optimizer_state_of_another_shape,
         "optimizer state exp_avg of parameter 0 has shape (3, 3)"),
    Case("seed-too-large", "--seed 10^23",
         lambda d: ["train", "--graph", str(write(d, "g.txt", GOOD_EDGES)), *TRAIN, "--seed", "1" + "0" * 23],
         "--seed: expected an integer in 0..2147483647"),
    Case("partition-seed-negative", "partition --seed -10^23",
         lambda d: ["partition", str(write(d, "g.txt", GOOD_EDGES)), "--parts", "2", "--model", "random",
                    *TRAIN[:4], "--seed", "-1" + "0" * 23, "--out", str(d / "out")],
         "--seed: expected an integer in 0..2147483647"),
    Case("layers-too-many", "--layers 10^23",
         lambda d: ["train", "--graph", str(write(d, "g.txt", GOOD_EDGES)), *TRAIN, "--layers", "1" + "0" * 23],
         "--layers: expected an integer in 2..10000"),
    Case("metrics-number-beyond-double", "report of a metrics file whose epoch_s is an integer of 401 digits",
         lambda d: ["report", str(huge_number_metrics(d)), "--out", str(d / "report")], "within a double's range"),
    Case("meta-integer-of-5000-digits", "train DIR whose meta.json holds an integer of 5000 digits",
         lambda d: ["train", str(meta_with(d, parts="1" * 5000)), "--epochs", "1"],
         "cannot read partition metadata (Exceeds the limit (4300 digits)"),
    Case("meta-count-beyond-64-bits", "train DIR whose meta.json says 10^30 parts",
         lambda d: ["train", str(meta_with(d, parts="1" + "0" * 30)), "--epochs", "1"],
         "field parts: expected a 64-bit integer >= 1"),
    Case("partition-input-symlink-loop", "partition GRAPH where GRAPH is a symbolic link loop",
         lambda d: ["partition", str(symlink_loop(d, "g.txt")), "--parts", "2", "--model", "random", *TRAIN[:4],
                    "--out", str(d / "out")], "too many levels of symbolic links"),
    Case("stats-dir-name-too-long", "stats naming a directory whose name is 300 bytes (over the limit)",
         lambda d: ["stats", str(d / ("d" * 300))], "file name too long for the file system"),
    Case("train-dir-name-too-long", "train DIR on 2 ranks, DIR's name 300 bytes (over the limit)",
         lambda d: ["train", str(d / ("d" * 300)), "--epochs", "1"], "file name too long for the file system",
         ranks=2),
    Case("metrics-load-not-a-number", "report of a metrics file whose run header's node.load_average is \"busy\"",
         lambda d: ["report", str(header_metrics(d, {"node": {"ranks": 1, "cores": 2, "load_average": "busy"}})),
                    "--out", str(d / "report")],
         'field run.node.load_average: expected a number >= 0 or null, got "busy"'),
    Case("stochastic-without-sampler", "partition --model stochastic without --sampler, on a graph file that "
         "would not load (refused before it is read)",
         lambda d: ["partition", str(write(d, "g.txt", "0 x\n")), "--parts", "2", "--model", "stochastic", "--out",
                    str(d / "out")],
         "--model stochastic needs a sampler: give --sampler and --batch-size (the minibatches it partitions for)"),
    Case("lr-step-schedule-without-step", "train --lr-schedule step without --lr-step",
         lambda d: ["train", "--graph", "synthetic:sbm,n=60,classes=3,features=4,seed=1", "--lr-schedule", "step"],
         "--lr-schedule step needs --lr-step N (epochs between two decays)"),
    Case("sample-on-without-sampler", "train --sample-on device without --sampler (full batch samples nothing)",
         lambda d: ["train", "--graph", "synthetic:sbm,n=60,classes=3,features=4,seed=1", "--sample-on", "device"],
         "--sample-on needs --sampler"),
    Case("predict-weights-without-model", "predict with an .npz of arrays that records no model",
         lambda d: ["predict", "synthetic:sbm,n=60,classes=3,features=4,seed=1", "--weights",
                    str(_plain_npz(d / "w.npz")), "--out", str(d / "p.npz")],
         "this weights file records no model (it was written before distgcn recorded one, or not by distgcn): "
         "train again with --save-weights", ranks=2),
]


def _plain_npz(path: Path) -> Path:
    """Arrays saved by numpy alone, as a user's own weights would be."""
    import numpy as np

    np.savez(path, np.zeros((4, 3)), np.zeros(3))
    return path


def planetoid_with_test_ids(directory: Path, test_ids: str) -> Path:
    """The 8-vertex Planetoid dataset of tests/helpers/tiny_datasets.py with another test.index."""
    from tiny_datasets import make_planetoid

    make_planetoid(directory / "tiny")
    write(directory / "tiny", "ind.tiny.test.index", test_ids)
    return directory / "tiny"


def musae_with(directory: Path, name: str, text: str) -> Path:
    """The 5-page MUSAE dataset of tests/helpers/tiny_datasets.py with one file replaced."""
    from tiny_datasets import make_musae

    make_musae(directory / "fb")
    write(directory / "fb", name, text)
    return directory / "fb"


def symlink(directory: Path, name: str, target: Path) -> Path:
    link = directory / name
    link.symlink_to(target)
    return link


def snapshot(directory: Path) -> dict[str, str]:
    """Every entry under ``directory`` with a hash of its content (or its link target)."""
    state = {}
    for path in sorted(directory.rglob("*")):
        key = str(path.relative_to(directory))
        if path.is_symlink():
            state[key] = "link:" + str(path.readlink())
        elif path.is_file():
            state[key] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            state[key] = "dir"
    return state


def messages(stderr: str) -> list[str]:
    """The lines a user reads: errors (ours and argparse's) and warnings, without usage or progress lines."""
    return [line for line in stderr.splitlines() if ": error: " in line or line.startswith("distgcn: warning:")]


def run_case(case: Case, directory: Path):
    """Make the inputs, run the command; returns (process, snapshot before, snapshot after)."""
    args = case.make(directory)
    before = snapshot(directory)
    proc = distgcn_in_process(args, ranks=case.ranks)
    return proc, before, snapshot(directory)


def shown(line: str, directory: Path) -> str:
    """The error line as the docs show it: the temporary directory replaced by ``DIR``, this machine's
    free memory by ``M``."""
    return re.sub(r"has [0-9.]+ GiB available", "has M GiB available", line.replace(str(directory), "DIR"))


def render_table() -> str:
    import tempfile

    rows = ["| id | bad input | what the user sees (stderr; exit status) |", "|---|---|---|"]
    for case in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp).resolve()
            proc, _, _ = run_case(case, directory)
            lines = [shown(line, directory) for line in messages(proc.stderr)]
            seen = "<br>".join(f"`{line}`" for line in lines) or "(nothing)"
            rows.append(f"| {case.name} | {case.what} | {seen}; exit {proc.returncode} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(render_table())
