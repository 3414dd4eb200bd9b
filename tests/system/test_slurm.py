"""The Slurm templates of jobs/: valid bash that documents its variables, and real runs under Slurm.

The runs use the session's one-node cluster (tests/helpers/slurm_cluster.py): the
chained partition and training jobs that 'distgcn jobs submit' sends, the
strong-scaling job arrays and the collector, the errors a wrong launch must
give at start, and 'distgcn train' started by srun and by mpiexec in a job.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, distgcn_in_process
from slurm_cluster import NODE_CPUS, SlurmCluster

from distgcn.cli.jobs import scaling_table

JOBS = ROOT / "jobs"
TEMPLATES = sorted(p.name for p in JOBS.glob("*.sbatch"))
GRAPH = "synthetic:sbm,n=2000,classes=4,features=16"


def _header_and_body(text: str) -> tuple[str, str]:
    lines = text.splitlines()
    end = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    return "\n".join(lines[:end]), "\n".join(lines[end:])


def test_the_four_templates_are_there() -> None:
    assert {"partition.sbatch", "partition-ranks.sbatch", "train-cpu.sbatch", "train-gpu.sbatch",
            "scaling.sbatch"} <= set(TEMPLATES)


def test_jobs_finds_the_templates_without_a_checkout_path(monkeypatch) -> None:
    """`pip install .` ships jobs/ to PREFIX/share/distgcn/jobs; an editable install reads the checkout's."""
    from distgcn.cli.jobs import default_templates

    monkeypatch.delenv("DISTGCN_JOBS_DIR", raising=False)
    found = default_templates()
    for name in TEMPLATES:
        assert (found / name).read_bytes() == (JOBS / name).read_bytes(), found / name


@pytest.mark.parametrize("name", TEMPLATES)
def test_template_is_valid_bash_and_documents_every_variable(name: str) -> None:
    path = JOBS / name
    checked = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    header, body = _header_and_body(path.read_text())
    used = set(re.findall(r"\bDISTGCN_[A-Z_]+", body))
    documented = set(re.findall(r"^#\s+(DISTGCN_[A-Z_]+)\s", header, re.M))
    assert used, f"{name} reads no DISTGCN_* variable"
    assert used == documented, f"used but not documented: {used - documented}; documented, unused: {documented - used}"
    assert not re.search(r"/home/|~/|\$HOME|\$\{HOME", path.read_text()), f"{name} names a home directory"


def test_collector_speedup_and_efficiency_are_relative_to_the_fewest_ranks() -> None:
    def run(times: list[float], halo: int) -> list[dict]:
        return [{"epoch_s": t, "compute_s": t / 2, "comm_wait_s": t / 4, "allreduce_s": t / 8, "halo_rows": halo,
                 "messages": 2, "test_acc": 0.9} for t in times]

    rows = scaling_table({4: run([9.0, 1.0, 1.0, 1.0], 40), 2: run([9.0, 2.0, 3.0, 2.0], 20)})
    assert [r["ranks"] for r in rows] == [2, 4]
    assert rows[0]["epoch_s"] == 2.0 and rows[1]["epoch_s"] == 1.0  # median after the warm-up epoch
    assert rows[1]["speedup"] == pytest.approx(2.0) and rows[1]["efficiency"] == pytest.approx(1.0)
    assert rows[1]["halo_rows"] == 40


def test_submit_dry_run_chains_training_after_partitioning(tmp_path: Path) -> None:
    # --partition-cpus given: its default asks sinfo, and no cluster runs in this test
    result = distgcn_in_process(["jobs", "submit", "--graph", GRAPH, "--parts", "6", "--nodes", "4", "--out", "part6",
                                 "--train-args=--epochs 9 --hidden 64,64", "--requeue", "--dry-run", "--templates",
                                 str(JOBS), "--partition-cpus", "3"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    partition, train = result.stdout.splitlines()[:2]
    assert partition.endswith("jobs/partition.sbatch") and "DISTGCN_PARTS=6 " in partition
    assert " --cpus-per-task=3 " in partition
    assert f"DISTGCN_OUT={tmp_path / 'part6'} " in partition
    assert train.endswith("jobs/train-cpu.sbatch") and f"DISTGCN_DIR={tmp_path / 'part6'} " in train
    # a comma inside a value survives: the variables go in sbatch's environment, not --export
    assert "DISTGCN_TRAIN_ARGS='--epochs 9 --hidden 64,64'" in train
    for option in ("--nodes=4", "--ntasks=6", "--ntasks-per-node=2", "--requeue",
                   "--dependency=afterok:<partition>", "--kill-on-invalid-dep=yes"):
        assert f" {option} " in train or f" '{option}' " in train, option


def _distgcn(cluster: SlurmCluster, args: list[str], cwd: Path) -> str:
    result = subprocess.run([sys.executable, "-m", "distgcn", *args], capture_output=True, text=True,
                            env=cluster.env, cwd=cwd, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _succeeded(records: list[dict[str, str]], cwd: Path) -> None:
    failed = [r["JobId"] for r in records if (r["JobState"], r["ExitCode"]) != ("COMPLETED", "0:0")]
    if failed:
        logs = "\n".join(f"--- {p.name}:\n{p.read_text()}" for p in sorted([*cwd.glob("*.out"), *cwd.glob("*.err")]))
        raise AssertionError(f"jobs {failed} did not complete with exit code 0:\n{logs}")


def test_partition_job_then_training_job_chained_with_afterok(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    out = _distgcn(slurm_cluster, ["jobs", "submit", "--graph", GRAPH, "--parts", "4", "--model", "hypergraph",
                                   "--partition-args=--preset default --quiet", "--partition-cpus", "2",
                                   "--out", "part4", "--metrics", "train.jsonl",
                                   "--train-args=--epochs 40 --quiet", "--time", "00:10:00"], tmp_path)
    part_id, train_id = map(int, re.search(r"partition job (\d+), training job (\d+)", out).groups())
    pending = slurm_cluster.jobs(train_id)[0]
    assert pending["JobState"] in ("PENDING", "RUNNING", "COMPLETED")

    (part,) = slurm_cluster.wait(part_id, timeout=300)
    (train,) = slurm_cluster.wait(train_id, timeout=300)
    _succeeded([part, train], tmp_path)
    assert train["StartTime"] >= part["EndTime"], "training started before its partition job ended"
    assert train["NumTasks"] == "4"

    assert json.loads((tmp_path / "part4" / "meta.json").read_text())["parts"] == 4
    records = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == list(range(1, 41))
    assert records[-1]["test_acc"] > 0.9, records[-1]
    run = records[0]["run"]
    assert (run["ranks"], run["backend"]) == (4, "mpi")
    log = (tmp_path / f"distgcn-train-{train_id}.out").read_text()
    assert "done: 40 epochs on 4 rank(s)" in log


def test_partition_job_asks_for_the_cores_a_node_of_its_partition_has(slurm_cluster: SlurmCluster,
                                                                       tmp_path: Path) -> None:
    """Without --partition-cpus: sinfo's CPUs of the largest node (the issue's default of 16 pended forever)."""
    for extra in ([], ["--sbatch-args=--partition=debug"], ["--sbatch-args=-p debug"]):
        out = _distgcn(slurm_cluster, ["jobs", "submit", "--graph", GRAPH, "--parts", "2", "--out", "p2",
                                       "--dry-run", *extra], tmp_path)
        partition_line = out.splitlines()[0]
        assert f"--cpus-per-task={NODE_CPUS} " in partition_line, out
    result = subprocess.run([sys.executable, "-m", "distgcn", "jobs", "submit", "--graph", GRAPH, "--parts", "2",
                             "--out", "p2", "--dry-run", "--sbatch-args=--partition=nosuch"],
                            capture_output=True, text=True, env=slurm_cluster.env, cwd=tmp_path, timeout=120)
    assert result.returncode == 2 and "partition nosuch" in result.stderr and "--partition-cpus" in result.stderr


def test_training_job_is_cancelled_when_its_partition_job_fails(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    # no --partition-cpus: the default must be schedulable on the test cluster's node
    out = _distgcn(slurm_cluster, ["jobs", "submit", "--graph", str(tmp_path / "missing.txt"), "--parts", "2",
                                   "--model", "random", "--out", "part2", "--time", "00:05:00"], tmp_path)
    part_id, train_id = map(int, re.search(r"partition job (\d+), training job (\d+)", out).groups())
    (part,) = slurm_cluster.wait(part_id, timeout=120)
    (train,) = slurm_cluster.wait(train_id, timeout=60)
    assert (part["JobState"], part["ExitCode"]) == ("FAILED", "2:0")
    assert "missing.txt" in (tmp_path / f"distgcn-partition-{part_id}.err").read_text()
    assert (train["JobState"], train["Reason"]) == ("CANCELLED", "DependencyNeverSatisfied")
    assert not list(tmp_path.glob("distgcn-train-*")), "the training job must not have run"


def test_scaling_array_then_collected_table(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    out = _distgcn(slurm_cluster, ["jobs", "scaling", "--graph", GRAPH, "--parts", "1,2,4", "--model", "random",
                                   "--partition-args=--quiet", "--partition-cpus", "1", "--out", "parts/p{P}",
                                   "--results", "results", "--train-args=--epochs 3 --quiet", "--cpus-per-task", "2",
                                   "--time", "00:10:00"], tmp_path)
    part_id, train_id = map(int, re.search(r"partition array (\d+), scaling array (\d+)", out).groups())
    # bounds for a loaded 2-core machine, where 4 ranks x 2 threads are 4x oversubscribed
    parts = slurm_cluster.wait(part_id, timeout=150)
    elements = slurm_cluster.wait(train_id, timeout=420)
    assert len(parts) == 3 and len(elements) == 3
    _succeeded(parts + elements, tmp_path)

    rows = json.loads(_distgcn(slurm_cluster, ["jobs", "collect", "results", "--json"], tmp_path))
    assert [r["ranks"] for r in rows] == [1, 2, 4]
    # threads come from SLURM_CPUS_PER_TASK: without it, 2 and 4 ranks on 2 cores would get 1 thread each
    for parts in (1, 2, 4):
        header = json.loads((tmp_path / "results" / f"metrics-p{parts}.jsonl").read_text().splitlines()[0])["run"]
        assert (header["ranks"], header["threads"], header["backend"]) == (parts, 2, "mpi")
    assert rows[0]["halo_rows"] == 0 and rows[0]["speedup"] == 1.0
    for row in rows[1:]:
        meta = json.loads((tmp_path / "parts" / f"p{row['ranks']}" / "meta.json").read_text())
        last = json.loads((tmp_path / "results" / f"metrics-p{row['ranks']}.jsonl").read_text().splitlines()[-1])
        assert row["halo_rows"] == meta["volume"]["total"] * last["spmm_exchanges"] > 0
    table = _distgcn(slurm_cluster, ["jobs", "collect", "results"], tmp_path)
    assert table.count("\n| ") == 3 and "speedup vs P=1" in table


@pytest.fixture
def two_part_dir(tmp_path: Path) -> Path:
    out = tmp_path / "part2"
    result = distgcn_in_process(["partition", GRAPH, "--parts", "2", "--model", "random", "--out", str(out), "--quiet"])
    assert result.returncode == 0, result.stderr
    return out


def _failed_job(cluster: SlurmCluster, cwd: Path, export: dict[str, str], *options: str) -> tuple[dict, str]:
    job = cluster.sbatch(JOBS / "train-cpu.sbatch", *options, "--time=00:05:00", export=export, cwd=cwd)
    (record,) = cluster.wait(job, timeout=180)
    return record, (cwd / f"distgcn-train-{job}.err").read_text()


def test_task_count_other_than_the_parts_is_a_clear_error(slurm_cluster: SlurmCluster, two_part_dir: Path) -> None:
    record, err = _failed_job(slurm_cluster, two_part_dir.parent, {"DISTGCN_DIR": str(two_part_dir)},
                              "--ntasks=3", "--ntasks-per-node=3")
    assert (record["JobState"], record["ExitCode"]) == ("FAILED", "2:0"), err
    assert "partition has 2 parts but the job has 3 ranks" in err


def test_srun_without_pmi_is_a_clear_error(slurm_cluster: SlurmCluster, two_part_dir: Path) -> None:
    record, err = _failed_job(slurm_cluster, two_part_dir.parent,
                              {"DISTGCN_DIR": str(two_part_dir), "DISTGCN_MPI": "none"},
                              "--ntasks=2", "--ntasks-per-node=2")
    # Both singleton ranks see the mismatch and exit 2; whichever exits second may already have been
    # ended by --kill-on-bad-exit (SIGTERM, 143), and srun reports the larger code: a race, not a defect.
    assert record["JobState"] == "FAILED" and record["ExitCode"] in ("2:0", "143:0"), (record, err)
    assert "Exited with exit code 2" in err, err
    assert "srun started 2 ranks but MPI sees 1" in err


def test_partition_ranks_job_reads_and_partitions_on_its_tasks(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    edges = tmp_path / "edges"
    edges.mkdir()
    rng = np.random.default_rng(4)
    for k in range(3):  # a directory of edge-list files, as large graphs are shipped
        pairs = rng.integers(0, 400, size=(700, 2)) * 5 + 1
        (edges / f"part-{k}.txt").write_text("".join(f"{u} {v}\n" for u, v in pairs))
    export = {"DISTGCN_GRAPH": str(edges), "DISTGCN_OUT": str(tmp_path / "part2"), "DISTGCN_MODEL": "random",
              "DISTGCN_PARTITION_ARGS": "--features 4 --classes 2 --seed 3"}
    job = slurm_cluster.sbatch(JOBS / "partition-ranks.sbatch", "--ntasks-per-node=2", "--time=00:05:00",
                               export=export, cwd=tmp_path)
    (record,) = slurm_cluster.wait(job, timeout=180)
    _succeeded([record], tmp_path)
    err = (tmp_path / f"distgcn-partition-ranks-{job}.err").read_text()
    assert "on 2 ranks" in err and "read, partitioned and written by the ranks" in err, err
    single = distgcn_in_process(["partition", str(edges), "--parts", "2", "--model", "random", "--features", "4",
                                 "--classes", "2", "--seed", "3", "--quiet", "--out", str(tmp_path / "single")])
    assert single.returncode == 0, single.stderr
    for name in ("parts.npy", "shard-00000.npz", "shard-00001.npz"):
        assert (tmp_path / "part2" / name).read_bytes() == (tmp_path / "single" / name).read_bytes(), name


@pytest.mark.parametrize("launch", ["srun --mpi=pmi2", "mpiexec -n 2"])
def test_train_runs_unchanged_under_srun_and_under_mpiexec_in_a_job(slurm_cluster: SlurmCluster, two_part_dir: Path,
                                                                    launch: str) -> None:
    script = two_part_dir.parent / "launch.sh"
    script.write_text(f"#!/bin/bash\n{launch} distgcn train {two_part_dir} --epochs 3 --quiet\n")
    job = slurm_cluster.sbatch(script, "--ntasks=2", "--time=00:05:00", "--output=launch-%j.out",
                               cwd=two_part_dir.parent)
    (record,) = slurm_cluster.wait(job, timeout=180)
    log = (two_part_dir.parent / f"launch-{job}.out").read_text()
    assert (record["JobState"], record["ExitCode"]) == ("COMPLETED", "0:0"), log
    assert "done: 3 epochs on 2 rank(s)" in log


@pytest.mark.parametrize("sbatch_args, partition", [
    ([], None), (["--partition=gpu"], "gpu"), (["--partition", "gpu"], "gpu"), (["-p", "gpu"], "gpu"),
    (["-pgpu"], "gpu"), (["--account=a", "--profile=all"], None),
])
def test_the_slurm_partition_is_read_from_sbatch_args(sbatch_args, partition):
    from distgcn.cli.jobs import _slurm_partition

    assert _slurm_partition(sbatch_args) == partition


@pytest.mark.parametrize("command", ["submit", "scaling"])
def test_a_dry_run_without_sinfo_shows_the_cap_and_says_so(tmp_path, command):
    """Without sinfo (a laptop) a dry run still prints the commands: the partition job's cores as the cap, with a
    comment line, so that the output stays a script."""
    extra = ["--out", "p2"] if command == "submit" else ["--out", "p{P}", "--results", "res"]
    done = distgcn_in_process(["jobs", command, "--graph", GRAPH, "--parts", "2", *extra, "--dry-run", "--templates",
                               str(JOBS)], env={"PATH": str(tmp_path)}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    note, partition = done.stdout.splitlines()[:2]
    assert note.startswith("# sinfo not found: the partition job's --cpus-per-task is shown as 16")
    assert " --cpus-per-task=16 " in partition and partition.endswith("jobs/partition.sbatch")
    assert done.stderr == ""


def test_without_sinfo_a_submission_is_refused_naming_the_flag(tmp_path):
    done = distgcn_in_process(["jobs", "submit", "--graph", GRAPH, "--parts", "2", "--out", "p2"],
                              env={"PATH": str(tmp_path)})
    assert done.returncode == 2 and "sinfo not found: give --partition-cpus" in done.stderr
