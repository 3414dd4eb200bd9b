"""Training jobs under the real Slurm that resume from checkpoints: the partition, the submission, the waits and
the check against an uninterrupted run (tests/system/test_slurm_resume.py, tests/runtime/test_signals.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, distgcn_in_process, run_distgcn
from slurm_cluster import SlurmCluster

from distgcn.io.checkpoint import NAME, list_checkpoints
from distgcn.runtime.faults import SLOW_ENV

EPOCHS = 80
EPOCH_SECONDS = 0.05
"""Each epoch of the jobs under test sleeps this long (faults.SLOW_ENV): the small graph alone runs 80
epochs in well under a second, faster than the test can cancel it mid-run; asleep, the 70 epochs after the
checkpoint the tests wait for take 3.5 s, against the few tenths of a second the test takes to interrupt."""
TRAIN_ARGS = f"--epochs {EPOCHS} --dtype float64 --hidden 16 --seed 3 --checkpoint-every 5 --resume --quiet"


@pytest.fixture(scope="module")
def resume_partition(tmp_path_factory) -> tuple[Path, Path]:
    """A 2-part partition and the weights of an uninterrupted run on it."""
    base = tmp_path_factory.mktemp("slurm-resume")
    part = base / "part"
    made = distgcn_in_process(["partition", "synthetic:sbm,n=2000,classes=4,features=32,seed=2", "--parts", "2",
                               "--model", "random", "--out", str(part), "--quiet"])
    assert made.returncode == 0, made.stderr
    reference = base / "reference.npz"
    full = run_distgcn(["train", str(part), *TRAIN_ARGS.replace(" --checkpoint-every 5 --resume", "").split(),
                        "--save-weights", str(reference)], ranks=2, timeout=600)
    assert full.returncode == 0, full.stderr
    return part, reference


def submit(cluster: SlurmCluster, work: Path, part: Path, *options: str) -> int:
    args = f"{TRAIN_ARGS} --checkpoint-dir {work / 'ckpt'} --save-weights {work / 'w.npz'}"
    return cluster.sbatch(ROOT / "jobs" / "train-cpu.sbatch", "--ntasks=2", "--ntasks-per-node=2", "--time=00:10:00",
                          *options, export={"DISTGCN_DIR": str(part), "DISTGCN_METRICS": str(work / "m.jsonl"),
                                            "DISTGCN_TRAIN_ARGS": args, SLOW_ENV: str(EPOCH_SECONDS)},
                          cwd=work)


def wait_for_checkpoint(cluster: SlurmCluster, job: int, ckpt: Path, epoch: int, timeout: float = 300) -> None:
    """Until the job has written a checkpoint of ``epoch`` or later (older ones are pruned as it goes)."""
    deadline = time.monotonic() + timeout
    while not any(int(NAME.match(path.name).group(1)) >= epoch for path in list_checkpoints(ckpt)):
        state = cluster.jobs(job)[0]["JobState"]
        assert state in ("PENDING", "RUNNING", "CONFIGURING"), f"job {job} is {state} before epoch {epoch}"
        assert time.monotonic() < deadline, f"no checkpoint of epoch {epoch} after {timeout} s"
        time.sleep(0.1)


def assert_finished_like_uninterrupted(work: Path, reference: Path) -> None:
    epochs = [json.loads(line)["epoch"] for line in (work / "m.jsonl").read_text().splitlines()]
    assert epochs == list(range(1, EPOCHS + 1))  # no epoch lost, none twice
    with np.load(work / "w.npz") as got, np.load(reference) as want:
        assert got.files == want.files
        for key in want.files:
            if key == "model":  # the record: equal but for where each run read its graph from
                record, wanted = (json.loads(str(npz[key])) for npz in (got, want))
                assert {**record, "graph": None} == {**wanted, "graph": None}
            else:
                assert np.array_equal(got[key], want[key]), key


def release_requeued(slurm_cluster, job: int, timeout: float) -> None:
    """Wait until a requeued job is PENDING and slurmd is done with its first run, then start it now."""
    deadline = time.monotonic() + timeout
    while slurm_cluster.jobs(job)[0]["JobState"] != "PENDING":  # Slurm holds a requeued job back a while
        assert time.monotonic() < deadline, "the requeued job never went back to PENDING"
        time.sleep(0.2)
    # Releasing it before slurmd has finished with the first run makes Slurm fail the relaunch ("already
    # killed, do not launch batch job"), a race of Slurm's own; so wait for slurmd to be done with it.
    slurmd_log = slurm_cluster.root / "log" / "slurmd.log"
    while f"[{job}.batch] done with job" not in slurmd_log.read_text():
        assert time.monotonic() < deadline, "slurmd never finished the first run"
        time.sleep(0.2)
    # slurmd also refuses a relaunch whose credential dates from the same second as the revocation of the
    # first run's ("Job credential revoked": seen once in CI), so let that second pass.
    time.sleep(2)
    slurm_cluster.command("scontrol", "update", f"JobId={job}", "StartTime=now")
