"""Every distgcn command shown in README.md and docs/ runs, on small data (how: tests/helpers/doc_commands.py).

The commands of one code block run in order in one directory, since later ones
use what earlier ones wrote; a test that needs its block's earlier commands runs
them first if no test has yet. A command shown with a launcher (mpiexec, torchrun)
or a --backend, and ``jobs submit|scaling``, start processes as shown; the others,
and what a block assumes the reader already has, run in this process
(conftest.distgcn_in_process). A command must exit 0, except where this machine
lacks what it needs: NCCL without a GPU must refuse with its documented error,
``jobs submit|scaling`` run against the test suite's real Slurm (and skip with its
reason where there is none), and ``srun`` with GPUs is not run here. A command that
reads what a skipped one would have written (``jobs collect scaling`` after
``jobs scaling --results scaling``) skips too, naming the command and its reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from conftest import ROOT, distgcn_in_process, mpiexec
from doc_commands import SMALL_GRAPH, Shown, shown_commands, shrink

SHOWN = list(shown_commands())
_WRITES = ("--out", "--results", "--metrics", "--checkpoint-dir")
"""The options whose value is a path a command writes."""


@dataclass
class _Block:
    """One code block's directory, the positions already run, and what its skipped commands would have written."""

    workdir: Path
    done: list[int] = field(default_factory=list)
    unwritten: dict[str, str] = field(default_factory=dict)
    """A path (or a template's prefix, up to ``{``) -> why the command that writes it was skipped."""

    def skipped(self, args: list[str], reason: str) -> None:
        for flag, value in zip(args, args[1:]):
            if flag in _WRITES:
                self.unwritten[value.split("{")[0] if "{" in value else value.rstrip("/") + "/"] = \
                    f"`distgcn {' '.join(args)}` was skipped ({reason})"

    def missing_input(self, args: list[str]) -> str | None:
        """Why a command cannot run: it reads a path that a skipped command of the block would have written."""
        for arg in args[1:]:
            for prefix, why in self.unwritten.items():
                if (arg.rstrip("/") + "/").startswith(prefix):
                    return f"reads {arg}, which {why}"
        return None


_BLOCKS: dict[tuple[str, int], _Block] = {}


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", **(extra or {}))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None,
         timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env or _env(), capture_output=True, text=True, timeout=timeout)


def _distgcn(args: list[str], cwd: Path, ranks: int = 1) -> None:
    done = distgcn_in_process(args, ranks=ranks, cwd=cwd)
    assert done.returncode == 0, f"setup: distgcn {' '.join(args)}\n{done.stderr}"


def _provide(args: list[str], workdir: Path) -> None:
    """Make what the command reads and the reader is assumed to have (a partition directory, metrics files)."""
    if args[0] in ("train", "stats") and not args[1].startswith("-") and not (workdir / args[1]).exists():
        model = "hypergraph" if "hp" in args[1] else "random"
        _distgcn(["partition", SMALL_GRAPH, "--parts", "2", "--model", model, "--out", args[1], "--quiet"], workdir)
    if args[0] == "report":
        for source in args[1:args.index("--out")]:
            if "*" in source and not list(workdir.glob(source)):
                for ranks in (1, 2):
                    metrics = source.replace("*", str(ranks), 1)
                    (workdir / metrics).parent.mkdir(parents=True, exist_ok=True)
                    _distgcn(["train", "--graph", SMALL_GRAPH, "--epochs", "3", "--metrics", metrics, "--quiet"],
                             workdir, ranks)
            elif "*" not in source and not (workdir / source).exists():
                _provide(["stats", source], workdir)


def _expand_globs(args: list[str], workdir: Path) -> list[str]:
    """What the shell makes of ``p*/metrics.jsonl``: the matches, sorted, or the word as it is."""
    out = []
    for arg in args:
        matches = sorted(str(p.relative_to(workdir)) for p in workdir.glob(arg)) if "*" in arg else []
        out += matches or [arg]
    return out


def _ranks(shown_count: str, args: list[str], workdir: Path) -> str:
    """A partition directory's parts when training one, else the launcher's count capped at 2."""
    meta = workdir / args[1] / "meta.json" if args[0] == "train" else None
    if meta is not None and meta.is_file():
        return str(json.loads(meta.read_text())["parts"])
    return str(min(int(shown_count), 2)) if shown_count.isdigit() else "2"


def _argv(shown: Shown, args: list[str], workdir: Path) -> list[str]:
    if not shown.launcher:
        return [sys.executable, "-m", "distgcn", *args]
    launcher = list(shown.launcher)
    flag = "-n" if launcher[0] == "mpiexec" else "--nproc-per-node"
    count = launcher.index(flag) + 1
    launcher[count] = _ranks(launcher[count], args, workdir)
    if launcher[0] == "mpiexec":
        return [mpiexec(), *launcher[1:], sys.executable, "-m", "distgcn", *args]
    torchrun = shutil.which("torchrun", path=_env()["PATH"])
    assert torchrun, "torchrun not found beside this Python"
    return [torchrun, *launcher[1:], "distgcn", *args]  # "-m distgcn", or the entry point with --no-python


def _wait_for_jobs(cluster, stdout: str, workdir: Path) -> None:
    ids = [int(i) for i in re.findall(r"(?:job|array) (\d+)", stdout)]
    assert ids, f"no job ids in: {stdout}"
    for job in ids:
        for record in cluster.wait(job, timeout=420):
            if (record["JobState"], record["ExitCode"]) != ("COMPLETED", "0:0"):
                logs = "\n".join(f"--- {p.name}:\n{p.read_text()}" for p in sorted(workdir.glob("*.out")))
                raise AssertionError(f"job {record['JobId']} ended {record['JobState']} {record['ExitCode']}\n{logs}")


def _run_shown(shown: Shown, block: _Block, request: pytest.FixtureRequest) -> None:
    workdir = block.workdir
    args = shrink(list(shown.args), workdir)
    missing = block.missing_input(args)
    if missing:
        pytest.skip(missing)
    try:
        _run_shrunk(shown, args, workdir, request)
    except pytest.skip.Exception as skipped:
        block.skipped(args, str(skipped))
        raise


def _run_shrunk(shown: Shown, args: list[str], workdir: Path, request: pytest.FixtureRequest) -> None:
    if shown.launcher[:1] == ["srun"]:
        pytest.skip("srun with --gpus-per-node needs GPUs that Slurm allocates; the test cluster has none")
    _provide(args, workdir)
    args = _expand_globs(args, workdir)
    cluster_jobs = args[:2] in (["jobs", "submit"], ["jobs", "scaling"])
    if not shown.launcher and "--backend" not in args and not cluster_jobs:
        done = distgcn_in_process(args, cwd=workdir)
        assert done.returncode == 0, f"distgcn {' '.join(args)}\n{done.stdout}\n{done.stderr}"
        return
    argv = _argv(shown, args, workdir)
    if cluster_jobs:
        cluster = request.getfixturevalue("slurm_cluster")
        done = _run(argv, workdir, env=dict(cluster.env, OMP_NUM_THREADS="1"))
        assert done.returncode == 0, done.stderr
        _wait_for_jobs(cluster, done.stdout, workdir)
        return
    done = _run(argv, workdir)
    if "nccl" in args and not torch.cuda.is_available():
        assert done.returncode != 0 and "no CUDA device is visible" in done.stderr, done.stderr
        return
    assert done.returncode == 0, f"{' '.join(argv)}\n{done.stdout}\n{done.stderr}"


@pytest.mark.parametrize("shown", SHOWN, ids=[s.id for s in SHOWN])
def test_documented_command_runs(shown: Shown, tmp_path_factory: pytest.TempPathFactory,
                                 request: pytest.FixtureRequest):
    key = (shown.doc, shown.block)
    if key not in _BLOCKS:
        _BLOCKS[key] = _Block(tmp_path_factory.mktemp(f"{shown.doc}-{shown.block}"))
    block = _BLOCKS[key]
    for earlier in SHOWN:
        same_block = (earlier.doc, earlier.block) == key
        if same_block and earlier.position < shown.position and earlier.position not in block.done:
            try:
                _run_shown(earlier, block, request)
            except pytest.skip.Exception:
                pass  # the block remembers what it would have written; a command reading that skips too
            block.done.append(earlier.position)
    _run_shown(shown, block, request)
    block.done.append(shown.position)
