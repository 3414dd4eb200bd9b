"""Defaults a new user gets without asking (issue #22): one partition model everywhere, and a sound one."""

from __future__ import annotations

import inspect
import json


from conftest import distgcn_in_process

import distgcn
from distgcn.cli import build_parser
from distgcn.config import DEFAULT_PARTITION_MODEL, SourceConfig
from distgcn.partition_dir import read_meta

SPEC = "synthetic:sbm,n=300,classes=3,features=8"


def test_one_default_partition_model_everywhere():
    """partition --model, train --partition, jobs --model and the Python API default to the same model."""
    parser = build_parser()
    assert DEFAULT_PARTITION_MODEL == "hypergraph"
    assert parser.parse_args(["partition", SPEC, "--parts", "2", "--out", "d"]).model == DEFAULT_PARTITION_MODEL
    assert parser.parse_args(["train", "--graph", SPEC]).partition == DEFAULT_PARTITION_MODEL
    for sub in (["submit", "--out", "d", "--parts", "2"], ["scaling", "--out", "p{P}", "--parts", "2", "--results", "r"]):
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
