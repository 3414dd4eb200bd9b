"""Shared test helpers: where the datasets are, running the CLI under a real mpiexec or on in-process ranks,
and the test tiers.

Every test gets exactly one tier marker (pyproject.toml registers them):
``emulated`` if it uses the ``emulated_cluster`` fixture (network namespaces joined by
shaped links: benchmarks/cluster/emulated_cluster.py), else
``cluster`` if it uses the ``slurm_cluster`` fixture (a real Slurm), else
``mpi`` if it starts processes (mpiexec, torchrun, the CLI or any other
program), else ``unit``. Whether a test starts processes is read from its code
(:func:`starts_processes`): the names it and the test helpers and fixtures it
reaches use. A ``unit`` test that starts a process anyway fails, saying so
(:func:`_unit_tests_start_no_process`), so the tiers cannot drift apart from
what the tests do.
"""

from __future__ import annotations

import dis
import importlib
import inspect
import io
import json
import os
import shutil
import subprocess
import sys
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, replace
from pathlib import Path
from unittest import mock

import kernel_warmup
import numpy as np
import pytest
from emulated_cluster_fixture import emulated_cluster  # noqa: F401 - the module fixture, for every test module
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


@pytest.fixture(scope="module")
def directed_graph(tmp_path_factory) -> str:
    """A seeded random directed SNAP edge list (ids not 0..n-1) with random features and labels."""
    rng = np.random.default_rng(11)
    n, m = 150, 700
    ids = np.sort(rng.choice(10_000, size=n, replace=False))
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    path = tmp_path_factory.mktemp("graphs") / "directed.txt"
    lines = ["# directed test graph"] + [f"{ids[s]}\t{ids[d]}" for s, d in zip(src, dst) if s != d]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def cora_accuracies(tmp_path, settings: list[str], run) -> list[float]:
    """The last epoch's test accuracy on Cora for seeds 0-4, each run trained by ``run(args)``."""
    cora = str(dataset("cora_planetoid"))
    accuracies = []
    for seed in range(5):
        metrics = tmp_path / f"m{seed}.jsonl"
        done = run(["train", "--graph", cora, *settings, "--seed", str(seed), "--metrics", str(metrics), "--quiet"])
        assert done.returncode == 0, done.stderr
        accuracies.append(json.loads(metrics.read_text().splitlines()[-1])["test_acc"])
    return accuracies


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


def restore_environ(saved: dict[str, str | None]) -> None:
    """Put environment variables back as ``saved`` recorded them (None: it was unset)."""
    for var, value in saved.items():
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value


def run_distgcn_in_process(args: list[str] | Callable[[int], list[str]], ranks: int) -> list[int]:
    """``distgcn ARGS`` on ``ranks`` in-process ranks (threads); each rank's exit status, in rank order.

    ``args`` may be a function of the rank: an MPMD launch, each rank with its own arguments.

    Each rank runs the command line's own pipeline (``distgcn.cli.main.main``); only
    the transport that ``train`` starts is swapped for the rank's in-process
    one, and the rank and rank count that ``train`` reads from its launcher
    before the transport starts (``launch.this_process``) are the rank's own.
    A failure on any rank is raised here once every rank has ended.
    ``train`` sets torch's thread count and the OpenMP variables for the whole
    process (the same value on every rank): they are restored afterwards.
    """
    import torch

    from distgcn.cli.main import main
    from distgcn.comm import launch
    from distgcn.comm.transport import setup
    from distgcn.comm.transport.inprocess import InProcessTransport, run_ranks

    local = threading.local()

    def rank_main(transport: InProcessTransport) -> int:
        local.transport = transport
        return main(args(transport.rank) if callable(args) else args)

    threads = torch.get_num_threads()
    saved = {var: os.environ.get(var) for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    try:
        def this_rank() -> launch.Launch:
            """The launch the environment describes (none, unless a test sets one), at this rank's place."""
            return replace(launch.detect(os.environ), rank=local.transport.rank, world_size=ranks)

        with mock.patch.object(setup, "make_transport", lambda backend: local.transport), \
                mock.patch.object(launch, "this_process", this_rank):
            return run_ranks(ranks, rank_main)
    finally:
        torch.set_num_threads(threads)
        restore_environ(saved)


@dataclass
class Finished:
    """How an in-process ``distgcn`` command ended, with the fields of the CompletedProcess run_distgcn returns."""

    returncode: int
    stdout: str
    stderr: str


def distgcn_in_process(args: list[str] | Callable[[int], list[str]], ranks: int = 1, cwd: Path | None = None,
                       env: dict | None = None) -> Finished:
    """``distgcn ARGS`` answered as :func:`run_distgcn` answers, but run on in-process ranks (threads).

    For tests of what the command does and prints, not of how a launcher
    starts it: no interpreter imports torch again. The exit status is the one
    every rank returned (ranks that disagree fail the test: a real job would
    be left half-finished), the code an aborted job aborted with, or
    argparse's; stdout and stderr are what the ranks printed. ``cwd`` and
    ``env`` hold for the run only. Python warnings go to pytest, not to this
    stderr: a test that needs nothing else on stderr starts a process (run_distgcn).
    """
    from distgcn.comm.transport.inprocess import RankAborted

    out, err = io.StringIO(), io.StringIO()
    here = Path.cwd()
    saved = {var: os.environ.get(var) for var in env or {}}
    try:
        os.environ.update(env or {})
        os.chdir(cwd or here)
        with redirect_stdout(out), redirect_stderr(err):
            try:
                codes = run_distgcn_in_process(args, ranks)
                assert len(set(codes)) == 1, f"the ranks of distgcn {args} ended apart: {codes}"
                code = codes[0]
            except RankAborted as aborted:
                code = aborted.code
            except SystemExit as exit:  # argparse's usage errors
                code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
    finally:
        os.chdir(here)
        restore_environ(saved)
    return Finished(code, out.getvalue(), err.getvalue())


def devices() -> list:
    """'cpu', and 'cuda' where a CUDA device is visible (skipped elsewhere, saying why): for what GPU ranks compute."""
    import torch

    no_gpu = "no CUDA device visible (torch.cuda.is_available() is False)"
    return ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason=no_gpu))]


# ---- test tiers ----------------------------------------------------------------------------------
TIERS = ("unit", "mpi", "cluster", "emulated")
TESTS = Path(__file__).resolve().parent
PROCESS_MODULES = ("subprocess", "multiprocessing", "torch.multiprocessing", "pexpect")
"""A name bound to one of these modules, or to a function of theirs, starts processes."""
PROCESS_NAMES = frozenset({
    "subprocess", "multiprocessing", "Popen", "torchrun", "mpiexec", "run_distgcn", "run_mpi_script",
    "spawn", "system", "popen", "fork", "execv", "execvp", "execve", "posix_spawn", "pexpect",
})
"""Names (globals, imported names or attributes) whose use means a process is started."""


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    """``code`` and the code of the functions, lambdas and comprehensions nested in it."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _in_tests(obj: object) -> bool:
    """Whether ``obj`` is a function written in this directory (a test, a helper, a fixture)."""
    code = getattr(obj, "__code__", None)
    return code is not None and code.co_filename.startswith(_TESTS_PREFIX)


_TESTS_PREFIX = str(TESTS) + os.sep
HELPER_FOLDERS = (TESTS, TESTS / "helpers", TESTS / "oracles")
"""Where the modules that tests import by their bare name live (pyproject's pytest ``pythonpath``)."""


def starts_processes(fn: Callable) -> bool:
    """Whether ``fn`` (unwrapped) or a test-directory function it names uses a name that starts processes.

    Globals are looked up in the function's module, names imported inside it
    in the module they come from; functions of this directory found so are
    followed, library code is not (a library call that starts a process is
    caught at run time instead, by :func:`_unit_tests_start_no_process`).
    """
    inner = getattr(getattr(fn, "hypothesis", None), "inner_test", None)  # @given wraps the test
    fn = inspect.unwrap(inner if inner is not None else fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return False
    if code not in _STARTS:
        _STARTS[code] = False  # while it is being read (recursion)
        _STARTS[code] = _names_start_processes(code, getattr(fn, "__globals__", {}))
    return _STARTS[code]


_STARTS: dict[types.CodeType, bool] = {}
"""starts_processes's answers, by code object."""


def _names_start_processes(code: types.CodeType, module_globals: dict) -> bool:
    """Whether a name in ``code`` starts processes, or names a test-directory function that does.

    Every name (global, imported or attribute) is checked against
    PROCESS_NAMES; only globals and names imported inside the function are
    resolved (attributes, such as ``distgcn.train``, are not this directory's functions).
    """
    for nested in _code_objects(code):
        if PROCESS_NAMES.intersection(nested.co_names):
            return True
        module_name = ""
        for instruction in dis.get_instructions(nested):
            if instruction.opname == "IMPORT_NAME":
                module_name = instruction.argval
                if module_name not in sys.modules and any((folder / f"{module_name}.py").is_file() for folder in HELPER_FOLDERS):
                    importlib.import_module(module_name)  # a helper of this directory, imported inside a test
                target = sys.modules.get(module_name)
            elif instruction.opname == "IMPORT_FROM":
                target = getattr(sys.modules.get(module_name), instruction.argval, None)
            elif instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                target = module_globals.get(instruction.argval)
            else:
                continue
            if target is None:
                continue
            module = target.__name__ if isinstance(target, types.ModuleType) else getattr(target, "__module__", "")
            if any(module == m or module.startswith(m + ".") for m in PROCESS_MODULES):
                return True
            functions = list(vars(target).values()) if isinstance(target, type) else [target]
            if any(_in_tests(f) and starts_processes(f) for f in functions):
                return True
    return False


def tier(item: pytest.Item) -> str:
    """``emulated``, ``cluster``, ``mpi`` or ``unit``, as the module docstring says."""
    if "emulated_cluster" in getattr(item, "fixturenames", ()):
        return "emulated"
    if "slurm_cluster" in getattr(item, "fixturenames", ()):
        return "cluster"
    function = getattr(item, "function", None)
    if function is not None and starts_processes(function):
        return "mpi"
    fixtures = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    for name, defs in fixtures.items():
        if name != "_unit_tests_start_no_process" and any(_in_tests(d.func) and starts_processes(d.func)
                                                          for d in defs):
            return "mpi"
    return "unit"


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test with its tier (``-m unit``, ``-m mpi``, ``-m cluster``, ``-m emulated`` select them)."""
    for item in items:
        if not any(item.get_closest_marker(name) for name in TIERS):  # a test may state its own
            item.add_marker(getattr(pytest.mark, tier(item)))


def pytest_sessionstart(session: pytest.Session) -> None:
    """A run of the whole tree (no path named) compiles its numba loops on the idle core from the start, while
    pytest collects (tests/helpers/kernel_warmup.py)."""
    if session.config.args_source == pytest.Config.ArgsSource.TESTPATHS:
        session.config.stash[_WARMUP] = kernel_warmup.start()


def pytest_collection_finish(session: pytest.Session) -> None:
    if len(session.items) < kernel_warmup.MIN_TESTS:  # a tier or a -k selection: its few loops compile as asked
        kernel_warmup.stop(session.config.stash.get(_WARMUP, None))


def pytest_sessionfinish(session: pytest.Session) -> None:
    kernel_warmup.stop(session.config.stash.get(_WARMUP, None))


_WARMUP = pytest.StashKey["subprocess.Popen | None"]()


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test marked ``unit`` that starts a process fails: the tier would be wrong."""
    if request.node.get_closest_marker("unit") is None:
        yield
        return

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"{request.node.nodeid} is marked unit but starts a process; name the helper that "
                             "starts it in conftest.PROCESS_NAMES or mark the test mpi")

    with mock.patch.object(subprocess.Popen, "_execute_child", refuse), mock.patch.object(os, "system", refuse), \
            mock.patch.object(os, "posix_spawn", refuse), mock.patch.object(os, "fork", refuse):
        yield
