"""Honest timings on a shared node: the warning when a run's threads will wait for a core (ranks × threads over the
cores, or other processes' load), and its verdict in the metrics file's run header."""

from __future__ import annotations

import json
import math
from contextlib import AbstractContextManager
from pathlib import Path
from unittest import mock

import pytest
from conftest import distgcn_in_process, run_distgcn

from distgcn.runtime.threads import available_cores
from distgcn.training.soundness import LOAD_MARGIN, NodeUse, contention, judge

SPEC = "synthetic:sbm,n=300,classes=3,features=8"


def node(cores: int, load: float) -> AbstractContextManager[object]:
    """A node of ``cores`` CPUs, all of them this process's, whose 1-minute load average reads ``load``."""
    return mock.patch.multiple("distgcn.training.pipeline", cpu_set=lambda: frozenset(range(cores)),
                               node_cpus=lambda: cores, load_average=lambda: load)


def train(tmp_path: Path, name: str, ranks: int, threads: int) -> tuple[list[str], dict]:
    """One epoch on in-process ranks: the warning lines and the run header's ``node``."""
    metrics = tmp_path / f"{name}.jsonl"
    done = distgcn_in_process(["train", "--graph", SPEC, "--epochs", "1", "--threads", str(threads), "--quiet",
                               "--metrics", str(metrics)], ranks=ranks)
    assert done.returncode == 0, done.stderr
    header = json.loads(metrics.read_text().splitlines()[0])["run"]
    return [line for line in done.stderr.splitlines() if "warning" in line], header["node"]


def test_ranks_times_threads_over_the_cores_is_one_warning_line_and_recorded(tmp_path):
    """2 ranks of 2 threads on 2 cores: as many ranks as cores, but twice the threads (issue #50: the check counted
    ranks only); 2 ranks of 1 thread fit."""
    with node(cores=2, load=0.0):
        crowded, crowded_node = train(tmp_path, "crowded", ranks=2, threads=2)
        roomy, roomy_node = train(tmp_path, "roomy", ranks=2, threads=1)
    assert len(crowded) == 1 and "2 ranks × 2 threads share 2 cores on this node" in crowded[0], crowded
    assert "--threads 1" in crowded[0]
    assert roomy == []
    assert crowded_node == {"ranks": 2, "cores": 2, "device": "cpu", "threads_per_rank": 2, "load_average": 0.0,
                            "other_load": 0.0, "oversubscribed": True, "busy": False}
    assert roomy_node["threads_per_rank"] == 1 and roomy_node["oversubscribed"] is False


def test_the_command_warns_when_one_rank_has_more_threads_than_the_cores(tmp_path):
    """The real command in its own process, on this machine's real cores: twice as many threads as cores."""
    cores = available_cores()
    metrics = tmp_path / "m.jsonl"
    done = run_distgcn(["train", "--graph", SPEC, "--epochs", "1", "--threads", str(2 * cores), "--quiet",
                        "--metrics", str(metrics)])
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1, done.stderr
    assert f"1 rank × {2 * cores} threads share {cores} cores on this node" in warnings[0]
    recorded = json.loads(metrics.read_text().splitlines()[0])["run"]["node"]
    assert recorded["threads_per_rank"] == 2 * cores and recorded["oversubscribed"] is True


def test_a_busy_node_warns_and_is_recorded(tmp_path):
    """One rank of one thread fits two cores, but other processes keep the load at 9: the run waits for a CPU."""
    with node(cores=2, load=9.0):
        busy, busy_node = train(tmp_path, "busy", ranks=1, threads=1)
    with node(cores=2, load=0.0):
        idle, idle_node = train(tmp_path, "idle", ranks=1, threads=1)
    assert len(busy) == 1 and "this node is busy: its load average is 9.00" in busy[0], busy
    assert idle == []
    assert busy_node["busy"] is True and busy_node["oversubscribed"] is False and busy_node["load_average"] == 9.0
    assert 8.0 <= busy_node["other_load"] <= 9.0  # this job's one thread can have added at most 1
    assert idle_node["busy"] is False and idle_node["load_average"] == 0.0


def kernel_load(seconds: float, runnable: float, start: float = 0.0) -> float:
    """The 1-minute load average as Linux keeps it: every 5 s, load = load·e^(-5/60) + n·(1 - e^(-5/60)), with
    ``runnable`` tasks for ``seconds`` after ``start``."""
    decay = math.exp(-5 / 60)
    load = start
    for _ in range(int(seconds // 5)):
        load = load * decay + runnable * (1 - decay)
    return load


@pytest.mark.parametrize("age_s", [3.0, 12.0, 30.0, 90.0, 600.0])
def test_the_load_this_job_adds_is_not_taken_for_other_processes(age_s):
    """A job of 4 threads alone on 4 CPUs raises the load by itself: not busy. The same job beside 3 other busy
    processes that ran before it is."""
    mine = NodeUse("n", (0, 1, 2, 3), 4, 2, kernel_load(age_s, 2 * 2), age_s)
    alone = [mine, mine]
    assert judge(alone)[0].busy is False and contention(alone) is None
    shared = NodeUse("n", (0, 1, 2, 3), 4, 2, kernel_load(age_s, 2 * 2 + 3, start=3.0), age_s)
    assert judge([shared, shared])[0].busy is True
    assert "this node is busy" in contention([shared, shared])


def test_busy_means_other_load_beyond_the_cpus_this_job_leaves_free():
    """One thread on 8 CPUs leaves 7 free: other load of 7 fits; beyond 7 + the margin it does not. Age unknown:
    all of this job's thread counts as its own."""
    def verdict(load: float):
        return judge([NodeUse("n", tuple(range(8)), 8, 1, load, None)])[0]
    assert verdict(8.0).other_load == pytest.approx(7.0) and verdict(8.0).busy is False
    assert verdict(8.0 + LOAD_MARGIN - 0.01).busy is False and verdict(8.0 + LOAD_MARGIN + 0.01).busy is True
    assert judge([NodeUse("n", (0,), 1, 1, None, None)])[0].busy is None  # no load average: not judged


def test_the_most_crowded_node_of_the_job_is_named_whichever_rank_is_on_it():
    """Rank 0's node may be roomy while another is oversubscribed: the warning looks at every rank's node."""
    roomy = NodeUse("a", (0, 1, 2, 3), 4, 1, 0.0, 1.0)
    crowded = NodeUse("b", (0, 1), 2, 1, 0.0, 1.0)
    worse = NodeUse("c", (0, 1), 2, 1, 0.0, 1.0)
    assert contention([roomy, roomy]) is None
    assert "4 ranks × 1 thread share 2 cores on this node" in contention([crowded] * 4)
    line = contention([roomy, roomy, *[crowded] * 4, *[worse] * 6])
    assert "6 ranks × 1 thread share 2 cores on node c (2 of the job's 3 nodes are so)" in line
    assert "mpiexec -n 2" in line


def test_ranks_bound_to_their_own_cores_are_judged_by_their_affinity():
    """srun binds each rank to its own cores: 4 ranks of 2 threads on 8 cores, 2 each, fit; a rank of 2 threads
    bound to 1 core does not, although its node has as many cores as the job's threads."""
    bound = [NodeUse("n", (2 * r, 2 * r + 1), 8, 2, 0.0, 1.0) for r in range(4)]
    assert judge(bound)[0].oversubscribed is False and contention(bound) is None
    tight = [NodeUse("n", (0,), 8, 2, 0.0, 1.0), NodeUse("n", (1, 2, 3), 8, 2, 0.0, 1.0)]
    assert judge(tight)[0].demand == judge(tight)[0].cores == 4 and judge(tight)[0].oversubscribed is True
    assert "may run on 1 core (its CPU affinity) but has 2 threads" in contention(tight)
