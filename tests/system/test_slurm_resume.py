"""Under a real Slurm: a cancelled job resubmitted, and a requeued job, both resume from the checkpoint.

The training template passes DISTGCN_TRAIN_ARGS through, so ``--checkpoint-dir
D --checkpoint-every K --resume`` makes every run of the job continue where
the last checkpoint left it. Both stories must end with the weights of an
uninterrupted run, to the bit (same partition, same P).
"""

from __future__ import annotations

from pathlib import Path

from slurm_cluster import SlurmCluster
from slurm_jobs import (  # noqa: F401
    EPOCHS,
    assert_finished_like_uninterrupted,
    release_requeued,
    resume_partition,
    submit,
    wait_for_checkpoint,
)

from distgcn.io.checkpoint import list_checkpoints, read_checkpoint


def test_scancel_then_resubmit_resumes(slurm_cluster: SlurmCluster, resume_partition, tmp_path: Path) -> None:
    part, reference = resume_partition
    job = submit(slurm_cluster, tmp_path, part)
    wait_for_checkpoint(slurm_cluster, job, tmp_path / "ckpt", 10)
    slurm_cluster.command("scancel", str(job))
    (record,) = slurm_cluster.wait(job, timeout=120)
    assert record["JobState"] == "CANCELLED"
    newest = list_checkpoints(tmp_path / "ckpt")[-1]
    stopped_at = read_checkpoint(newest)["epoch"]  # verifies: the cancel did not damage it
    assert 10 <= stopped_at < EPOCHS

    again = submit(slurm_cluster, tmp_path, part)
    (record,) = slurm_cluster.wait(again, timeout=600)
    log = (tmp_path / f"distgcn-train-{again}.out").read_text()
    assert (record["JobState"], record["ExitCode"]) == ("COMPLETED", "0:0"), log
    resumed_from = int(log.split("resuming after epoch ")[1].split()[0])
    assert resumed_from >= stopped_at
    assert_finished_like_uninterrupted(tmp_path, reference)


def test_requeued_job_resumes_by_itself(slurm_cluster: SlurmCluster, resume_partition, tmp_path: Path) -> None:
    part, reference = resume_partition
    job = submit(slurm_cluster, tmp_path, part, "--requeue")
    wait_for_checkpoint(slurm_cluster, job, tmp_path / "ckpt", 10)
    slurm_cluster.command("scontrol", "requeue", str(job))  # what a preemption or node failure does
    release_requeued(slurm_cluster, job, timeout=60)
    (record,) = slurm_cluster.wait(job, timeout=600)
    log = (tmp_path / f"distgcn-train-{job}.out").read_text()
    assert (record["JobState"], record["ExitCode"], record["Restarts"]) == ("COMPLETED", "0:0", "1"), log
    assert "run 2" in log and "resuming after epoch" in log
    assert_finished_like_uninterrupted(tmp_path, reference)
