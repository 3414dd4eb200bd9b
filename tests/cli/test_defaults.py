"""Defaults a new user gets without asking (issue #22): one partition model everywhere, and a sound one."""

from __future__ import annotations

import inspect
import json
from contextlib import AbstractContextManager
from unittest import mock

from conftest import distgcn_in_process

import distgcn
from distgcn.cli.main import build_parser
from distgcn.config import DEFAULT_PARTITION_MODEL, SourceConfig
from distgcn.shard.directory import read_meta

SPEC = "synthetic:sbm,n=300,classes=3,features=8"


def idle_node() -> AbstractContextManager[object]:
    """No other process's load on this node, whatever this shared machine's is: the runs below must warn of nothing
    else (the contention warning is tested in tests/training/test_contention.py)."""
    return mock.patch("distgcn.training.pipeline.load_average", return_value=0.0)


def test_one_default_partition_model_everywhere():
    """partition --model, train --partition, jobs --model and the Python API default to the same model."""
    parser = build_parser()
    assert DEFAULT_PARTITION_MODEL == "hypergraph"
    assert parser.parse_args(["partition", SPEC, "--parts", "2", "--out", "d"]).model == DEFAULT_PARTITION_MODEL
    assert parser.parse_args(["train", "--graph", SPEC]).partition == DEFAULT_PARTITION_MODEL
    submit = ["submit", "--out", "d", "--parts", "2"]
    scaling = ["scaling", "--out", "p{P}", "--parts", "2", "--results", "r"]
    for sub in (submit, scaling):
        args = parser.parse_args(["jobs", *sub, "--graph", SPEC])
        assert args.model == DEFAULT_PARTITION_MODEL, sub
    assert SourceConfig().partition == DEFAULT_PARTITION_MODEL
    assert inspect.signature(distgcn.partition).parameters["model"].default == DEFAULT_PARTITION_MODEL
    assert inspect.signature(distgcn.train).parameters["partition_model"].default == DEFAULT_PARTITION_MODEL


def test_partition_without_model_writes_a_hypergraph_partition(tmp_path):
    out = tmp_path / "part"
    done = distgcn_in_process(["partition", SPEC, "--parts", "2", "--out", str(out), "--quiet"])
    assert done.returncode == 0, done.stderr
    meta = read_meta(out)
    assert meta["model"] == "hypergraph"
    random_volume = distgcn.partition(SPEC, 2, "random").metrics["volume"]["total"]
    assert meta["volume"]["total"] < random_volume


def test_train_graph_partitions_the_same_way_twice(tmp_path):
    """train --graph's default partition is reproducible (a resume must find the checkpoint's partition)."""
    ids = []
    for run in range(2):
        metrics = tmp_path / f"m{run}.jsonl"
        done = distgcn_in_process(["train", "--graph", SPEC, "--epochs", "1", "--quiet", "--metrics", str(metrics)],
                                  ranks=2)
        assert done.returncode == 0, done.stderr
        ids.append(json.loads(metrics.read_text().splitlines()[0])["run"])
    assert ids[0]["partition_model"] == "hypergraph"
    assert ids[0]["partition_id"] == ids[1]["partition_id"]


def test_random_labels_are_one_warning_line(tmp_path):
    """Random labels train to chance accuracy; a graph with its own labels (here an SBM's communities) does not warn."""
    edges = tmp_path / "g.txt"
    edges.write_text("".join(f"{v} {(v * 7 + 1) % 60}\n" for v in range(60)))
    with idle_node():
        drawn = distgcn_in_process(["train", "--graph", str(edges), "--features", "4", "--classes", "5", "--epochs",
                                    "1", "--quiet"])
        learnable = distgcn_in_process(["train", "--graph", SPEC, "--features", "8", "--classes", "3", "--epochs",
                                        "1", "--quiet"])
    assert drawn.returncode == learnable.returncode == 0, drawn.stderr + learnable.stderr
    warnings = [line for line in drawn.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "labels are random" in warnings[0] and "1/5" in warnings[0]
    assert "warning" not in learnable.stderr


def test_the_one_thread_scipy_kernel_with_more_threads_is_one_warning_line():
    """--threads 2 with scipy's products: the sparse part of the epoch stays on one thread; auto's loops do not."""
    with idle_node():
        runs = {kernel: distgcn_in_process(["train", "--graph", SPEC, "--epochs", "1", "--threads", "2",
                                            "--spmm-kernel", kernel, "--quiet"]) for kernel in ("scipy", "auto")}
        one = distgcn_in_process(["train", "--graph", SPEC, "--epochs", "1", "--threads", "1", "--spmm-kernel",
                                  "scipy", "--quiet"])
    assert all(run.returncode == 0 for run in [*runs.values(), one]), [run.stderr for run in runs.values()]
    warnings = [line for line in runs["scipy"].stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "scipy multiplies the sparse blocks on one thread" in warnings[0]
    assert "--threads 2" in warnings[0]
    assert "warning" not in runs["auto"].stderr and "warning" not in one.stderr
