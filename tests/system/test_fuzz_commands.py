"""The whole command line under fuzzing: malformed graph files of every format, damaged partition
directories, checkpoints and metrics files, and random combinations of options.

The property is the project's rule for bad input: every command ends cleanly, with exit 0, or with exit 2
and one error line, never a traceback, a hang or a large allocation. Each example runs in
tests/helpers/fuzz_worker.py, a process whose data segment is capped (``LIMIT_MB`` above what it needs to start),
with a time bound per command; a timed-out worker is killed and replaced.

CI runs ``DISTGCN_FUZZ_EXAMPLES`` examples per target (default 20, derandomized); a long run is
``DISTGCN_FUZZ_EXAMPLES=2000 python -m pytest tests/system/test_fuzz_commands.py`` (docs/reliability.md records
the last one and what it found).
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from bad_inputs import messages, ogb_directory
from conftest import ROOT, distgcn_in_process
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny_datasets import make_musae, make_planetoid

EXAMPLES = int(os.environ.get("DISTGCN_FUZZ_EXAMPLES", "20"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 100, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
LIMIT_MB = 1536
"""How much more than at start the worker may allocate: tiny inputs never need it unless a size is unbounded."""
COMMAND_S = 120
"""A command that runs longer than this on a tiny input hangs (the slowest clean answer takes ~5 s on an idle
machine; the margin is for a loaded one)."""
GRAPH = "synthetic:sbm,n=60,classes=3,features=5"


class Worker:
    """tests/helpers/fuzz_worker.py, started on first use and again after a command that did not answer."""

    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
        self.process = subprocess.Popen([sys.executable, str(ROOT / "tests" / "helpers" / "fuzz_worker.py"), str(LIMIT_MB)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert json.loads(self.process.stdout.readline()) == {"ready": True}

    def run(self, args: list[str], cwd: Path) -> dict:
        if self.process is None or self.process.poll() is not None:
            self.start()
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(json.dumps({"args": args, "cwd": str(cwd)}) + "\n")
        self.process.stdin.flush()
        answer: list[str] = []
        reader = _reader(self.process, answer)
        reader.join(COMMAND_S)
        if reader.is_alive() or not answer or not answer[0]:
            self.stop()
            return {"code": None, "stderr": f"no answer within {COMMAND_S} s (a hang, or the worker died)",
                    "stdout": "", "seconds": COMMAND_S, "peak_growth_mb": 0}
        return json.loads(answer[0])

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


def _reader(process: subprocess.Popen, into: list[str]):
    import threading

    thread = threading.Thread(target=lambda: into.append(process.stdout.readline()), daemon=True)
    thread.start()
    return thread


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    started = Worker()
    yield started
    started.stop()


def assert_clean(worker: Worker, args: list[str], cwd: Path) -> dict:
    """Run ``distgcn ARGS``: exit 0, or exit 2 with one error line; no traceback, no hang, no large allocation."""
    done = worker.run(args, cwd)
    shown = f"distgcn {' '.join(args)}\n--- stderr:\n{done['stderr']}"
    assert done["code"] in (0, 2), shown
    assert "Traceback" not in done["stderr"] and "unexpected error" not in done["stderr"], shown
    if done["code"] == 2:
        errors = [line for line in messages(done["stderr"]) if ": error: " in line]
        assert len(errors) == 1, shown
        assert "\x1b" not in errors[0] and "\r" not in errors[0], shown  # no terminal control from the input
    assert done["peak_growth_mb"] < LIMIT_MB, shown
    return done


# ---- malformed graph files --------------------------------------------------------------------------

NASTY = st.sampled_from(["", "x", "-1", "-0", "0", "1.5", "1e308", "nan", "inf", "99999999999999999999",
                         str(2**63), str(2**62), "-" + str(2**63 + 1), "0x10", "٣", "\x00", "\x1b[2J", "\r",
                         "1 2 3", ",", "\"", "{", "[" * 50, "é", "\ufeff1", "100000000000"])


@st.composite
def mutated_text(draw, text: str) -> str:
    """``text`` with one to three edits: a token replaced by a nasty one, a line dropped, doubled or cut short."""
    lines = text.splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 3))):
        if not lines:
            lines = [draw(NASTY)]
            continue
        index = draw(st.integers(0, len(lines) - 1))
        edit = draw(st.sampled_from(["token", "token", "drop", "double", "cut", "append"]))
        line = lines[index]
        if edit == "token":
            parts = line.replace(",", " , ").split(" ")
            spot = draw(st.integers(0, len(parts) - 1))
            parts[spot] = draw(NASTY)
            lines[index] = " ".join(parts).replace(" , ", ",")
        elif edit == "drop":
            del lines[index]
        elif edit == "double":
            lines.insert(index, line)
        elif edit == "cut":
            lines[index] = line[:draw(st.integers(0, max(0, len(line) - 1)))]
        else:
            lines.append(draw(NASTY) + "\n")
    return "".join(lines)


def write_file(path: Path, text: str, compress: bool) -> Path:
    data = text.encode(errors="surrogateescape")
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


STRUCTURE = ["--features", "4", "--classes", "2"]
TEXT_FORMATS: dict[str, tuple[str, str]] = {
    "edges.txt": ("# a comment\n0 1\n1 2\n2 3\n3 0\n0 2\n", "edge list"),
    "m.mtx": ("%%MatrixMarket matrix coordinate pattern general\n4 4 4\n1 2\n2 3\n3 4\n4 1\n", "Matrix Market"),
    "g.graph": ("4 4\n2 4\n1 3\n2 4\n1 3\n", "METIS"),
}


@FUZZ
@given(data=st.data(), name=st.sampled_from(sorted(TEXT_FORMATS)), compress=st.booleans(),
       command=st.sampled_from(["train", "partition"]))
def test_malformed_text_graphs(worker, data, name, compress, command):
    text = data.draw(mutated_text(TEXT_FORMATS[name][0]))
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        graph = write_file(directory / (name + (".gz" if compress else "")), text, compress)
        if command == "train":
            args = ["train", "--graph", str(graph), *STRUCTURE, "--epochs", "1", "--quiet"]
        else:
            args = ["partition", str(graph), *STRUCTURE, "--parts", "2", "--model", "contiguous", "--out",
                    str(directory / "out"), "--quiet"]
        assert_clean(worker, args, directory)


def musae_files(directory: Path) -> Path:
    make_musae(directory / "musae")
    return directory / "musae"


def planetoid_files(directory: Path) -> Path:
    (directory / "planetoid").mkdir()
    make_planetoid(directory / "planetoid")
    return directory / "planetoid"


def ogb_files(directory: Path) -> Path:
    return ogb_directory(directory)


DIRECTORY_FORMATS: dict[str, Callable[[Path], Path]] = {"musae": musae_files, "planetoid": planetoid_files,
                                                       "ogb": ogb_files}


@FUZZ
@given(data=st.data(), kind=st.sampled_from(sorted(DIRECTORY_FORMATS)))
def test_malformed_dataset_directories(worker, data, kind):
    """One file of a MUSAE, Planetoid or OGB directory edited (text), or replaced by another array (pickles)."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        dataset = DIRECTORY_FORMATS[kind](directory)
        files = sorted(path for path in dataset.rglob("*") if path.is_file())
        target = data.draw(st.sampled_from(files), label="file")
        compressed = target.name.endswith(".gz")
        raw = gzip.decompress(target.read_bytes()) if compressed else target.read_bytes()
        if kind == "planetoid" and not target.name.endswith("test.index"):
            target.write_bytes(pickle.dumps(data.draw(planetoid_part(), label="array"), protocol=2))
        else:
            write_file(target, data.draw(mutated_text(raw.decode(errors="surrogateescape"))), compressed)
        assert_clean(worker, ["train", "--graph", str(dataset), "--epochs", "1", "--quiet"], directory)


@st.composite
def planetoid_part(draw):
    """What a Planetoid pickle might hold instead: arrays of other shapes, dtypes and values."""
    import scipy.sparse as sp

    rows, cols = draw(st.integers(0, 9)), draw(st.integers(0, 4))
    dtype = draw(st.sampled_from([np.float32, np.float64, np.int64, np.bool_, np.complex64]))
    values = draw(st.sampled_from([0, 1, -1, np.nan, np.inf, 1e300]))
    array = np.full((rows, cols), values).astype(dtype) if dtype is not np.bool_ else np.ones((rows, cols), bool)
    kind = draw(st.sampled_from(["dense", "csr", "list", "dict", "scalar"]))
    if kind == "csr":
        return sp.csr_matrix(array)
    if kind == "list":
        return array.tolist()
    if kind == "dict":
        return {int(i): [int(draw(st.integers(-2, 12)))] for i in range(rows)}
    if kind == "scalar":
        return 3
    return array


@st.composite
def npz_arrays(draw) -> dict[str, np.ndarray]:
    """A 4-vertex .npz graph with one or two arrays replaced by arrays of another dtype, shape or value."""
    n = 4
    arrays = dict(adj_indptr=np.array([0, 1, 2, 3, 4]), adj_indices=np.array([1, 2, 3, 0]),
                  adj_shape=np.array([n, n]), vertex_ids=np.arange(n), features=np.ones((n, 3), np.float32),
                  labels=np.array([0, 1, 0, 1]), train_mask=np.array([True, True, False, False]),
                  val_mask=np.array([False, False, True, False]), test_mask=np.array([False, False, False, True]))
    for name in draw(st.lists(st.sampled_from(sorted(arrays)), min_size=1, max_size=2, unique=True)):
        shape = draw(st.sampled_from([(), (0,), (n,), (n + 1,), (n, 0), (n, 3), (2, 2, 2)]))
        dtype = draw(st.sampled_from(["int64", "int8", "uint64", "float32", "float16", "complex64", "bool",
                                      "U3"]))
        value = draw(st.sampled_from([0, 1, -1, 3, 2**40, "nan", "inf"]))
        try:
            arrays[name] = np.full(shape, value if dtype != "U3" else "ab", dtype=dtype)
        except (ValueError, OverflowError, TypeError):
            arrays[name] = np.zeros(shape, dtype=dtype)
        if draw(st.booleans()):
            del arrays[name]
    return arrays


@FUZZ
@given(arrays=npz_arrays())
def test_malformed_npz_graphs(worker, arrays):
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        np.savez(directory / "g.npz", **arrays)
        assert_clean(worker, ["train", "--graph", str(directory / "g.npz"), "--epochs", "1", "--quiet"], directory)


# ---- damaged partition directories, checkpoints and metrics files ---------------------------------------

@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """A partition directory, a checkpoint directory of a run on it, and that run's metrics file."""
    base = tmp_path_factory.mktemp("fuzz-made")
    done = distgcn_in_process(["partition", GRAPH, "--parts", "1", "--model", "contiguous", "--out",
                               str(base / "part"), "--quiet"])
    assert done.returncode == 0, done.stderr
    done = distgcn_in_process(["train", str(base / "part"), "--epochs", "2", "--quiet", "--metrics",
                               str(base / "m.jsonl"), "--checkpoint-dir", str(base / "ckpt"),
                               "--checkpoint-every", "1"])
    assert done.returncode == 0, done.stderr
    return base


@st.composite
def damaged_bytes(draw, data: bytes) -> bytes:
    """``data`` cut short, with bytes flipped, or with a stretch replaced by random bytes."""
    edit = draw(st.sampled_from(["cut", "flip", "splice"]))
    if edit == "cut":
        return data[:draw(st.integers(0, len(data)))]
    position = draw(st.integers(0, max(0, len(data) - 1)))
    if edit == "flip":
        return data[:position] + bytes([data[position] ^ draw(st.integers(1, 255))]) + data[position + 1:]
    return data[:position] + draw(st.binary(min_size=1, max_size=64)) + data[position + 64:]


@FUZZ
@given(data=st.data(), command=st.sampled_from(["train", "stats"]))
def test_damaged_partition_directories(worker, made, data, command):
    with tempfile.TemporaryDirectory() as tmp:
        part = Path(tmp) / "part"
        shutil.copytree(made / "part", part)
        target = data.draw(st.sampled_from(sorted(part.iterdir())), label="file")
        if target.name == "meta.json" and data.draw(st.booleans(), label="as text"):
            target.write_text(data.draw(mutated_text(target.read_text())))
        else:
            target.write_bytes(data.draw(damaged_bytes(target.read_bytes())))
        args = ["train", str(part), "--epochs", "1", "--quiet"] if command == "train" else ["stats", str(part)]
        assert_clean(worker, args, Path(tmp))


@FUZZ
@given(data=st.data())
def test_damaged_checkpoints(worker, made, data):
    """A checkpoint cut, flipped or spliced, its checksum then made right or left wrong: --resume answers cleanly."""
    import hashlib

    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "ckpt"
        shutil.copytree(made / "ckpt", ckpt)
        newest = sorted(ckpt.glob("checkpoint-*.pt"))[-1]
        header, digest, payload = newest.read_bytes().split(b"\n", 2)
        payload = data.draw(damaged_bytes(payload))
        if data.draw(st.booleans(), label="checksum made right"):
            digest = hashlib.sha256(payload).hexdigest().encode()
        newest.write_bytes(b"\n".join([header, digest, payload]))
        assert_clean(worker, ["train", str(made / "part"), "--epochs", "3", "--quiet", "--checkpoint-dir", str(ckpt),
                              "--resume"], Path(tmp))


@FUZZ
@given(data=st.data(), command=st.sampled_from(["report", "resume"]))
def test_damaged_metrics_files(worker, made, data, command):
    with tempfile.TemporaryDirectory() as tmp:
        metrics = Path(tmp) / "m.jsonl"
        metrics.write_text(data.draw(mutated_text((made / "m.jsonl").read_text())))
        if command == "report":
            args = ["report", str(metrics), "--out", str(Path(tmp) / "report")]
        else:
            shutil.copytree(made / "ckpt", Path(tmp) / "ckpt")
            args = ["train", str(made / "part"), "--epochs", "3", "--quiet", "--metrics", str(metrics),
                    "--checkpoint-dir", str(Path(tmp) / "ckpt"), "--resume"]
        assert_clean(worker, args, Path(tmp))


# ---- random combinations of options ----------------------------------------------------------------

TRAIN_OPTIONS: dict[str, list[str]] = {
    "--epochs": ["1", "2", "0", "-1", "x", "99999999999999999999999"],
    "--layers": ["2", "3", "1", "0", "x"],
    "--hidden": ["4", "4,6", "0", "-3", "", "1,2,3,4", "99999999999999999999999", "2000000000000"],
    "--lr": ["0.01", "0", "-1", "nan", "inf", "x", "1e400"],
    "--dropout": ["0", "0.5", "1", "-0.1", "nan"],
    "--weight-decay": ["0", "1e-3", "-1", "inf"],
    "--optimizer": ["adam", "sgd", "lbfgs"],
    "--seed": ["0", "7", "-1", "x", "99999999999999999999999", str(2**64)],
    "--dtype": ["float32", "float64", "int8"],
    "--conv": ["gcn", "sage", "gat", "gin"],
    "--heads": ["1", "2", "0"],
    "--first-layer": ["exact", "cached"],
    "--comm": ["halo", "broadcast"],
    "--halo-dtype": ["float32", "bfloat16", "float16"],
    "--spmm-kernel": ["auto", "torch", "scipy", "numba"],
    "--threads": ["1", "0", "-2"],
    "--sampler": ["node", "edge", "rw", "frontier", "none"],
    "--batch-size": ["8", "0", "1", "100000"],
    "--batches-per-epoch": ["1", "0"],
    "--norm-samples": ["0", "2", "-1"],
    "--walk-length": ["2", "0"],
    "--features": ["4", "0", "100000000000", "-1"],
    "--classes": ["2", "1", "0", "1000000"],
    "--feature-norm": ["row", "none", "l2"],
    "--partition": ["random", "contiguous", "graph", "hypergraph"],
    "--vertex-order": ["rcm", "natural"],
    "--checkpoint-every": ["1", "0"],
    "--resume": [],
    "--restart-metrics": [],
    "--symmetrize": [],
    "--no-root-weight": [],
}


@FUZZ
@given(chosen=st.dictionaries(st.sampled_from(sorted(TRAIN_OPTIONS)), st.integers(0, 7), max_size=6),
       source=st.sampled_from(["graph", "directory"]), outputs=st.booleans())
def test_random_train_options(worker, made, chosen, source, outputs):
    """Any mix of train's options, valid or not, on a small graph: trained (exit 0) or refused in one line."""
    with tempfile.TemporaryDirectory() as tmp:
        args = ["train", "--graph", GRAPH] if source == "graph" else ["train", str(made / "part")]
        for flag, pick in chosen.items():
            values = TRAIN_OPTIONS[flag]
            args += [flag] if not values else [flag, values[pick % len(values)]]
        if outputs or "--checkpoint-every" in chosen or "--resume" in chosen:
            args += ["--metrics", f"{tmp}/m.jsonl", "--save-weights", f"{tmp}/w.npz", "--checkpoint-dir",
                     f"{tmp}/ckpt"]
        args += ["--quiet"] + ([] if "--epochs" in chosen else ["--epochs", "1"])
        assert_clean(worker, args, Path(tmp))


# ---- what fuzzing found, kept ------------------------------------------------------------------------

@pytest.mark.parametrize("several", [False, True])
def test_found_stats_of_a_meta_json_without_optional_figures(worker, made, tmp_path, several):
    """meta.json may lack the figures older versions did not write (partition_s, volume, ...): stats crashed
    formatting None (a meta.json with 'partition_s' misspelt, found by test_damaged_partition_directories)."""
    part = tmp_path / "part"
    shutil.copytree(made / "part", part)
    meta = json.loads((part / "meta.json").read_text())
    for key in ("partition_s", "volume", "messages", "imbalance", "edge_cut", "max_recv_volume"):
        meta.pop(key)
    (part / "meta.json").write_text(json.dumps(meta))
    done = assert_clean(worker, ["stats", str(part), *([str(made / "part")] if several else [])], tmp_path)
    assert done["code"] == 0
    assert ("not recorded" if not several else " - ") in done["stdout"]


def test_found_a_shard_whose_zip_header_is_damaged_is_named_in_one_short_line(worker, made, tmp_path):
    """zipfile's error quotes the damaged local header, raw, tens of KB: the line stays short and whole
    (a shard with one file name's length flipped, found by test_damaged_partition_directories)."""
    part = tmp_path / "part"
    shutil.copytree(made / "part", part)
    shard = part / "shard-00000.npz"
    data = bytearray(shard.read_bytes())
    first_name = data.index(b"rank.npy")
    data[first_name - 3] ^= 0x0c  # the high byte of the file name length in the second local header
    shard.write_bytes(bytes(data))
    done = assert_clean(worker, ["train", str(part), "--epochs", "1", "--quiet"], tmp_path)
    [line] = [line for line in messages(done["stderr"]) if ": error: " in line]
    assert line.startswith(f"distgcn: error: {shard}: cannot read shard (") and len(line) < 1100, line
