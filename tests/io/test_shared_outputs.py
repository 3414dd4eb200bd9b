"""Outputs that two runs, or two options, share (distgcn/io/safe_io.py: claimed, refuse_inside_partition;
distgcn/io/metrics_log.py: continued_records).

A second process that wants an output a running distgcn process writes is refused at its start, naming the
holder; two options naming one path are refused before any work; no output goes inside a partition
directory; a resume refuses a metrics file of another run or with missing epochs unless told to start anew.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, distgcn_in_process

from distgcn.io.safe_io import claim_path

GRAPH = "synthetic:sbm,n=120,classes=3,features=6"
TRAIN = ["--graph", GRAPH, "--epochs", "3", "--quiet"]


def env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("distgcn: error:")]


def epochs(metrics: Path) -> list[int]:
    return [json.loads(line)["epoch"] for line in metrics.read_text().splitlines()]


def start_holder(*outputs: tuple[Path, str]) -> subprocess.Popen:
    """A real second process that claims ``outputs`` and waits, until it is killed."""
    code = ("import sys; from pathlib import Path; from distgcn.io.safe_io import claimed\n"
            f"with claimed([(Path(p), w) for p, w in {[(str(p), w) for p, w in outputs]!r}]):\n"
            "    print('held', flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=env())
    assert holder.stdout.readline().strip() == "held"
    return holder


def stop(holder: subprocess.Popen) -> None:
    holder.stdin.close()
    holder.wait(timeout=30)


def test_two_train_runs_on_one_metrics_file(tmp_path):
    """The audit's case: both exited 0 and the first run's epochs were gone. Now the second is refused at
    its start, naming the first, and the first run's file keeps every epoch."""
    metrics = tmp_path / "m.jsonl"
    command = [sys.executable, "-m", "distgcn", "train", *TRAIN, "--epochs", "30", "--metrics", str(metrics)]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**env(), "DISTGCN_SLOW_EPOCH": "0.2"})
    try:
        deadline = time.monotonic() + 120
        while not (metrics.exists() and metrics.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)  # the first run holds its claim from its start; wait until it is training
        second = subprocess.run([*command[:-1], str(metrics)], capture_output=True, text=True, env=env(),
                                timeout=120)
    finally:
        out, err = first.communicate(timeout=120)
    assert second.returncode == 2, second.stderr
    [line] = errors(second.stderr)
    assert line.startswith(f"distgcn: error: {metrics}: the metrics file is being written by another distgcn run "
                           f"(process {first.pid} on ")
    assert line.endswith("; wait for it to end or choose another name")
    assert first.returncode == 0, err
    assert epochs(metrics) == list(range(1, 31))
    assert not claim_path(metrics).exists()  # released, and its lock file removed, at the end of the run


@pytest.mark.parametrize("command, output, what", [
    (["train", *TRAIN, "--metrics", "{out}"], "m.jsonl", "metrics file"),
    (["train", *TRAIN, "--save-weights", "{out}"], "w.npz", "weights file"),
    (["partition", GRAPH, "--parts", "2", "--model", "contiguous", "--out", "{out}", "--quiet"], "part",
     "partition directory"),
])
def test_an_output_held_by_another_process_is_refused(tmp_path, command, output, what):
    out = tmp_path / output
    holder = start_holder((out, what))
    try:
        done = distgcn_in_process([arg.replace("{out}", str(out)) for arg in command])
    finally:
        stop(holder)
    assert done.returncode == 2, done.stderr
    assert errors(done.stderr) == [
        f"distgcn: error: {out}: the {what} is being written by another distgcn run (process {holder.pid} on "
        f"{os.uname().nodename}: -c); wait for it to end or choose another name"]
    assert not out.exists()
    again = distgcn_in_process([arg.replace("{out}", str(out)) for arg in command])  # the holder has ended
    assert again.returncode == 0, again.stderr
    assert not claim_path(out).exists()


def test_report_directory_held_by_another_process_is_refused(tmp_path):
    metrics = tmp_path / "m.jsonl"
    assert distgcn_in_process(["train", *TRAIN, "--metrics", str(metrics)]).returncode == 0
    out = tmp_path / "report"
    holder = start_holder((out, "report directory"))
    try:
        done = distgcn_in_process(["report", str(metrics), "--out", str(out)])
    finally:
        stop(holder)
    assert done.returncode == 2
    assert "the report directory is being written by another distgcn run" in done.stderr
    assert not out.exists()


def test_a_killed_holder_leaves_a_lock_file_that_the_next_run_takes_over(tmp_path):
    metrics = tmp_path / "m.jsonl"
    holder = start_holder((metrics, "metrics file"))
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    assert claim_path(metrics).exists()  # SIGKILL runs no cleanup; the kernel released the lock itself
    done = distgcn_in_process(["train", *TRAIN, "--metrics", str(metrics)])
    assert done.returncode == 0, done.stderr
    assert not claim_path(metrics).exists()


@pytest.mark.parametrize("options, message", [
    (["--metrics", "{d}/x", "--save-weights", "{d}/x"],
     "--metrics and --save-weights name one path ({d}/x): give each output its own"),
    (["--metrics", "{d}/x", "--save-weights", "{d}/./x"],
     "--metrics and --save-weights name one path ({d}/x): give each output its own"),
    (["--metrics", "{d}/c", "--checkpoint-dir", "{d}/c"],
     "--metrics and --checkpoint-dir name one path ({d}/c): give each output its own"),
    (["--save-weights", "{d}/c", "--checkpoint-dir", "{d}/c"],
     "--save-weights and --checkpoint-dir name one path ({d}/c): give each output its own"),
])
def test_two_options_naming_one_path_are_refused_before_any_work(tmp_path, options, message):
    """The audit's case trained to the end and then refused to save the weights."""
    done = distgcn_in_process(["train", *TRAIN, "--epochs", "1000", *[o.replace("{d}", str(tmp_path))
                                                                    for o in options]])
    assert done.returncode == 2
    assert errors(done.stderr) == ["distgcn: error: " + message.replace("{d}", str(tmp_path))]
    assert list(tmp_path.iterdir()) == []  # refused before anything was created


@pytest.fixture(scope="module")
def part(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("home") / "part"
    done = distgcn_in_process(["partition", GRAPH, "--parts", "1", "--model", "contiguous", "--out", str(out),
                               "--quiet"])
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.parametrize("command, inside, what", [
    (["train", "{p}", "--epochs", "1", "--quiet", "--checkpoint-dir", "{x}"], "ckpt", "checkpoint directory"),
    (["train", "{p}", "--epochs", "1", "--quiet", "--metrics", "{x}"], "m.jsonl", "metrics file"),
    (["train", "{p}", "--epochs", "1", "--quiet", "--save-weights", "{x}"], "deep/w.npz", "weights file"),
    (["partition", GRAPH, "--parts", "1", "--out", "{x}"], "sub", "partition directory"),
])
def test_no_output_inside_a_partition_directory(part, command, inside, what):
    """A partition directory holding anything else is one that `partition --force` no longer recognises."""
    before = sorted(path.name for path in part.iterdir())
    target = part / inside
    done = distgcn_in_process([arg.replace("{p}", str(part)).replace("{x}", str(target)) for arg in command])
    assert done.returncode == 2, done.stderr
    assert errors(done.stderr) == [f"distgcn: error: {target}: the {what} would lie inside the partition directory "
                                   f"{part}, which distgcn replaces as a whole: choose a place outside it"]
    assert sorted(path.name for path in part.iterdir()) == before
    again = distgcn_in_process(["partition", GRAPH, "--parts", "1", "--model", "contiguous", "--out", str(part),
                                "--quiet", "--force"])
    assert again.returncode == 0, again.stderr


def test_report_inside_a_partition_directory_is_refused(part, tmp_path):
    metrics = tmp_path / "m.jsonl"
    assert distgcn_in_process(["train", str(part), "--epochs", "1", "--quiet", "--metrics", str(metrics)]
                              ).returncode == 0
    done = distgcn_in_process(["report", str(metrics), "--out", str(part / "report")])
    assert done.returncode == 2
    assert "the report directory would lie inside the partition directory" in done.stderr
    assert not (part / "report").exists()


class TestResumeMetrics:
    """A resume continues only a metrics file of its own run that holds every epoch the checkpoint covers."""

    @staticmethod
    def run(tmp_path: Path, metrics: Path, *extra: str, epochs: int = 4) -> object:
        return distgcn_in_process(["train", *TRAIN, "--epochs", str(epochs), "--metrics", str(metrics),
                                   "--checkpoint-dir", str(tmp_path / "ckpt"), "--checkpoint-every", "2", *extra])

    def test_a_metrics_file_of_another_run_is_refused(self, tmp_path):
        assert self.run(tmp_path, tmp_path / "m.jsonl").returncode == 0
        other = tmp_path / "other.jsonl"
        assert distgcn_in_process(["train", *TRAIN, "--dtype", "float64", "--metrics", str(other)]).returncode == 0
        before = other.read_bytes()
        done = self.run(tmp_path, other, "--resume", epochs=6)
        assert done.returncode == 2
        assert errors(done.stderr) == [
            f"distgcn: error: {other}: the metrics file is another run's (dtype 'float64', this run has 'float32'); pass "
            "--restart-metrics to start a new file after the checkpoint, or give another file"]
        assert other.read_bytes() == before

    def test_a_metrics_file_with_missing_epochs_is_refused(self, tmp_path):
        metrics = tmp_path / "m.jsonl"
        assert self.run(tmp_path, metrics).returncode == 0
        lines = metrics.read_text().splitlines(keepends=True)
        metrics.write_text(lines[0] + "".join(lines[2:]))  # epoch 2 lost
        done = self.run(tmp_path, metrics, "--resume", epochs=6)
        assert done.returncode == 2
        assert errors(done.stderr) == [
            f"distgcn: error: {metrics}: the metrics file lacks epochs 2 up to the checkpoint's epoch 4; pass "
            "--restart-metrics to start a new file after the checkpoint, or give another file"]

    def test_restart_metrics_starts_a_file_that_says_where_it_starts(self, tmp_path):
        assert self.run(tmp_path, tmp_path / "m.jsonl").returncode == 0
        other = tmp_path / "other.jsonl"
        assert distgcn_in_process(["train", *TRAIN, "--seed", "5", "--metrics", str(other)]).returncode == 0
        done = self.run(tmp_path, other, "--resume", "--restart-metrics", epochs=6)
        assert done.returncode == 0, done.stderr
        records = [json.loads(line) for line in other.read_text().splitlines()]
        assert [r["epoch"] for r in records] == [5, 6]
        assert records[0]["run"]["resumed_after"] == 4 and records[0]["run"]["seed"] == 0  # this run's header
        # and that file is continued by the next resume: its epochs start after 4
        again = self.run(tmp_path, other, "--resume", epochs=8)
        assert again.returncode == 0, again.stderr
        assert epochs(other) == [5, 6, 7, 8]

    def test_the_own_file_is_continued(self, tmp_path):
        metrics = tmp_path / "m.jsonl"
        assert self.run(tmp_path, metrics).returncode == 0
        assert self.run(tmp_path, metrics, "--resume", epochs=6).returncode == 0
        assert epochs(metrics) == [1, 2, 3, 4, 5, 6]
        records = [json.loads(line) for line in metrics.read_text().splitlines()]
        assert [r.get("resumed_after") for r in records] == [None, None, None, None, 4, None]  # where it resumed

    def test_restart_metrics_needs_resume(self, tmp_path):
        done = distgcn_in_process(["train", *TRAIN, "--restart-metrics"])
        assert done.returncode == 2
        assert errors(done.stderr) == ["distgcn: error: --restart-metrics applies to --resume with --metrics"]


def test_the_longest_name_allowed_is_written_and_one_byte_more_is_refused(tmp_path):
    """check_name_length's allowance covers every hidden name an output is built under (its temporary, its
    lock file): at the limit the run writes, one byte over it is refused before any work."""
    from distgcn.io.safe_io import HIDDEN_NAME_EXTRA, name_max

    longest = name_max(tmp_path) - HIDDEN_NAME_EXTRA
    fits = tmp_path / ("m" * (longest - len(".jsonl")) + ".jsonl")
    done = distgcn_in_process(["train", *TRAIN, "--metrics", str(fits)])
    assert done.returncode == 0, done.stderr
    assert epochs(fits) == [1, 2, 3]
    over = tmp_path / ("m" * (longest + 1 - len(".jsonl")) + ".jsonl")
    refused = distgcn_in_process(["train", *TRAIN, "--metrics", str(over)])
    assert refused.returncode == 2
    assert errors(refused.stderr) == [f"distgcn: error: {over}: file name too long: {longest + 1} bytes, and distgcn "
                                      f"builds it under a hidden name {HIDDEN_NAME_EXTRA} bytes longer; this file "
                                      f"system allows {longest + HIDDEN_NAME_EXTRA}: choose a shorter name (at most "
                                      f"{longest} bytes)"]


@pytest.mark.parametrize("command, what", [
    (["train", "{p}", "--epochs", "1", "--quiet", "--checkpoint-dir", "{p}", "--checkpoint-every", "1"],
     "checkpoint directory"),
    (["report", "{m}", "--out", "{p}"], "report directory"),
])
def test_a_partition_directory_is_no_output_directory(part, tmp_path, command, what):
    """Checkpoints or a report written into the partition directory itself: refused before anything is written
    there (not even a lock file), so `partition --force` still recognises the directory."""
    metrics = tmp_path / "m.jsonl"
    assert distgcn_in_process(["train", str(part), "--epochs", "1", "--quiet", "--metrics", str(metrics)]
                              ).returncode == 0
    before = sorted(path.name for path in part.iterdir())
    done = distgcn_in_process([arg.replace("{p}", str(part)).replace("{m}", str(metrics)) for arg in command])
    assert done.returncode == 2, done.stderr
    assert errors(done.stderr) == [f"distgcn: error: {part}: the {what} is the partition directory {part}, which "
                                   "distgcn replaces as a whole: choose a place outside it"]
    assert sorted(path.name for path in part.iterdir()) == before
