"""Ranks on an emulated cluster: network namespaces joined by shaped links (benchmarks/cluster/emulated_cluster.py).

What is checked: each rank runs on its own "node" (its own hostname and address), its messages cross the
shaped link at the link's rate (and much faster without the shaping, so the rate is the link's doing), training
over the links gives the same bits as on one machine (mpiexec and torchrun with gloo), nothing is left behind
when the owner of a cluster dies, and ``calibrate`` with ``stats --predict-time`` predicts an epoch that is
dominated by the link.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import ROOT, dataset, mpiexec
from emulated_cluster_fixture import cluster_module

ENV = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
TRANSFER = textwrap.dedent("""
    import socket, sys, time
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    buffer = np.zeros(int(sys.argv[1]), np.uint8)
    comm.Barrier()
    start = time.perf_counter()
    if comm.rank == 0:
        comm.Send(buffer, dest=1)
        comm.Recv(buffer[:1], source=1)
    else:
        comm.Recv(buffer, source=0)
        comm.Send(buffer[:1], dest=0)
    seconds = time.perf_counter() - start
    gathered = comm.gather((socket.gethostname(), seconds), root=0)
    if comm.rank == 0:
        print(" ".join(host for host, _ in gathered), max(s for _, s in gathered), flush=True)
""")


def _run(argv: list[str], timeout: float = 300) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=ENV)
    assert done.returncode == 0, f"{argv}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _transfer(cluster, tmp_path: Path, size: int) -> tuple[set[str], float]:
    script = tmp_path / "transfer.py"
    script.write_text(TRANSFER)
    *hosts, seconds = _run(cluster.mpiexec_command(mpiexec(), 2, [sys.executable, str(script), str(size)])).split()
    return set(hosts), float(seconds)


def test_ranks_run_on_their_own_nodes_and_cross_the_shaped_link(emulated_cluster, tmp_path):
    size = 3 * 2**20
    emulated_cluster.set_rate("40mbit")
    hosts, shaped = _transfer(emulated_cluster, tmp_path, size)
    assert hosts == {emulated_cluster.hostname(0), emulated_cluster.hostname(1)}
    rate = size * 8 / shaped
    assert 0.75 * 40e6 < rate < 1.05 * 40e6, f"{rate / 1e6:.1f} Mbit/s over a 40mbit link"
    emulated_cluster.set_rate(None)
    _, unshaped = _transfer(emulated_cluster, tmp_path, size)
    assert unshaped < shaped / 3, f"unshaped {unshaped:.3f} s, shaped {shaped:.3f} s: the shaping does not act"


def _records(metrics: Path) -> list[dict]:
    return [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]


def _losses(metrics: Path) -> list[float]:
    return [record["loss"] for record in _records(metrics)]


def _cora_partition(tmp_path: Path) -> Path:
    out = tmp_path / "cora2"
    _run([sys.executable, "-m", "distgcn", "partition", str(dataset("cora_planetoid")), "--parts", "2",
          "--model", "random", "--seed", "3", "--out", str(out), "--quiet"])
    return out


def test_training_over_the_links_equals_training_on_one_machine(emulated_cluster, tmp_path):
    directory = _cora_partition(tmp_path)
    emulated_cluster.set_rate("200mbit")
    train = [sys.executable, "-m", "distgcn", "train", str(directory), "--epochs", "3", "--threads", "1", "--quiet"]
    _run(emulated_cluster.mpiexec_command(mpiexec(), 2, [*train, "--metrics", str(tmp_path / "links.jsonl")]))
    _run([mpiexec(), "-n", "2", *train, "--metrics", str(tmp_path / "local.jsonl")])
    torchrun = [sys.executable, "-m", "torch.distributed.run"]
    commands = emulated_cluster.torchrun_commands(torchrun, 2, ["-m", "distgcn", *train[3:], "--backend", "gloo",
                                                                "--metrics", str(tmp_path / "gloo.jsonl")])
    nodes = [subprocess.Popen(command, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for command in commands]
    outputs = [node.communicate(timeout=300)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], "\n".join(o[-2000:] for o in outputs)
    local = _losses(tmp_path / "local.jsonl")
    assert len(local) == 3
    assert _losses(tmp_path / "links.jsonl") == local
    assert _losses(tmp_path / "gloo.jsonl") == local
    assert all(r["halo_bytes"] > 0 for r in _records(tmp_path / "links.jsonl"))


def test_a_dead_owner_leaves_nothing_behind(tmp_path):
    module = cluster_module()
    reason = module.missing_requirements()
    if reason:
        pytest.skip(reason)
    script = tmp_path / "owner.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(module.SOURCE_DIR)!r})
        from emulated_cluster import EmulatedCluster
        with EmulatedCluster(nodes=2, name=sys.argv[1], subnet=91) as cluster:
            print(cluster.switch, cluster.node(0), cluster.node(1), flush=True)
            time.sleep(600)
    """))

    def namespaces() -> set[str]:
        return set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())

    for how in (signal.SIGTERM, signal.SIGKILL):
        owner = subprocess.Popen([sys.executable, str(script), f"own{how.value}"], stdout=subprocess.PIPE, text=True)
        made = set(owner.stdout.readline().split())
        assert len(made) == 3 and made <= namespaces()
        owner.send_signal(how)
        owner.wait(timeout=60)
        if how == signal.SIGKILL:  # no teardown ran: the next cluster made anywhere removes the orphans
            assert made <= namespaces()
            assert made <= set(module.remove_orphans())
        assert not made & namespaces(), f"left behind after {how.name}: {made & namespaces()}"
        assert not list(Path("/tmp").glob(f"*own{how.value}-sw-ssh"))


def test_the_predicted_epoch_follows_the_link(emulated_cluster, tmp_path):
    """On slow links, where the halo dominates, the prediction from a calibration on the cluster is within 35% of
    the measured epoch (the benchmark's tables: docs/network.md), and it moves with the link as the measurement
    does: the second link's prediction takes its rate as given (``--bandwidth``), the calibration is the first's."""
    directory = tmp_path / "sbm2"
    _run([sys.executable, "-m", "distgcn", "partition", "synthetic:sbm,n=3000,features=16,classes=4,seed=2",
          "--parts", "2", "--model", "random", "--seed", "3", "--out", str(directory), "--quiet"])
    calibration = tmp_path / "calibration.json"
    emulated_cluster.set_rate("30mbit")
    _run(emulated_cluster.mpiexec_command(mpiexec(), 2, [
        sys.executable, "-m", "distgcn", "calibrate", "--out", str(calibration), "--features", "16",
        "--classes", "4", "--threads", "1", "--graphs", "1000:4,1000:12,3000:4", "--epochs", "3"]))
    record = json.loads(calibration.read_text())
    assert 0.75 < record["network"]["bandwidth_bytes_s"] * 8 / 30e6 < 1.05
    measured, predicted = {}, {}
    for rate in ("30mbit", "120mbit"):
        emulated_cluster.set_rate(rate)
        metrics = tmp_path / f"{rate}.jsonl"
        _run(emulated_cluster.mpiexec_command(mpiexec(), 2, [
            sys.executable, "-m", "distgcn", "train", str(directory), "--epochs", "6", "--threads", "1", "--quiet",
            "--metrics", str(metrics)]))
        epochs = sorted(record["epoch_s"] for record in _records(metrics)[2:])
        measured[rate] = epochs[len(epochs) // 2]
        link = [] if rate == "30mbit" else ["--bandwidth", rate]
        out = json.loads(_run([sys.executable, "-m", "distgcn", "stats", str(directory), "--predict-time",
                               str(calibration), *link, "--json"]))
        predicted[rate] = out["serial_s"]
        assert abs(predicted[rate] / measured[rate] - 1) < 0.35, (rate, predicted[rate], measured[rate])
    assert measured["30mbit"] > 2 * measured["120mbit"]
    assert predicted["30mbit"] > 2 * predicted["120mbit"]


def test_emulated_cluster_command_line(tmp_path):
    """up, rate, mpiexec and down from the command line, as a user runs them."""
    module = cluster_module()
    reason = module.missing_requirements()
    if reason:
        pytest.skip(reason)
    tool = [sys.executable, str(module.SOURCE_DIR / "emulated_cluster.py")]
    env = dict(ENV, DISTGCN_CLUSTER_STATE=str(tmp_path / "state"))

    def call(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*tool, *args], capture_output=True, text=True, env=env, timeout=120)

    try:
        made = call("up", "--nodes", "2", "--rate", "50mbit", "--name", "cli", "--subnet", "93")
        assert made.returncode == 0, made.stderr
        assert call("up", "--nodes", "2", "--name", "cli", "--subnet", "93").returncode == 2  # already there
        assert call("rate", "--name", "cli", "80mbit").returncode == 0
        shown = subprocess.run(["tc", "-n", module.EmulatedCluster(2, name="cli", owner=1).node(0), "qdisc", "show"],
                               capture_output=True, text=True).stdout
        assert "rate 80Mbit" in shown
        ran = call("mpiexec", "--name", "cli", "-n", "2", "--", sys.executable, "-c",
                   "import socket; print(socket.gethostname())")
        assert ran.returncode == 0, ran.stderr
        assert sorted(re.findall(r"cli-node\d", ran.stdout)) == ["cli-node0", "cli-node1"]  # lines may interleave
        bad = call("rate", "--name", "cli", "fast")
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "fast" in bad.stderr
    finally:
        assert call("down", "--name", "cli").returncode == 0
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "-cli-" not in listed
