"""A rank killed from outside mid-epoch: the job ends quickly, leaves nothing behind, and resumes exactly.

Also determinism: the same seed, P and partition give identical metrics and
weights; another P changes only the order of floating-point sums. Those runs
are on in-process ranks (conftest.distgcn_in_process): determinism is the
code's, and the real launcher's part, a killed or failing rank, is tested above them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, distgcn_in_process, mpiexec, run_distgcn
from processes import alive, descendants, rank_pid

from distgcn.io.checkpoint import list_checkpoints, read_checkpoint
from distgcn.runtime.faults import FAIL_ENV, SLOW_ENV, InjectedFailure, inject_faults

GRAPH = ["--graph", "synthetic:sbm,n=3000,classes=4,features=32,seed=8"]
COMMON = ["--partition", "contiguous", "--hidden", "16", "--seed", "4", "--dtype", "float64", "--quiet"]
EPOCHS = 60
SLOW_EPOCH_S = "0.05"
"""How long each epoch of the job that is killed sleeps: its epochs after the checkpoint of epoch 20 take at least
2 s, time enough to find and kill a rank before the job ends."""


def _env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def weights(path: Path) -> list[np.ndarray]:
    with np.load(path) as npz:
        return [npz[f"arr_{i}"] for i in range(sum(name.startswith("arr_") for name in npz.files))]


def test_sigkill_of_one_rank_ends_the_job_and_resume_finishes_it(tmp_path):
    # The uninterrupted reference runs on in-process ranks: both transports add the ranks' sums in one fixed
    # order, so it has the bits an mpiexec run has, without three more interpreters to start. The killed job
    # and its resume are real MPI processes.
    reference = distgcn_in_process(["train", *GRAPH, *COMMON, "--epochs", str(EPOCHS),
                                    "--save-weights", str(tmp_path / "full.npz")], ranks=3)
    assert reference.returncode == 0, reference.stderr

    shm_before = set(Path("/dev/shm").glob("mpich_shm_*"))
    ckpt = tmp_path / "ckpt"
    train = ["train", *GRAPH, *COMMON, "--epochs", str(EPOCHS), "--checkpoint-dir", str(ckpt),
             "--checkpoint-every", "5", "--save-weights", str(tmp_path / "resumed.npz")]
    job = subprocess.Popen([mpiexec(), "-n", "3", sys.executable, "-m", "distgcn", *train],
                           env=dict(_env(), **{SLOW_ENV: SLOW_EPOCH_S}),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (ckpt / "checkpoint-00000020.pt").exists():
            assert job.poll() is None, job.communicate()
            assert time.monotonic() < deadline, "no checkpoint after 120 s"
            time.sleep(0.02)
        victim = rank_pid(job.pid, 1)
        assert victim is not None, "rank 1 not found among the launcher's processes"
        ranks = descendants(job.pid)
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        _, stderr = job.communicate(timeout=60)
        elapsed = time.monotonic() - killed_at
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode != 0
    assert elapsed < 30, f"the job took {elapsed:.1f}s to end after rank 1 was killed"
    gone_by = time.monotonic() + 5  # the launcher may exit a moment before the kernel has reaped its ranks
    while [pid for pid in ranks if alive(pid)] and time.monotonic() < gone_by:
        time.sleep(0.05)
    assert not [pid for pid in ranks if alive(pid)], "processes left behind"
    for segment in set(Path("/dev/shm").glob("mpich_shm_*")) - shm_before:
        segment.unlink(missing_ok=True)  # MPICH's shared memory of the killed job: a SIGKILL skips its cleanup
    kept = list_checkpoints(ckpt)
    assert kept and read_checkpoint(kept[-1])["epoch"] < EPOCHS  # intact, and from the middle of the run

    resumed = run_distgcn([*train, "--resume"], ranks=3, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    for got, want in zip(weights(tmp_path / "resumed.npz"), weights(tmp_path / "full.npz"), strict=True):
        assert np.array_equal(got, want)


def test_raising_rank_is_reported_once_and_leaves_no_process(tmp_path):
    """The exception path of issue 8: every rank aborts quickly, one message names the rank, nothing lingers."""
    start = time.monotonic()
    job = subprocess.Popen([mpiexec(), "-n", "3", sys.executable, "-m", "distgcn", "train", *GRAPH, *COMMON,
                            "--epochs", str(EPOCHS)], env=dict(_env(), **{FAIL_ENV: "1:3"}),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while job.poll() is None:  # every process the launcher starts, for as long as it runs
            seen |= descendants(job.pid)
            assert time.monotonic() < deadline, "the job did not end within 120 s of its start"
            time.sleep(0.02)
        _, stderr = job.communicate(timeout=30)
        elapsed = time.monotonic() - start
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode != 0
    assert elapsed < 30, f"job took {elapsed:.1f}s to end after a rank failed"
    assert len(seen) >= 3, f"only {len(seen)} processes seen under the launcher"
    assert stderr.count("unexpected error") == 1, stderr
    assert "distgcn: rank 1: unexpected error: InjectedFailure: injected failure at epoch 3" in stderr
    gone_by = time.monotonic() + 5
    while [pid for pid in seen if alive(pid)] and time.monotonic() < gone_by:
        time.sleep(0.05)
    assert not [pid for pid in seen if alive(pid)], "processes left behind"


def _curve(path: Path) -> list[tuple]:
    keys = ("epoch", "loss", "train_acc", "val_acc", "test_acc", "halo_rows", "halo_bytes", "messages")
    return [tuple(r[k] for k in keys) for r in map(json.loads, path.read_text().splitlines()) if "epoch" in r]


def test_same_seed_partition_and_p_give_identical_runs(tmp_path):
    part = tmp_path / "part"
    made = distgcn_in_process(["partition", GRAPH[1], "--parts", "3", "--model", "hypergraph", "--out",
                               str(part), "--quiet"])
    assert made.returncode == 0, made.stderr
    runs = []
    for i in range(2):
        out = tmp_path / f"run{i}"
        proc = distgcn_in_process(["train", str(part), "--epochs", "15", "--dtype", "float32", "--metrics",
                                   str(out / "m.jsonl"), "--save-weights", str(tmp_path / f"w{i}.npz"), "--quiet"],
                                  ranks=3)
        assert proc.returncode == 0, proc.stderr
        runs.append((_curve(out / "m.jsonl"), weights(tmp_path / f"w{i}.npz")))
    assert runs[0][0] == runs[1][0]
    for a, b in zip(runs[0][1], runs[1][1], strict=True):
        assert np.array_equal(a, b)


def test_changing_p_changes_only_rounding(tmp_path):
    """float32 on 1 and 4 ranks: the same computation summed in another order, so nearly equal."""
    results = []
    for ranks in (1, 4):
        metrics, w = tmp_path / f"m{ranks}.jsonl", tmp_path / f"w{ranks}.npz"
        proc = distgcn_in_process(["train", *GRAPH, "--partition", "random", "--hidden", "16", "--seed", "4",
                                   "--epochs", "20", "--dtype", "float32", "--metrics", str(metrics),
                                   "--save-weights", str(w), "--quiet"], ranks=ranks)
        assert proc.returncode == 0, proc.stderr
        results.append(([r[1] for r in _curve(metrics)], weights(w)))
    (loss1, w1), (loss4, w4) = results
    np.testing.assert_allclose(loss4, loss1, rtol=1e-5)
    for a, b in zip(w4, w1, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * np.abs(b).max())


def test_injected_faults_act_only_where_asked(monkeypatch):
    monkeypatch.setenv(FAIL_ENV, "1:3")
    monkeypatch.setenv(SLOW_ENV, "0.2")
    start = time.monotonic()
    inject_faults(0, 3)  # another rank: only the delay
    inject_faults(1, 2)  # another epoch
    assert time.monotonic() - start >= 0.4
    with pytest.raises(InjectedFailure, match="epoch 3"):
        inject_faults(1, 3)


@pytest.mark.parametrize(("name", "value", "expected"), [(FAIL_ENV, "1", "RANK:EPOCH"), (SLOW_ENV, "soon", "seconds")])
def test_malformed_fault_variables_are_named(monkeypatch, name, value, expected):
    monkeypatch.setenv(name, value)
    with pytest.raises(InjectedFailure, match=f"{name}='{value}': expected .*{expected}"):
        inject_faults(0, 1)
