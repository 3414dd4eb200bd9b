"""Nothing left behind (docs/reliability.md, Signals and Outputs): every process removes the temporaries and
shared-memory files it made on any exit it can catch, and a rerun removes what a killed one left.

Real processes and real signals where a launcher is involved: a writer SIGKILLed mid-write (held there by
DISTGCN_SLOW_WRITE) leaves a temporary that the next run into the directory removes; a stop signal to a job of
two ranks removes the file its rank 0 is writing; ``partition`` under mpiexec, killed or interrupted, leaves
no MPICH file in /dev/shm. Temporaries of a live process, of another host or of a user (a similar name, a
link, another owner) are never removed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import distgcn_in_process
from metrics_files import metrics_file
from processes import alive, descendants, rank_pid, unused_pid

from distgcn.errors import InputError
from distgcn.io import safe_io
from distgcn.io.leftovers import abandoned_by, host_tag, owned_name, scratch_directory
from distgcn.io.safe_io import WEIGHTS, write_npz
from distgcn.runtime import signals
from distgcn.runtime.faults import SLOW_WRITE_ENV
from distgcn.shard.directory import remove_abandoned_staging, staging_directory
from jobs import assert_interrupted_once, kill_group, shared_memory_names, start_job

GRAPH = "synthetic:sbm,n=600,classes=4,features=16,seed=8"
TRAIN = ["train", "--graph", GRAPH, "--partition", "contiguous", "--quiet"]
BIG = "synthetic:rmat,scale=18,edge_factor=8,features=16,classes=4,seed=1"
"""A graph that rank 0 of a 2-rank ``partition`` takes seconds to load and cut: time to interrupt it."""


def _temporaries(directory: Path) -> list[Path]:
    return sorted(path for path in directory.iterdir() if safe_io.TEMPORARY_FILE.fullmatch(path.name))


def _wait_for(found, job, what: str, timeout: float = 120) -> None:
    """Poll until ``found()`` is true while ``job`` runs."""
    deadline = time.monotonic() + timeout
    while not found():
        assert job.poll() is None, job.communicate()
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.01)


def test_a_temporary_names_its_host_and_process():
    name = owned_name(".w.npz.", ".tmp")
    assert re.fullmatch(rf"\.w\.npz\.distgcn-{host_tag()}-{os.getpid()}-[0-9a-f]{{8}}\.tmp", name), name
    assert safe_io.TEMPORARY_FILE.fullmatch(name)


def test_only_abandoned_temporaries_of_this_host_are_removed(tmp_path, capsys):
    """A write removes the temporaries of the directory whose maker on this host has ended, and nothing else:
    not a live process's, not another host's, not a link or a directory of that name, not a user's file of a
    similar name, not another user's."""
    host, dead = host_tag(), unused_pid()
    other_host = format((int(host, 16) + 1) % 16**8, "08x")
    abandoned = tmp_path / f".w.npz.distgcn-{host}-{dead}-0123abcd.tmp"
    abandoned.write_bytes(b"half a weights file")
    other_target = tmp_path / f".m.jsonl.distgcn-{host}-{dead}-89abcdef.tmp"  # another output's, same directory
    other_target.write_bytes(b"{")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    kept = {
        "live": tmp_path / f".w.npz.distgcn-{host}-{os.getppid()}-0123abcd.tmp",
        "elsewhere": tmp_path / f".w.npz.distgcn-{other_host}-{dead}-0123abcd.tmp",
        "similar": tmp_path / f".w.npz.distgcn-{host}-{dead}-notes.tmp",
        "longer": tmp_path / f".w.npz.distgcn-{host}-{dead}-0123abcd.tmp.bak",
        "no dot": tmp_path / f"w.npz.distgcn-{host}-{dead}-0123abcd.tmp",
    }
    for path in kept.values():
        path.write_text("mine")
    link = tmp_path / f".x.distgcn-{host}-{dead}-0123abcd.tmp"
    link.symlink_to(victim)
    directory = tmp_path / f".y.distgcn-{host}-{dead}-0123abcd.tmp"
    directory.mkdir()
    others = None
    if os.getuid() == 0:  # a file of another user's, on a name of ours: theirs to remove
        others = tmp_path / f".z.distgcn-{host}-{dead}-0123abcd.tmp"
        others.write_text("theirs")
        os.chown(others, 65534, 65534)

    write_npz(tmp_path / "w.npz", WEIGHTS, np.ones(3))
    err = capsys.readouterr().err
    assert not abandoned.exists() and not other_target.exists()
    assert f"removed {abandoned}: a temporary file left by an interrupted run (process {dead} on this host " \
           "has ended)" in err, err
    assert err.count("distgcn: removed ") == 2, err
    assert all(path.read_text() == "mine" for path in kept.values())
    assert link.is_symlink() and victim.read_text() == "precious" and directory.is_dir()
    assert others is None or others.read_text() == "theirs"
    assert _temporaries(tmp_path) == sorted([kept["live"], kept["elsewhere"], link, directory]
                                            + ([others] if others else []))


def test_a_temporary_of_an_ended_process_not_yet_reaped_is_abandoned(tmp_path):
    """A killed rank can stay a zombie a while (its parent, the launcher, is ending too): it has ended."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30
        while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child did not end"
            time.sleep(0.01)
        left = tmp_path / owned_name(".w.npz.", ".tmp").replace(f"-{os.getpid()}-", f"-{child.pid}-")
        left.write_bytes(b"half")
        assert abandoned_by(left, safe_io.TEMPORARY_FILE) == child.pid
    finally:
        child.wait()


def test_a_checkpoint_temporary_left_by_sigkill_is_removed_by_the_next_run(tmp_path):
    """SIGKILL while rank 0 writes a checkpoint (held mid-write): the temporary stays, as SIGKILL runs nothing;
    the next run into the directory removes it and says so, and the checkpoints are those of that run."""
    ckpt = tmp_path / "ckpt"
    args = [*TRAIN, "--epochs", "2", "--checkpoint-dir", str(ckpt), "--checkpoint-every", "1"]
    job = start_job(args, ranks=1, **{SLOW_WRITE_ENV: "120"})
    try:
        _wait_for(lambda: ckpt.is_dir() and _temporaries(ckpt), job, "checkpoint temporary")
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=30)
    finally:
        kill_group(job)
    (left,) = _temporaries(ckpt)
    assert left.name.startswith(".checkpoint-00000001.pt.distgcn-")
    users = ckpt / ".checkpoint-00000001.pt.0123abcd.tmp"  # a name of the same shape, not distgcn's scheme
    users.write_text("mine")

    again = distgcn_in_process([*args, "--resume"])
    assert again.returncode == 0, again.stderr
    assert f"removed {left}: a temporary file left by an interrupted run (process {job.pid} " in again.stderr
    assert not left.exists() and users.read_text() == "mine"
    assert sorted(p.name for p in ckpt.iterdir() if not p.name.startswith(".")) == \
        ["checkpoint-00000001.pt", "checkpoint-00000002.pt"]


@pytest.mark.parametrize(("outputs", "ranks", "signum", "target"), [
    (("--save-weights", "w.npz"), 2, signal.SIGINT, "terminal"),  # Ctrl-C: mpiexec forwards it to every rank
    (("--metrics", "m.jsonl"), 2, signal.SIGTERM, 0),
    (("--save-weights", "w.npz"), 2, signal.SIGTERM, 1),  # rank 0, which writes, does not get the signal
    (("--checkpoint-dir", "ckpt", "--checkpoint-every", "1"), 1, signal.SIGINT, 0),
], ids=["weights-ctrl-c", "metrics-sigterm-rank0", "weights-sigterm-rank1", "checkpoint-one-process"])
def test_a_stop_signal_mid_write_leaves_no_temporary(tmp_path, outputs, ranks, signum, target):
    """A stop signal while rank 0 writes an output (held mid-write): the job ends as always, one line and
    128 + N, and the temporary is gone. A job's abort unwinds nothing, so rank 0 removes it first; when only
    another rank gets the signal, that rank passes it on to rank 0 and waits for it before the abort."""
    flag, name, *more = outputs
    out = tmp_path / "out"
    out.mkdir()
    shown = out / name if flag == "--checkpoint-dir" else out
    job = start_job([*TRAIN, "--epochs", "2", flag, str(out / name), *more], ranks=ranks, **{SLOW_WRITE_ENV: "120"})
    try:
        _wait_for(lambda: shown.is_dir() and _temporaries(shown), job, "temporary")
        processes = descendants(job.pid) | {job.pid}
        shm = shared_memory_names(processes)
        if target == "terminal":  # the launcher's process group (hydra starts each rank in a session of its own)
            os.killpg(job.pid, signum)
        else:
            os.kill(job.pid if ranks == 1 else rank_pid(job.pid, target), signum)
        _, stderr = job.communicate(timeout=60)
    finally:
        kill_group(job)
    assert job.returncode == 128 + signum, stderr
    assert_interrupted_once(stderr, signal.Signals(signum).name)
    assert _temporaries(shown) == []
    assert shm or ranks == 1, "the job mapped no MPICH shared-memory file: nothing checked"
    assert not [name for name in shm if Path(name).exists()], shm


def _partition_job(out: Path) -> object:
    return start_job(["partition", BIG, "--parts", "2", "--model", "random", "--out", str(out), "--quiet"], ranks=2)


def _staging(out: Path) -> list[Path]:
    return [path for path in out.parent.iterdir() if path.name.startswith(f".{out.name}.")]


@pytest.mark.parametrize("how", ["sigkill-rank1", "ctrl-c"])
def test_partition_under_mpiexec_leaves_nothing_in_dev_shm(tmp_path, how):
    """mpiexec -n 2 distgcn partition, once both ranks are past MPI's start (rank 0 has made its staging
    directory): SIGKILL of rank 1, or Ctrl-C (SIGINT to the launcher's process group). MPICH's files in
    /dev/shm, which the ranks map, no longer have a name; Ctrl-C also removes the staging directory."""
    out = tmp_path / "part"
    job = _partition_job(out)
    try:
        _wait_for(lambda: [p for p in _staging(out) if (p / ".distgcn-staging").is_file()], job, "staging directory")
        processes = descendants(job.pid)
        shm = shared_memory_names(processes)
        if how == "ctrl-c":
            os.killpg(job.pid, signal.SIGINT)
        else:
            os.kill(rank_pid(job.pid, 1), signal.SIGKILL)
        _, stderr = job.communicate(timeout=60)
    finally:
        kill_group(job)
    gone_by = time.monotonic() + 5
    while [p for p in processes if alive(p)] and time.monotonic() < gone_by:
        time.sleep(0.05)
    assert not [p for p in processes if alive(p)], "processes left behind"
    assert shm, "the job mapped no MPICH shared-memory file: nothing checked"
    assert not [name for name in shm if Path(name).exists()], f"left in /dev/shm: {shm}"
    if how == "ctrl-c":
        assert job.returncode == 130, stderr
        assert_interrupted_once(stderr, "SIGINT")
        assert list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())
    else:
        assert job.returncode != 0


def test_a_rerun_of_report_removes_the_earlier_reports_figures_it_does_not_draw(tmp_path, capsys):
    """Two runs, then one: the second run's time-split figure goes, and so does a figure of a report older
    than the PNG marker (known by the old summary's link); a user's PNG and notes stay."""
    pytest.importorskip("matplotlib")

    from distgcn.cli.main import main

    first, second = metrics_file(tmp_path / "first.jsonl"), metrics_file(tmp_path / "second.jsonl")
    out = tmp_path / "report"
    assert main(["report", str(first), str(second), "--out", str(out)]) == 0
    drawn = sorted(p.name for p in out.glob("*.png"))
    assert "time-second.png" in drawn, drawn
    legacy = out / "legacy.png"
    legacy.write_bytes(safe_io.PNG_SIGNATURE + b"a figure drawn before the marker")
    with (out / "summary.md").open("a") as summary:
        summary.write("\n![legacy](legacy.png)\n")
    (out / "mine.png").write_bytes(safe_io.PNG_SIGNATURE + b"the user's own picture")
    (out / "notes.txt").write_text("mine")
    capsys.readouterr()

    assert main(["report", str(first), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    remaining = sorted(p.name for p in out.iterdir())
    assert "time-second.png" not in remaining and "legacy.png" not in remaining, remaining
    assert {"mine.png", "notes.txt", "time-first.png", "curves.png", "summary.md"} <= set(remaining), remaining
    assert (out / "mine.png").read_bytes().endswith(b"the user's own picture")
    assert f"removed {out / 'time-second.png'}: a figure of the earlier report" in err, err


def test_scratch_directories_of_ended_processes_are_removed(tmp_path, monkeypatch, capsys):
    """TMPDIR scratch (the spilled graph, the hypergraph file, KaMinPar's input): removed when the block ends,
    and the next scratch directory removes those of ended processes of this host, nothing else."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    host, dead = host_tag(), unused_pid()
    abandoned = tmp_path / f"distgcn-{host}-{dead}-0123abcd.spill"
    abandoned.mkdir()
    (abandoned / "array.npy").write_bytes(b"GBs of a graph")
    kept = [tmp_path / f"distgcn-{host}-{os.getppid()}-0123abcd.spill", tmp_path / "distgcn-notes.spill",
            tmp_path / f"distgcn-{host}-{dead}-0123abcd.hmetis"]  # another kind: its own writer's to remove
    for path in kept:
        path.mkdir()
    with scratch_directory("spill") as scratch:
        assert scratch.is_dir() and scratch.parent == tmp_path
        assert re.fullmatch(rf"distgcn-{host}-{os.getpid()}-[0-9a-f]{{8}}\.spill", scratch.name)
        (scratch / "array.npy").write_bytes(b"x")
    assert not scratch.exists() and not abandoned.exists()
    assert all(path.is_dir() for path in kept)
    assert f"removed {abandoned}: a spill scratch directory left by an interrupted run" in capsys.readouterr().err


def test_an_old_partition_left_aside_is_removed_once_the_new_one_is_in_place(tmp_path, capsys):
    """A swap killed after renaming the old partition aside: once the new one is at --out, the next write of
    --out removes the old one; without a partition at --out it is the only copy, and stays."""
    host, dead = host_tag(), unused_pid()
    out = tmp_path / "part"
    aside = tmp_path / f".part.distgcn-{host}-{dead}-0123abcd.old"
    aside.mkdir()
    (aside / "shard-00000.npz").write_bytes(b"an old shard")
    users = tmp_path / f".part.distgcn-{host}-{dead}-4567abcd.old"  # holds a file partition never writes
    users.mkdir()
    (users / "notes.txt").write_text("mine")
    remove_abandoned_staging(out)
    assert aside.is_dir()
    out.mkdir()
    (out / "meta.json").write_text(json.dumps({}))
    remove_abandoned_staging(out)
    assert not aside.exists() and (users / "notes.txt").read_text() == "mine"
    assert f"removed {aside}: an old partition directory left by an interrupted run" in capsys.readouterr().err


@pytest.fixture
def full_disk(tmp_path) -> Iterator[Path]:
    """A filled 64 KB tmpfs: a directory can still be made in it, but no file's data written."""
    if os.getuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "full"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        with open(mount / "filler", "wb", buffering=0) as filler:
            try:
                while filler.write(b"\0" * 4096):
                    pass
            except OSError:
                pass
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_staging_directory_whose_owner_file_cannot_be_written_is_removed(full_disk):
    """The disk fills between making the staging directory and writing its owner file: the failure removes
    the directory all the same (its maker knows it is its own)."""
    with pytest.raises(InputError, match="no space left on the device"):  # an environment error names --out
        with staging_directory(full_disk / "part"):
            pytest.fail("the block ran: writing the owner file should have failed")
    assert [path.name for path in full_disk.iterdir()] == ["filler"]


def test_nothing_stays_registered_for_a_stop_once_a_command_has_ended(tmp_path):
    """Every temporary's stop-signal cleanup is withdrawn once it is renamed into place or removed: a process
    that runs commands one after another (a notebook, these tests) holds none between them."""
    part = tmp_path / "part"
    done = distgcn_in_process(["partition", GRAPH, "--parts", "2", "--model", "random", "--out", str(part),
                               "--quiet"])
    assert done.returncode == 0, done.stderr
    done = distgcn_in_process(["partition", GRAPH, "--parts", "2", "--model", "random", "--out", str(part),
                               "--quiet", "--force"])  # the old one is renamed aside, then deleted
    assert done.returncode == 0, done.stderr
    done = distgcn_in_process(["train", str(part), "--epochs", "2", "--quiet", "--metrics", str(tmp_path / "m.jsonl"),
                               "--save-weights", str(tmp_path / "w.npz"), "--checkpoint-dir", str(tmp_path / "ckpt"),
                               "--checkpoint-every", "1"], ranks=2)
    assert done.returncode == 0, done.stderr
    assert signals._cleanups.pending == {} and signals._cleanups.marker is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "m.jsonl", "part", "w.npz"]
