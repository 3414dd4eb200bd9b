"""Shared test helpers: where the datasets are, and running the CLI under a real mpiexec or on in-process ranks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from slurm_cluster import slurm_cluster  # noqa: F401 - the session fixture, for every test module

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT.parent / "shared" / "datasets"


def dataset(*parts: str) -> Path:
    """Path of a shared dataset, or skip the test with the reason."""
    path = DATASETS.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not present: ../shared/datasets exists in CI, not in a fresh clone")
    return path


def mpiexec() -> str:
    exe = shutil.which("mpiexec", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    if exe is None:
        pytest.fail("mpiexec not found: install an MPI (pip install 'distgcn[mpich]')")
    return exe


def random_edge_file(path: Path, n: int, m: int, seed: int) -> str:
    """A seeded random directed edge list (m draws, self loops dropped), written to ``path``."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    path.write_text("\n".join(f"{s}\t{d}" for s, d in zip(src, dst) if s != d) + "\n")
    return str(path)


def run_mpi_script(script: str, ranks: int, out: Path, *args: str, timeout: float = 120) -> dict:
    """Run tests/mpi_scripts/SCRIPT under mpiexec; it writes its JSON result to ``out``, returned here."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    proc = subprocess.run([mpiexec(), "-n", str(ranks), sys.executable, str(ROOT / "tests" / "mpi_scripts" / script),
                           str(out), *args], capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


def run_distgcn(args: list[str], ranks: int = 1, timeout: float = 300, env: dict | None = None,
                cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``distgcn ARGS`` on ``ranks`` MPI ranks (a real mpiexec for ranks > 1)."""
    cmd = [sys.executable, "-m", "distgcn", *args]
    if ranks > 1:
        cmd = [mpiexec(), "-n", str(ranks), *cmd]
    full_env = dict(os.environ)
    full_env.setdefault("OMP_NUM_THREADS", "1")
    full_env["PYTHONPATH"] = str(ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
    if env:
        full_env.update(env)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=cwd)


def run_distgcn_in_process(args: list[str], ranks: int) -> list[int]:
    """``distgcn ARGS`` on ``ranks`` in-process ranks (threads); each rank's exit status, in rank order.

    Each rank runs the command line's own pipeline (``distgcn.cli.main``); only
    the transport that ``train`` starts is swapped for the rank's in-process
    one. A failure on any rank is raised here once every rank has ended.
    ``train`` sets torch's thread count and the OpenMP variables for the whole
    process (the same value on every rank): they are restored afterwards.
    """
    import torch

    from distgcn import train_command
    from distgcn.cli import main
    from distgcn.transport.inprocess import InProcessTransport, run_ranks

    local = threading.local()

    def rank_main(transport: InProcessTransport) -> int:
        local.transport = transport
        return main(args)

    threads = torch.get_num_threads()
    saved = {var: os.environ.get(var) for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    try:
        with mock.patch.object(train_command, "make_transport", lambda backend: local.transport):
            return run_ranks(ranks, rank_main)
    finally:
        torch.set_num_threads(threads)
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
