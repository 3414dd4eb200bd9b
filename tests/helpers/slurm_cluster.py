"""A real one-node Slurm cluster on localhost for tests: munged, slurmctld and slurmd.

Everything lives in a temporary directory (key, sockets, state, spool, logs)
and uses its own ports, so it neither needs nor touches a system Slurm or
munge, and two test sessions on one machine do not collide. Client commands
find the cluster through ``SLURM_CONF`` in :attr:`SlurmCluster.env`, which
jobs inherit (sbatch exports the submitting environment). The daemons are
stopped by the pids this module started, after cancelling the cluster's own
jobs so that no job step outlives its slurmd.

Use the session fixture ``slurm_cluster`` (re-exported by conftest.py). It
skips, saying why, only where the Debian packages are missing (``.ci/run``
installs them) or the tests do not run as root (slurmd must start job steps
as the submitting user); a daemon that fails to start is a test error.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "scontrol", "squeue", "sinfo", "scancel")
# More CPUs than the machine has (SlurmdParameters=config_overrides lets the node claim them), so
# that a 4-rank job and a 1-task partition job can be scheduled side by side on a 2-core runner.
NODE_CPUS = 8
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
            "BOOT_FAIL", "DEADLINE"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tail(path: Path, lines: int = 30) -> str:
    if not path.exists():
        return f"({path} was not written)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def slurm_conf(root: Path, host: str, ctld_port: int, slurmd_port: int, munge_socket: Path) -> str:
    """Our own minimal configuration: one node, no cgroups, no accounting database."""
    return "\n".join([
        "ClusterName=distgcn-test",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket}",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
        # containers and CI runners have no delegated cgroup tree
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "MpiDefault=pmi2",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "SchedulerType=sched/builtin",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        # finished jobs stay visible to 'scontrol show job' (there is no slurmdbd for sacct)
        "MinJobAge=900",
        # job ids differ between clusters (sessions may run side by side), and so do the rendezvous
        # ports that distgcn derives from them under srun (20000 + job id mod 20000)
        f"FirstJobId={1000 + secrets.randbelow(1_000_000)}",
        f"NodeName={host} NodeAddr=127.0.0.1 CPUs={NODE_CPUS} State=UNKNOWN",
        f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


@dataclass
class SlurmCluster:
    """A running cluster: its directory, configuration, and an environment for client commands."""

    root: Path
    host: str
    env: dict[str, str]
    socket_dir: Path
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    def command(self, *args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
        """Run a Slurm client command against this cluster."""
        result = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, env=self.env)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(args)} exited {result.returncode}:\n{result.stdout}{result.stderr}")
        return result

    def sbatch(self, script: Path | str, *options: str, export: dict[str, str] | None = None,
               cwd: Path | None = None) -> int:
        """Submit a batch script; ``export`` adds variables (sbatch --export=ALL,NAME=value)."""
        args = ["sbatch", "--parsable"]
        if export:
            args.append("--export=" + ",".join(["ALL", *(f"{k}={v}" for k, v in export.items())]))
        result = subprocess.run([*args, *options, str(script)], capture_output=True, text=True, timeout=60,
                                env=self.env, cwd=cwd or self.root)
        if result.returncode != 0:
            raise AssertionError(f"sbatch {script} failed:\n{result.stderr}")
        return int(result.stdout.strip().split(";")[0])

    def jobs(self, job_id: int) -> list[dict[str, str]]:
        """'scontrol show job' records of a job (one per element for an array job)."""
        out = self.command("scontrol", "show", "job", "-o", str(job_id)).stdout
        return [dict(re.findall(r"(\w+)=(\S*)", line)) for line in out.splitlines() if line.strip()]

    def wait(self, job_id: int, timeout: float) -> list[dict[str, str]]:
        """Wait until every element of the job has finished; fail with the logs if time runs out."""
        deadline = time.monotonic() + timeout
        while True:
            records = self.jobs(job_id)
            if records and all(r["JobState"] in FINISHED for r in records):
                return records
            if time.monotonic() > deadline:
                states = ", ".join(f"{r['JobId']}:{r['JobState']}({r.get('Reason', '')})" for r in records)
                raise AssertionError(f"job {job_id} not finished in {timeout:.0f} s: {states}\n"
                                     f"slurmctld log:\n{_tail(self.root / 'log' / 'slurmctld.log')}")
            time.sleep(0.5)

    def stop(self) -> None:
        """Cancel this cluster's jobs, then stop the daemons we started (by pid), slurmd first."""
        if "slurmctld" in self.processes and self.processes["slurmctld"].poll() is None:
            self.command("scancel", "--full", "--user", str(os.getuid()), check=False)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                queue = self.command("squeue", "-h", "-o", "%i", check=False)
                if queue.returncode != 0 or not queue.stdout.strip():
                    break
                time.sleep(0.5)
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.processes.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        shutil.rmtree(self.socket_dir, ignore_errors=True)


def missing_requirements() -> str | None:
    """Why a cluster cannot be started here, or None."""
    missing = [name for name in (*DAEMONS, *CLIENTS) if shutil.which(name, path=_sbin_path()) is None]
    if missing:
        return (f"Slurm/munge not installed ({', '.join(missing)} missing): .ci/run installs them with "
                f"'apt-get install slurm-wlm munge'; here that was not run or failed")
    if os.geteuid() != 0:
        return "a local Slurm cluster needs root (slurmd starts job steps as the submitting user)"
    return None


def _sbin_path() -> str:
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def start_cluster(root: Path, ready_timeout: float = 60) -> SlurmCluster:
    """Start munged, slurmctld and slurmd under ``root`` and wait until the node is idle."""
    host = socket.gethostname().split(".")[0]
    for sub in ("state", "spool", "log", "munge"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    key = root / "munge" / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o600)
    # munged wants every directory above its socket searchable by all, which pytest's (0700) are not
    socket_dir = Path(tempfile.mkdtemp(prefix="distgcn-munge-"))
    socket_dir.chmod(0o755)
    munge_socket = socket_dir / "munge.socket"
    conf = root / "slurm.conf"
    conf.write_text(slurm_conf(root, host, _free_port(), _free_port(), munge_socket))

    venv_bin = str(Path(sys.executable).parent)
    env = dict(os.environ)
    env.update({
        "SLURM_CONF": str(conf),
        "PATH": os.pathsep.join([venv_bin, _sbin_path()]),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    })
    # variables of an enclosing Slurm job would otherwise leak into sbatch/srun defaults
    for name in [k for k in env if k.startswith(("SLURM_", "SBATCH_", "SRUN_")) and k != "SLURM_CONF"]:
        del env[name]

    cluster = SlurmCluster(root=root, host=host, env=env, socket_dir=socket_dir)
    commands = {
        "munged": ["munged", "--foreground", f"--socket={munge_socket}", f"--key-file={key}",
                   f"--log-file={root / 'log' / 'munged.log'}", f"--pid-file={socket_dir / 'munged.pid'}",
                   f"--seed-file={root / 'munge' / 'munged.seed'}"],
        "slurmctld": ["slurmctld", "-D", "-f", str(conf)],
        "slurmd": ["slurmd", "-D", "-f", str(conf)],
    }
    try:
        for name, cmd in commands.items():
            log = open(root / "log" / f"{name}.out", "w")  # noqa: SIM115 - the daemon keeps it open
            cluster.processes[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                                       start_new_session=True)
            log.close()
            if name == "munged":
                _wait_for(lambda: munge_socket.exists(), 20, cluster, name)
        _wait_for(lambda: _node_state(cluster) == "idle", ready_timeout, cluster, "slurmd")
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _node_state(cluster: SlurmCluster) -> str:
    result = cluster.command("sinfo", "-h", "-N", "-o", "%T", "-n", cluster.host, check=False, timeout=20)
    return result.stdout.strip() if result.returncode == 0 else ""


def _wait_for(condition: Callable[[], bool], timeout: float, cluster: SlurmCluster, name: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        dead = [n for n, p in cluster.processes.items() if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            logs = "\n".join(f"--- {n}:\n{_tail(cluster.root / 'log' / f'{n}.out')}\n"
                             f"{_tail(cluster.root / 'log' / f'{n}.log')}" for n in cluster.processes)
            reason = f"{', '.join(dead)} exited" if dead else f"{name} not ready in {timeout:.0f} s"
            raise RuntimeError(f"local Slurm cluster did not start: {reason}\n{logs}")
        time.sleep(0.3)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """One cluster for the whole session; tests submit jobs to it and wait for them."""
    reason = missing_requirements()
    if reason:
        pytest.skip(reason)
    cluster = start_cluster(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster
    finally:
        cluster.stop()
