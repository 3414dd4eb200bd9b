"""Fuzzing the files distgcn reads back: meta.json, metrics files and checkpoints.

One field of a valid file is replaced by a value of another type or range, or
deleted; the reader that the command line uses (stats and report for a
partition, report and ``jobs collect`` for metrics, ``train --resume`` for a
checkpoint) must then either accept the file or raise an InputError that names
the field, never another exception. A few real command-line runs show what the
user sees: exit 2, one line, no traceback.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import run_distgcn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distgcn.cli.jobs import load_metrics
from distgcn.cli.stats_tables import stats_json
from distgcn.data.prepare import GraphOptions
from distgcn.errors import InputError
from distgcn.io.checkpoint import (
    MAGIC,
    RunIdentity,
    capture_rng_states,
    newest_checkpoint,
    read_checkpoint,
)
from distgcn.report.inputs import load_inputs
from distgcn.shard.write import write_partition

FILES = settings(max_examples=60, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
WRONG = st.sampled_from(["x", "", -7, 1.5, 10**30, True, None, [], [1, "a"], {}, {"a": 1}, "NaN"])
DELETE = object()


def paths(value, prefix: str = "") -> list[tuple[str, tuple]]:
    """Every field of a JSON-like value as (printed path, key tuple), parents before children."""
    out = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for key, child in items:
        printed = f"{prefix}[{key}]" if isinstance(key, int) else f"{prefix}.{key}" if prefix else str(key)
        out.append((printed, (key,)))
        out += [(p, (key, *k)) for p, k in paths(child, printed)]
    return out


def mutated(document, keys: tuple, value):
    changed = copy.deepcopy(document)
    parent = changed
    for key in keys[:-1]:
        parent = parent[key]
    if value is DELETE:
        del parent[keys[-1]]
    else:
        parent[keys[-1]] = value
    return changed


def expect_clean(read, printed: str) -> None:
    """The read succeeds, or fails with an InputError naming the field (its path or its own name)."""
    try:
        read()
    except InputError as exc:
        last = printed.rsplit(".", 1)[-1].split("[")[0] or printed
        assert printed in str(exc) or last in str(exc), f"{printed}: {exc}"


def mutations(document) -> st.SearchStrategy:
    return st.tuples(st.sampled_from(paths(document)), st.one_of(WRONG, st.just(DELETE)))


# ---- meta.json ------------------------------------------------------------------

@pytest.fixture(scope="module")
def partition_dir(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("fuzzpart")
    graph = base / "g.txt"
    graph.write_text("0 1\n1 2\n2 3\n3 0\n0 2\n4 5\n5 6\n6 7\n7 4\n1 5\n")
    write_partition(GraphOptions(spec=str(graph), features=4, classes=2, seed=0), base / "part", 2, "contiguous",
                    quiet=True)
    return base / "part"


@pytest.fixture(scope="module")
def meta(partition_dir) -> dict:
    return json.loads((partition_dir / "meta.json").read_text())


def test_meta_fields(tmp_path_factory, partition_dir, meta):
    work = tmp_path_factory.mktemp("meta") / "part"
    shutil.copytree(partition_dir, work)

    @FILES
    @given(mutation=mutations(meta))
    def run(mutation):
        (printed, keys), value = mutation
        (work / "meta.json").write_text(json.dumps(mutated(meta, keys, value)))
        expect_clean(lambda: stats_json(work), printed)
        expect_clean(lambda: load_inputs([str(work)]), printed)

    run()


def test_meta_wrong_type_is_named(tmp_path, partition_dir, meta):
    """The issue's example: a count given as a string names its field path."""
    work = Path(shutil.copytree(partition_dir, tmp_path / "part"))
    (work / "meta.json").write_text(json.dumps(mutated(meta, ("shards", 1, "n_owned"), "x")))
    with pytest.raises(InputError, match=r'meta.json: field shards\[1\].n_owned: expected an integer >= 0, got "x"'):
        stats_json(work)


# ---- metrics files --------------------------------------------------------------

RECORD = {"epoch": 1, "loss": 0.69, "train_acc": 0.5, "val_acc": None, "test_acc": 0.25, "epoch_s": 0.01,
          "compute_s": 0.005, "comm_wait_s": 0.001, "allreduce_s": 0.001, "halo_rows": 6, "halo_bytes": 96,
          "messages": 2, "max_rank_halo_rows": 3, "spmm_exchanges": 2,
          "run": {"ranks": 2, "partition_model": "contiguous", "partition_id": "abc",
                  "graph": {"name": "g", "fingerprint": "f", "spec": "g.txt"}}}
"""An epoch record as train writes it (val_acc null: no validation vertices, written as null)."""


def metrics_lines(first: dict) -> str:
    second = {k: v for k, v in RECORD.items() if k != "run"}
    second["epoch"] = 2
    return json.dumps(first) + "\n" + json.dumps(second) + "\n"


def test_metrics_fields(tmp_path):
    path = tmp_path / "metrics-p2.jsonl"

    @FILES
    @given(mutation=mutations(RECORD))
    def run(mutation):
        (printed, keys), value = mutation
        path.write_text(metrics_lines(mutated(RECORD, keys, value)))
        expect_clean(lambda: load_inputs([str(path)]), printed)
        expect_clean(lambda: load_metrics(path), printed)

    run()


# ---- checkpoints ----------------------------------------------------------------

IDENTITY = RunIdentity("fingerprint", "partition", '{"widths": [4, 2]}')


def checkpoint_contents() -> dict:
    return {"epoch": 3, "identity": {"graph_fingerprint": IDENTITY.graph_fingerprint,
                                     "partition_id": IDENTITY.partition_id, "model_config": IDENTITY.model_config},
            "state": {"model": {"layers.0.weight": torch.zeros(4, 2)},
                      "optimizer": {"state": {}, "param_groups": [{"lr": 0.01, "params": [0]}]},
                      "completed_epochs": 3, "rng": capture_rng_states()}}


def write_checkpoint(directory: Path, contents) -> Path:
    """A checkpoint file whose checksum verifies, around any contents (what a forger would write)."""
    buffer = io.BytesIO()
    torch.save(contents, buffer)
    payload = buffer.getvalue()
    path = directory / "checkpoint-00000003.pt"
    path.write_bytes(MAGIC + hashlib.sha256(payload).hexdigest().encode() + payload)
    return path


def test_checkpoint_fields(tmp_path):
    valid = checkpoint_contents()
    assert read_checkpoint(write_checkpoint(tmp_path, valid))["epoch"] == 3
    fields = [(p, k) for p, k in paths(valid) if not p.startswith("state.rng.")]  # rng: restored by torch/numpy

    @FILES
    @given(field=st.sampled_from(fields), value=st.one_of(WRONG, st.just(DELETE)))
    def run(field, value):
        printed, keys = field
        path = write_checkpoint(tmp_path, mutated(valid, keys, value))
        expect_clean(lambda: read_checkpoint(path), printed)
        warnings: list[str] = []
        try:
            newest_checkpoint(tmp_path, IDENTITY, warnings.append)
        except InputError as exc:  # refused: the reason is the warning, or the identity mismatch named
            assert warnings or printed.split(".")[-1] in str(exc), str(exc)
        if warnings:
            last = printed.rsplit(".", 1)[-1].split("[")[0]
            assert printed in warnings[0] or last in warnings[0], warnings[0]

    run()


# ---- what the user sees ---------------------------------------------------------

def one_line(proc) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_command_line_answers_in_one_line(tmp_path, partition_dir, meta):
    part = Path(shutil.copytree(partition_dir, tmp_path / "part"))
    (part / "meta.json").write_text(json.dumps(mutated(meta, ("volume", "total"), "many")))
    assert "field volume.total: expected a number >= 0" in one_line(run_distgcn(["stats", str(part)]))

    metrics = tmp_path / "metrics-p2.jsonl"
    metrics.write_text(metrics_lines(mutated(RECORD, ("run", "ranks"), "two")))
    line = one_line(run_distgcn(["jobs", "collect", str(metrics)]))
    assert "metrics-p2.jsonl:1: field run.ranks: expected an integer >= 1" in line
    line = one_line(run_distgcn(["report", str(metrics), "--out", str(tmp_path / "report")]))
    assert "field run.ranks" in line

    checkpoints = tmp_path / "ckpt"
    graph = tmp_path / "g.txt"
    graph.write_text("0 1\n1 2\n2 3\n3 0\n0 2\n")
    train = ["train", "--graph", str(graph), "--features", "4", "--classes", "2", "--epochs", "1", "--quiet",
             "--checkpoint-dir", str(checkpoints)]
    assert run_distgcn([*train, "--checkpoint-every", "1"]).returncode == 0
    newest = checkpoints / "checkpoint-00000001.pt"
    contents = read_checkpoint(newest)
    contents["identity"]["partition_id"] = 7
    buffer = io.BytesIO()
    torch.save(contents, buffer)
    newest.write_bytes(MAGIC + hashlib.sha256(buffer.getvalue()).hexdigest().encode() + buffer.getvalue())
    proc = run_distgcn([*train, "--epochs", "2", "--resume"])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "field identity.partition_id: expected a string, got 7" in proc.stderr
