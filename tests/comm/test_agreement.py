"""Ranks that must agree (distgcn/comm/agreement.py): a job whose ranks were given different settings, or read
different partitions, stops on every rank with one line naming the first differing field and the ranks.

The oracle for "which field differs" is the arguments each test gives each rank, not the module's own digests.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import distgcn_in_process, mpiexec

from distgcn.comm.agreement import (
    RanksDisagree,
    agree_on_config,
    config_fields,
    digest_chunks,
    first_difference,
)
from distgcn.config import (
    ComputeConfig,
    OutputConfig,
    RunConfig,
    SourceConfig,
    TrainConfig,
)

GRAPH = "synthetic:sbm,n=120,classes=3,features=6"
TRAIN = ["--epochs", "2", "--quiet"]


@pytest.fixture(scope="module")
def part2(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("agree") / "p2"
    done = distgcn_in_process(["partition", GRAPH, "--parts", "2", "--model", "contiguous", "--out", str(out)])
    assert done.returncode == 0, done.stderr
    return out


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("distgcn: error:")]


@pytest.mark.parametrize("rank_args, field, shown", [
    (lambda r: ["--epochs", str(2 + r)], "--epochs", "2 on rank 0 and 3 on rank 1"),
    (lambda r: ["--hidden", str(8 * (r + 1))], "--hidden", "[8] on rank 0 and [16] on rank 1"),
    (lambda r: ["--dtype", ("float32", "float64")[r]], "--dtype", '"float32" on rank 0 and "float64" on rank 1'),
    (lambda r: ["--conv", ("gcn", "sage")[r]], "--conv", '"gcn" on rank 0 and "sage" on rank 1'),
    (lambda r: ["--lr", ("0.01", "0.02")[r]], "--lr", "0.01 on rank 0 and 0.02 on rank 1"),
])
def test_different_settings_stop_every_rank_naming_the_field(part2, rank_args, field, shown):
    done = distgcn_in_process(lambda rank: ["train", str(part2), *TRAIN, *rank_args(rank)], ranks=2)
    assert done.returncode == 2, done.stderr
    assert errors(done.stderr) == [f"distgcn: error: ranks were given different settings: {field} is {shown}; "
                                   "start every rank with the same arguments"], done.stderr
    assert "Traceback" not in done.stderr and "done:" not in done.stdout


def test_an_output_with_a_collective_step_on_one_rank_only_is_refused(part2, tmp_path):
    weights = tmp_path / "w.npz"
    done = distgcn_in_process(lambda rank: ["train", str(part2), *TRAIN,
                                            *(["--save-weights", str(weights)] if rank == 0 else [])], ranks=2)
    assert done.returncode == 2, done.stderr
    assert "--save-weights is true on rank 0 and false on rank 1" in done.stderr
    assert not weights.exists()


def test_settings_of_one_node_or_of_rank_0_alone_may_differ(part2, tmp_path):
    """Threads, verbosity and the metrics file (written by rank 0 only) are not compared."""
    metrics = tmp_path / "m.jsonl"
    done = distgcn_in_process(lambda rank: ["train", str(part2), *TRAIN,
                                            *(["--threads", "1", "--metrics", str(metrics)] if rank == 0 else [])],
                              ranks=2)
    assert done.returncode == 0, done.stderr
    assert len(metrics.read_text().splitlines()) == 2


def test_partitions_that_differ_only_in_feature_norm_are_refused(part2, tmp_path):
    other = tmp_path / "p2none"
    made = distgcn_in_process(["partition", GRAPH, "--parts", "2", "--model", "contiguous", "--out", str(other),
                               "--feature-norm", "none"])
    assert made.returncode == 0, made.stderr
    done = distgcn_in_process(lambda rank: ["train", str((part2, other)[rank]), *TRAIN], ranks=2)
    assert done.returncode == 2, done.stderr
    assert errors(done.stderr) == [
        f"distgcn: error: {part2}: ranks read different partitions: meta.json's graph.feature_norm is \"row\" on "
        "rank 0 and \"none\" on rank 1; the directory changed while the job loaded it, or the ranks were given "
        "different directories: start every rank on one unchanged partition directory"], done.stderr


def test_a_copy_of_the_same_partition_is_the_same_partition(part2, tmp_path):
    """Identity is the directory's contents, not its path: node-local copies train together."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(part2, copy)
    done = distgcn_in_process(lambda rank: ["train", str((part2, copy)[rank]), *TRAIN], ranks=2)
    assert done.returncode == 0, done.stderr


def test_a_graph_on_one_rank_and_a_directory_on_another_is_refused(part2):
    done = distgcn_in_process(lambda rank: ["train", *([str(part2)] if rank else ["--graph", GRAPH]), *TRAIN],
                              ranks=2)
    assert done.returncode == 2, done.stderr
    assert "DIR is false on rank 0 and true on rank 1" in done.stderr


def test_api_raises_a_config_error_on_every_rank(part2):
    """Through the API, different epochs per rank used to hang, different widths to exit 0 with other shapes."""
    from distgcn import api
    from distgcn.comm.transport.inprocess import run_ranks

    def rank_main(transport):
        try:
            api.train(str(part2), epochs=2, hidden=(8, 16)[transport.rank], quiet=True, transport=transport)
        except RanksDisagree as exc:
            return exc.field, str(exc)
        return None

    outcomes = run_ranks(2, rank_main)
    assert outcomes[0] == outcomes[1] == ("train.hidden", "ranks were given different settings: train.hidden is "
                                          "[8] on rank 0 and [16] on rank 1; start every rank with the same arguments")


def test_many_ranks_are_grouped_by_value():
    from distgcn.comm.transport.inprocess import run_ranks

    def rank_main(transport):
        config = RunConfig(train=TrainConfig(epochs=3 if transport.rank in (2, 5) else 2))
        try:
            agree_on_config(transport, config)
        except RanksDisagree as exc:
            return str(exc)
        return None

    outcomes = run_ranks(6, rank_main)
    assert set(outcomes) == {"ranks were given different settings: train.epochs is 2 on ranks 0-1,3-4 and 3 on "
                             "ranks 2,5; start every rank with the same arguments"}


def test_agreement_is_one_reduction_when_the_ranks_agree():
    from distgcn.comm.transport.inprocess import run_ranks

    calls = []

    class Counting:
        def __init__(self, transport):
            self.transport, self.rank, self.size = transport, transport.rank, transport.size

        def allreduce(self, values, op="sum"):
            calls.append(("allreduce", len(values)))
            return self.transport.allreduce(values, op)

        def allgather_object(self, value):
            calls.append(("allgather", None))
            return self.transport.allgather_object(value)

    run_ranks(3, lambda transport: agree_on_config(Counting(transport), RunConfig()))
    assert calls == [("allreduce", 6)] * 3


def test_every_compared_field_changes_the_digest():
    """Each field in config_fields reaches the digest (a field left out of it would pass unnoticed)."""
    base = RunConfig(source=SourceConfig(partition_dir="d"), outputs=OutputConfig())
    changed = [
        RunConfig(source=SourceConfig(graph="g"), outputs=OutputConfig()),
        RunConfig(source=SourceConfig(partition_dir="d"), train=TrainConfig(seed=1)),
        RunConfig(source=SourceConfig(partition_dir="d"), train=TrainConfig(halo_dtype="bfloat16")),
        RunConfig(source=SourceConfig(partition_dir="d"), compute=ComputeConfig(spmm_kernel="torch")),
        RunConfig(source=SourceConfig(partition_dir="d"), outputs=OutputConfig(checkpoint_dir="c", resume=True)),
    ]
    reference = digest_chunks(config_fields(base))
    for config in changed:
        assert digest_chunks(config_fields(config)) != reference
    assert digest_chunks(config_fields(RunConfig(source=SourceConfig(partition_dir="other"),
                                                 compute=ComputeConfig(threads=7)))) == reference


def test_first_difference_follows_rank_0s_order():
    shown = [{"a": "1", "b": "2", "c": "3"}, {"a": "1", "b": "2", "c": "4"}, {"a": "1", "b": "5", "c": "3"}]
    assert first_difference(shown) == "b"
    assert first_difference([{"a": "1"}, {"a": "1", "z": "2"}]) == "z"


def test_mpmd_launch_with_different_epochs_ends_at_once(part2):
    """The audit's case under a real mpiexec: it used to hang after rank 0 printed 'done'."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    command = [sys.executable, "-m", "distgcn", "train", str(part2), "--quiet"]
    started = time.monotonic()
    done = subprocess.run([mpiexec(), "-n", "1", *command, "--epochs", "2", ":", "-n", "1", *command,
                           "--epochs", "3"], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2, done.stderr
    assert errors(done.stderr) == ["distgcn: error: ranks were given different settings: --epochs is 2 on rank 0 and "
                                   "3 on rank 1; start every rank with the same arguments"], done.stderr
    assert "Traceback" not in done.stderr and "done:" not in done.stdout
    assert time.monotonic() - started < 100

